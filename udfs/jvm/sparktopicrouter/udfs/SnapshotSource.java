package sparktopicrouter.udfs;

import java.io.IOException;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Tuple2;

/**
 * The current snapshot of one subscription table in this JVM, shared by every task and every copy of the
 * UDF: loaded once from its newest snapshot file, then checked in the background at most every
 * {@code refreshMillis} (never per row) and swapped for a newer published version without stopping the query.
 * The matcher a swap replaces is retired, and freed when the last lookup on it ends ({@link FrozenMatcher}).
 *
 * <p>A file that fails verification is logged once and skipped; the source keeps what it has. A source
 * that finds no usable file at all within {@code firstWaitMillis} fails the task with a one-line error,
 * and Spark retries it.
 *
 * <p>A source no lookup has used for {@code idleMillis} is evicted: its checks stop and its matcher is freed
 * once the last lookup on it ends. An executor outlives the queries it runs (a notebook's, a restarted
 * router's with a new table), and without this each would keep a matcher and a polling task forever. A
 * lookup that meets an evicted source ({@link #acquire} returns null) asks {@link #of} again, which loads
 * the newest file afresh.
 */
final class SnapshotSource {
    private static final Logger LOG = LoggerFactory.getLogger(SnapshotSource.class);
    private static final ConcurrentHashMap<String, SnapshotSource> SOURCES = new ConcurrentHashMap<>();
    /** One daemon thread checks every source of the JVM. */
    private static final ScheduledExecutorService REFRESHER = Executors.newSingleThreadScheduledExecutor(task -> {
        Thread thread = new Thread(task, "spark-topic-router-snapshots");
        thread.setDaemon(true);
        return thread;
    });
    private static final long FIRST_POLL_MILLIS = 200;

    private final String key;
    private final SnapshotFiles files;
    private final long refreshMillis;
    private final long idleMillis;
    /** The snapshot lookups use; replaced (never mutated) by the refresher thread only. */
    private volatile SnapshotFiles.Loaded current;
    /** Files refused once (by path): not read again. Refresher thread only, after construction. */
    private final Set<String> refused = new HashSet<>();
    /** Set by lookups (written only when false: no write per row), cleared by each check. */
    private volatile boolean used = true;
    /** Consecutive checks that found {@code used} false. Refresher thread only. */
    private long idleChecks;
    /** Set once, before the matcher is retired: a lookup whose acquire then fails sees it and looks again. */
    private volatile boolean evicted;
    /** This source's scheduled check; set right after construction, cancelled on eviction. */
    private volatile ScheduledFuture<?> checks;

    private SnapshotSource(String key, SnapshotFiles files, long refreshMillis, long idleMillis, long firstWaitMillis) {
        this.key = key;
        this.files = files;
        this.refreshMillis = refreshMillis;
        this.idleMillis = idleMillis;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(firstWaitMillis);
        while ((current = newer(-1)) == null) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no usable snapshot file in " + files.describe() + " after "
                        + firstWaitMillis + " ms: the real-time router publishes one before its query starts");
            }
            sleep(FIRST_POLL_MILLIS);
        }
        LOG.info("snapshot version {} of {} loaded", current.version(), files.describe());
    }

    /**
     * The source of {@code tableId}'s files in {@code directory}, made (and its first snapshot loaded) on first
     * use; {@code refreshMillis} and {@code idleMillis} are the first caller's.
     */
    static SnapshotSource of(
            String directory, String tableId, long refreshMillis, long idleMillis, long firstWaitMillis) {
        return SOURCES.computeIfAbsent(directory + "\n" + tableId, key -> {
            SnapshotSource source = new SnapshotSource(key, new SnapshotFiles(directory, tableId, hadoopConf()),
                    refreshMillis, idleMillis, firstWaitMillis);
            source.checks = REFRESHER.scheduleWithFixedDelay(
                    source::check, refreshMillis, refreshMillis, TimeUnit.MILLISECONDS);
            return source;
        });
    }

    /** How many sources this JVM holds (tests: eviction). */
    static int loaded() {
        return SOURCES.size();
    }

    /**
     * The current snapshot with a use taken on its matcher: release it when the lookup is done. Null once the
     * source was evicted: ask {@link #of} again.
     */
    SnapshotFiles.Loaded acquire() {
        if (!used) {
            used = true;
        }
        while (true) {
            SnapshotFiles.Loaded snapshot = current;
            if (snapshot.matcher().acquire()) {
                return snapshot;
            }
            if (evicted) {
                return null;
            }
            // Retired and freed between the read and the acquire: `current` already holds its successor.
        }
    }

    long version() {
        return current.version();
    }

    /** The refresher's periodic task: evict the source if it sat idle for {@code idleMillis}, else refresh it. */
    private void check() {
        if (used) {
            used = false;
            idleChecks = 0;
        } else if (++idleChecks * refreshMillis >= idleMillis) {
            evict();
            return;
        }
        refresh();
    }

    private void evict() {
        evicted = true;
        SOURCES.remove(key, this);
        checks.cancel(false);
        current.matcher().retire();
        LOG.info("snapshot source {} evicted after {} ms unused", files.describe(), idleMillis);
    }

    private void refresh() {
        try {
            SnapshotFiles.Loaded newer = newer(current.version());
            if (newer != null) {
                SnapshotFiles.Loaded old = current;
                current = newer;
                old.matcher().retire();
                LOG.info("snapshot version {} of {} loaded (was {})", newer.version(), files.describe(), old.version());
            }
        } catch (RuntimeException e) {
            // A scheduled task that throws is never run again: log and keep checking.
            LOG.warn("checking {} for a newer snapshot failed: {}", files.describe(), e.toString());
        }
    }

    /** The newest usable snapshot above {@code version}, or null. */
    private SnapshotFiles.Loaded newer(long version) {
        List<SnapshotFiles.Candidate> candidates;
        try {
            candidates = files.candidates();
        } catch (IOException e) {
            LOG.warn("listing {} failed: {}", files.describe(), e.toString());
            return null;
        }
        for (SnapshotFiles.Candidate candidate : candidates) {
            if (candidate.version() <= version) {
                return null;
            }
            String path = candidate.path().toString();
            if (refused.contains(path)) {
                continue;
            }
            try {
                return files.load(candidate);
            } catch (SnapshotFiles.RefusedException e) {
                refused.add(path);
                LOG.warn("snapshot file {} refused: {}", path, e.getMessage());
            } catch (IOException e) {
                // Pruned or half-visible: try again next time.
                LOG.warn("reading snapshot file {} failed: {}", path, e.toString());
            }
        }
        return null;
    }

    /** Hadoop's configuration with the application's {@code spark.hadoop.*} entries, as Spark builds it. */
    private static Configuration hadoopConf() {
        Configuration conf = new Configuration();
        SparkEnv env = SparkEnv.get();
        if (env != null) {
            SparkConf sparkConf = env.conf();
            for (Tuple2<String, String> entry : sparkConf.getAll()) {
                if (entry._1().startsWith("spark.hadoop.")) {
                    conf.set(entry._1().substring("spark.hadoop.".length()), entry._2());
                }
            }
        }
        return conf;
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted waiting for the first snapshot file", e);
        }
    }
}

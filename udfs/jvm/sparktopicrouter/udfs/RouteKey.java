package sparktopicrouter.udfs;

import java.util.Objects;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The real-time lane's routing UDF: a routing key's bytes in, a struct out, one row at a time in the JVM, so
 * that it plans as a plain expression inside a {@code ProjectExec} (which Real-Time Mode allows; the Arrow
 * UDF's {@code ArrowEvalPythonExec} it does not). The matching is the native core's, through
 * {@link FrozenMatcher}, on the table's current snapshot ({@link SnapshotSource}).
 *
 * <p>The struct ({@link #RETURN_TYPE}):
 * <pre>
 * subscribers       array&lt;string&gt;  the matching subscriber ids, ascending; null for a dead letter
 * fanout            int             how many subscribers matched; null for a key that is not UTF-8
 * reason            string          the dead-letter reason (the micro-batch lane's codes), else null
 * snapshot_version  bigint          the subscription table version the key was matched against
 * </pre>
 * A null key gives a null struct: the key rules ({@code routing/router/classify.py}) judged the message
 * already. A key over {@code maxFanout} subscribers is dead-lettered whole ({@link #FANOUT_LIMIT}), never
 * partly delivered.
 */
public final class RouteKey implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    /** {@code routing.grammar.INVALID_KEY}. */
    public static final String INVALID_KEY = "invalid_key";
    /** {@code routing.grammar.FANOUT_LIMIT}. */
    public static final String FANOUT_LIMIT = "fanout_limit";

    public static final StructType RETURN_TYPE = new StructType()
            .add("subscribers", DataTypes.createArrayType(DataTypes.StringType, false), true)
            .add("fanout", DataTypes.IntegerType, true)
            .add("reason", DataTypes.StringType, true)
            .add("snapshot_version", DataTypes.LongType, false);

    /** Ids a thread's first lookup can take without growing its buffer. */
    private static final int FIRST_IDS = 64;
    private static final ThreadLocal<int[]> IDS = ThreadLocal.withInitial(() -> new int[FIRST_IDS]);

    private final String directory;
    private final String tableId;
    private final long refreshMillis;
    private final long idleMillis;
    private final long firstWaitMillis;
    private final int maxFanout;
    private transient SnapshotSource source;

    public RouteKey(String directory, String tableId, long refreshMillis, long idleMillis, long firstWaitMillis,
            int maxFanout) {
        this.directory = Objects.requireNonNull(directory, "directory");
        this.tableId = Objects.requireNonNull(tableId, "tableId");
        if (refreshMillis <= 0 || idleMillis < refreshMillis || firstWaitMillis < 0 || maxFanout < 1) {
            throw new IllegalArgumentException("refreshMillis must be > 0, idleMillis >= refreshMillis, "
                    + "firstWaitMillis >= 0 and maxFanout >= 1");
        }
        this.refreshMillis = refreshMillis;
        this.idleMillis = idleMillis;
        this.firstWaitMillis = firstWaitMillis;
        this.maxFanout = maxFanout;
    }

    /** Register a {@code RouteKey} as {@code name} in {@code session}'s function registry. */
    public static void register(SparkSession session, String name, String directory, String tableId,
            long refreshMillis, long idleMillis, long firstWaitMillis, int maxFanout) {
        session.udf().register(name,
                new RouteKey(directory, tableId, refreshMillis, idleMillis, firstWaitMillis, maxFanout), RETURN_TYPE);
    }

    /** How many tables' snapshots this JVM holds: each is evicted {@code idleMillis} after its last lookup. */
    public static int loadedSnapshotSources() {
        return SnapshotSource.loaded();
    }

    @Override
    public Row call(byte[] key) {
        if (key == null) {
            return null;
        }
        SnapshotFiles.Loaded snapshot;
        while ((snapshot = source().acquire()) == null) {
            source = null; // evicted while idle: load the newest file again
        }
        try {
            FrozenMatcher matcher = snapshot.matcher();
            int[] ids = IDS.get();
            int count = matcher.lookup(key, ids);
            if (count == FrozenMatcher.INVALID_UTF8) {
                return RowFactory.create(null, null, INVALID_KEY, snapshot.version());
            }
            if (count > maxFanout) {
                return RowFactory.create(null, count, FANOUT_LIMIT, snapshot.version());
            }
            if (count > ids.length) {
                ids = new int[Math.max(count, ids.length * 2)];
                IDS.set(ids);
                count = matcher.lookup(key, ids);
            }
            String[] subscribers = new String[count];
            for (int i = 0; i < count; i++) {
                subscribers[i] = matcher.subscriber(ids[i]);
            }
            return RowFactory.create(subscribers, count, null, snapshot.version());
        } finally {
            snapshot.matcher().release();
        }
    }

    private SnapshotSource source() {
        SnapshotSource found = source;
        if (found == null) {
            found = SnapshotSource.of(directory, tableId, refreshMillis, idleMillis, firstWaitMillis);
            source = found;
        }
        return found;
    }
}

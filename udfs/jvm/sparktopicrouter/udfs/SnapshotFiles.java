package sparktopicrouter.udfs;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The snapshot files of one subscription table, read the way {@code routing/router/snapshot_files.py} writes
 * them and trusting nothing: {@code <version>-<sha256>.frozen} files in the table's directory, each the
 * frozen matcher sealed with a claim ({@code STRSNAP2}, a u16 little-endian length, the JSON
 * {@code {"table_id", "version"}}, zeros up to a multiple of 8, then the matcher's bytes). A file is used only
 * if its claim names this table and the version in its name and the native decoder validates the matcher
 * (its checksum, then every structural check). A file on the local file system is then <b>mapped</b>, as the
 * micro-batch lane's Python workers map it: every JVM and worker of a machine shares one copy in the page
 * cache, and no Java array bounds the file's size. A file elsewhere (HDFS, an object store) is read into the
 * heap, and its bytes must also hash to the digest in its name. Anything else is refused with a reason, never
 * half-used.
 * Only whole snapshots ({@code .frozen}) are read here: the micro-batch lane's deltas ({@code .delta}, over a
 * base) need their base, and the real-time lane's publisher writes whole snapshots only.
 */
final class SnapshotFiles {
    static final byte[] MAGIC = "STRSNAP2".getBytes(StandardCharsets.US_ASCII);
    static final int MAX_CLAIM_BYTES = 1024;
    /** A Java array's reach: a larger file that must be read (not local, so not mapped) is refused. */
    static final long MAX_FILE_BYTES = Integer.MAX_VALUE - 8;
    /** The most of a file its claim can take: magic, length, claim, padding. */
    static final int MAX_SEAL_BYTES = MAGIC.length + 2 + MAX_CLAIM_BYTES + 8;

    private static final Pattern NAME = Pattern.compile("^(\\d{1,19})-([0-9a-f]{64})\\.frozen$");
    private static final ObjectMapper JSON = new ObjectMapper();

    /** A file that is not a valid snapshot of the table and version it was looked up for. */
    static final class RefusedException extends Exception {
        private static final long serialVersionUID = 1L;

        RefusedException(String message) {
            super(message);
        }
    }

    /** A listed file's version, digest and path. */
    record Candidate(long version, String digest, Path path) {}

    /** A verified snapshot: its version and its matcher (owned: retire it). */
    record Loaded(long version, FrozenMatcher matcher) {}

    private final Path directory;
    private final String tableId;
    private final Configuration conf;

    SnapshotFiles(String directory, String tableId, Configuration conf) {
        this.directory = new Path(directory);
        this.tableId = tableId;
        this.conf = conf;
    }

    String describe() {
        return directory + " (table " + tableId + ")";
    }

    /** The directory's snapshot files, newest version first; none if the directory does not exist yet. */
    List<Candidate> candidates() throws IOException {
        FileSystem fs = directory.getFileSystem(conf);
        if (!fs.exists(directory)) {
            return List.of();
        }
        List<Candidate> found = new ArrayList<>();
        for (FileStatus status : fs.listStatus(directory)) {
            Matcher name = NAME.matcher(status.getPath().getName());
            if (status.isFile() && name.matches()) {
                try {
                    found.add(new Candidate(Long.parseLong(name.group(1)), name.group(2), status.getPath()));
                } catch (NumberFormatException e) {
                    // 19 digits past Long.MAX_VALUE: no version of a Delta table; not a candidate.
                }
            }
        }
        found.sort(Comparator.comparingLong(Candidate::version).reversed());
        return found;
    }

    /** Verify and open {@code candidate}; a {@link RefusedException} saying why it is not usable. */
    Loaded load(Candidate candidate) throws IOException, RefusedException {
        FileSystem fs = candidate.path().getFileSystem(conf);
        long size = fs.getFileStatus(candidate.path()).getLen();
        if (fs instanceof LocalFileSystem local) {
            return map(local, candidate, size);
        }
        if (size > MAX_FILE_BYTES) {
            throw new RefusedException("it is " + size + " bytes, over " + MAX_FILE_BYTES);
        }
        byte[] sealed = new byte[(int) size];
        try (FSDataInputStream in = fs.open(candidate.path())) {
            in.readFully(0, sealed);
        }
        if (!HexFormat.of().formatHex(sha256(sealed)).equals(candidate.digest())) {
            throw new RefusedException("its bytes do not hash to the digest in its name");
        }
        int start = unsealedStart(sealed, candidate.version());
        try {
            return new Loaded(candidate.version(), FrozenMatcher.fromBytes(sealed, start, sealed.length - start));
        } catch (FrozenFormatException e) {
            throw new RefusedException("its matcher does not decode: " + e.getMessage());
        }
    }

    /** A local file's claim checked from its head, then its matcher mapped and validated in place. */
    private Loaded map(LocalFileSystem fs, Candidate candidate, long size) throws IOException, RefusedException {
        byte[] head = new byte[(int) Math.min(size, MAX_SEAL_BYTES)];
        try (FSDataInputStream in = fs.open(candidate.path())) {
            in.readFully(0, head);
        }
        int start = unsealedStart(head, candidate.version());
        try {
            return new Loaded(candidate.version(), FrozenMatcher.fromFile(fs.pathToFile(candidate.path()).toPath(), start));
        } catch (IllegalArgumentException e) { // FrozenFormatException too: not intact, or not mappable
            throw new RefusedException("its matcher does not validate: " + e.getMessage());
        }
    }

    /**
     * Where the matcher's bytes start in {@code sealed} (the file, or at least its first {@link #MAX_SEAL_BYTES}),
     * a file that must claim this table at {@code version}.
     */
    int unsealedStart(byte[] sealed, long version) throws RefusedException {
        int head = MAGIC.length + 2;
        if (sealed.length < head || !Arrays.equals(sealed, 0, MAGIC.length, MAGIC, 0, MAGIC.length)) {
            throw new RefusedException("not a sealed snapshot file (no STRSNAP2 magic)");
        }
        int length = ByteBuffer.wrap(sealed, MAGIC.length, 2).order(ByteOrder.LITTLE_ENDIAN).getShort() & 0xffff;
        // The matcher starts at the next multiple of 8 after the claim.
        int padded = head + length + Math.floorMod(-(head + length), 8);
        if (length > MAX_CLAIM_BYTES || padded > sealed.length) {
            throw new RefusedException("its claim length " + length + " is over " + MAX_CLAIM_BYTES
                    + " or past the file's end");
        }
        for (int at = head + length; at < padded; at++) {
            if (sealed[at] != 0) {
                throw new RefusedException("the padding after its claim is not zero");
            }
        }
        JsonNode claim;
        try {
            String text = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(sealed, head, length))
                    .toString();
            claim = JSON.readTree(text);
        } catch (IOException e) { // a CharacterCodingException too: not UTF-8
            throw new RefusedException("its claim is not JSON");
        }
        if (claim == null || !claim.isObject() || claim.size() != 2
                || !claim.has("table_id") || !claim.has("version")) {
            throw new RefusedException("its claim is not {table_id, version}");
        }
        JsonNode claimedTable = claim.get("table_id");
        JsonNode claimedVersion = claim.get("version");
        if (!claimedTable.isTextual() || !claimedVersion.isIntegralNumber() || !claimedVersion.canConvertToLong()) {
            throw new RefusedException("its claim's table id is not text or its version not an integer");
        }
        if (!claimedTable.textValue().equals(tableId) || claimedVersion.longValue() != version) {
            throw new RefusedException("it holds another table's or version's snapshot, not table " + tableId
                    + " version " + version);
        }
        return padded;
    }

    static byte[] sha256(byte[] bytes) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(bytes);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("this JVM has no SHA-256", e);
        }
    }
}

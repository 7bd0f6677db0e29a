package sparktopicrouter.udfs;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The native frozen matcher ({@code native/core}'s {@code FrozenMatcher}, the one {@code routing._native}
 * runs) in a JVM, through the JNI library {@code native/jvm}.
 *
 * <p><b>Uses, and why not {@code close()}.</b> The native matcher is freed when its last use ends, never
 * while a lookup runs on it. The owner holds one use from {@link #fromBytes} and gives it up with
 * {@link #retire}; every lookup runs between {@link #acquire} (which fails once the count has reached zero)
 * and {@link #release}. So a snapshot swap on one thread never frees the matcher another thread is matching
 * with, and the native side may trust every handle it is given (its module docs' invariant).
 *
 * <p>Invariant: {@code uses} is the number of holders (the owner until it retires, plus each acquired use);
 * {@code handle} is live while {@code uses > 0} and released exactly once, by whoever takes it to 0.
 */
public final class FrozenMatcher {
    static {
        NativeLibrary.load();
    }

    /** What {@link #lookup} returns for a key that is not UTF-8. */
    public static final int INVALID_UTF8 = -1;

    private final long handle;
    private final AtomicLong uses = new AtomicLong(1);
    /** Every subscriber id's UTF-8 text, back to back: id {@code i} is {@code [ends[i - 1], ends[i])}. */
    private final byte[] text;
    private final int[] ends;
    /**
     * Each id's {@code String}, made at its first lookup: a table's idle tenants never match, and a million
     * Strings made per snapshot cost the JVM ~100 MB of heap to mark and a pause at every swap. Invariant:
     * a slot is null or the String of {@code text}'s range for that id.
     */
    private final String[] subscribers;

    private FrozenMatcher(long handle) {
        this.handle = handle;
        text = subscriberText(handle);
        ends = subscriberEnds(handle);
        subscribers = new String[ends.length];
    }

    /** Decode {@code bytes[offset, offset + length)}, validating everything; a {@link FrozenFormatException} if not intact. */
    public static FrozenMatcher fromBytes(byte[] bytes, int offset, int length) {
        long handle = open(bytes, offset, length);
        try {
            return new FrozenMatcher(handle);
        } catch (RuntimeException | Error e) {
            release(handle);
            throw e;
        }
    }

    /**
     * Map the file {@code path} from byte {@code offset} (a multiple of 8) and validate the matcher there as
     * {@link #fromBytes} validates a copy; a {@link FrozenFormatException} if it is not intact, an
     * {@link IllegalArgumentException} if it cannot be mapped. Every process of a machine that maps one file
     * shares its pages.
     */
    public static FrozenMatcher fromFile(java.nio.file.Path path, long offset) {
        long handle = openFile(path.toString().getBytes(StandardCharsets.UTF_8), offset);
        try {
            return new FrozenMatcher(handle);
        } catch (RuntimeException | Error e) {
            release(handle);
            throw e;
        }
    }

    /** Whether the matcher reads a mapped file in place ({@link #fromFile}), not a copy; call holding a use. */
    public boolean isMapped() {
        return isMapped(handle);
    }

    /** Take a use for a lookup; false if the matcher is already freed (the caller takes the newer one). */
    public boolean acquire() {
        for (long count = uses.get(); count > 0; count = uses.get()) {
            if (uses.compareAndSet(count, count + 1)) {
                return true;
            }
        }
        return false;
    }

    /** End a use; the last one frees the native matcher. */
    public void release() {
        long left = uses.decrementAndGet();
        if (left == 0) {
            release(handle);
        } else if (left < 0) {
            throw new IllegalStateException("frozen matcher released more often than acquired");
        }
    }

    /** The owner gives up its use: the matcher is freed once no lookup holds it. */
    public void retire() {
        release();
    }

    /**
     * Match {@code key} (UTF-8 bytes) while holding a use: how many subscribers matched, their ids (ascending)
     * in the first {@code min(count, ids.length)} slots of {@code ids}; {@link #INVALID_UTF8} if the key is not
     * UTF-8.
     */
    public int lookup(byte[] key, int[] ids) {
        return lookup(handle, key, key.length, ids);
    }

    /** The text of subscriber id {@code id}. */
    public String subscriber(int id) {
        String found = subscribers[id];
        if (found == null) {
            int start = id == 0 ? 0 : ends[id - 1];
            found = new String(text, start, ends[id] - start, StandardCharsets.UTF_8);
            // A race here is benign: threads that both miss store equal Strings, and a String is immutable and
            // published whole through its final fields, so a reader sees null or a complete one (JLS 17.5).
            subscribers[id] = found;
        }
        return found;
    }

    public int subscriberCount() {
        return subscribers.length;
    }

    // The JNI library's functions (native/jvm/src/lib.rs): every handle passed is live (see the class docs).
    private static native long open(byte[] bytes, int offset, int length);

    private static native long openFile(byte[] path, long offset);

    private static native boolean isMapped(long handle);

    private static native void release(long handle);

    private static native byte[] subscriberText(long handle);

    private static native int[] subscriberEnds(long handle);

    private static native int lookup(long handle, byte[] key, int length, int[] ids);

    /** The frozen format version this build decodes ({@code routing._native.FORMAT_VERSION}). */
    public static native int formatVersion();
}

package sparktopicrouter.udfs;

/**
 * Bytes that are not an intact frozen matcher: corrupt, truncated, foreign or of another format version.
 * Thrown by {@link FrozenMatcher#fromBytes} with the native decoder's message (Python's
 * {@code routing._native.FrozenFormatError}).
 */
public final class FrozenFormatException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public FrozenFormatException(String message) {
        super(message);
    }
}

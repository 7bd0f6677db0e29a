package sparktopicrouter.udfs;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads the JNI library packed inside this jar, once per JVM, the way snappy-java and rocksdbjni do: the
 * library is a resource under {@code sparktopicrouter/udfs/native/<os>-<arch>/}, copied into a directory
 * only this JVM's user may write (a fresh {@link Files#createTempDirectory}, so no other user can put a file
 * where it is loaded from) and loaded from there with {@link System#load}. spark-submit needs nothing but the
 * jar: no {@code java.library.path}, no file on the executors.
 */
final class NativeLibrary {
    /** The library's file name (cargo's for the {@code spark_topic_router_jvm} crate). */
    static final String FILE_NAME = "libspark_topic_router_jvm.so";

    private static boolean loaded;

    private NativeLibrary() {}

    /** The resource directory's platform name: {@code linux-x86_64}, as the Makefile names it. */
    static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT).replaceAll("\\s+", "");
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        if (arch.equals("amd64") || arch.equals("x86-64")) {
            arch = "x86_64";
        } else if (arch.equals("arm64")) {
            arch = "aarch64";
        }
        return os + "-" + arch;
    }

    /** Load the library if this JVM has not yet; an {@link UnsatisfiedLinkError} naming why if it cannot. */
    static synchronized void load() {
        if (loaded) {
            return;
        }
        String resource = "native/" + platform() + "/" + FILE_NAME;
        try (InputStream packed = NativeLibrary.class.getResourceAsStream(resource)) {
            if (packed == null) {
                throw new UnsatisfiedLinkError(
                        "spark-topic-router's jar holds no native matcher for " + platform()
                                + " (sparktopicrouter/udfs/" + resource + "): build the jar on that platform");
            }
            Path directory = Files.createTempDirectory("spark-topic-router-native-");
            Path library = directory.resolve(FILE_NAME);
            Files.copy(packed, library, StandardCopyOption.REPLACE_EXISTING);
            System.load(library.toAbsolutePath().toString());
            // Mapped now: the files can go at exit, the library first (deleteOnExit runs in reverse order).
            directory.toFile().deleteOnExit();
            library.toFile().deleteOnExit();
        } catch (IOException e) {
            UnsatisfiedLinkError error = new UnsatisfiedLinkError(
                    "could not unpack spark-topic-router's native matcher: " + e.getMessage());
            error.initCause(e);
            throw error;
        }
        loaded = true;
    }
}

package sparktopicrouter.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system without a child process per call.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} runs {@code chmod} in a
 * child process for every file it creates (the permission of the new file) and {@code readlink} for every
 * {@link #getFileLinkStatus}, which {@code FileContext.rename} calls for both paths of every rename. Spark's
 * offset and commit logs and Delta's commits each write a file and rename it, so a streaming batch forked
 * about 44 processes, a tenth of the machine's CPU in a router run on two cores, and one atomic write of the
 * offset log took 37-39 ms (1.7 ms without them; docs/development.md, "Faster local JVMs").
 *
 * <p>The same two calls here go through {@code java.nio} instead, with the same results: a permission without
 * the sticky bit (the only bit of {@link FsPermission} beyond the nine) is set with
 * {@link Files#setPosixFilePermissions}, which like {@code chmod} follows a symbolic link, and a path that is not
 * a symbolic link has no link target, so its link status is its status. Anything else (the sticky bit, a file
 * system without POSIX permissions, a symbolic link) still takes Hadoop's own code.
 *
 * <p>Concurrency: no state beyond {@link RawLocalFileSystem}'s own, so as thread-safe as it is; each call is one
 * system call or Hadoop's own code path.
 */
public class SpawnFreeRawLocalFileSystem extends RawLocalFileSystem {

    /** The permission bits {@link Files#setPosixFilePermissions} can set: read, write and execute, nine of them. */
    static final int POSIX_BITS = 0777;

    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
        int bits = permission.toShort();
        if ((bits & ~POSIX_BITS) != 0) {
            super.setPermission(path, permission);
            return;
        }
        try {
            Files.setPosixFilePermissions(pathToFile(path).toPath(), posix(bits));
        } catch (UnsupportedOperationException notPosix) {
            super.setPermission(path, permission);
        }
    }

    @Override
    public FileStatus getFileLinkStatus(Path path) throws IOException {
        if (Files.isSymbolicLink(pathToFile(path).toPath())) {
            return super.getFileLinkStatus(path);
        }
        // Hadoop's own answer for a path that is not a link (readlink prints nothing): the path's status, or
        // FileNotFoundException when nothing is there.
        return getFileStatus(path);
    }

    /** The nine permission bits of {@code bits} as {@code java.nio} permissions (owner, group, others). */
    static Set<PosixFilePermission> posix(int bits) {
        PosixFilePermission[] order = {
            PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE,
            PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
            PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE,
        };
        Set<PosixFilePermission> permissions = EnumSet.noneOf(PosixFilePermission.class);
        for (int at = 0; at < order.length; at++) {
            if ((bits & (0400 >> at)) != 0) {
                permissions.add(order[at]);
            }
        }
        return permissions;
    }
}

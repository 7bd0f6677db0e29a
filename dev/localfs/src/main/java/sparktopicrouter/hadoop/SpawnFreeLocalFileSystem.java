package sparktopicrouter.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * The checksummed local file system ({@code fs.file.impl}) over {@link SpawnFreeRawLocalFileSystem}: what
 * Hadoop's {@link LocalFileSystem} is over its raw one, without the child processes.
 */
public class SpawnFreeLocalFileSystem extends LocalFileSystem {
    public SpawnFreeLocalFileSystem() {
        super(new SpawnFreeRawLocalFileSystem());
    }
}

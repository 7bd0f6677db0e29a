package sparktopicrouter.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * The local file system of {@code FileContext} ({@code fs.AbstractFileSystem.file.impl}; Spark's offset and
 * commit logs and Delta's log store use it): Hadoop's {@code LocalFs} (checksums over a raw file system) with
 * {@link SpawnFreeRawLocalFileSystem} underneath, where {@code LocalFs} hard-codes Hadoop's own raw one.
 */
public class SpawnFreeLocalFs extends ChecksumFs {

    /** The constructor {@code AbstractFileSystem.createFileSystem} calls by reflection. */
    public SpawnFreeLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(uri, conf));
    }

    /** Hadoop's {@code RawLocalFs} (whose constructors are package-private) over the spawn-free raw system. */
    static final class Raw extends DelegateToFileSystem {
        Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(uri, new SpawnFreeRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1; // no port in a local URI
        }

        @Override
        @Deprecated
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public FsServerDefaults getServerDefaults(Path path) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true; // any local path is valid, as in RawLocalFs
        }
    }
}

"""The Spark properties file the demo, the tests and the benchmarks start their driver JVMs with.

    python -m dev.local_spark    # writes var/spark-conf/spark-defaults.conf; prints PYSPARK_SUBMIT_ARGS for it

pyspark starts a local session's driver JVM with ``$SPARK_HOME/bin/spark-submit $PYSPARK_SUBMIT_ARGS`` (default
``pyspark-shell``), and spark-submit's ``--properties-file`` loads Spark properties from a file; the session's
own configuration (``--conf``, from :func:`routing.spark.spark_conf`) wins key by key. So what :func:`use` writes
and points ``PYSPARK_SUBMIT_ARGS`` at reaches every driver JVM that process and its children start (a job's, a
test's, a ``python -m routing ...`` child's) without the library knowing. (Not ``$SPARK_CONF_DIR``: Spark puts
that directory on the JVM's class path, and a class-data archive refuses a class path with a non-empty
directory before the jars it loads.) It holds:

* the spawn-free local file system (``dev/localfs``, built by ``make jars``): its jar on
  ``spark.driver.extraClassPath`` and its classes as ``spark.hadoop.fs.file.impl`` and
  ``spark.hadoop.fs.AbstractFileSystem.file.impl``. Hadoop's own local file system, without its native
  library (pyspark ships none), runs ``chmod`` in a child process for every file it creates and ``readlink``
  for both paths of every ``FileContext`` rename: about 44 processes a streaming batch, 37-39 ms for each
  small atomic write (1.7 ms without them). Local masters only: executors elsewhere lack the jar.
* the class-data archive (:mod:`dev.class_archive`) in ``spark.driver.defaultJavaOptions``, which Spark puts
  before the session's own ``spark.driver.extraJavaOptions``: a fresh JVM starts about 10 s sooner here;
* Spark's scratch space, warehouse and Ivy home under ``var/``.

Written fresh each time (:func:`use`), so the archive named is the one for the current JDK, pyspark, jars
and class path, or none (until ``make jvm-archive`` builds it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dev import class_archive
from dev.spark_properties import (
    ARCHIVE_DIR,
    DEFAULT_JAVA_OPTIONS,
    DRIVER_CLASS_PATH,
    LOCAL_FS_CLASSES,
    LOCAL_FS_JAR,
    PROPERTIES_FILE,
    SUBMIT_ARGS,
    VAR,
    join_options,
    local_fs_conf,
    scratch_conf,
    submit_args,
    write_properties,
)

if TYPE_CHECKING:
    from routing.settings import Settings

__all__ = [
    "ARCHIVE_DIR",
    "DEFAULT_JAVA_OPTIONS",
    "DRIVER_CLASS_PATH",
    "JIT_LAZY",
    "JIT_QUICK",
    "LOCAL_FS_CLASSES",
    "LOCAL_FS_JAR",
    "PROPERTIES_FILE",
    "SUBMIT_ARGS",
    "VAR",
    "archive_options",
    "join_options",
    "local_conf",
    "local_fs_conf",
    "main",
    "scratch_conf",
    "submit_args",
    "use",
    "write_properties",
]


#: JIT flags for a JVM of a run of a minute or two (a test's job process): C1 only, about half the JVM's CPU.
#: Stopping at C1 also shrinks the default code cache to 48 MB, which a Spark driver fills within minutes, so
#: the tiered default of 240 MB stays.
JIT_QUICK = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
#: JIT flags for a long session of many short, different queries (the test session): C2 only for the hottest
#: code, forty times HotSpot's call and loop counts before it compiles a method. Against ten times, on 90 tests
#: of the session's own JVM in one run after the other: C2's CPU 99 -> 41 s, the JVM's 456 -> 416 s, 303 -> 284 s.
JIT_LAZY = (
    "-XX:Tier4InvocationThreshold=200000 -XX:Tier4MinInvocationThreshold=24000 "
    "-XX:Tier4CompileThreshold=600000 -XX:Tier4BackEdgeThreshold=1600000"
)


def archive_options(settings: Settings, defaults: Mapping[str, str], archive_dir: Path = ARCHIVE_DIR) -> str:
    """The options that map the archive for a session of ``settings`` started over ``defaults``; "" if none."""
    from routing.spark import SparkJarsMissingError, spark_conf

    try:
        session = {**defaults, **spark_conf(settings)}
    except SparkJarsMissingError:
        return ""
    return class_archive.java_options(str(archive_dir), session)


def local_conf(
    settings: Settings | None = None,
    *,
    var: Path = VAR,
    archive_dir: Path | None = ARCHIVE_DIR,
    java_options: str = "",
) -> dict[str, str]:
    """The properties: scratch under ``var``, the local file system, the archive (unless
    ``archive_dir`` is None) and then ``java_options`` in ``spark.driver.defaultJavaOptions``."""
    from routing.settings import load_settings

    conf = {**scratch_conf(var), **local_fs_conf()}
    archive = "" if archive_dir is None else archive_options(settings or load_settings(), conf, archive_dir)
    options = join_options(archive, java_options)
    if options:
        conf[DEFAULT_JAVA_OPTIONS] = options
    return conf


def use(
    settings: Settings | None = None,
    *,
    path: Path = PROPERTIES_FILE,
    var: Path = VAR,
    java_options: str = "",
) -> Path:
    """Write :func:`local_conf` to ``path`` and point this process and its children at it (``PYSPARK_SUBMIT_ARGS``),
    before a driver JVM starts; ``path``."""
    write_properties(path, local_conf(settings, var=var, java_options=java_options))
    os.environ[SUBMIT_ARGS] = submit_args(path)
    return path


def main() -> int:
    print(submit_args(use()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

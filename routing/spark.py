"""The one SparkSession factory: every job and test gets its session from :func:`get_spark`.

The session is local (``local[2]`` by default) and loads exactly the jars ``make jars`` resolved
into ``spark.jars_dir`` (Kafka source + Delta). Nothing is resolved at run time:
``spark.jars.packages`` and ``spark.jars.repositories`` are refused, and ``spark.jars.ivy`` points
at an empty directory under var/, so a missing jar fails at once with "run `make jars`" instead of
a download attempt.

A JVM holds one SparkContext, so Spark's *static* configuration (jars, master, driver memory,
extensions) is fixed by the first call in a process; later calls return the running session
(``getOrCreate``) with runtime options from ``extra_conf`` applied.

Under spark-submit the command line wins: whatever it set (``--master``, ``--jars``, ``--conf``)
overrides the settings, because PySpark's builder would otherwise silently replace it (a
``--master spark://...`` job would run in ``local[2]``). The jars then come from ``--jars`` (checked
for Delta and the Kafka source like ``spark.jars_dir``), and the Python of the executors is the
submitter's choice (``spark.pyspark.python``/``PYSPARK_PYTHON``, e.g. ``./environment/bin/python`` of
a packed environment), never this driver's interpreter path, which does not exist on other nodes.
The loopback driver address is for local masters only: on a cluster Spark picks the host's own.

With ``spark.remote = "sc://host:port"`` the session is a Spark Connect client instead: no JVM in
this process, and the server (``python -m jobs.connect_server`` starts one with this project's jars and
settings) owns every static setting. Only the runtime SQL settings (:func:`runtime_conf`, then
``[spark.conf]``) are set on the session; :func:`is_connect` tells the two kinds apart.

Where the runtime itself provides Delta and the Kafka source (a managed Spark, or an image with them in
``$SPARK_HOME/jars``), ``spark.jars_provided = true`` skips the jar check and adds nothing to
``spark.jars``: loading the open-source jars beside the runtime's own would shadow them.

Jobs are scheduled FAIR between two pools (:func:`scheduler_pools_xml`, written under ``spark.local_dir``): the
default pool, where the stream's batches run, is always served first, and the driver's background work (the
snapshot refresh's change-feed reads, :func:`run_in_background_pool`) takes the task slots the stream leaves
idle. With Spark's default FIFO, a refresh job submitted between two batches ran all its tasks before the next
batch's. ``[spark.conf]`` may set ``spark.scheduler.mode`` or ``spark.scheduler.allocation.file`` instead.

A driver JVM this process starts (not under spark-submit) maps the class-data archive of
``spark.class_archive`` when one was built for its JDK, pyspark and jars (:mod:`routing.class_archive`):
the options go first in ``spark.driver.extraJavaOptions``, before any of the settings' own. So does
``spark.jit`` (``"quick"``: C1 only, for runs of a minute or two; ``"lazy"``: C2 for the hottest code only;
:data:`routing.settings.JIT_MODES`) and ``spark.gc`` (``"parallel"``; :data:`routing.settings.GC_MODES`).
Such a JVM with a local master also reads and writes ``file:`` paths through the spawn-free local file system
of ``spark.local_fs_jar`` (:func:`local_fs_conf`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from routing import class_archive, console
from routing.settings import GC_MODES, JIT_MODES, Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_APP_NAME = "spark-topic-router"
#: Jar name prefixes the session cannot work without (Delta; the Kafka source and its client).
REQUIRED_JARS = ("delta-spark_", "delta-storage-", "spark-sql-kafka-0-10_", "kafka-clients-")
#: Run-time dependency resolution: never (see module docstring).
FORBIDDEN_CONF = ("spark.jars.packages", "spark.jars.repositories", "spark.jars.excludes")
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: A JVM option that picks the garbage collector (``-XX:+UseG1GC``, ``-XX:+UseZGC``, ...). The JVM refuses to start
#: with two ("Multiple garbage collectors selected"), so where the user's own options pick one, ``spark.gc`` adds none.
COLLECTOR_OPTION = re.compile(r"(?:^|\s)-XX:\+Use\w*GC(?=\s|$)")
#: Where else a driver JVM started here reads options from: Spark's prepended driver options, and the variables the
#: JVM (``JAVA_TOOL_OPTIONS``, ``_JAVA_OPTIONS``) and the ``java`` launcher (``JDK_JAVA_OPTIONS``) read at start.
#: A collector picked in any of them and ours would stop the JVM before the session exists.
DRIVER_DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
JVM_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")


def user_collector(conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str | None:
    """Where the user's own JVM options pick a garbage collector (a conf key or an environment variable), or None."""
    environ = os.environ if environ is None else environ
    sources = [(key, conf.get(key)) for key in (DRIVER_JAVA_OPTIONS, DRIVER_DEFAULT_JAVA_OPTIONS)]
    sources += [(f"${name}", environ.get(name)) for name in JVM_OPTION_VARIABLES]
    return next((where for where, options in sources if options and COLLECTOR_OPTION.search(options)), None)


#: The Hadoop settings that name the ``file:`` file systems (``FileSystem``; ``FileContext``, which Spark's offset
#: and commit logs and Delta's log store use), and the spawn-free classes of ``spark.local_fs_jar`` for each.
LOCAL_FS_CLASSES = {
    "spark.hadoop.fs.file.impl": "sparktopicrouter.hadoop.SpawnFreeLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "sparktopicrouter.hadoop.SpawnFreeLocalFs",
}
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"


def local_fs_conf(jar: str, conf: Mapping[str, str]) -> dict[str, str]:
    """What makes a driver JVM to be started with ``conf`` use the spawn-free local file system of ``jar``.

    Hadoop's local file system, without its native library (pyspark ships none), runs ``chmod`` in a child
    process for every file it creates and ``readlink`` for both paths of every ``FileContext`` rename: about 44
    processes a streaming batch (offset and commit logs, the Delta commit, its checksum file, the data files),
    and 37-39 ms for each small atomic write (1.7 ms without them). The classes in ``jar`` (``conf/jvm/src``)
    make the same calls through ``java.nio`` instead. Only for a local master, whose executors are this JVM
    (executors elsewhere would need the jar on their own class path), and only on the JVM's class path: Hadoop
    looks the class up when spark-submit first resolves a path, before ``spark.jars`` are loaded. Nothing when
    ``jar`` is "" or ``conf`` names a ``file:`` file system of its own; a missing jar is logged (``make jars``
    builds it).
    """
    if not jar or not conf.get("spark.master", "").startswith("local"):
        return {}
    if any(key in conf for key in LOCAL_FS_CLASSES):
        return {}
    if not Path(jar).is_file():
        log.warning("spark.local_fs_jar %s is missing (run `make jars`): Hadoop's local file system forks", jar)
        return {}
    class_path = conf.get(DRIVER_CLASS_PATH, "")
    return {**LOCAL_FS_CLASSES, DRIVER_CLASS_PATH: os.pathsep.join(part for part in (class_path, jar) if part)}


#: The fair-scheduler pool of the driver's background Spark jobs (the snapshot refresh), below the stream's.
BACKGROUND_POOL = "background"
#: The default pool's minShare: more cores than any cluster has, so the pool is always "below its minimum share"
#: and Spark's fair scheduler offers it every free task slot before any other pool's (strict priority).
STREAM_MIN_SHARE = 1_000_000


def scheduler_pools_xml() -> str:
    """The fair-scheduler allocation file: the stream's (default) pool first, :data:`BACKGROUND_POOL` after it."""
    return f"""<?xml version="1.0"?>
<!-- Written by routing.spark (see its module docs). The stream's batches run in the default pool, which is
     always below its minShare and so always served first; the driver's background work gets idle slots. -->
<allocations>
  <pool name="default">
    <schedulingMode>FIFO</schedulingMode>
    <weight>1</weight>
    <minShare>{STREAM_MIN_SHARE}</minShare>
  </pool>
  <pool name="{BACKGROUND_POOL}">
    <schedulingMode>FIFO</schedulingMode>
    <weight>1</weight>
    <minShare>0</minShare>
  </pool>
</allocations>
"""


def write_scheduler_pools(directory: str) -> Path:
    """:func:`scheduler_pools_xml` in ``directory`` (rewritten only when it differs); its path.

    Written beside and renamed into place: another process's JVM starting at the same moment (a job and
    a Spark Connect server share ``spark.local_dir``) reads the old file or the new one, never a part.
    """
    path = Path(directory).resolve() / "fairscheduler.xml"
    text = scheduler_pools_xml()
    if not path.is_file() or path.read_text() != text:
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
    return path


def run_in_background_pool(spark: SparkSession) -> bool:
    """Submit the calling thread's later Spark jobs to :data:`BACKGROUND_POOL`; whether that was possible.

    Only a classic session scheduled FAIR has pools (a Spark Connect client has no SparkContext, and under FIFO
    a pool changes nothing). The pool is a thread-local property, so only this thread's jobs move.
    """
    if is_connect(spark):
        return False
    context = spark.sparkContext
    if (context.getConf().get("spark.scheduler.mode") or "FIFO").upper() != "FAIR":
        return False
    context.setLocalProperty("spark.scheduler.pool", BACKGROUND_POOL)
    return True


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class SparkJarsMissingError(RuntimeError):
    """The jars ``make jars`` resolves are missing."""


def spark_jars(settings: Settings) -> list[Path]:
    """The jar files a session loads, checked to include Delta and the Kafka source."""
    jars_dir = Path(settings.spark.jars_dir)
    jars = sorted(jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    _check_required_jars([jar.name for jar in jars], f"{jars_dir}", "run `make jars`")
    return jars


def _check_required_jars(names: list[str], where: str, remedy: str) -> None:
    missing = [prefix for prefix in REQUIRED_JARS if not any(name.startswith(prefix) for name in names)]
    if missing:
        raise SparkJarsMissingError(
            f"Spark jars missing from {where} ({', '.join(prefix.rstrip('_-') for prefix in missing)}): {remedy}"
        )


#: Spark's cache of compiled generated classes (static: set before the session starts; ``[spark.conf]`` may
#: override it).
CODEGEN_CACHE_ENTRIES = "spark.sql.codegen.cache.maxEntries"
DEFAULT_CODEGEN_CACHE_ENTRIES = 2000


def submitted_conf() -> dict[str, str]:
    """The Spark configuration spark-submit passed this driver; empty when not run by spark-submit."""
    # spark-submit starts the JVM first and hands the Python driver its gateway through this variable.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return {key: value for key, value in SparkConf().getAll()}


def runtime_conf(settings: Settings) -> dict[str, str]:
    """The SQL settings a session may change after it started: part of :func:`spark_conf`, and all a Spark
    Connect session sets on itself (the server owns the static rest)."""
    return {
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # Delta's defaults assume a cluster: 50 partitions to replay a table's log is slow on 2 cores.
        "spark.databricks.delta.snapshotPartitions": str(settings.spark.delta_snapshot_partitions),
        # Parquet's INT64 timestamps instead of Spark's default, the deprecated INT96: cheaper to write, smaller,
        # and what other Parquet readers expect (routing.router.tables, Parquet encodings).
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }


def spark_conf(
    settings: Settings,
    *,
    app_name: str = DEFAULT_APP_NAME,
    master: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
    submitted: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The full Spark configuration :func:`get_spark` starts a session with.

    ``submitted`` is what spark-submit set (:func:`submitted_conf`); it overrides everything else.
    """
    spark = settings.spark
    submitted = submitted or {}
    for directory in (spark.ivy_dir, spark.local_dir):
        Path(directory).mkdir(parents=True, exist_ok=True)
    jars: dict[str, str] = {}
    if spark.jars_provided:
        pass  # the runtime's classpath has them: check nothing, add nothing
    elif "spark.jars" in submitted:
        names = [Path(jar).name for jar in submitted["spark.jars"].split(",")]
        _check_required_jars(names, "spark-submit --jars", "pass the jars of `make package` (dist/jars/)")
    else:
        # Local jars only; an empty Ivy home proves nothing was fetched.
        jars["spark.jars"] = ",".join(str(jar) for jar in spark_jars(settings))
    conf = {
        "spark.master": master or spark.master,
        "spark.app.name": app_name,
        **jars,
        "spark.jars.ivy": spark.ivy_dir,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": str(spark.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": spark.driver_memory,
        # Loopback: no hostname lookups, nothing listens on other interfaces.
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        **runtime_conf(settings),
        "spark.default.parallelism": str(spark.shuffle_partitions),
        # Compiled whole-stage classes kept for reuse (Spark's 100 thrashes: a test session compiled 5,058 and
        # 949 with 2,000 entries, 0.92x its CPU; README "Settings that matter"). A few MB of metaspace.
        CODEGEN_CACHE_ENTRIES: str(DEFAULT_CODEGEN_CACHE_ENTRIES),
        # The stream's jobs before the driver's background work (module docs).
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(write_scheduler_pools(spark.local_dir)),
        "spark.sql.warehouse.dir": spark.warehouse_dir,
        "spark.local.dir": spark.local_dir,
        # Python workers run this interpreter (the project's virtualenv), not whatever is on PATH.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if submitted:
        # The submitter picks the executors' Python (see module docstring).
        del conf["spark.pyspark.python"], conf["spark.pyspark.driver.python"]
    effective_master = {**conf, **spark.conf, **(extra_conf or {}), **submitted}["spark.master"]
    if not effective_master.startswith("local"):
        # Executors on other hosts connect back to the driver: a loopback driver address would strand them.
        del conf["spark.driver.host"], conf["spark.driver.bindAddress"]
    conf.update(spark.conf)
    conf.update(extra_conf or {})
    conf.update(submitted)
    if not submitted:
        # This process starts the driver JVM (spark-submit started it already otherwise): the local file system's
        # class path first (the class archive is keyed by the class path), then map the class archive, pick the
        # compiler tiers and the collector; the user's options last, so theirs win (a collector of theirs
        # replaces ours: the JVM would refuse both).
        conf.update(local_fs_conf(spark.local_fs_jar, conf))
        user_options = conf.get(DRIVER_JAVA_OPTIONS) or ""
        theirs = user_collector(conf)
        if theirs is not None and GC_MODES[spark.gc]:
            log.info("spark.gc = %r not applied: %s picks the garbage collector", spark.gc, theirs)
        options = class_archive.merge_java_options(
            class_archive.java_options(spark.class_archive, conf),
            JIT_MODES[spark.jit],
            "" if theirs is not None else GC_MODES[spark.gc],
            user_options,
        )
        if options:
            conf[DRIVER_JAVA_OPTIONS] = options
    forbidden = sorted(key for key in conf if key in FORBIDDEN_CONF)
    if forbidden:
        raise ValueError(
            f"{', '.join(forbidden)}: Spark may not resolve dependencies at run time; "
            "declare them in conf/jvm/pom.xml and run `make jars`"
        )
    return conf


def get_spark(
    settings: Settings | None = None,
    *,
    app_name: str = DEFAULT_APP_NAME,
    master: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The process's SparkSession, started with :func:`spark_conf` if none is running."""
    from pyspark.sql import SparkSession

    settings = settings or load_settings()
    if settings.spark.remote:
        return _connect_session(settings, extra_conf)
    conf = spark_conf(settings, app_name=app_name, master=master, extra_conf=extra_conf, submitted=submitted_conf())
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in (extra_conf or {}).items():
            active.conf.set(key, value)
        return active
    # The JVM reads this before any conf; without it Spark warns about the hostname and binds elsewhere.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Local mode starts Python workers from PYSPARK_PYTHON (it ignores spark.pyspark.python): they must
    # run this interpreter, whose environment has pyarrow and the native module.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # A quiet command line's JVM writes its output to a log file (routing.console); log levels are log4j's.
    console.start_driver_jvm(conf, local_dir=settings.spark.local_dir, app_name=app_name)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _connect_session(settings: Settings, extra_conf: Mapping[str, str] | None) -> SparkSession:
    """A Spark Connect session to ``spark.remote`` with this project's runtime settings."""
    from pyspark.sql import SparkSession

    runtime = runtime_conf(settings)
    runtime.update(settings.spark.conf)
    runtime.update(extra_conf or {})
    session = SparkSession.builder.remote(settings.spark.remote).getOrCreate()
    for key, value in runtime.items():
        try:
            session.conf.set(key, value)
        except Exception as error:  # a static setting: the server's to set
            raise ValueError(
                f"{key} cannot be set on a Spark Connect session (start the server with it instead): {error}"
            ) from error
    return session

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
``[spark.conf]``; its static defaults, such as the JVM's flags, are the server's) are set on the session;
:func:`is_connect` tells the two kinds apart.

Where the runtime itself provides Delta and the Kafka source (a managed Spark, or an image with them in
``$SPARK_HOME/jars``), an empty ``spark.jars_dir`` skips the jar check and adds nothing to
``spark.jars``: loading the open-source jars beside the runtime's own would shadow them.

Jobs are scheduled FAIR between two pools (:func:`scheduler_pools_xml`, written under ``spark.local.dir``): the
default pool, where the stream's batches run, is always served first, and the driver's background work (the
snapshot refresh's change-feed reads, :func:`run_in_background_pool`) takes the task slots the stream leaves
idle. With Spark's default FIFO, a refresh job submitted between two batches ran all its tasks before the next
batch's. ``[spark.conf]`` may set ``spark.scheduler.mode`` or ``spark.scheduler.allocation.file`` instead.

JVM flags, memory, the UI and every other Spark or Delta knob are Spark's own keys: ``[spark.conf]`` of the
settings (:data:`routing.settings.DEFAULT_SPARK_CONF` holds the project's local defaults, such as the parallel
collector in ``spark.driver.extraJavaOptions``), or Spark's own properties files (``spark-defaults.conf``,
``--properties-file``), which the ``spark-submit`` that starts a local session's JVM reads too (the development
tooling in ``dev/`` hands it its class-data archive and local file system that way).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from routing import console
from routing.settings import DEFAULT_SPARK_CONF, Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_APP_NAME = "spark-topic-router"
#: Jar name prefixes the session cannot work without (Delta; the Kafka source and its client).
REQUIRED_JARS = ("delta-spark_", "delta-storage-", "spark-sql-kafka-0-10_", "kafka-clients-")
#: Run-time dependency resolution: never (see module docstring).
FORBIDDEN_CONF = ("spark.jars.packages", "spark.jars.repositories", "spark.jars.excludes")
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
    a Spark Connect server share the directory) reads the old file or the new one, never a part.
    """
    path = Path(directory).resolve() / "fairscheduler.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
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
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
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
    jars: dict[str, str] = {}
    if not spark.jars_dir:
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
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.showConsoleProgress": "false",
        # Loopback: no hostname lookups, nothing listens on other interfaces.
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        **runtime_conf(settings),
        # Compiled whole-stage classes kept for reuse (Spark's 100 thrashes: a test session compiled 5,058 and
        # 949 with 2,000 entries, 0.92x its CPU; docs/tuning.md, "Spark"). A few MB of metaspace.
        CODEGEN_CACHE_ENTRIES: str(DEFAULT_CODEGEN_CACHE_ENTRIES),
        # The stream's jobs before the driver's background work (module docs).
        "spark.scheduler.mode": "FAIR",
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
    if "spark.scheduler.allocation.file" not in conf:
        conf["spark.scheduler.allocation.file"] = str(write_scheduler_pools(scratch_dir(conf)))
    forbidden = sorted(key for key in conf if key in FORBIDDEN_CONF)
    if forbidden:
        raise ValueError(
            f"{', '.join(forbidden)}: Spark may not resolve dependencies at run time; "
            "declare them in conf/jvm/pom.xml and run `make jars`"
        )
    return conf


def scratch_dir(conf: Mapping[str, str]) -> str:
    """Where the driver keeps its own files (scheduler pools, a quiet command's JVM log): Spark's first
    ``spark.local.dir`` when the configuration names one, else a directory of this user's in the machine's
    temporary directory."""
    default = os.path.join(tempfile.gettempdir(), f"spark-topic-router-{os.getuid()}")
    return conf.get("spark.local.dir", "").split(",")[0] or default


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
    console.start_driver_jvm(conf, local_dir=scratch_dir(conf), app_name=app_name)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


#: Prefixes of the SQL settings a session may set after it started (Spark's and Delta's); the rest of Spark's
#: configuration belongs to the JVM that runs it.
RUNTIME_PREFIXES = ("spark.sql.", "spark.databricks.")


def _connect_session(settings: Settings, extra_conf: Mapping[str, str] | None) -> SparkSession:
    """A Spark Connect session to ``spark.remote`` with this project's runtime settings."""
    from pyspark.sql import SparkSession

    runtime = runtime_conf(settings)
    runtime.update(settings.spark.conf)
    runtime.update(extra_conf or {})
    session = SparkSession.builder.remote(settings.spark.remote).getOrCreate()
    for key, value in runtime.items():
        if DEFAULT_SPARK_CONF.get(key) == value and not key.startswith(RUNTIME_PREFIXES):
            continue  # a JVM-wide default (flags, memory, the UI): the server's own, never a session's
        try:
            session.conf.set(key, value)
        except Exception as error:  # a static setting: the server's own
            # The project's local defaults (the JVM's flags and memory, the UI) are the server's to choose; a
            # static key the settings name beyond them is a mistake, unless the server already has its value.
            if DEFAULT_SPARK_CONF.get(key) == value or session.conf.get(key, None) == value:
                continue
            raise ValueError(
                f"{key} cannot be set on a Spark Connect session (start the server with it instead): {error}"
            ) from error
    return session

"""What a command line prints: its own lines, not Spark's, log4j's or py4j's, unless ``--verbose``.

Every entry point (``python -m routing ...``, ``python -m jobs.route``, the other jobs) calls
:func:`configure` once with its ``--verbose`` flag (:func:`add_verbose_argument`):

* **Python logging** goes to stderr. The project's own loggers (``routing``, ``jobs``, ``udfs``, ``bench``)
  log at the job's ``--log-level``; every other library at WARNING, and py4j not at all: its INFO lines
  ("Received command c on object id p0") and its shutdown errors are about its own sockets, and a call
  that fails reaches this code as an exception anyway. ``--verbose`` logs everything at the job's level.
* **The driver JVM** that :func:`routing.spark.get_spark` starts writes its stdout and stderr to
  ``<scratch>/logs/<app name>.log`` (appended to, one header line per run) instead of the terminal, where
  ``<scratch>`` is Spark's ``spark.local.dir``, else a directory of the user's in the temporary directory
  (:func:`routing.spark.scratch_dir`): the JDK's own warnings ("Using incubator modules"), log4j's output with
  Spark's default profile, Spark's warnings, Python workers' output. A command that fails names that file in
  one line (:func:`report_jvm_log`). ``--verbose`` leaves the JVM's output on the terminal.

A process that never calls :func:`configure` (a notebook, the tests, a library user) is left as it is.
Under spark-submit the JVM already exists: its output and log4j configuration are the submitter's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

#: The loggers of this project's own packages: they log at the job's level.
PROJECT_LOGGERS = ("routing", "jobs", "udfs", "bench")
#: Loggers silenced unless ``--verbose``: py4j's own (see the module doc).
SILENCED_LOGGERS = ("py4j",)
#: The directory under the driver's scratch directory (:func:`routing.spark.scratch_dir`) the JVM's output goes to.
JVM_LOG_DIRECTORY = "logs"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Exit status of a command stopped by Ctrl-C before it could stop cleanly (128 + SIGINT, as shells report).
EXIT_INTERRUPTED = 130

#: None: not configured (the JVM's output stays where it is); else whether ``--verbose`` was given.
_verbose: bool | None = None
#: The driver JVM's log file, once a JVM was started with its output there.
_jvm_log: Path | None = None
_jvm_log_file: IO[bytes] | None = None


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print Spark's, log4j's and py4j's own output (by default the driver JVM's goes to "
        f"<spark.local.dir>/{JVM_LOG_DIRECTORY}/<app>.log, named on failure)",
    )


def configure(*, verbose: bool, level: str | int = logging.WARNING) -> None:
    """Set up logging on stderr for a command line, and where the driver JVM's output goes (module doc).

    Like :func:`logging.basicConfig`, nothing at all when the root logger has handlers already: the host
    process (pytest, an application calling a job's ``main``) configured logging and owns its output.
    """
    global _verbose
    root = logging.getLogger()
    if root.handlers:
        return
    _verbose = verbose
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level if verbose else logging.WARNING)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(level)
    for name in SILENCED_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.NOTSET if verbose else logging.CRITICAL + 1)


def jvm_log_path(local_dir: str, app_name: str) -> Path:
    """Where the driver JVM of ``app_name`` writes its output when not ``--verbose``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in app_name) or "spark"
    return Path(local_dir).resolve() / JVM_LOG_DIRECTORY / f"{safe}.log"


def jvm_log() -> Path | None:
    """The log file the driver JVM's output went to, if this process started one so."""
    return _jvm_log


def start_driver_jvm(conf: Mapping[str, str], *, local_dir: str, app_name: str) -> None:
    """Start the driver JVM with ``conf``, its output to :func:`jvm_log_path`, when a quiet command asked for it.

    Nothing when :func:`configure` was not called or was ``verbose``, when a SparkContext exists, or under
    spark-submit (the JVM exists): :func:`routing.spark.get_spark`'s builder then starts or finds it as usual.
    """
    global _jvm_log, _jvm_log_file
    if _verbose is not False or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._active_spark_context is not None:
        return
    path = jvm_log_path(local_dir, app_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    log_file = path.open("ab")
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    log_file.write(f"=== {started} pid {os.getpid()}: {' '.join(sys.argv)}\n".encode())
    log_file.flush()
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    # popen_kwargs: pyspark's documented hook for capturing the JVM's stdout and stderr.
    gateway = launch_gateway(  # type: ignore[no-untyped-call]  # pyspark leaves it unannotated
        spark_conf, popen_kwargs={"stdout": log_file, "stderr": log_file}
    )
    SparkContext(conf=spark_conf, gateway=gateway)
    _jvm_log, _jvm_log_file = path, log_file


def report_jvm_log(prog: str, status: int, err: Callable[[str], None] | None = None) -> int:
    """``status``, after naming the JVM's log file in one line on stderr when the command failed (status 1)."""
    if status == 1 and _jvm_log is not None:
        (err or (lambda line: print(line, file=sys.stderr)))(f"{prog}: Spark's own output is in {_jvm_log}")
    return status


def run(prog: str, main: Callable[[], int]) -> int:
    """``main()``'s exit status; Ctrl-C before the command could stop cleanly is one line, not a traceback."""
    try:
        status = main()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return report_jvm_log(prog, status)

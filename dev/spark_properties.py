"""The pieces of a local Spark properties file: where development tooling keeps its files, the spawn-free local file
system's keys, Spark's scratch space under ``var/``, and how a file of properties reaches pyspark's driver JVM.

:mod:`dev.local_spark` puts them together with the class-data archive (:mod:`dev.class_archive`), which builds
its archive over the same pieces: this module is below both.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from routing.config import REPO_ROOT

log = logging.getLogger(__name__)

VAR = REPO_ROOT / "var"
#: Where :func:`use` writes the properties by default.
PROPERTIES_FILE = VAR / "spark-conf" / "spark-defaults.conf"
#: Where ``make jvm-archive`` writes the class-data archives.
ARCHIVE_DIR = VAR / "jvm"
#: Built by ``make jars`` from ``dev/localfs/src``.
LOCAL_FS_JAR = VAR / "jars" / "localfs" / "spark-topic-router-localfs.jar"
#: The Hadoop settings naming the ``file:`` file systems (``FileSystem``; ``FileContext``, which Spark's offset and
#: commit logs and Delta's log store use), and the spawn-free classes for each.
LOCAL_FS_CLASSES = {
    "spark.hadoop.fs.file.impl": "sparktopicrouter.hadoop.SpawnFreeLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "sparktopicrouter.hadoop.SpawnFreeLocalFs",
}
DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
#: The variable pyspark's ``launch_gateway`` hands spark-submit's arguments in.
SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"


def join_options(*options: str | None) -> str:
    """JVM options joined in order, empty ones left out (for the JVM the last of two conflicting ones wins)."""
    return " ".join(part for part in ((option or "").strip() for option in options) if part)


def local_fs_conf(jar: Path = LOCAL_FS_JAR) -> dict[str, str]:
    """The keys that make a local driver JVM use the spawn-free local file system; nothing when the jar is missing."""
    if not jar.is_file():
        log.warning("%s is missing (run `make jars`): Hadoop's local file system forks", jar)
        return {}
    return {**LOCAL_FS_CLASSES, DRIVER_CLASS_PATH: str(jar)}


def scratch_conf(var: Path = VAR) -> dict[str, str]:
    """Spark's scratch space, warehouse and Ivy home (kept empty: nothing is resolved at run time) under ``var``."""
    return {
        "spark.local.dir": str(var / "spark-local"),
        "spark.sql.warehouse.dir": str(var / "spark-warehouse"),
        "spark.jars.ivy": str(var / "ivy"),
    }


def _escaped(text: str) -> str:
    """``text`` as a value of a Java properties file (what Spark reads ``spark-defaults.conf`` as)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def write_properties(path: Path, conf: Mapping[str, str]) -> Path:
    """``conf`` as the Spark properties file ``path``, written beside and renamed into place; ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Written by dev/local_spark.py for the demo, the tests and the benchmarks; rewritten on each use."]
    lines += [f"{key} {_escaped(value)}" for key, value in sorted(conf.items())]
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text("\n".join(lines) + "\n")
    os.replace(partial, path)
    return path


def submit_args(path: Path) -> str:
    """The ``PYSPARK_SUBMIT_ARGS`` that start pyspark's driver JVM with the properties file ``path``."""
    return f"--properties-file {shlex.quote(str(path))} pyspark-shell"

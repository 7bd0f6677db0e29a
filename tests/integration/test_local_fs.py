"""The spawn-free local file system (development tooling: ``dev/localfs/src``, applied by :mod:`dev.local_spark`
through the Spark properties every test JVM starts with).

Two things are checked: that it answers as Hadoop's own local file system does (the oracle: Hadoop's classes on
the same paths, in the same JVM), and that it runs no child process where Hadoop's runs dozens (a count, taken
with tracing stand-ins for the commands Hadoop's ``Shell`` runs, put first on a fresh JVM's ``PATH``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dev import local_spark
from routing.settings import REPO_ROOT, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OURS = "sparktopicrouter.hadoop.SpawnFreeLocalFileSystem"
OURS_FILE_CONTEXT = "sparktopicrouter.hadoop.SpawnFreeLocalFs"
#: Hadoop's own local file systems (``FileSystem``, ``FileContext``), by the settings that name them: the oracle.
HADOOP_OWN_CLASSES = {
    "fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}
#: What Hadoop's ``Shell`` runs on a local file system (permissions, owners, links, disk usage, groups).
TRACED_COMMANDS = ("readlink", "chmod", "chown", "chgrp", "ls", "stat", "df", "du", "id", "groups", "whoami")


def the_jvm(spark: SparkSession) -> Any:
    """The session's py4j view of the JVM (classic Spark: always there)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm


def hadoop_conf(spark: SparkSession, *, hadoop_own: bool) -> Any:
    """The session's Hadoop configuration, or a copy naming Hadoop's own local file systems."""
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    if not hadoop_own:
        return conf
    jvm = the_jvm(spark)
    own = jvm.org.apache.hadoop.conf.Configuration(conf)
    for key, name in HADOOP_OWN_CLASSES.items():
        own.set(key, name)
    return own


def file_system(spark: SparkSession, *, hadoop_own: bool) -> Any:
    jvm = the_jvm(spark)
    return jvm.org.apache.hadoop.fs.FileSystem.newInstance(
        jvm.java.net.URI("file:///"), hadoop_conf(spark, hadoop_own=hadoop_own)
    )


def test_the_session_reads_and_writes_local_paths_through_the_spawn_free_classes(spark: SparkSession) -> None:
    jvm = the_jvm(spark)
    conf = hadoop_conf(spark, hadoop_own=False)
    uri = jvm.java.net.URI("file:///tmp")
    assert jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName() == OURS
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == OURS_FILE_CONTEXT
    assert file_system(spark, hadoop_own=True).getClass().getName() == "org.apache.hadoop.fs.LocalFileSystem"


#: Permissions set on a fresh file (a directory for the sticky bit, which java.nio cannot set: Hadoop's code does).
PERMISSIONS = ("000", "400", "600", "640", "644", "700", "751", "755", "777", "1777")


@pytest.mark.parametrize("octal", PERMISSIONS)
def test_set_permission_leaves_the_mode_hadoop_s_own_leaves(spark: SparkSession, tmp_path: Path, octal: str) -> None:
    jvm = the_jvm(spark)
    modes = {}
    for hadoop_own in (True, False):
        fs = file_system(spark, hadoop_own=hadoop_own)
        path = tmp_path / f"{'hadoop' if hadoop_own else 'ours'}-{octal}"
        if len(octal) == 4:
            path.mkdir()
        else:
            path.write_bytes(b"x")
        fs.setPermission(
            jvm.org.apache.hadoop.fs.Path(str(path)), jvm.org.apache.hadoop.fs.permission.FsPermission(octal)
        )
        modes[hadoop_own] = path.stat().st_mode & 0o7777
    assert modes[False] == modes[True] == int(octal, 8)


def test_created_files_and_directories_get_the_permissions_hadoop_s_own_gives_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A file with the default permission (under the umask) and a directory with a permission of its own."""
    jvm = the_jvm(spark)
    modes = {}
    for hadoop_own in (True, False):
        fs = file_system(spark, hadoop_own=hadoop_own)
        file, directory = tmp_path / f"file-{hadoop_own}", tmp_path / f"directory-{hadoop_own}"
        fs.create(jvm.org.apache.hadoop.fs.Path(str(file)), True).close()
        fs.mkdirs(
            jvm.org.apache.hadoop.fs.Path(str(directory)), jvm.org.apache.hadoop.fs.permission.FsPermission("750")
        )
        modes[hadoop_own] = (file.stat().st_mode & 0o7777, directory.stat().st_mode & 0o7777)
    assert modes[False] == modes[True]
    assert modes[False][1] == 0o750 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def link_status(spark: SparkSession, path: Path, *, hadoop_own: bool) -> tuple[object, ...]:
    """What ``getFileLinkStatus`` says of ``path``: its kind, link target and length, or the exception's class."""
    from py4j.protocol import Py4JJavaError

    fs = file_system(spark, hadoop_own=hadoop_own)
    try:
        status = fs.getFileLinkStatus(the_jvm(spark).org.apache.hadoop.fs.Path(str(path)))
    except Py4JJavaError as error:
        return ("raised", error.java_exception.getClass().getName())
    target = status.getSymlink().toUri().getPath() if status.isSymlink() else None
    return (
        status.isFile(),
        status.isDirectory(),
        status.isSymlink(),
        target,
        status.getLen(),
        status.getPath().toUri().getPath(),
    )


def test_link_status_is_hadoop_s_own_for_files_directories_links_and_missing_paths(
    spark: SparkSession, tmp_path: Path
) -> None:
    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "directory").mkdir()
    (tmp_path / "link-to-file").symlink_to(tmp_path / "file")
    (tmp_path / "link-to-directory").symlink_to(tmp_path / "directory")
    (tmp_path / "dangling-link").symlink_to(tmp_path / "nothing-here")
    for name in ("file", "directory", "link-to-file", "link-to-directory", "dangling-link", "missing"):
        ours = link_status(spark, tmp_path / name, hadoop_own=False)
        assert ours == link_status(spark, tmp_path / name, hadoop_own=True), name
    assert link_status(spark, tmp_path / "file", hadoop_own=False)[:3] == (True, False, False)
    assert link_status(spark, tmp_path / "link-to-file", hadoop_own=False)[2:4] == (True, str(tmp_path / "file"))
    assert link_status(spark, tmp_path / "missing", hadoop_own=False) == ("raised", "java.io.FileNotFoundException")


def test_atomic_writes_and_delta_commits_land_as_with_hadoop_s_own(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's offset log writes (a FileContext create and rename) and a Delta table's commits, read back."""
    jvm = the_jvm(spark)
    for hadoop_own in (True, False):
        root = tmp_path / ("hadoop" if hadoop_own else "ours")
        root.mkdir()
        manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
            jvm.org.apache.hadoop.fs.Path(str(root)), hadoop_conf(spark, hadoop_own=hadoop_own)
        )
        for index in range(3):
            stream = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(str(root / str(index))), False)
            stream.write(f"entry {index}".encode())
            stream.close()
        assert {path.name: path.read_bytes() for path in root.iterdir() if not path.name.startswith(".")} == {
            str(index): f"entry {index}".encode() for index in range(3)
        }
        # Checksums beside each file, as Hadoop's checksummed local file system keeps them.
        assert sorted(path.name for path in root.iterdir() if path.name.endswith(".crc")) == [
            ".0.crc",
            ".1.crc",
            ".2.crc",
        ]
    table = str(tmp_path / "delta")
    for batch in range(3):
        spark.range(batch * 10, batch * 10 + 10).write.format("delta").mode("append").save(table)
    assert sorted(row.id for row in spark.read.format("delta").load(table).collect()) == list(range(30))


#: A child process: a session of its own (with ``PATH`` as the test sets it), the same file operations through
#: the session's file systems and then through Hadoop's own, and how many traced commands each ran.
CHILD = textwrap.dedent(
    """
    import json, os, sys
    from routing.settings import load_settings
    from routing.spark import get_spark

    settings, root, log = load_settings(overrides=json.loads(sys.argv[1])), sys.argv[2], sys.argv[3]
    hadoop_own_classes = json.loads(sys.argv[4])
    spark = get_spark(settings, app_name="local-fs-spawns")
    jvm = spark.sparkContext._jvm
    Path = jvm.org.apache.hadoop.fs.Path

    def traced():
        return len(open(log).read().splitlines()) if os.path.exists(log) else 0

    def work(conf, name):
        base = os.path.join(root, name)
        os.makedirs(base)
        manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
            Path(base), conf
        )
        for index in range(10):
            stream = manager.createAtomic(Path(os.path.join(base, str(index))), False)
            stream.write(b"offsets")
            stream.close()
        fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.java.net.URI("file:///"), conf)
        fs.create(Path(os.path.join(base, "file"))).close()
        fs.rename(Path(os.path.join(base, "file")), Path(os.path.join(base, "renamed")))
        fs.getFileLinkStatus(Path(os.path.join(base, "renamed")))

    conf = spark._jsparkSession.sessionState().newHadoopConf()
    own = jvm.org.apache.hadoop.conf.Configuration(conf)
    for key, name in hadoop_own_classes.items():
        own.set(key, name)
    counts = {}
    start = traced()
    work(conf, "session")
    for batch in range(3):  # a Delta table's commits, data files and checksums
        spark.range(10).write.format("delta").mode("append").save(os.path.join(root, "delta"))
    counts["session"] = traced() - start
    start = traced()
    work(own, "hadoop")
    counts["hadoop"] = traced() - start
    counts["class"] = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf).getClass().getName()
    print("COUNTS " + json.dumps(counts), flush=True)
    spark.stop()
    """
)


@pytest.mark.slow
def test_the_session_runs_no_child_process_where_hadoop_s_own_runs_dozens(settings: Settings, tmp_path: Path) -> None:
    jar = local_spark.LOCAL_FS_JAR
    assert jar.is_file(), f"{jar} missing: `make jars` builds it"
    bin_dir, log = tmp_path / "bin", tmp_path / "spawns.log"
    bin_dir.mkdir()
    for command in TRACED_COMMANDS:
        real = shutil.which(command)
        if real is None:
            continue
        stand_in = bin_dir / command
        stand_in.write_text(f'#!/bin/sh\necho "{command} $*" >> "{log}"\nexec "{real}" "$@"\n')
        stand_in.chmod(0o755)
    overrides = {"spark": {"jars_dir": settings.spark.jars_dir}}
    work = tmp_path / "work"
    work.mkdir()
    # The child's JVM gets the file system the way every test JVM does: from its Spark properties file.
    conf = local_spark.local_conf(settings, var=tmp_path, archive_dir=None, java_options=local_spark.JIT_QUICK)
    assert conf[local_spark.DRIVER_CLASS_PATH] == str(jar)
    properties = local_spark.write_properties(tmp_path / "spark.conf", conf)
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        local_spark.SUBMIT_ARGS: local_spark.submit_args(properties),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(overrides), str(work), str(log), json.dumps(HADOOP_OWN_CLASSES)],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("COUNTS ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    counts = json.loads(lines[0].removeprefix("COUNTS "))
    assert counts["class"] == OURS
    # The same work through Hadoop's own classes forks (so the stand-ins do see Hadoop's commands) ...
    assert counts["hadoop"] >= 20, counts
    # ... and through the session's, with three Delta commits more, not once.
    assert counts["session"] == 0, (counts, log.read_text()[-2000:] if log.exists() else "")

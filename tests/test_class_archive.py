"""The class-data archive's plumbing (:mod:`dev.class_archive`, development tooling): which JVMs get it through
:mod:`dev.local_spark`, its key, its builder's CLI.

No JVM: a fake JDK (``JAVA_HOME`` pointing at a directory with an executable ``bin/java``) and fake archive
files. ``tests/integration/test_class_archive.py`` builds a real archive and proves a JVM maps it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from dev import class_archive, local_spark
from dev.local_spark import DEFAULT_JAVA_OPTIONS
from routing.settings import Settings, load_settings
from routing.spark import spark_conf


@pytest.fixture
def fake_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A JDK-shaped directory whose ``bin/java`` is an executable script; ``JAVA_HOME`` points at it."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(0o755)
    (home / "lib" / "server" / "libjvm.so").write_bytes(b"jvm 17.0.1")
    (home / "lib" / "modules").write_bytes(b"modules")
    monkeypatch.setenv("JAVA_HOME", str(home))
    return java


def archive_settings(**spark: object) -> Settings:
    """Settings with no jar check (no var/jars needed)."""
    return load_settings(env={}, overrides={"spark": {"jars_dir": "", **spark}})


def publish(
    settings: Settings,
    directory: Path,
    defaults: Mapping[str, str] | None = None,
    *,
    size: int = 4096,
    manifest_size: int | None = None,
) -> Path:
    """A fake archive where a session of ``settings`` over ``defaults`` looks for one, with its manifest."""
    java = class_archive.java_binary()
    assert java is not None
    archive = class_archive.archive_path(str(directory), {**(defaults or {}), **spark_conf(settings)}, java)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"\0" * size)
    class_archive.write_manifest(archive, size if manifest_size is None else manifest_size)
    return archive


def test_the_local_conf_maps_the_archive_exactly_when_it_exists(fake_java: Path, tmp_path: Path) -> None:
    settings = archive_settings()
    archive_dir = tmp_path / "jvm"

    def options() -> str | None:
        return local_spark.local_conf(settings, var=tmp_path, archive_dir=archive_dir).get(DEFAULT_JAVA_OPTIONS)

    assert options() is None  # not built yet
    defaults = local_spark.local_conf(settings, var=tmp_path, archive_dir=None)
    archive = publish(settings, archive_dir, defaults)
    assert options() == " ".join([f"-XX:SharedArchiveFile={archive}", *class_archive.USE_OPTIONS])
    assert archive.name.startswith("spark-") and archive.suffix == ".jsa"
    # The tooling's own JVM options come after the archive's.
    with_jit = local_spark.local_conf(settings, var=tmp_path, archive_dir=archive_dir, java_options=" -Xint ")
    assert with_jit[DEFAULT_JAVA_OPTIONS] == f"{options()} -Xint"
    archive.unlink()
    assert options() is None


def test_an_archive_cut_short_or_without_a_manifest_is_not_offered(fake_java: Path, tmp_path: Path) -> None:
    """A file shorter than its header says crashes the JVM (SIGBUS): only a whole one is ever mapped."""
    settings = archive_settings()
    directory = tmp_path / "jvm"
    archive = publish(settings, directory, size=4096, manifest_size=8192)
    assert local_spark.archive_options(settings, {}, directory) == ""
    class_archive.write_manifest(archive, 4096)
    assert local_spark.archive_options(settings, {}, directory) != ""
    class_archive.manifest_path(archive).unlink()
    assert local_spark.archive_options(settings, {}, directory) == ""
    class_archive.manifest_path(archive).write_text("{not json")
    assert local_spark.archive_options(settings, {}, directory) == ""


def test_the_archive_is_the_one_for_the_session_s_class_path(fake_java: Path, tmp_path: Path) -> None:
    """The session's own ``spark.driver.extraClassPath`` (``--conf``) replaces the defaults file's: so does the key."""
    jar = tmp_path / "localfs.jar"
    jar.write_bytes(b"PK")
    defaults = {local_spark.DRIVER_CLASS_PATH: str(jar)}
    settings = archive_settings()
    directory = tmp_path / "jvm"
    archive = publish(settings, directory, defaults)
    assert str(archive) in local_spark.archive_options(settings, defaults, directory)
    assert local_spark.archive_options(settings, {}, directory) == ""
    own = archive_settings(conf={local_spark.DRIVER_CLASS_PATH: "/opt/extra.jar"})
    assert local_spark.archive_options(own, defaults, directory) == ""


def test_without_java_there_is_no_archive(fake_java: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = archive_settings()
    publish(settings, tmp_path / "jvm")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert class_archive.java_binary() is None
    assert local_spark.archive_options(settings, {}, tmp_path / "jvm") == ""


def test_the_properties_file_holds_the_local_conf(
    fake_java: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Spark reads as a Java properties file: one ``key value`` line each; ``use`` points pyspark at it."""
    settings = archive_settings()
    publish(settings, tmp_path / "jvm", local_spark.local_conf(settings, var=tmp_path, archive_dir=None))
    conf = local_spark.local_conf(settings, var=tmp_path, archive_dir=tmp_path / "jvm")
    assert conf["spark.local.dir"] == str(tmp_path / "spark-local")
    assert conf["spark.sql.warehouse.dir"] == str(tmp_path / "spark-warehouse")
    path = local_spark.write_properties(tmp_path / "spark-conf" / "spark.conf", conf)
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert dict(line.split(" ", 1) for line in lines) == conf
    assert [entry.name for entry in path.parent.iterdir()] == ["spark.conf"]  # no partial file left
    monkeypatch.delenv(local_spark.SUBMIT_ARGS, raising=False)
    spaced = tmp_path / "a dir" / "spark.conf"
    assert local_spark.use(settings, path=spaced, var=tmp_path) == spaced
    assert os.environ[local_spark.SUBMIT_ARGS] == f"--properties-file '{spaced}' pyspark-shell"


def test_the_local_file_system_needs_its_jar(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    jar = tmp_path / "localfs.jar"
    with caplog.at_level("WARNING", logger="dev.local_spark"):
        assert local_spark.local_fs_conf(jar) == {}
    assert f"{jar} is missing (run `make jars`)" in caplog.text
    jar.write_bytes(b"PK")  # only its presence is checked here; tests/integration/test_local_fs.py loads it
    assert local_spark.local_fs_conf(jar) == {**local_spark.LOCAL_FS_CLASSES, local_spark.DRIVER_CLASS_PATH: str(jar)}


def test_joining_java_options() -> None:
    assert local_spark.join_options("-Xa", None) == "-Xa"
    assert local_spark.join_options("-Xa", "  ") == "-Xa"
    assert local_spark.join_options("-Xa", " -Xb -Xc ") == "-Xa -Xb -Xc"
    assert local_spark.join_options("", "-Xa", None, " -Xb ", "") == "-Xa -Xb"
    assert local_spark.join_options() == ""


def test_the_key_follows_the_jdk_pyspark_and_the_jars(fake_java: Path, tmp_path: Path) -> None:
    jars = {"spark.jars": "/opt/jars/delta-spark_4.2_2.13-4.4.0.jar,/opt/jars/kafka-clients-3.9.2.jar"}
    key = class_archive.archive_key(jars, fake_java, "4.2.0")
    assert key == class_archive.archive_key(jars, fake_java, "4.2.0")  # stable
    # The jar names decide, not their order or directory (CDS checks each class by its checksum anyway).
    reordered = {"spark.jars": "/elsewhere/kafka-clients-3.9.2.jar,/elsewhere/delta-spark_4.2_2.13-4.4.0.jar"}
    assert class_archive.archive_key(reordered, fake_java, "4.2.0") == key
    changed = {
        "another jar": {"spark.jars": jars["spark.jars"] + ",/opt/jars/extra.jar"},
        "a new jar version": {"spark.jars": jars["spark.jars"].replace("3.9.2", "3.9.3")},
        "no jars": {},
        "a driver class path": {**jars, "spark.driver.extraClassPath": "/opt/extra.jar"},
    }
    for what, conf in changed.items():
        assert class_archive.archive_key(conf, fake_java, "4.2.0") != key, what
    assert class_archive.archive_key(jars, fake_java, "4.2.1") != key, "pyspark version"
    assert class_archive.archive_key(jars, fake_java) == class_archive.archive_key(
        jars, fake_java, class_archive.pyspark_version()
    )
    # A JDK update rewrites its libjvm.so in place: same path, new key.
    libjvm = fake_java.parent.parent / "lib" / "server" / "libjvm.so"
    libjvm.write_bytes(b"jvm 17.0.2")
    os.utime(libjvm, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert class_archive.archive_key(jars, fake_java, "4.2.0") != key, "JDK update"


def test_a_class_path_jar_rebuilt_under_its_name_looks_for_an_archive_of_its_own(
    fake_java: Path, tmp_path: Path
) -> None:
    """A changed class path entry stops the JVM at start (not only the archive), so its identity is in the key."""
    jar = tmp_path / "spark-topic-router-localfs.jar"
    jar.write_bytes(b"first build")
    conf = {"spark.driver.extraClassPath": str(jar)}
    key = class_archive.archive_key(conf, fake_java, "4.2.0")
    assert class_archive.archive_key(conf, fake_java, "4.2.0") == key
    jar.write_bytes(b"second build, same name")
    assert class_archive.archive_key(conf, fake_java, "4.2.0") != key, "size"
    jar.write_bytes(b"second build, same size")
    os.utime(jar, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert class_archive.archive_key(conf, fake_java, "4.2.0") != key, "modification time"
    # An entry that does not exist counts by its name (the JVM skips it).
    missing = {"spark.driver.extraClassPath": str(tmp_path / "gone.jar")}
    assert class_archive.archive_key(missing, fake_java, "4.2.0") == class_archive.archive_key(
        {"spark.driver.extraClassPath": "/elsewhere/gone.jar"}, fake_java, "4.2.0"
    )


def test_the_key_follows_the_java_spark_runs(fake_java: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``$JAVA_HOME/bin/java`` if set (as Spark's launcher), else ``java`` on PATH, by its real path."""
    assert class_archive.java_binary() == fake_java
    link = tmp_path / "bin" / "java"
    link.parent.mkdir()
    link.symlink_to(fake_java)
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(link.parent))
    assert class_archive.java_binary() == fake_java
    other = tmp_path / "other-jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(other.parent.parent))
    assert class_archive.java_binary() == other
    assert class_archive.archive_key({}, other, "4.2.0") != class_archive.archive_key({}, fake_java, "4.2.0")


def test_building_keeps_an_archive_that_is_there(fake_java: Path, tmp_path: Path) -> None:
    settings = archive_settings()
    archive = publish(settings, tmp_path / "jvm", local_spark.local_fs_conf())
    lines: list[str] = []
    built = class_archive.build(settings, tmp_path / "jvm", log=lines.append)
    assert (built.path, built.built, built.size) == (archive, False, 4096)
    assert lines == []


def test_a_builder_waits_for_the_one_building_and_then_finds_its_archive(fake_java: Path, tmp_path: Path) -> None:
    """Two builders (two pytest workers, two make runs) write one archive: the second waits on the lock."""
    settings = archive_settings()
    directory = tmp_path / "jvm"
    results: list[class_archive.Built] = []
    lines: list[str] = []
    with class_archive.build_lock(directory):
        waiter = threading.Thread(
            target=lambda: results.append(class_archive.build(settings, directory, log=lines.append))
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines and "waiting" in lines[0]
        assert results == []  # still waiting
        archive = publish(settings, directory, local_spark.local_fs_conf())  # what the first builder writes
    waiter.join(10)
    assert [(result.path, result.built) for result in results] == [(archive, False)]


def test_only_the_newest_archives_are_kept(tmp_path: Path) -> None:
    paths = []
    for index in range(class_archive.KEEP + 2):
        archive = tmp_path / f"spark-{index:016x}.jsa"
        archive.write_bytes(b"x")
        class_archive.write_manifest(archive, 1)
        os.utime(archive, (1_000_000 + index, 1_000_000 + index))
        paths.append(archive)
    oldest = paths[0]
    class_archive._prune(tmp_path, keep=oldest)  # the one just built stays whatever its mtime
    kept = sorted(path.name for path in tmp_path.glob("spark-*.jsa"))
    assert kept == sorted(path.name for path in [oldest, *paths[-(class_archive.KEEP - 1) :]])
    assert sorted(path.name for path in tmp_path.glob("*.json")) == [f"{name}.json" for name in kept]


# -- python -m dev.class_archive ----------------------------------------------------------------------------


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        class_archive.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--force" in out and "--set" in out and "--dir" in out


def test_no_java_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    code = class_archive.main(["--dir", str(tmp_path / "jvm")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.strip().splitlines() == ["class_archive: no java: set JAVA_HOME or put a JDK 17+ java on PATH"]
    assert not (tmp_path / "jvm").exists()


def test_missing_jars_and_bad_settings_exit_2(
    fake_java: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = class_archive.main(["--dir", str(tmp_path / "jvm"), "--set", f"spark.jars_dir={tmp_path / 'no-jars'}"])
    err = capsys.readouterr().err
    assert code == 2 and "run `make jars`" in err and len(err.strip().splitlines()) == 1
    assert class_archive.main(["--set", "router.max_offsets_per_trigger=0"]) == 2
    assert "router.max_offsets_per_trigger" in capsys.readouterr().err


def test_an_archive_that_is_there_is_reported_and_kept(
    fake_java: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = publish(archive_settings(), tmp_path / "jvm", local_spark.local_fs_conf())
    assert class_archive.main(["--dir", str(tmp_path / "jvm"), "--set", "spark.jars_dir="]) == 0
    assert f"{archive} is up to date" in capsys.readouterr().out

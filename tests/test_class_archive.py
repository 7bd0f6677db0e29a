"""The class-data archive's plumbing (:mod:`routing.class_archive`): which JVMs get it, its key, its builder's CLI.

No JVM: a fake JDK (``JAVA_HOME`` pointing at a directory with an executable ``bin/java``) and fake archive
files. ``tests/integration/test_class_archive.py`` builds a real archive and proves a JVM maps it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from jobs import class_archive as class_archive_job
from jobs.connect_server import ConnectServer
from routing import class_archive
from routing.settings import Settings, load_settings
from routing.spark import (
    COLLECTOR_OPTION,
    DRIVER_DEFAULT_JAVA_OPTIONS,
    DRIVER_JAVA_OPTIONS,
    JVM_OPTION_VARIABLES,
    spark_conf,
    user_collector,
)

USER_OPTIONS = "-Dtopic.router=1 -Xshare:off"


@pytest.fixture(autouse=True)
def no_jvm_option_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collector in the developer's own ``JAVA_TOOL_OPTIONS`` (and the like) would replace ``spark.gc`` in every
    expectation here: each test starts without them, and the tests about them set their own."""
    for name in JVM_OPTION_VARIABLES:
        monkeypatch.delenv(name, raising=False)


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


def archive_settings(tmp_path: Path, archive_dir: str | None = None, **spark: object) -> Settings:
    """Settings with an archive directory under ``tmp_path`` and no jar check (no var/jars needed).

    The collector is G1 (no option of ours) unless a test picks one, so the options seen are the archive's."""
    spark.setdefault("gc", "g1")
    return load_settings(
        env={},
        overrides={
            "spark": {
                "class_archive": str(tmp_path / "jvm") if archive_dir is None else archive_dir,
                "jars_provided": True,
                "ivy_dir": str(tmp_path / "ivy"),
                "local_dir": str(tmp_path / "spark-local"),
                "warehouse_dir": str(tmp_path / "warehouse"),
                **spark,
            }
        },
    )


def publish(settings: Settings, *, size: int = 4096, manifest_size: int | None = None) -> Path:
    """A fake archive where a session with ``settings`` looks for one, with its manifest."""
    conf = spark_conf(settings.replace(spark=dataclasses.replace(settings.spark, class_archive="")))
    java = class_archive.java_binary()
    assert java is not None
    archive = class_archive.archive_path(settings.spark.class_archive, conf, java)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"\0" * size)
    class_archive.write_manifest(archive, size if manifest_size is None else manifest_size)
    return archive


def test_spark_conf_maps_the_archive_exactly_when_it_exists(fake_java: Path, tmp_path: Path) -> None:
    settings = archive_settings(tmp_path)
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings)  # not built yet
    archive = publish(settings)
    options = spark_conf(settings)[DRIVER_JAVA_OPTIONS].split()
    assert options == [f"-XX:SharedArchiveFile={archive}", *class_archive.USE_OPTIONS]
    assert archive.name.startswith("spark-") and archive.suffix == ".jsa"
    archive.unlink()
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings)


def test_an_archive_cut_short_or_without_a_manifest_is_not_offered(fake_java: Path, tmp_path: Path) -> None:
    """A file shorter than its header says crashes the JVM (SIGBUS): only a whole one is ever mapped."""
    settings = archive_settings(tmp_path)
    archive = publish(settings, size=4096, manifest_size=8192)
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings)
    class_archive.write_manifest(archive, 4096)
    assert DRIVER_JAVA_OPTIONS in spark_conf(settings)
    class_archive.manifest_path(archive).unlink()
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings)
    class_archive.manifest_path(archive).write_text("{not json")
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings)


@pytest.mark.parametrize("where", ["settings", "extra_conf"])
def test_the_users_java_options_are_kept_and_come_last(fake_java: Path, tmp_path: Path, where: str) -> None:
    settings = archive_settings(tmp_path)
    if where == "settings":
        settings = archive_settings(tmp_path, conf={DRIVER_JAVA_OPTIONS: USER_OPTIONS})
    extra = {DRIVER_JAVA_OPTIONS: USER_OPTIONS} if where == "extra_conf" else None
    assert spark_conf(settings, extra_conf=extra)[DRIVER_JAVA_OPTIONS] == USER_OPTIONS  # no archive: untouched
    archive = publish(settings)
    options = spark_conf(settings, extra_conf=extra)[DRIVER_JAVA_OPTIONS]
    # The JVM takes the last of conflicting options: the user's -Xshare:off beats our -Xshare:auto.
    assert options == " ".join([f"-XX:SharedArchiveFile={archive}", *class_archive.USE_OPTIONS, USER_OPTIONS])


def test_nothing_is_added_under_spark_submit(fake_java: Path, tmp_path: Path) -> None:
    """spark-submit started the JVM before this process runs: its options are final."""
    settings = archive_settings(tmp_path)
    publish(settings)
    submitted = {"spark.master": "local[2]", "spark.app.name": "submitted"}
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings, submitted=submitted)
    submitted[DRIVER_JAVA_OPTIONS] = USER_OPTIONS
    assert spark_conf(settings, submitted=submitted)[DRIVER_JAVA_OPTIONS] == USER_OPTIONS


def test_an_empty_setting_turns_it_off(fake_java: Path, tmp_path: Path) -> None:
    settings = archive_settings(tmp_path)
    publish(settings)
    assert DRIVER_JAVA_OPTIONS in spark_conf(settings)
    off = load_settings(
        env={"ROUTER__SPARK__CLASS_ARCHIVE": ""}, overrides={"spark": {"jars_provided": True, "gc": "g1"}}
    )
    assert off.spark.class_archive == ""
    assert DRIVER_JAVA_OPTIONS not in spark_conf(off)
    assert DRIVER_JAVA_OPTIONS not in spark_conf(
        settings.replace(spark=dataclasses.replace(settings.spark, class_archive=""))
    )


def test_without_java_there_is_no_archive(fake_java: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = archive_settings(tmp_path)
    publish(settings)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert class_archive.java_binary() is None
    assert DRIVER_JAVA_OPTIONS not in spark_conf(settings)


def test_the_setting_is_a_path_relative_to_the_settings_file(tmp_path: Path) -> None:
    conf = tmp_path / "conf" / "router.toml"
    conf.parent.mkdir()
    conf.write_text('[spark]\nclass_archive = "../var/jvm"\n')
    assert load_settings(conf, env={}).spark.class_archive == str(tmp_path / "var" / "jvm")


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


def test_the_connect_server_gets_the_archive_too(fake_java: Path, tmp_path: Path) -> None:
    settings = archive_settings(tmp_path)
    archive = publish(settings)
    command = ConnectServer(settings, port=15123, log_path=tmp_path / "connect.log").command()
    conf = dict(command[index + 1].split("=", 1) for index, flag in enumerate(command) if flag == "--conf")
    # spark-submit in client mode starts the driver JVM with spark.driver.extraJavaOptions.
    assert conf[DRIVER_JAVA_OPTIONS].split()[0] == f"-XX:SharedArchiveFile={archive}"


def test_building_keeps_an_archive_that_is_there(fake_java: Path, tmp_path: Path) -> None:
    settings = archive_settings(tmp_path)
    archive = publish(settings)
    lines: list[str] = []
    built = class_archive.build(settings, log=lines.append)
    assert (built.path, built.built, built.size) == (archive, False, 4096)
    assert lines == []


def test_a_builder_waits_for_the_one_building_and_then_finds_its_archive(fake_java: Path, tmp_path: Path) -> None:
    """Two builders (two pytest workers, two make runs) write one archive: the second waits on the lock."""
    settings = archive_settings(tmp_path)
    results: list[class_archive.Built] = []
    lines: list[str] = []
    with class_archive.build_lock(Path(settings.spark.class_archive)):
        waiter = threading.Thread(target=lambda: results.append(class_archive.build(settings, log=lines.append)))
        waiter.start()
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lines and "waiting" in lines[0]
        assert results == []  # still waiting
        archive = publish(settings)  # what the first builder writes
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


def test_merging_java_options() -> None:
    assert class_archive.merge_java_options("-Xa", None) == "-Xa"
    assert class_archive.merge_java_options("-Xa", "  ") == "-Xa"
    assert class_archive.merge_java_options("-Xa", " -Xb -Xc ") == "-Xa -Xb -Xc"
    assert class_archive.merge_java_options("", "-Xa", None, " -Xb ", "") == "-Xa -Xb"
    assert class_archive.merge_java_options() == ""


# -- python -m jobs.class_archive ----------------------------------------------------------------------------


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        class_archive_job.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--force" in out and "--set" in out


def test_no_java_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    code = class_archive_job.main(["--set", f"spark.class_archive={tmp_path / 'jvm'}"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.strip().splitlines() == ["class_archive: no java: set JAVA_HOME or put a JDK 17+ java on PATH"]
    assert not (tmp_path / "jvm").exists()


def test_missing_jars_and_bad_settings_exit_2(
    fake_java: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = class_archive_job.main(
        ["--set", f"spark.class_archive={tmp_path / 'jvm'}", "--set", f"spark.jars_dir={tmp_path / 'no-jars'}"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "run `make jars`" in err and len(err.strip().splitlines()) == 1
    assert class_archive_job.main(["--set", "spark.shuffle_partitions=0"]) == 2
    assert "spark.shuffle_partitions" in capsys.readouterr().err


def test_off_is_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert class_archive_job.main(["--set", "spark.class_archive="]) == 0
    assert "off" in capsys.readouterr().out


def test_an_archive_that_is_there_is_reported_and_kept(
    fake_java: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = archive_settings(tmp_path)
    archive = publish(settings)
    flags = ["--set", f"spark.class_archive={tmp_path / 'jvm'}", "--set", "spark.jars_provided=true"]
    for directory in ("ivy_dir", "local_dir", "warehouse_dir"):
        flags += ["--set", f"spark.{directory}={getattr(settings.spark, directory)}"]
    assert class_archive_job.main(flags) == 0
    assert f"{archive} is up to date" in capsys.readouterr().out


#: What each ``spark.jit`` and ``spark.gc`` mode must put on the JVM's command line, written out here.
JIT_OPTIONS = {
    "full": [],
    "quick": ["-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=240m"],
    "lazy": [
        "-XX:Tier4InvocationThreshold=50000",
        "-XX:Tier4MinInvocationThreshold=6000",
        "-XX:Tier4CompileThreshold=150000",
        "-XX:Tier4BackEdgeThreshold=400000",
    ],
}
GC_OPTIONS = {"g1": [], "parallel": ["-XX:+UseParallelGC"]}


@pytest.mark.parametrize("gc", sorted(GC_OPTIONS))
@pytest.mark.parametrize("jit", sorted(JIT_OPTIONS))
def test_jit_and_gc_options_follow_the_archive_and_precede_the_users_options(
    fake_java: Path, tmp_path: Path, jit: str, gc: str
) -> None:
    settings = archive_settings(tmp_path, jit=jit, gc=gc, conf={DRIVER_JAVA_OPTIONS: USER_OPTIONS})
    ours = [*JIT_OPTIONS[jit], *GC_OPTIONS[gc]]
    assert spark_conf(settings)[DRIVER_JAVA_OPTIONS].split() == [*ours, *USER_OPTIONS.split()]
    archive = publish(settings)
    options = spark_conf(settings)[DRIVER_JAVA_OPTIONS].split()
    assert options == [f"-XX:SharedArchiveFile={archive}", *class_archive.USE_OPTIONS, *ours, *USER_OPTIONS.split()]
    # spark-submit started the JVM already: its tiers and collector are the submitter's.
    submitted = {"spark.master": "local[2]", DRIVER_JAVA_OPTIONS: USER_OPTIONS}
    assert spark_conf(settings, submitted=submitted)[DRIVER_JAVA_OPTIONS] == USER_OPTIONS


@pytest.mark.parametrize(
    "collector", ["-XX:+UseG1GC", "-XX:+UseZGC", "-XX:+UseSerialGC", "-XX:+UseShenandoahGC", "-XX:+UseParallelGC"]
)
@pytest.mark.parametrize("gc", sorted(GC_OPTIONS))
def test_a_collector_in_the_users_options_replaces_spark_gc(
    fake_java: Path, tmp_path: Path, gc: str, collector: str
) -> None:
    """The JVM refuses two collectors ("Multiple garbage collectors selected"): the user's choice is the one."""
    user = f"-Xss4m {collector} -XX:+UseGCOverheadLimit"
    settings = archive_settings(tmp_path, jit="full", gc=gc, conf={DRIVER_JAVA_OPTIONS: user})
    options = spark_conf(settings)[DRIVER_JAVA_OPTIONS].split()
    assert options == user.split()
    assert sum(COLLECTOR_OPTION.fullmatch(option) is not None for option in options) == 1


@pytest.mark.parametrize(
    "options",
    ["-XX:+UseGCOverheadLimit", "-XX:+UseStringDeduplication", "-XX:-UseG1GC", "-Dx=-XX:+UseG1GC", "-XX:+UseG1GCx"],
)
def test_options_that_pick_no_collector_keep_spark_gc(fake_java: Path, tmp_path: Path, options: str) -> None:
    settings = archive_settings(tmp_path, jit="full", gc="parallel", conf={DRIVER_JAVA_OPTIONS: options})
    assert spark_conf(settings)[DRIVER_JAVA_OPTIONS].split() == [*GC_OPTIONS["parallel"], options]


@pytest.mark.parametrize("collector", ["-XX:+UseG1GC", "-XX:+UseSerialGC"])
@pytest.mark.parametrize("variable", JVM_OPTION_VARIABLES)
def test_a_collector_in_a_jvm_option_variable_replaces_spark_gc(
    fake_java: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, collector: str
) -> None:
    """The JVM reads these variables at start: a collector there and ours would stop it before the session exists."""
    monkeypatch.setenv(variable, f"-Xss4m {collector}")
    settings = archive_settings(tmp_path, jit="full", gc="parallel")
    assert user_collector(spark_conf(settings)) == f"${variable}"
    assert not COLLECTOR_OPTION.search(spark_conf(settings).get(DRIVER_JAVA_OPTIONS, ""))
    monkeypatch.setenv(variable, "-Xss4m -XX:+UseStringDeduplication")
    assert spark_conf(settings)[DRIVER_JAVA_OPTIONS].split() == GC_OPTIONS["parallel"]


def test_a_collector_in_the_default_driver_options_replaces_spark_gc(fake_java: Path, tmp_path: Path) -> None:
    """Spark puts ``spark.driver.defaultJavaOptions`` before the extra ones on the same command line."""
    settings = archive_settings(tmp_path, jit="full", gc="parallel", conf={DRIVER_DEFAULT_JAVA_OPTIONS: "-XX:+UseZGC"})
    assert not COLLECTOR_OPTION.search(spark_conf(settings).get(DRIVER_JAVA_OPTIONS, ""))


@pytest.mark.parametrize("variable", JVM_OPTION_VARIABLES)
def test_a_real_jvm_starts_with_our_options_and_a_collector_in_a_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The oracle is the JVM itself, which refuses two collectors ("Multiple garbage collectors selected")."""
    java = shutil.which("java")
    assert java is not None, "the JDK's java is on PATH wherever the suite runs Spark"
    monkeypatch.setenv(variable, "-XX:+UseSerialGC")
    settings = archive_settings(tmp_path, jit="full", gc="parallel")
    options = spark_conf(settings).get(DRIVER_JAVA_OPTIONS, "").split()
    started = subprocess.run([java, *options, "-XX:+PrintCommandLineFlags", "-version"], capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    assert "-XX:+UseSerialGC" in started.stdout, started.stdout
    # The same options with ours added back: the JVM refuses them, so the check above can fail.
    refused = subprocess.run([java, *options, *GC_OPTIONS["parallel"], "-version"], capture_output=True, text=True)
    assert refused.returncode != 0 and "Multiple garbage collectors" in refused.stdout + refused.stderr

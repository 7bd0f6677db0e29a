"""The class-data archive for real (development tooling: :mod:`dev.class_archive`, applied by
:mod:`dev.local_spark`): the builder writes one, a fresh JVM maps it, a bad one changes nothing.

The archive is the development tooling's (``var/jvm/``), through the real builder: ``make test`` builds it
before pytest (``make jvm-archive``), so that every JVM of the session maps it and here the builder finds it
complete; on a checkout without it, the first worker to get here builds it (a minute or two), and the JVMs
whose properties are written after that (the probes here, the Connect server) map it. Each check then starts a
fresh Python process with ``get_spark``, as a job does, with a Spark properties file of its own
(``$PYSPARK_SUBMIT_ARGS``), and looks from inside its JVM: the options it started with (the settings' own
``spark.driver.extraJavaOptions`` among them), the files it has mapped (``/proc/<pid>/maps``: a JVM unmaps an
archive it refuses) and where its classes came from (``-Xlog:class+load``). The Spark Connect server is the
session's (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dev import class_archive, local_spark
from jobs.connect_server import ConnectServer
from routing.settings import DEFAULT_SPARK_CONF, REPO_ROOT, Settings
from routing.spark import spark_conf

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The top layer in ``-Xlog:class+load`` (the dynamic archive; the JDK's own is "shared objects file").
FROM_ARCHIVE = "source: shared objects file (top)"

PROBE = """
import json, sys
from routing.settings import load_settings
from routing.spark import get_spark

spec = json.loads(sys.argv[1])
settings = load_settings(env={}, overrides={"spark": spec["spark"]})
spark = get_spark(settings, app_name="class-archive-probe")
if spec["table"]:
    spark.range(5).write.format("delta").save(spec["table"])
jvm = spark.sparkContext._jvm
runtime = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
with open(f"/proc/{runtime.getPid()}/maps") as maps:
    mapped = sorted({line.split()[-1] for line in maps.read().splitlines() if line.endswith(".jsa")})
result = {"arguments": list(runtime.getInputArguments()), "mapped": mapped}
spark.stop()
print("RESULT " + json.dumps(result), flush=True)
"""


def archive_for(settings: Settings, directory: Path) -> Path:
    """Where a session with ``settings`` over the development tooling's defaults looks for its archive."""
    java = class_archive.java_binary()
    assert java is not None, "no java"
    return class_archive.archive_path(str(directory), {**local_spark.local_fs_conf(), **spark_conf(settings)}, java)


@pytest.fixture(scope="module")
def built(settings: Settings) -> tuple[Settings, class_archive.Built]:
    lines: list[str] = []
    result = class_archive.build(settings, local_spark.ARCHIVE_DIR, log=lines.append)
    if result.built:  # no make jvm-archive before this session: this worker built it
        assert lines[0].startswith("building the class-data archive"), lines
        assert lines[-1].startswith(f"wrote {result.path}"), lines
    else:
        assert lines == []
    return settings, result


def probe(
    settings: Settings,
    tmp_path: Path,
    java_options: str = "",
    *,
    archive_dir: Path = local_spark.ARCHIVE_DIR,
    delta_write: bool = True,
) -> tuple[dict[str, Any], str]:
    """Start a fresh Python process with ``get_spark`` (and a Delta write) over a Spark properties file of the
    development tooling (C1 only, as the tests' job processes run, then ``java_options``); what its JVM
    says, and its output."""
    options = local_spark.join_options(local_spark.JIT_QUICK, java_options)
    conf = local_spark.local_conf(settings, var=tmp_path / "var", archive_dir=archive_dir, java_options=options)
    properties = local_spark.write_properties(tmp_path / "spark.conf", conf)
    table = str(tmp_path / "table") if delta_write else ""
    spec = {"spark": {"jars_dir": settings.spark.jars_dir}, "table": table}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(spec)],
        cwd=REPO_ROOT,
        env={**os.environ, local_spark.SUBMIT_ARGS: local_spark.submit_args(properties)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    results = [line.removeprefix("RESULT ") for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1, output[-3000:]
    return json.loads(results[0]), output


def archive_warnings(output: str) -> list[str]:
    return [line for line in output.splitlines() if "[cds" in line or "shared archive" in line.lower()]


def test_the_builder_writes_a_whole_checked_archive_once(built: tuple[Settings, class_archive.Built]) -> None:
    settings, result = built
    assert result.path == archive_for(settings, local_spark.ARCHIVE_DIR)
    assert result.size > 50_000_000  # Spark's, Delta's and the Kafka source's classes: ~200 MB here
    assert class_archive.is_complete(result.path)
    manifest = json.loads(class_archive.manifest_path(result.path).read_text())
    assert manifest["size"] == result.size and manifest["pyspark"] == class_archive.pyspark_version()
    assert any(jar.startswith("delta-spark_") for jar in manifest["jars"])
    directory = result.path.parent
    assert sorted(path.name for path in directory.glob(".spark-*")) == []  # no temporary file left
    log = (directory / class_archive.LOG_NAME).read_text()
    assert "Skipping" not in log and "[warning][cds" not in log  # the dump's per-class warnings are off
    again = class_archive.build(settings, directory, log=lambda line: pytest.fail(f"rebuilt: {line}"))
    assert (again.built, again.path) == (False, result.path)


def test_a_fresh_session_maps_the_archive(built: tuple[Settings, class_archive.Built], tmp_path: Path) -> None:
    settings, result = built
    classes = tmp_path / "classes.log"
    # -Xshare:on after ours: the JVM now refuses to start unless it maps the archive (with quick JIT, as the tests'
    # job processes run: the compiler tiers do not change which archive a JVM can map).
    result_of, output = probe(settings, tmp_path, f"-Xshare:on -Xlog:class+load=info:file={classes}")
    arguments = result_of["arguments"]
    ours = f"-XX:SharedArchiveFile={result.path}"
    assert ours in arguments and arguments.index(ours) < arguments.index("-Xshare:on")
    assert "-XX:TieredStopAtLevel=1" in arguments and "-XX:ReservedCodeCacheSize=240m" in arguments
    # The settings' own JVM flags (conf/router.toml's spark.driver.extraJavaOptions) come after the tooling's.
    collector = DEFAULT_SPARK_CONF["spark.driver.extraJavaOptions"]
    assert collector == "-XX:+UseParallelGC" and arguments.index(collector) > arguments.index("-Xshare:on")
    assert str(result.path) in result_of["mapped"]
    loaded = classes.read_text().splitlines()
    from_archive = [line for line in loaded if line.endswith(FROM_ARCHIVE)]
    assert len(from_archive) > 1000, f"{len(from_archive)} of {len(loaded)} classes from the archive"
    # Delta comes through spark.jars (Spark's own class loader), and from the archive too.
    assert any(" org.apache.spark.sql.delta.DeltaLog " in line for line in from_archive)
    assert archive_warnings(output) == []


def mismatched_archive(path: Path, tmp_path: Path) -> None:
    """A real dynamic archive, of another class path (a one-class jar): what a stale archive looks like."""
    java = class_archive.java_binary()
    assert java is not None
    source = tmp_path / "Probe.java"
    source.write_text("public class Probe { public static void main(String[] args) { System.out.println(1); } }")
    subprocess.run([str(java.parent / "javac"), "-d", str(tmp_path), str(source)], check=True, timeout=120)
    jar = tmp_path / "probe.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.write(tmp_path / "Probe.class", "Probe.class")
    dump = [str(java), f"-XX:ArchiveClassesAtExit={path}", *class_archive.DUMP_OPTIONS, "-cp", str(jar), "Probe"]
    subprocess.run(dump, check=True, capture_output=True, timeout=120)
    # It is a good archive for its own class path (so the session below refuses it for the mismatch alone).
    use = [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={path}", "-cp", str(jar), "Probe"]
    subprocess.run(use, check=True, capture_output=True, timeout=120)


@pytest.mark.parametrize("kind", ["not an archive", "another class path"])
def test_a_corrupt_or_mismatched_archive_is_ignored_silently(
    built: tuple[Settings, class_archive.Built], tmp_path: Path, kind: str
) -> None:
    settings = built[0]
    archive = archive_for(settings, tmp_path / "jvm")
    archive.parent.mkdir()
    if kind == "not an archive":
        archive.write_bytes(bytes(range(256)) * 4096)
    else:
        mismatched_archive(archive, tmp_path)
    class_archive.write_manifest(archive, archive.stat().st_size)
    classes = tmp_path / "classes.log"
    result_of, output = probe(
        settings, tmp_path, f"-Xlog:class+load=info:file={classes}", archive_dir=tmp_path / "jvm", delta_write=False
    )
    assert f"-XX:SharedArchiveFile={archive}" in result_of["arguments"]  # offered ...
    assert str(archive) not in result_of["mapped"]  # ... refused, and the session ran without it
    assert not any(line.endswith(FROM_ARCHIVE) for line in classes.read_text().splitlines())
    assert archive_warnings(output) == []


def test_the_connect_server_maps_the_archive(
    built: tuple[Settings, class_archive.Built], connect_server: ConnectServer
) -> None:
    assert connect_server.process is not None
    # spark-submit execs the JVM: the server's process is the JVM.
    maps = Path(f"/proc/{connect_server.process.pid}/maps").read_text()
    assert str(built[1].path) in maps
    assert archive_warnings(connect_server.log_tail(10_000)) == []

"""The class-data archive for real: the builder writes one, a fresh JVM maps it, a bad one changes nothing.

The archive is the one the test session's settings name (``var/jvm/``), through the real builder
(``routing.class_archive.build``): ``make test`` builds it before pytest (``make jvm-archive``), so here the
builder finds it complete; on a checkout without it, the first worker to get here builds it (a minute or two)
and the rest of the session maps it too. Each check then starts a fresh Python process with ``get_spark``,
as a job does, and looks from inside its JVM: the options it started with, the files it has mapped
(``/proc/<pid>/maps``: a JVM unmaps an archive it refuses) and where its classes came from
(``-Xlog:class+load``). The Spark Connect server is the session's (``tests/conftest.py``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from jobs.connect_server import ConnectServer
from routing import class_archive
from routing.settings import REPO_ROOT, Settings
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
extra = {"spark.driver.extraJavaOptions": spec["java_options"]} if spec["java_options"] else None
spark = get_spark(settings, app_name="class-archive-probe", extra_conf=extra)
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


def with_archive(settings: Settings, directory: Path | str) -> Settings:
    return settings.replace(spark=dataclasses.replace(settings.spark, class_archive=str(directory)))


def archive_for(settings: Settings) -> Path:
    """Where a session with ``settings`` looks for its archive."""
    java = class_archive.java_binary()
    assert java is not None, "no java"
    conf = spark_conf(with_archive(settings, ""))
    return class_archive.archive_path(settings.spark.class_archive, conf, java)


@pytest.fixture(scope="module")
def built(settings: Settings) -> tuple[Settings, class_archive.Built]:
    lines: list[str] = []
    result = class_archive.build(settings, log=lines.append)
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
    delta_write: bool = True,
    jit: str = "full",
    gc: str = "g1",
) -> tuple[dict[str, Any], str]:
    """Start a fresh Python process with ``get_spark`` (and a Delta write); what its JVM says, and its output."""
    spark: dict[str, str] = {
        name: getattr(settings.spark, name)
        for name in ("class_archive", "jars_dir", "ivy_dir", "local_dir", "warehouse_dir")
    }
    spark["jit"] = jit
    spark["gc"] = gc
    table = str(tmp_path / "table") if delta_write else ""
    spec = {"spark": spark, "java_options": java_options, "table": table}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(spec)],
        cwd=REPO_ROOT,
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
    assert result.path == archive_for(settings)
    assert result.size > 50_000_000  # Spark's, Delta's and the Kafka source's classes: ~200 MB here
    assert class_archive.is_complete(result.path)
    manifest = json.loads(class_archive.manifest_path(result.path).read_text())
    assert manifest["size"] == result.size and manifest["pyspark"] == class_archive.pyspark_version()
    assert any(jar.startswith("delta-spark_") for jar in manifest["jars"])
    directory = result.path.parent
    assert sorted(path.name for path in directory.glob(".spark-*")) == []  # no temporary file left
    log = (directory / class_archive.LOG_NAME).read_text()
    assert "Skipping" not in log and "[warning][cds" not in log  # the dump's per-class warnings are off
    again = class_archive.build(settings, log=lambda line: pytest.fail(f"rebuilt: {line}"))
    assert (again.built, again.path) == (False, result.path)


def test_a_fresh_session_maps_the_archive(built: tuple[Settings, class_archive.Built], tmp_path: Path) -> None:
    settings, result = built
    classes = tmp_path / "classes.log"
    # -Xshare:on after ours: the JVM now refuses to start unless it maps the archive (with quick JIT and the
    # parallel collector, as the tests' job processes run: the archive was dumped under G1, and neither the
    # compiler tiers nor the collector change which archive a JVM can map).
    result_of, output = probe(
        settings, tmp_path, f"-Xshare:on -Xlog:class+load=info:file={classes}", jit="quick", gc="parallel"
    )
    arguments = result_of["arguments"]
    ours = f"-XX:SharedArchiveFile={result.path}"
    assert ours in arguments and arguments.index(ours) < arguments.index("-Xshare:on")
    assert "-XX:TieredStopAtLevel=1" in arguments and "-XX:ReservedCodeCacheSize=240m" in arguments
    assert "-XX:+UseParallelGC" in arguments
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
    settings = with_archive(built[0], tmp_path / "jvm")
    archive = archive_for(settings)
    archive.parent.mkdir()
    if kind == "not an archive":
        archive.write_bytes(bytes(range(256)) * 4096)
    else:
        mismatched_archive(archive, tmp_path)
    class_archive.write_manifest(archive, archive.stat().st_size)
    classes = tmp_path / "classes.log"
    result_of, output = probe(settings, tmp_path, f"-Xlog:class+load=info:file={classes}", delta_write=False)
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

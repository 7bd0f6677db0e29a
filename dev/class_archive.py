"""The class-data archive that makes every Spark JVM of this project start faster (AppCDS).

**What it is.** A JVM spends most of a Spark start loading classes: reading some 20,000 class files out
of ~290 jars, parsing and verifying them and laying out their metadata. Class-Data Sharing (CDS) does
that work once and writes the result to an *archive*, a file the next JVM maps into memory instead.
The JDK ships a *static* archive of its own core classes (``lib/server/classes.jsa``, used by default);
a *dynamic* archive (JDK 13+, JEP 350) sits on top of it and holds the application's classes: the JVM
writes it at exit when started with ``-XX:ArchiveClassesAtExit=FILE``, and maps it when started with
``-XX:SharedArchiveFile=FILE``. Dynamic, because it needs nothing but one representative run (no class
list to maintain, no second dump command) and it archives the classes of Spark's own class loader too
(Delta and the Kafka source come through ``spark.jars``, not the JVM's class path). Measured on a 2-core
machine (a run kept in git history): a session's start went from 10.9 s to 6.7 s, its first Delta write
from 10.8 s to 7.4 s, a fresh job process from 34 s to 26 s.

**Who uses it.** The development tooling only: :mod:`dev.local_spark` puts :func:`java_options` in
``spark.driver.defaultJavaOptions`` of the Spark properties file that the demo, the tests and the
benchmarks start pyspark's driver JVMs with, so every driver JVM they start (a job's, the test session's, the
Spark Connect server's) maps it. ``python -m dev.class_archive`` (:func:`build`; ``make jvm-archive``, which
``make test`` and ``make demo`` run) writes it into ``var/jvm`` by running a small representative workload in
a child process whose JVM dumps its classes at exit. A deployment sets its JVM flags itself
(``spark.driver.extraJavaOptions``).

**Why the key.** The JVM only accepts an archive dumped by the same JDK build with the same class path,
and classes of Spark's class loader are matched by their class-file checksum. The file name carries a
key (:func:`archive_key`) over everything that decides that: the Java binary Spark will run (its real
path and the size and mtime of the binary, ``libjvm.so`` and the ``lib/modules`` image, which any JDK
update rewrites), the pyspark version (its jars are the class path), the names of the ``spark.jars``
and the ``spark.driver.extraClassPath`` entries with their size and modification time (a class path
entry that changed stops the JVM instead of only disabling the archive). A new JDK, pyspark or jar set
thus looks for a new file, misses it and runs without an archive (as fast as before) until ``python -m
dev.class_archive`` builds the new one; old archives are never reused, and only the newest :data:`KEEP`
are kept.

**What happens on a mismatch.** Should an archive still not match (a JVM option that changes the
layout, such as another GC or heap over 32 GB without compressed pointers, or a jar replaced in place
under the same name), the JVM checks the archive's header against itself at start-up, refuses it and
runs without it: ``-Xshare:auto`` (never ``on``) makes that a fallback rather than an error, and
``-Xlog:cds=off,cds+dynamic=off`` silences the one warning line it would print ("Unable to use shared
archive ..."). A file that is not an archive at all (a bad magic number) is refused the same way. Tested
in ``tests/integration/test_class_archive.py``.

**Why it is safe.** An archive holds the parsed form of the same class files the JVM would read, checked
against them as above; it changes no behaviour, only where the JVM gets the bytes from. The one way a
bad archive can hurt is a file *shorter* than its header says (a copy cut short): the JVM maps it and
dies of SIGBUS. So the archive is never published half-written: the JVM dumps to a temporary file in the
same directory, :func:`build` checks that a fresh JVM maps it with ``-Xshare:on`` (which fails instead
of falling back), writes a manifest with its size, and renames both into place (atomic on one file
system). :func:`archive_file` only offers an archive whose size matches its manifest. Builders take a
file lock (``fcntl``), so concurrent builds (two pytest workers, two ``make`` runs) write it once. A
running JVM keeps the file it mapped even when a rebuild replaces or :data:`KEEP` deletes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from routing.config import REPO_ROOT

if TYPE_CHECKING:
    from routing.settings import Settings

#: Archives of other keys (another JDK, pyspark or jar set) kept in the directory, newest first.
KEEP = 3
#: Use the archive when it matches this JVM, else run without it, silently (see the module docstring).
USE_OPTIONS = ("-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")
#: While dumping: no line per class CDS cannot archive ("Skipping ...: Signed JAR", old class versions).
DUMP_OPTIONS = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
#: Seconds the workload child may take (one to two minutes on 2 cores).
BUILD_TIMEOUT_S = 900.0
#: Seconds the check that a fresh JVM maps the new archive may take.
CHECK_TIMEOUT_S = 120.0
LOCK_NAME = ".build.lock"
LOG_NAME = "build.log"


class ClassArchiveError(RuntimeError):
    """The archive cannot be built; ``usage``: because of the setup (no Java), not a failed dump."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def java_binary(env: Mapping[str, str] | None = None) -> Path | None:
    """The real path of the ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate: str | None = os.path.join(java_home, "bin", "java")
    else:
        candidate = shutil.which("java", path=env.get("PATH", os.defpath))
    if not candidate or not os.access(candidate, os.X_OK):
        return None
    return Path(os.path.realpath(candidate))


def jdk_identity(java: Path) -> list[str]:
    """What identifies the JDK build behind ``java``: its path and the size and mtime of its binaries."""
    home = java.parent.parent
    identity = [str(java)]
    for part in (java, home / "lib" / "server" / "libjvm.so", home / "lib" / "modules"):
        with contextlib.suppress(OSError):
            stat = part.stat()
            identity.append(f"{part.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return identity


def pyspark_version() -> str:
    from pyspark.version import __version__

    return str(__version__)


def _names(value: str, separator: str) -> list[str]:
    return sorted(Path(entry).name for entry in value.split(separator) if entry.strip())


def class_path_identity(class_path: str) -> list[list[object]]:
    """Each entry of a JVM class path by name, size and modification time (a missing one by name alone).

    Unlike a ``spark.jars`` jar, a class path entry that differs from the archive's stops the JVM at start
    ("A jar file is not the one used while building the shared archive file"), not merely the archive: a jar
    rebuilt in place under its old name (``make jars`` after a change to ``dev/localfs/src``) must look for an
    archive of its own.
    """
    identity: list[list[object]] = []
    for entry in sorted(part for part in class_path.split(os.pathsep) if part.strip()):
        try:
            stat = Path(entry).stat()
        except OSError:
            identity.append([Path(entry).name])
        else:
            identity.append([Path(entry).name, stat.st_size, stat.st_mtime_ns])
    return identity


def archive_key(conf: Mapping[str, str], java: Path, version: str | None = None) -> str:
    """The key in an archive's name: a SHA-256 prefix over the JDK, pyspark and the jars (module docstring)."""
    parts = {
        "jdk": jdk_identity(java),
        "pyspark": version or pyspark_version(),
        "jars": _names(conf.get("spark.jars", ""), ","),
        "class_path": class_path_identity(conf.get("spark.driver.extraClassPath", "")),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def archive_path(directory: str, conf: Mapping[str, str], java: Path, version: str | None = None) -> Path:
    """Where the archive for a JVM started with ``conf`` lives (it may not exist)."""
    return Path(directory) / f"spark-{archive_key(conf, java, version)}.jsa"


def manifest_path(archive: Path) -> Path:
    return archive.with_name(archive.name + ".json")


def write_manifest(archive: Path, size: int, **details: object) -> None:
    """Record that ``archive`` is whole at ``size`` bytes (before it is renamed into place); ``details`` for people."""
    manifest = manifest_path(archive)
    temporary = manifest.with_name(f".{manifest.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"size": size, **details}, indent=2) + "\n")
    os.replace(temporary, manifest)


def is_complete(archive: Path) -> bool:
    """Whether ``archive`` exists whole: its size is the one its manifest recorded when it was built."""
    try:
        manifest = json.loads(manifest_path(archive).read_text())
        return isinstance(manifest, dict) and archive.stat().st_size == manifest.get("size")
    except (OSError, ValueError):
        return False


def archive_file(directory: str, conf: Mapping[str, str]) -> Path | None:
    """The complete archive for a JVM started with ``conf``, or None (off, no Java, not built yet)."""
    if not directory:
        return None
    java = java_binary()
    if java is None:
        return None
    archive = archive_path(directory, conf, java)
    return archive if is_complete(archive) else None


def java_options(directory: str, conf: Mapping[str, str]) -> str:
    """The driver's JVM options that map the archive for ``conf``; "" when there is none to map."""
    archive = archive_file(directory, conf)
    if archive is None:
        return ""
    return " ".join([f"-XX:SharedArchiveFile={archive}", *USE_OPTIONS])


# -- building --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Built:
    """What :func:`build` did."""

    path: Path
    #: False: the archive already existed (and ``force`` was not given); nothing was run.
    built: bool
    size: int
    seconds: float


@contextlib.contextmanager
def build_lock(directory: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold the directory's build lock: one builder at a time; ``on_wait`` is called if another holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_NAME, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(
    settings: Settings,
    directory: Path,
    *,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> Built:
    """Write the archive for sessions of ``settings`` (over :func:`dev.spark_properties.local_fs_conf`) into
    ``directory`` unless it exists.

    Runs ``python -m dev.class_archive_workload`` in a child process whose driver JVM dumps its classes
    at exit into a temporary file, checks that a fresh JVM maps it, and renames it into place (module
    docstring). Idempotent: a complete archive is kept unless ``force``. :class:`ClassArchiveError` when
    it cannot be built.
    """
    from dev.spark_properties import local_fs_conf
    from routing.spark import spark_conf

    java = java_binary()
    if java is None:
        raise ClassArchiveError("no java: set JAVA_HOME or put a JDK 17+ java on PATH", usage=True)
    # The jars and class path the archive is for, exactly as a session would start (jar check included).
    defaults = local_fs_conf()
    conf = {**defaults, **spark_conf(settings)}
    archive = archive_path(str(directory), conf, java)
    root = archive.parent
    if is_complete(archive) and not force:
        return Built(archive, False, archive.stat().st_size, 0.0)
    with build_lock(root, on_wait=lambda: log(f"another process is building an archive in {root}: waiting for it")):
        if is_complete(archive) and not force:  # another builder finished it while we waited
            return Built(archive, False, archive.stat().st_size, 0.0)
        for stale in root.glob(".spark-*.tmp*"):  # a builder killed halfway; none runs now (we hold the lock)
            stale.unlink(missing_ok=True)
        started = time.monotonic()
        log(f"building the class-data archive {archive} (a minute or two)")
        temporary = root / f".{archive.name}.{os.getpid()}.tmp"
        try:
            class_path = _dump(settings, defaults, temporary, root / LOG_NAME)
            _check_maps(java, temporary, class_path, root / LOG_NAME)
            size = temporary.stat().st_size
            write_manifest(
                archive,
                size,
                java=str(java),
                pyspark=pyspark_version(),
                jars=_names(conf.get("spark.jars", ""), ","),
                built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
            os.replace(temporary, archive)
        finally:
            temporary.unlink(missing_ok=True)
        _prune(root, keep=archive)
        seconds = time.monotonic() - started
    log(f"wrote {archive} ({size / 1e6:.0f} MB) in {seconds:.0f} s")
    return Built(archive, True, size, seconds)


def _dump(settings: Settings, defaults: Mapping[str, str], temporary: Path, log_path: Path) -> str:
    """Run the workload child over ``defaults`` (its own properties file); the JVM class path it ran with.
    Its output goes to ``log_path``."""
    from dev.spark_properties import SUBMIT_ARGS, scratch_conf, submit_args, write_properties

    spark_settings = settings.spark
    with tempfile.TemporaryDirectory(prefix="class-archive-") as scratch:
        properties = write_properties(Path(scratch) / "spark.conf", {**scratch_conf(Path(scratch)), **defaults})
        spec = {
            "spark": {
                **{field.name: getattr(spark_settings, field.name) for field in dataclasses.fields(spark_settings)},
                "remote": "",
            },
            "scratch": scratch,
            "archive": str(temporary),
            "java_options": " ".join([f"-XX:ArchiveClassesAtExit={temporary}", *DUMP_OPTIONS]),
            "result": os.path.join(scratch, "result.json"),
        }
        spec_path = Path(scratch) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = {**os.environ, SUBMIT_ARGS: submit_args(properties)}
        env["PYTHONPATH"] = os.pathsep.join(part for part in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if part)
        with open(log_path, "wb") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "dev.class_archive_workload", str(spec_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own group: a timeout stops its JVM too, not just the child
            )
            try:
                returncode = child.wait(BUILD_TIMEOUT_S)
            except BaseException as error:  # the timeout, or Ctrl-C: leave no JVM writing behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                if isinstance(error, subprocess.TimeoutExpired):
                    raise ClassArchiveError(
                        f"the archive's workload took over {BUILD_TIMEOUT_S:g} s (log: {log_path})"
                    ) from None
                raise
        if returncode != 0:
            raise ClassArchiveError(f"the archive's workload failed ({returncode}):\n{_tail(log_path)}")
        if not temporary.is_file() or temporary.stat().st_size == 0:
            raise ClassArchiveError(f"the JVM wrote no archive at exit:\n{_tail(log_path)}")
        result = json.loads((Path(scratch) / "result.json").read_text())
        return str(result["class_path"])


def _check_maps(java: Path, archive: Path, class_path: str, log_path: Path) -> None:
    """A fresh JVM with the workload's class path maps ``archive`` (``-Xshare:on`` fails where ``auto`` would not)."""
    command = [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", class_path, "-version"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)
    if done.returncode != 0:
        with open(log_path, "a") as log:
            log.write(done.stdout + done.stderr)
        lines = (done.stdout + done.stderr).strip().splitlines()
        raise ClassArchiveError(f"a fresh JVM cannot map the new archive: {lines[-1] if lines else done.returncode}")


def _prune(root: Path, *, keep: Path) -> None:
    """Delete all but the :data:`KEEP` newest archives (``keep`` among them) and their manifests."""

    def modified(path: Path) -> float:
        with contextlib.suppress(OSError):
            return path.stat().st_mtime
        return 0.0

    archives = sorted(root.glob("spark-*.jsa"), key=modified, reverse=True)
    kept = [keep, *(archive for archive in archives if archive != keep)][:KEEP]
    for archive in archives:
        if archive not in kept:
            archive.unlink(missing_ok=True)
            manifest_path(archive).unlink(missing_ok=True)


def _tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return f"(no log at {path})"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dev.class_archive [--force]``: build the archive for the current settings (``make jvm-archive``).

    Exit status: 0 built or already there; 1 the build failed (the log's tail says why); 2 bad flags or
    settings, no Java, or the jars are missing.
    """
    import argparse

    from dev.spark_properties import ARCHIVE_DIR
    from routing.config import ConfigError
    from routing.settings import add_settings_arguments, settings_from_args
    from routing.spark import SparkJarsMissingError

    parser = argparse.ArgumentParser(
        prog="python -m dev.class_archive",
        description="Build the class-data archive that starts every local Spark driver JVM faster.",
    )
    parser.add_argument("--force", action="store_true", help="rebuild the archive even if it exists")
    parser.add_argument(
        "--dir", type=Path, default=ARCHIVE_DIR, help=f"the archives' directory (default: {ARCHIVE_DIR})"
    )
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
        result = build(
            settings, args.dir, force=args.force, log=lambda line: print(f"class_archive: {line}", flush=True)
        )
    except (ConfigError, SparkJarsMissingError, ValueError) as error:
        print(f"class_archive: {error}", file=sys.stderr)
        return 2
    except ClassArchiveError as error:
        print(f"class_archive: {error}", file=sys.stderr)
        return 2 if error.usage else 1
    if not result.built:
        print(f"class_archive: {result.path} is up to date ({result.size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build what a Spark cluster needs to run the router, under ``dist/`` (``make package``).

    python -m jobs.package [--dist DIR] [--build DIR] [--python PYTHON]

1. **The wheel**, with the native extension: ``pip wheel --no-deps . -w dist/`` (no build
   isolation: the dev virtualenv already has setuptools-rust, and cargo's target dir is shared,
   so an unchanged crate is not recompiled).
2. **The packed environment** ``dist/spark-topic-router-env.tar.gz``: a clean virtualenv under
   ``build/package-env/`` with the wheel and its dependencies installed, packed by
   ``venv-pack``. spark-submit ships it with ``--archives ...#environment`` and executors run
   ``./environment/bin/python``. The archive's key hashes the wheel's ``RECORD`` (the content
   hash of every file in it; the wheel file itself differs per build by its zip timestamps), its
   requirements, the interpreter and the exclusions, so an unchanged wheel reuses the archive
   already packed; a changed wheel with the same requirements is reinstalled into the cached
   virtualenv and repacked (seconds, not the minutes a fresh environment takes).
   pyspark's ``jars/`` (about 450 MB) are left out: on a cluster the JVM is the cluster's Spark
   and Python workers only import pyspark's Python modules. venv-pack does not copy the
   interpreter: ``bin/python`` links to the base Python 3.11, which must exist at the same path on
   every node (or repoint it with ``venv-pack --python-prefix``).
3. **The JVM jars** ``dist/jars/``: a copy of ``var/jars/spark`` (``make jars``), for ``--jars``.

Re-running it is cheap and leaves the same files. It prints what it produced. Concurrent runs
(``make package`` and the cluster test) take turns on ``build/package.lock``: they share setuptools'
``build/`` directories and the environment cache.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from routing.settings import REPO_ROOT

DIST_NAME = "spark_topic_router"
ENV_ARCHIVE_NAME = "spark-topic-router-env.tar.gz"
#: venv-pack ``--exclude`` patterns (relative to the environment's root); see the module docstring.
ENV_EXCLUDES = ("lib/python3.11/site-packages/pyspark/jars/*",)
#: Python of the packed environment: the same minor version the wheel is built for.
DEFAULT_PYTHON = "python3.11"


class PackageError(RuntimeError):
    """A packaging step failed; the message names it."""


@dataclass(frozen=True)
class Package:
    """The files ``make package`` produced."""

    wheel: Path
    env_archive: Path
    jars: tuple[Path, ...]
    #: The cache key of the packed environment (see module docstring).
    env_key: str
    #: False when the archive came from the cache under ``build/``.
    env_rebuilt: bool


def run(command: Sequence[str | os.PathLike[str]], what: str, *, cwd: Path = REPO_ROOT) -> None:
    result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise PackageError(f"{what} failed (exit {result.returncode}): {' '.join(map(str, command))}\n{tail}")


def build_wheel(dist: Path) -> Path:
    dist.mkdir(parents=True, exist_ok=True)
    for stale in dist.glob(f"{DIST_NAME}-*.whl"):
        stale.unlink()
    run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", ".", "-w", dist],
        "building the wheel",
    )
    wheels = sorted(dist.glob(f"{DIST_NAME}-*.whl"))
    if len(wheels) != 1:
        raise PackageError(f"expected one {DIST_NAME} wheel in {dist}, found {[wheel.name for wheel in wheels]}")
    with zipfile.ZipFile(wheels[0]) as archive:
        if not any(name.startswith("routing/_native") and name.endswith(".so") for name in archive.namelist()):
            raise PackageError(f"{wheels[0].name} has no routing/_native extension module")
    return wheels[0]


def _wheel_member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if name.endswith(suffix)]
        if len(names) != 1:
            raise PackageError(f"{wheel.name} has no single {suffix}")
        return archive.read(names[0])


def _key(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def env_keys(wheel: Path, python: str) -> tuple[str, str]:
    """(dependencies key, archive key) of the environment built from ``wheel`` (see module docstring)."""
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout.encode()
    requirements = b"\n".join(
        line for line in _wheel_member(wheel, ".dist-info/METADATA").splitlines() if line.startswith(b"Requires-Dist:")
    )
    excludes = "\0".join(ENV_EXCLUDES).encode()
    return (
        _key(version, requirements),
        _key(version, requirements, excludes, _wheel_member(wheel, ".dist-info/RECORD")),
    )


def build_env_archive(wheel: Path, dist: Path, build: Path, python: str) -> tuple[Path, str, bool]:
    """The packed environment in ``dist``, taken from the cache under ``build`` or built into it.

    Two cache levels: a virtualenv with the dependencies per dependency set (``venv-<key>``; creating it
    is the slow part) into which each new wheel is reinstalled, and the newest archive (``env-<key>``).
    """
    deps_key, archive_key = env_keys(wheel, python)
    cache = build / "package-env"
    cache.mkdir(parents=True, exist_ok=True)
    cached_archive = cache / f"env-{archive_key}.tar.gz"
    rebuilt = not cached_archive.is_file()
    if rebuilt:
        venv = cache / f"venv-{deps_key}"
        pip: list[str | os.PathLike[str]] = [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ]
        if not (venv / ".complete").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            run([python, "-m", "venv", venv], "creating the environment's virtualenv")
            run([*pip, wheel], "installing the wheel and its dependencies into the environment")
            (venv / ".complete").touch()
        else:
            run([*pip, "--no-deps", "--force-reinstall", wheel], "reinstalling the wheel into the environment")
        partial = cache / f"env-{archive_key}.partial"
        excludes = [arg for pattern in (*ENV_EXCLUDES, ".complete") for arg in ("--exclude", pattern)]
        venv_pack = Path(sys.executable).parent / "venv-pack"
        if not venv_pack.exists():
            raise PackageError(f"{venv_pack} not found: pip install -e '.[package]'")
        run(
            [venv_pack, "--quiet", "--force", "--prefix", venv, "--format", "tar.gz", "--output", partial, *excludes],
            "packing the environment with venv-pack",
        )
        # Only a complete archive carries the cache's name; older archives and dependency sets are dead weight.
        partial.rename(cached_archive)
        for other in cache.iterdir():
            if other not in (cached_archive, venv):
                if other.is_dir():
                    shutil.rmtree(other, ignore_errors=True)
                else:
                    other.unlink(missing_ok=True)
    target = dist / ENV_ARCHIVE_NAME
    if rebuilt or not target.is_file() or target.stat().st_size != cached_archive.stat().st_size:
        shutil.copyfile(cached_archive, target)
    return target, archive_key, rebuilt


def copy_jars(jars_dir: Path, dist: Path) -> tuple[Path, ...]:
    jars = sorted(jars_dir.glob("*.jar"))
    if not jars:
        raise PackageError(f"no jars in {jars_dir}: run `make jars`")
    target = dist / "jars"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for jar in jars:
        shutil.copyfile(jar, target / jar.name)
    return tuple(target / jar.name for jar in jars)


def build_package(dist: Path, build: Path, *, python: str = DEFAULT_PYTHON, jars_dir: Path | None = None) -> Package:
    """Build the wheel, the packed environment and the jars into ``dist``."""
    resolved_python = shutil.which(python)
    if resolved_python is None:
        raise PackageError(f"{python} not found: the packed environment needs Python 3.11")
    build.mkdir(parents=True, exist_ok=True)
    with (build / "package.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheel = build_wheel(dist)
        archive, key, rebuilt = build_env_archive(wheel, dist, build, resolved_python)
        jars = copy_jars(jars_dir or REPO_ROOT / "var" / "jars" / "spark", dist)
    return Package(wheel=wheel, env_archive=archive, jars=jars, env_key=key, env_rebuilt=rebuilt)


def describe(package: Package) -> str:
    def size(path: Path) -> str:
        return f"{path.stat().st_size / 2**20:,.1f} MiB"

    cache_note = "packed now" if package.env_rebuilt else "from the cache"
    jars_bytes = sum(jar.stat().st_size for jar in package.jars)
    return "\n".join(
        [
            f"wheel        {package.wheel}  ({size(package.wheel)})",
            f"environment  {package.env_archive}  ({size(package.env_archive)}, key {package.env_key}, {cache_note})",
            f"jars         {package.jars[0].parent}/  ({len(package.jars)} jars, {jars_bytes / 2**20:,.1f} MiB)",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.package", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist", help="output directory (default dist/)")
    parser.add_argument(
        "--build", type=Path, default=REPO_ROOT / "build", help="cache of packed environments (default build/)"
    )
    parser.add_argument("--python", default=DEFAULT_PYTHON, help="interpreter of the packed environment")
    args = parser.parse_args(argv)
    try:
        package = build_package(args.dist.resolve(), args.build.resolve(), python=args.python)
    except PackageError as error:
        print(f"package: {error}", file=sys.stderr)
        return 1
    print(describe(package), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

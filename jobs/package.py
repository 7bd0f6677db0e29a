"""Build what a Spark cluster needs to run the router, under ``dist/`` (``make package``).

    python -m jobs.package [--dist DIR] [--build DIR] [--python PYTHON]

1. **The wheel**, with the native extension: ``pip wheel --no-deps . -w dist/`` (no build
   isolation: the dev virtualenv already has setuptools-rust, and cargo's target dir is shared,
   so an unchanged crate is not recompiled).
2. **The packed environment** ``dist/spark-topic-router-env.tar.gz``: a clean virtualenv under
   ``build/package-env/<key>/`` with the wheel and its dependencies installed, packed by
   ``venv-pack``. spark-submit ships it with ``--archives ...#environment`` and executors run
   ``./environment/bin/python``. ``<key>`` hashes the wheel's ``RECORD`` (the content hash of
   every file in it; the wheel file itself differs per build by its zip timestamps), the
   interpreter and the exclusions, so an unchanged wheel reuses the archive already packed.
   pyspark's ``jars/`` (about 450 MB) are left out: on a cluster the JVM is the cluster's Spark
   and Python workers only import pyspark's Python modules. venv-pack does not copy the
   interpreter: ``bin/python`` links to the base Python 3.11, which must exist at the same path on
   every node (or repoint it with ``venv-pack --python-prefix``).
3. **The JVM jars** ``dist/jars/``: a copy of ``var/jars/spark`` (``make jars``), for ``--jars``.

Re-running it is cheap and leaves the same files. It prints what it produced.
"""

from __future__ import annotations

import argparse
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
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", ".", "-w", dist],
        "building the wheel")
    wheels = sorted(dist.glob(f"{DIST_NAME}-*.whl"))
    if len(wheels) != 1:
        raise PackageError(f"expected one {DIST_NAME} wheel in {dist}, found {[wheel.name for wheel in wheels]}")
    with zipfile.ZipFile(wheels[0]) as archive:
        if not any(name.startswith("routing/_native") and name.endswith(".so") for name in archive.namelist()):
            raise PackageError(f"{wheels[0].name} has no routing/_native extension module")
    return wheels[0]


def env_key(wheel: Path, python: str) -> str:
    """Content key of the packed environment built from ``wheel`` (see module docstring)."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive:
        records = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise PackageError(f"{wheel.name} has no single .dist-info/RECORD")
        digest.update(archive.read(records[0]))
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    digest.update(version.encode())
    digest.update("\0".join(ENV_EXCLUDES).encode())
    return digest.hexdigest()[:16]


def build_env_archive(wheel: Path, dist: Path, build: Path, python: str) -> tuple[Path, str, bool]:
    """The packed environment in ``dist``, taken from the cache under ``build`` or built into it."""
    key = env_key(wheel, python)
    cache = build / "package-env" / key
    cached_archive = cache / ENV_ARCHIVE_NAME
    rebuilt = not cached_archive.is_file()
    if rebuilt:
        shutil.rmtree(cache, ignore_errors=True)
        venv = cache / "venv"
        run([python, "-m", "venv", venv], "creating the environment's virtualenv")
        run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel],
            "installing the wheel and its dependencies into the environment")
        partial = cache / f"{ENV_ARCHIVE_NAME}.partial"
        excludes = [arg for pattern in ENV_EXCLUDES for arg in ("--exclude", pattern)]
        venv_pack = Path(sys.executable).parent / "venv-pack"
        if not venv_pack.exists():
            raise PackageError(f"{venv_pack} not found: pip install -e '.[package]'")
        run([venv_pack, "--quiet", "--force", "--prefix", venv, "--format", "tar.gz", "--output", partial,
             *excludes], "packing the environment with venv-pack")
        # Only a complete archive carries the cache's name.
        partial.rename(cached_archive)
    target = dist / ENV_ARCHIVE_NAME
    if not target.is_file() or target.stat().st_size != cached_archive.stat().st_size or rebuilt:
        shutil.copyfile(cached_archive, target)
    return target, key, rebuilt


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
    wheel = build_wheel(dist)
    archive, key, rebuilt = build_env_archive(wheel, dist, build, resolved_python)
    jars = copy_jars(jars_dir or REPO_ROOT / "var" / "jars" / "spark", dist)
    return Package(wheel=wheel, env_archive=archive, jars=jars, env_key=key, env_rebuilt=rebuilt)


def describe(package: Package) -> str:
    def size(path: Path) -> str:
        return f"{path.stat().st_size / 2**20:,.1f} MiB"

    cache_note = "packed now" if package.env_rebuilt else "from the cache"
    jars_bytes = sum(jar.stat().st_size for jar in package.jars)
    return "\n".join([
        f"wheel        {package.wheel}  ({size(package.wheel)})",
        f"environment  {package.env_archive}  ({size(package.env_archive)}, key {package.env_key}, {cache_note})",
        f"jars         {package.jars[0].parent}/  ({len(package.jars)} jars, {jars_bytes / 2**20:,.1f} MiB)",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.package", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist", help="output directory (default dist/)")
    parser.add_argument("--build", type=Path, default=REPO_ROOT / "build",
                        help="cache of packed environments (default build/)")
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

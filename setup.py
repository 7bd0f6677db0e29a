"""spark-topic-router: a Spark-native topic router with a native (Rust) matcher.

``pip install .`` builds everything, the Rust extension ``routing._native``
included (setuptools-rust drives cargo).
"""

import os
import sys

from setuptools import find_packages, setup
from setuptools_rust import Binding, RustExtension

# pyo3's build script reruns, and the crate is rebuilt (~30 s), whenever PYO3_PYTHON changes, and
# setuptools-rust sets it to sys.executable: `.venv/bin/python` from make, `.venv/bin/python3.11` from pip's
# build of `pip install -e` or `pip wheel`. Resolving the link gives every caller one value, so cargo finds its
# last build fresh (the interpreter is only asked for its version and ABI, which the link target shares).
os.environ.setdefault("PYO3_PYTHON", os.path.realpath(sys.executable))

REQUIREMENTS = [
    # [connect]: the Spark Connect client (grpcio, protobuf, zstandard) for spark.remote (docs/deployment.md).
    "pyspark[connect]==4.2.0",
    "delta-spark==4.4.1",
    "pyarrow>=18",
    "pyroaring>=1.0",
    "confluent-kafka>=2.6",
    # PySpark 4.2's Arrow and pandas UDF paths support pandas < 3.
    "pandas>=2.2,<3",
]
EXTRAS = {
    "test": [
        "pytest>=8",
        "pytest-timeout>=2.3",
        # `make test` runs two workers (--dist loadfile); see the Makefile.
        "pytest-xdist>=3.6",
        "hypothesis>=6.100",
        "ruff>=0.6",
        "mypy>=1.11",
        # `make lint`'s import layering contract (pyproject.toml [tool.importlinter]; acyclic_siblings is 2.x's).
        "import-linter==2.17",
        # notebooks/explore.ipynb runs in the tests (nbclient + an IPython kernel); nbstripout
        # strips outputs before a commit (a test fails on any committed output).
        "nbclient>=0.10",
        "nbformat>=5.10",
        "ipykernel>=6.29",
        "nbstripout>=0.7",
    ],
    "bench": [
        "matplotlib>=3.8",
        "hdrhistogram>=0.10",
    ],
    # `make package`: packs a clean virtualenv into the archive spark-submit ships (--archives).
    "package": [
        "venv-pack>=0.2",
    ],
    # `make docs`: the documentation site (mkdocs.yml), built with --strict inside `make test`.
    "docs": [
        "mkdocs-material==9.8.2",
    ],
}

if sys.argv[1:] == ["--requirements"]:
    # `make install`: the dependencies alone, one per line, for pip to install while cargo builds the extension.
    print("\n".join([*REQUIREMENTS, *(requirement for extra in EXTRAS.values() for requirement in extra)]))
    sys.exit(0)

setup(
    name="spark-topic-router",
    version="0.1.0",
    description="Spark-native, horizontally scalable AMQP-style topic router",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["routing", "routing.*", "udfs", "udfs.*", "jobs", "jobs.*"]),
    package_data={"routing": ["py.typed", "*.pyi"]},
    install_requires=REQUIREMENTS,
    extras_require=EXTRAS,
    # The binding crate of the native workspace (native/python); its `extension-module` cargo feature is
    # enabled only here: it leaves libpython to the interpreter and makes mimalloc the allocator.
    rust_extensions=[
        RustExtension(
            "routing._native",
            path="native/python/Cargo.toml",
            binding=Binding.PyO3,
            features=["extension-module"],
            debug=False,
        )
    ],
    zip_safe=False,
)

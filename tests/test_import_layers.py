"""The import layering of pyproject.toml's ``[tool.importlinter]`` holds (``make lint`` checks it too).

The contracts are the spec: the entry points (``jobs``) above the library, the library never importing an entry
point, a benchmark or a test, the UDF never importing the router, and no import cycle among the modules of any
package (imports under ``TYPE_CHECKING`` included: a type-only arrow is still an arrow of the design).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from routing.settings import REPO_ROOT


def test_the_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    completed = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},  # this checkout's packages, whatever is installed
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]
    assert "0 broken" in completed.stdout


#: What reaches past PySpark's public API into the JVM: PySpark's private handles and py4j itself.
JVM_REACH = re.compile(r"\._(jvm|jdf|jc|jsc|jsparkSession|jconf|jreader|jwrite|gateway)\b|\bpy4j\.|from py4j\b")


def test_only_routing_jvm_reaches_into_the_jvm() -> None:
    """Every py4j use of a Spark or Delta internal is in :mod:`routing.jvm`, behind its version checks and
    fallbacks; the rest of the library and the UDFs use the public API or that module."""
    offenders = []
    for package in ("routing", "udfs", "jobs"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path == REPO_ROOT / "routing" / "jvm.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if JVM_REACH.search(code) and not code.lstrip().startswith(('"', "'")):
                    offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert offenders == []
    assert JVM_REACH.search("frame._jdf.select(x)") and JVM_REACH.search("from py4j.protocol import Py4JError")

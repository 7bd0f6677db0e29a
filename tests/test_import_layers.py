"""The import layering of pyproject.toml's ``[tool.importlinter]`` holds (``make lint`` checks it too).

The contracts are the spec: the entry points (``jobs``) above the library, the library never importing an entry
point, a benchmark or a test, the UDF never importing the router, and no import cycle among the modules of any
package (imports under ``TYPE_CHECKING`` included: a type-only arrow is still an arrow of the design).
"""

from __future__ import annotations

import os
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

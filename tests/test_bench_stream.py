"""Smoke test: ``bench/stream.py --help`` starts and documents its flags.

The benchmark itself needs a broker and Spark and runs for minutes, so the test
suite only guards it against import-time rot; its figures and its correctness
checks (the SQL baseline's and the Python trie's deliveries against the native
router's) live in the benchmark's own output. No timing is asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "stream.py"


@pytest.mark.timeout(60)
def test_help_lists_the_flags() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--help"], capture_output=True, text=True, check=False, timeout=50
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for flag in ("--quick", "--seed", "--messages", "--rlike-messages", "--sizes", "--max-offsets", "--set"):
        assert flag in done.stdout, f"{flag} missing from --help"

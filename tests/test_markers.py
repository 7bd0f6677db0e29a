"""What ``make test-fast`` (``-m "not slow and not integration"``) runs: no integration test, no benchmark run.

Tests under ``tests/integration/`` are marked by folder (``tests/conftest.py``), whatever their files say.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.timeout(120)
def test_fast_selection_leaves_out_integration_tests_and_benchmark_runs() -> None:
    files = ["integration", "test_matchers_bench.py", "test_subscriptions_bench.py"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow and not integration",
            *files,
        ],
        cwd=TESTS,
        capture_output=True,
        text=True,
        check=False,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    # Nothing from integration/ (every file there is marked by its folder), and of the benchmark smoke
    # tests only --help: test_matchers_bench.py holds nothing but its run.
    assert selected == ["tests/test_subscriptions_bench.py::test_help_lists_the_flags"]

"""How the suite is selected and scheduled (``tests/conftest.py``).

What ``make test-fast`` (``-m "not slow and not integration"``) runs: no integration test, no benchmark run.
Tests under ``tests/integration/`` are marked by folder, whatever their files say. And under ``make test``'s
``--dist loadfile``, every file that uses the ``connect_server`` fixture goes to one worker.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.timeout(120)
def test_fast_selection_leaves_out_integration_tests_and_benchmark_runs() -> None:
    runs = ["bench/tests/test_bench_matchers.py", "bench/tests/test_bench_subscriptions.py"]
    files = ["tests/integration", *runs, "bench/tests/test_bench_help.py"]
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
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        check=False,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    # Nothing from integration/ (every file there is marked by its folder) nor from the files of benchmark
    # runs: only the benchmarks' --help.
    assert selected and all(test.startswith("bench/tests/test_bench_help.py::") for test in selected), selected


def test_every_file_that_uses_the_connect_server_is_scheduled_with_the_others() -> None:
    from conftest import CONNECT_SERVER_FILES

    # As a test parameter or through request.getfixturevalue("connect_server").
    uses = re.compile(r"\bconnect_server: ConnectServer\b|getfixturevalue\(\"connect_server\"\)")
    users = sorted(
        str(path.relative_to(TESTS.parent))
        for path in TESTS.rglob("test_*.py")
        if path != Path(__file__) and uses.search(path.read_text(encoding="utf-8"))
    )
    assert users == sorted(CONNECT_SERVER_FILES)

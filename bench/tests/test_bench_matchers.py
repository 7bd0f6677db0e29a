"""Smoke test: ``bench/matchers.py --quick`` runs end to end and writes its report and chart.

No timing is asserted (timings belong to the benchmark's own output); this
only guards the harness against rot. The benchmark itself re-checks every
matcher's realistic lookups against the trie and aborts on a disagreement, so
a passing run also means every contender answered those lookups correctly.
It runs the benchmark (about a minute), so it is marked ``slow``: ``make test-fast`` skips it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from routing.matchers import CLASSIC_MATCHERS

BENCH = Path(__file__).resolve().parents[1] / "matchers.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_quick_benchmark_runs_and_writes_results(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--seed", "7", "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = (tmp_path / "matchers.md").read_text()
    assert (tmp_path / "matchers.png").stat().st_size > 0
    for heading in ("## Seed latency", "## Seed throughput", "## Realistic workload", "## Memory"):
        assert heading in report
    names = {"NaiveMatcher": "naive", "InvertedBitmapMatcher": "inverted bitmap", "TrieMatcher": "trie"}
    names["OptimizedInvertedBitmapMatcher"] = "optimized inverted bitmap"
    for cls in CLASSIC_MATCHERS:
        assert f"| {names[cls]} |" in report, f"no row for {cls}"
    assert "memory probe" not in report, "a memory probe failed"
    assert "seed latency" in done.stderr  # progress lines go to stderr

"""Smoke tests of ``bench/jvm_start.py``: it documents its flags, takes medians and tells overlapping runs apart.

Its real run (fresh Spark JVMs, minutes) is the benchmark itself (``make bench-jvm-start``), not a test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.timeout(60)
def test_help_lists_the_flags() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "jvm_start.py"), "--help"], capture_output=True, text=True, check=False, timeout=50
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for flag in ("--runs", "--output", "--conf", "--set"):
        assert flag in done.stdout, f"{flag} missing from --help"


def test_medians_per_variant_and_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import jvm_start

    def run(seconds: float) -> dict[str, float]:
        return {stage: seconds + index for index, stage in enumerate(jvm_start.STAGES)}

    runs = {"without": [run(10), run(30), run(20)], "with": [run(5), run(1), run(9)]}
    medians = jvm_start.summarize(runs)
    assert medians["without"] == {"start": 20, "first write": 21, "merge": 22, "total": 23}
    assert medians["with"] == {"start": 5, "first write": 6, "merge": 7, "total": 8}
    assert [stage for stage in jvm_start.STAGES if jvm_start._overlap(runs, stage)] == []
    runs["with"].append(run(25))
    assert [stage for stage in jvm_start.STAGES if jvm_start._overlap(runs, stage)] == list(jvm_start.STAGES)

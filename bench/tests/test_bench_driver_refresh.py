"""``bench/driver_refresh.py``: its flags, its report of a result, and a tiny run end to end (it starts Spark).

No timing is asserted: the run itself checks that the published snapshot equals one built independently
from the table (the report's "equals the table" row), and these tests check that it says so.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import driver_refresh
import pytest
from harness import RunRecord

BENCH = Path(__file__).resolve().parents[1] / "driver_refresh.py"


def result(baseline: list[float], during: list[float]) -> driver_refresh.RefreshResult:
    refresh = {"mode": "changes", "changed_rows": 200, "subscriptions": 2_000, "serialized_bytes": 40_000}
    return driver_refresh.RefreshResult(
        rows=2_000,
        changes=200,
        keys_per_batch=2_000,
        commit_to_published_s=0.5,
        worker_load_s=0.01,
        job_s=3.0,
        initial_load_s=1.0,
        refresh=refresh,
        thread_nice=10,
        baseline=baseline,
        during=during,
        verified=True,
    )


def test_the_report_judges_the_p99_target_and_writes_its_chart(tmp_path: Path) -> None:
    record = RunRecord("python bench/driver_refresh.py", datetime.datetime.now(datetime.UTC), (0.1, 0.2, 0.3))
    within = driver_refresh.report(result([0.2] * 10, [0.25] * 10), record)
    assert within.startswith("# The driver refresh under load\n\n`python bench/driver_refresh.py` on ")
    target = "| issue 9: router per-batch p99 during a 200-change refresh of a 2,000-row table"
    target += " | ≤ 1.5x the p99 without |"
    assert f"{target} 1.25x | pass |" in within
    routable = "| issue 59: a 200-change publish of a 2,000-row table routable on a worker | ≤ 1 s after the commit |"
    assert f"{routable} 0.51 s | pass |" in within
    assert "| published snapshot equals the table (independent build: pairs and lookups) | yes |" in within
    over = driver_refresh.report(result([0.2] * 10, [0.4] * 10), record)
    assert "| 2.00x | fail |" in over
    assert "| n/a | n/a |" in driver_refresh.report(result([0.2] * 10, []), record)
    driver_refresh.chart(result([0.2] * 10, [0.25] * 10), tmp_path / "driver_refresh.png")
    assert (tmp_path / "driver_refresh.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_tiny_run_publishes_and_reports(tmp_path: Path) -> None:
    flags = ["--rows", "2000", "--changes", "200", "--keys", "2000", "--baseline-batches", "4"]
    flags += ["--warmup-batches", "1", "--dir", str(tmp_path / "refresh"), "--results-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, str(BENCH), *flags], capture_output=True, text=True, check=False, timeout=560
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "driver_refresh.md").read_text(encoding="utf-8")
    assert done.stdout.strip() == report.strip()
    assert "| published snapshot equals the table (independent build: pairs and lookups) | yes |" in report
    target = [line for line in report.splitlines() if line.startswith("| issue 9: router per-batch p99")]
    assert len(target) == 1 and target[0].rstrip(" |").endswith(("pass", "fail")), target
    assert (tmp_path / "driver_refresh.png").stat().st_size > 0

"""Smoke tests of ``bench/jvm_start.py``: it documents its flags, takes medians, tells overlapping runs apart
and reports the ratios between its variants.

Its real run (fresh Spark JVMs, minutes) is the benchmark itself (``make bench-jvm-start``), not a test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _runs(stages: tuple[str, ...]) -> dict[str, list[dict[str, float]]]:
    """Synthetic runs, each stage ``index`` seconds above the run's first: the archive's clearly below no archive's
    in every stage (medians 20 and 10 s at the start), quick JIT's (median 8 s) overlapping the archive's."""

    def run(seconds: float) -> dict[str, float]:
        return {stage: seconds + index for index, stage in enumerate(stages)}

    return {
        "no archive": [run(18), run(20), run(30)],
        "archive": [run(10), run(4), run(12)],
        "archive + quick JIT": [run(8), run(11), run(3)],
    }


def _table(text: str, first_column: str) -> dict[str, dict[str, str]]:
    """The Markdown table of ``text`` whose header starts with ``first_column``: its rows by their first cell."""

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip().strip("|").split("|")]

    lines = text.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"| {first_column} |")))
    header = cells(lines[start])
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:  # after the header and its separator
        if not line.startswith("|"):
            break
        row = dict(zip(header, cells(line), strict=True))
        rows[row[first_column]] = row
    return rows


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

    medians = jvm_start.summarize(_runs(jvm_start.STAGES))
    assert jvm_start.STAGES == ("start", "first write", "merge", "total", "JVM CPU")
    assert medians["no archive"] == {"start": 20, "first write": 21, "merge": 22, "total": 23, "JVM CPU": 24}
    assert medians["archive"] == {"start": 10, "first write": 11, "merge": 12, "total": 13, "JVM CPU": 14}
    assert medians["archive + quick JIT"] == {"start": 8, "first write": 9, "merge": 10, "total": 11, "JVM CPU": 12}


def test_overlap_compares_the_two_variants_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import jvm_start

    runs = _runs(jvm_start.STAGES)
    for stage in jvm_start.STAGES:
        assert not jvm_start._overlap(runs, stage, "archive", "no archive"), stage
        assert not jvm_start._overlap(runs, stage, "no archive", "archive"), stage
        assert jvm_start._overlap(runs, stage, "archive + quick JIT", "archive"), stage
        assert jvm_start._overlap(runs, stage, "archive", "archive + quick JIT"), stage
    # One slow archive run reaching into the no-archive runs' range: no clear difference any more.
    runs["archive"].append({stage: 19.0 + index for index, stage in enumerate(jvm_start.STAGES)})
    assert all(jvm_start._overlap(runs, stage, "archive", "no archive") for stage in jvm_start.STAGES)


def test_report_has_a_ratio_column_per_pair(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import jvm_start

    monkeypatch.setattr(jvm_start, "_java_version", lambda: "openjdk version 17")  # no JVM started for a test
    archive = tmp_path / "spark-0123456789abcdef.jsa"
    archive.write_bytes(b"\0" * 2_000_000)
    runs = _runs(jvm_start.STAGES)
    text = jvm_start.report(
        runs,
        jvm_start.summarize(runs),
        archive=archive,
        loads=[0.5, 2.5],
        load_before=(0.25, 0.5, 0.5),
        load_after=(2.0, 1.0, 0.5),
        command="python bench/jvm_start.py",
    )
    assert text.startswith("# Fresh Spark driver JVMs: the class-data archive and quick JIT\n")
    medians = _table(text, "stage")
    assert list(medians) == list(jvm_start.STAGES)
    assert medians["start"] == {
        "stage": "start",
        "no archive s": "20.0",
        "archive s": "10.0",
        "archive + quick JIT s": "8.0",
        "archive / no archive": "0.50x",  # 10 / 20
        "quick / archive": "0.80x",  # 8 / 10
    }
    assert medians["JVM CPU"]["archive / no archive"] == "0.58x"  # 14 / 24
    assert medians["JVM CPU"]["quick / archive"] == "0.86x"  # 12 / 14
    assert (
        "*archive* against *no archive*: none; *archive + quick JIT* against *archive*: "
        "start, first write, merge, total, JVM CPU." in text
    )
    each = _table(text, "variant")
    assert each["archive + quick JIT"]["start"] == "8.0 / 11.0 / 3.0"
    assert "spark-0123456789abcdef.jsa` (2 MB)" in text

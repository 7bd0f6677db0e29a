"""Smoke tests: ``bench/subscriptions.py`` runs end to end at tiny sizes and writes its report and chart.

No timing is asserted (timings belong to the benchmark's own output): these
only guard the benchmark against rot. The benchmark itself checks the pair
count of every loaded trie and the frozen matcher's lookups against
``TrieMatcher``, and exits non-zero on a disagreement, so a passing run also
means every load really held its n pairs.

Every test here runs the benchmark and is marked ``slow`` (``make test-fast`` skips them; its ``--help`` is
``test_bench_help.py``'s). The Rust half (the seed's multithreaded workloads, ``cargo run --bin
cstrie_workloads``, in the dev profile that ``cargo test`` has built) may have to compile the crate
first, so it is its own test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harness import section_rows as section

BENCH = Path(__file__).resolve().parents[1] / "subscriptions.py"
SIZES = (200, 400)
SHAPES = ("wide node", "hot pattern", "realistic")


def run(tmp_path: Path, *flags: str, timeout: float) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--seed", "7", "--out-dir", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "subscriptions.png").stat().st_size > 0
    report = (tmp_path / "subscriptions.md").read_text()
    assert done.stdout.strip() == report.strip()  # the same markdown on stdout
    return report, done.stderr


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_tiny_run_writes_every_loading_section(tmp_path: Path) -> None:
    sizes = ",".join(str(n) for n in SIZES)
    report, stderr = run(
        tmp_path, "--sizes", sizes, "--repeats", "1", "--load-repeats", "2", "--skip", "rust", timeout=170
    )
    assert "load average (1/5/15 min)" in report
    expected = {(shape, f"{n:,}") for shape in SHAPES for n in SIZES}

    single = section(report, "Single subscribes from Python")
    assert {(row[0].split(" (")[0], row[1]) for row in single} == expected
    for row in single:
        assert re.fullmatch(r"[\d,.]+ \(wall [\d,.]+\)", row[3]), row  # CSTrieMatcher: complete, a number
        assert re.fullmatch(r"[\d,.]+ \(wall [\d,.]+\)", row[4]), row  # TrieMatcher
    bulk = section(report, "Bulk subscribes (subscribe_many from Arrow)")
    assert {(row[0].split(" (")[0], row[1]) for row in bulk} == expected
    freeze = section(report, "Freeze and serialize")
    assert {(row[0].split(" (")[0], row[1]) for row in freeze} == expected
    for row in freeze:
        assert float(row[7]) > 0, row  # bytes per subscription
        assert int(row[6].replace(",", "")) > 0, row

    # The driver refresh is bench/driver_refresh.py's, and the Rust section was skipped.
    assert "## Driver refresh" not in report
    assert "## Seed multithreaded workloads" not in report
    targets = section(report, "Targets")
    # Per shape: 10k→1M scaling, single vs TrieMatcher, bulk vs TrieMatcher, freeze vs serialize;
    # then the two 90/10 thread-scaling rows.
    assert len(targets) == 4 * len(SHAPES) + 2
    for row in targets:
        assert row[3] in {"pass", "fail", "n/a"} or row[3].startswith("inconclusive"), row
    assert all(row[3] == "n/a" for row in targets[-2:])  # no Rust run
    assert "TrieMatcher subscribe loop" in stderr  # progress lines go to stderr
    # The loads of one (shape, n) take turns, round by round, rather than running kind after kind.
    label = f"wide n={SIZES[0]:,}: "
    # Untimed warm-up rounds (two by default) come first, the same way.
    kinds = ("TrieMatcher subscribe loop", "CSTrieMatcher subscribe loop", "CSTrieMatcher.subscribe_many")
    loads = [line.split(label, 1)[1] for line in stderr.splitlines() if label in line and "round " in line]
    assert loads == [f"{kind} (warm-up round {round_number} of 2)" for round_number in (1, 2) for kind in kinds] + [
        f"{kind} (round {round_number} of 2)" for round_number in (1, 2) for kind in kinds
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")
def test_tiny_run_with_the_rust_workloads(tmp_path: Path) -> None:
    report, _ = run(
        tmp_path,
        "--sizes",
        "100",
        "--shapes",
        "hot",
        "--repeats",
        "1",
        "--rust-warmup-ms",
        "1",
        "--rust-sample-ms",
        "5",
        "--rust-samples",
        "1",
        # `make test` ran `cargo test` first, which built the dev binary; a release build took 75-100 s.
        "--rust-profile",
        "dev",
        timeout=880,
    )
    rows = section(report, "Seed multithreaded workloads (Rust threads)")
    names = {row[0].strip("`") for row in rows}
    # The seed's benchmark names, and the mixed layout's, for 1, 2 and 4 threads.
    assert names == {
        f"BenchmarkMultithreaded{threads}Thread{mix}{suffix}CSTrie"
        for threads in (1, 2, 4)
        for mix in ("5050", "9010")
        for suffix in ("", "Mixed")
    }
    for row in rows:
        threads = int(row[3])
        operations = int(row[7].replace(",", ""))
        layout, mix = row[1], row[2]
        if layout == "seed":
            assert operations == 1000 * threads, row
        else:
            assert operations == threads * 1000 * (2 if mix == "50/50" else 10), row
        assert float(row[5].replace(",", "")) > 0, row  # ns per operation
    targets = {row[0]: row for row in section(report, "Targets")}
    speedups = [row for name, row in targets.items() if "ops/s at 2 threads vs 1" in name]
    assert len(speedups) == 2 and all(row[3] in {"pass", "fail"} for row in speedups)

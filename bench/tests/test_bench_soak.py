"""``bench/soak.py`` without a broker or Spark: its command line, what a sample reads, and the criteria.

The soak itself is an hour long: ``make soak`` runs it (bench/results/soak.md).
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1]


@pytest.fixture
def soak(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import soak

    return soak


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "soak.py"), *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_bad_flags_are_exit_2_in_one_line() -> None:
    done = run_script("--minutes", "0")
    assert done.returncode == 2
    assert "--minutes: must be above 0, got 0" in done.stderr
    done = run_script("--calibration-messages", "10")
    assert done.returncode == 2
    assert "--calibration-messages must be at least 10,000" in done.stderr


def test_processes_of_the_routers_group_are_told_apart(soak: ModuleType) -> None:
    assert soak.process_kind(b"/usr/bin/python3\0-m\0jobs.route\0--set\0x=1\0") == soak.KINDS[0]
    assert soak.process_kind(b"/usr/lib/jvm/java-17/bin/java\0-cp\0...\0") == soak.KINDS[1]
    assert soak.process_kind(b"/repo/.venv/bin/python\0-m\0pyspark.daemon\0") == soak.KINDS[2]
    assert soak.process_kind(b"/bin/sh\0-c\0true\0") is None


def test_own_process_reads_rss_and_open_files(soak: ModuleType) -> None:
    import os

    resident, files = soak.rss_and_files(os.getpid())
    assert resident > 1_000_000
    assert files >= 3  # stdin, stdout, stderr at least
    assert soak.rss_and_files(2**22 + 7) == (0, 0)  # no such pid: gone, not an error
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)  # another group, as PySpark's daemon
    try:
        assert soak.process_tree(os.getpid())[0] == os.getpid()
        assert child.pid in soak.process_tree(os.getpid())
        assert os.getpid() not in soak.process_tree(child.pid)
    finally:
        child.kill()
        child.wait()


def test_batch_durations_come_from_the_routers_metrics_lines(soak: ModuleType) -> None:
    lines = [
        b"26/12/03 INFO metrics: "
        + json.dumps({"event": "router_batch", "duration_ms": {"triggerExecution": 812}}, sort_keys=True).encode(),
        b"26/12/03 INFO something else entirely",
        b"x " + json.dumps({"event": "router_batch", "duration_ms": {}}).encode(),  # no figure: skipped
    ]
    assert soak.batch_durations_ms(lines) == [812.0]


def test_p99_is_the_nearest_rank(soak: ModuleType) -> None:
    assert soak.p99([]) is None
    assert soak.p99([5.0]) == 5.0
    assert soak.p99([float(v) for v in range(1, 101)]) == 99.0
    assert soak.p99([float(v) for v in range(1, 201)]) == 198.0


def test_the_key_pool_holds_dead_letters_and_hits(soak: ModuleType) -> None:
    from workloads import realistic_pattern, vocabulary

    rng = random.Random(1)
    vocab = vocabulary(rng, 50)
    patterns = [realistic_pattern(rng, vocab) for _ in range(20)]
    keys = soak.message_keys(rng, vocab, patterns, 3000)
    assert keys.count(None) == 3
    assert sum(key is not None and len(key) > 255 for key in keys) == 3
    assert all(key is None or len(key) > 255 or key.count(b".") >= 4 for key in keys)


def test_the_producers_partition_counts_are_round_robin(soak: ModuleType) -> None:
    producer = soak.SteadyProducer.__new__(soak.SteadyProducer)
    for sent, expected in [(0, {0: 0, 1: 0}), (1, {0: 1, 1: 0}), (7, {0: 4, 1: 3}), (8, {0: 4, 1: 4})]:
        producer.sent = sent
        assert producer.per_partition() == expected


def test_snapshot_versions_count_distinct_versions(soak: ModuleType, tmp_path: Path) -> None:
    table = tmp_path / "_snapshots" / "table-id"
    table.mkdir(parents=True)
    for version, digit in [(3, "a"), (3, "b"), (4, "c")]:
        (table / f"{version}-{digit * 64}.frozen").write_bytes(b"x" * 10)
    (table / ".4-tmp.tmp").write_bytes(b"partial")
    assert soak.snapshot_versions(tmp_path / "_snapshots") == (2, 30)


def _settings(retain: int = 100, keep: int = 3) -> object:
    @dataclasses.dataclass
    class Router:
        retain_batches: int
        snapshot_files_keep: int

    @dataclasses.dataclass
    class Settings:
        router: Router

    return Settings(Router(retain, keep))


def _samples(soak: ModuleType, minutes: float, **changes: object) -> list[Any]:
    """A sample a minute; ``changes`` maps a field to a function of the minute."""
    samples = []
    for minute in range(1, int(minutes) + 1):
        fields: dict[str, object] = {
            "at_s": minute * 60.0,
            "rss": dict.fromkeys(soak.KINDS, 500 * 2**20),
            "open_files": 300,
            "ledger_entries": 150,
            "ledger_bytes": 10_000,
            "offsets_entries": 101,
            "commits_entries": 100,
            "checkpoint_bytes": 50_000,
            "snapshot_versions": 3,
            "snapshot_bytes": 2_000_000,
            "metrics_bytes": minute * 1000,
            "lag": 1000,
            "batches_ms": [1000.0] * 12,
            "checked_messages": 1_000_000,
        }
        for name, value in changes.items():
            fields[name] = value(minute)  # type: ignore[operator]
        samples.append(soak.Sample(**fields))
    return samples


def _failed(soak: ModuleType, samples: list[object], problems: list[str] = ()) -> list[str]:  # type: ignore[assignment]
    plan = soak.SoakPlan(seed=1, minutes=60)
    return [v.name for v in soak.verdicts(samples, plan, _settings(), list(problems)) if v.passed is False]


def test_a_steady_hour_meets_every_criterion(soak: ModuleType) -> None:
    assert _failed(soak, _samples(soak, 60)) == []


def test_rss_growing_over_the_hour_fails_its_kind(soak: ModuleType) -> None:
    growing = _samples(soak, 60, rss=lambda m: {**dict.fromkeys(soak.KINDS, 500 * 2**20), soak.KINDS[1]: m * 2**24})
    assert _failed(soak, growing) == [f"RSS flat: {soak.KINDS[1]}"]
    # 8% higher at the end is within 10%
    drift = _samples(soak, 60, rss=lambda m: dict.fromkeys(soak.KINDS, (540 if m > 45 else 500) * 2**20))
    assert _failed(soak, drift) == []


def test_the_refresh_jobs_rss_is_reported_not_judged(soak: ModuleType) -> None:
    growing = _samples(soak, 60, rss=lambda m: {**dict.fromkeys(soak.KINDS, 500 * 2**20), soak.KINDS[3]: m * 2**24})
    assert _failed(soak, growing) == []
    (reported,) = [v for v in soak.verdicts(growing, soak.SoakPlan(seed=1), _settings(), []) if v.passed is None]
    assert soak.KINDS[3] in reported.name
    assert reported.figure.endswith("= 2.39")  # minutes 45 to 60 against 15 to 29: 52.5 / 22


def test_a_router_sampled_just_after_its_restart_is_left_out_of_its_rss_means(soak: ModuleType) -> None:
    samples = _samples(soak, 60)
    for minute in (47, 50, 53):  # samples just after a kill: the process seconds old, its RSS nearly nothing
        samples[minute - 1].rss = {**samples[minute - 1].rss, soak.KINDS[1]: 2**20}
    assert _failed(soak, samples) == [f"RSS flat: {soak.KINDS[1]}"]
    for minute in (47, 50, 53):
        samples[minute - 1].router_uptime_s = 5.0
    assert _failed(soak, samples) == []


def test_a_file_set_over_its_retention_fails(soak: ModuleType) -> None:
    assert _failed(soak, _samples(soak, 60, ledger_entries=lambda m: 100 + m * 2)) == [
        "ledger entries within retention"
    ]
    assert _failed(soak, _samples(soak, 60, snapshot_versions=lambda m: 6)) == [
        "snapshot file versions within retention"
    ]
    assert _failed(soak, _samples(soak, 60, offsets_entries=lambda m: 103)) == ["offset log entries within retention"]


def test_a_slower_last_quarter_fails_the_p99_criterion(soak: ModuleType) -> None:
    slower = _samples(soak, 60, batches_ms=lambda m: [1000.0] * 11 + [1600.0 if m > 45 else 1000.0])
    assert _failed(soak, slower) == ["batch p99: last quarter within 1.5x the first"]
    within = _samples(soak, 60, batches_ms=lambda m: [1000.0] * 11 + [1400.0 if m > 45 else 1000.0])
    assert _failed(soak, within) == []


def test_a_conservation_problem_fails_the_run(soak: ModuleType) -> None:
    assert _failed(soak, _samples(soak, 60), ["3 message(s) of {0: 0}..{0: 10} in no output"]) == [
        "conservation exact at every check, no duplicate delivery id"
    ]


def test_a_shorter_run_compares_its_last_quarter_with_its_second(soak: ModuleType) -> None:
    assert soak.rss_windows(60) == ((900.0, 1800.0), (2700.0, 3601.0))
    assert soak.rss_windows(8) == ((120.0, 240.0), (360.0, 481.0))


def test_cpu_seconds_of_a_process_grow_as_it_works(soak: ModuleType) -> None:
    import os
    import time

    before = soak.cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert soak.cpu_seconds(os.getpid()) >= before + 0.2
    assert soak.cpu_seconds(2**22 + 7) == 0.0  # gone: no error


def test_the_quarters_table_shows_where_the_time_and_the_cores_went(soak: ModuleType) -> None:
    samples = _samples(
        soak,
        60,
        batches_ms=lambda m: [4000.0] * 10 if m <= 45 else [8000.0] * 5,
        cores=lambda m: {"router driver (JVM)": 1.0, "refresh job": 0.25 if m <= 30 else 0.5},
    )
    result = soak.SoakResult(
        soak.SoakPlan(seed=1), samples, [], [], [], 30_000.0, 15_000.0, 1, {}, ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    )
    rows = [line.split(" | ") for line in result.quarters_table().splitlines()[2:]]
    assert [row[0].strip("| ") for row in rows] == ["1", "2", "3", "4"]
    assert rows[0][1] == "150" and rows[3][1] == "75"  # minutes 1-15: 15 samples of 10 batches; 46-60: 15 of 5
    assert rows[0][2] == "4,000 / 4,000 / 4,000" and rows[3][2] == "8,000 / 8,000 / 8,000"
    assert (rows[1][4], rows[2][4]) == ("0.25", "0.50")  # the refresh job's cores (its column sorts first)
    assert rows[0][5].strip("| ") == "1.00"

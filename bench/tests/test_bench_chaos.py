"""``bench/chaos.py`` without a broker or Spark: its command line, its fault plan and its checkpoint reader.

The harness itself runs in ``tests/integration/test_chaos.py`` (a few kills) and ``make chaos`` (the full run).
"""

from __future__ import annotations

import collections
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "chaos.py"), *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_a_negative_count_is_exit_2() -> None:
    done = run_script("--router-kills", "-1")
    assert done.returncode == 2
    assert "--router-kills: must be 0 or more, got -1" in done.stderr


def test_the_fault_order_holds_each_fault_as_often_as_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    plan = chaos.ChaosPlan(seed=7, router_kills=20, broker_kills=3, refresh_kills=2)
    order = plan.fault_order(random.Random(plan.seed))
    assert collections.Counter(order) == {chaos.ROUTER_KILL: 20, chaos.BROKER_KILL: 3, chaos.REFRESH_KILL: 2}
    assert order == plan.fault_order(random.Random(plan.seed))  # the seed repeats it


def test_a_run_drained_in_process_ends_with_its_router_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    for seed in range(20):
        plan = chaos.ChaosPlan(seed=seed, router_kills=1, broker_kills=2, refresh_kills=2, drain_in_process=True)
        order = plan.fault_order(random.Random(seed))
        assert collections.Counter(order) == {chaos.ROUTER_KILL: 1, chaos.BROKER_KILL: 2, chaos.REFRESH_KILL: 2}
        assert order[-1] == chaos.ROUTER_KILL, (seed, order)
    orders = {
        tuple(chaos.ChaosPlan(seed, 1, 2, 2, drain_in_process=True).fault_order(random.Random(seed)))
        for seed in range(20)
    }
    assert len(orders) > 1  # the faults before it still come in a seeded random order


def test_committed_offsets_are_the_last_committed_batchs_end(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Read from a checkpoint laid out as Spark 4 writes it (files copied from a router's checkpoint): batch 2 was
    planned (``offsets/2``) but never committed, so the committed end is batch 1's."""
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    checkpoint = tmp_path / "checkpoint"
    assert chaos.committed_offsets(checkpoint) == {}
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    metadata = '{"batchWatermarkMs":0,"batchTimestampMs":1795521718915,"conf":{"spark.sql.shuffle.partitions":"4"}}'
    for batch, ends in enumerate(['{"0":500,"1":500}', '{"0":1000,"1":1000}', '{"0":1500,"1":1400}']):
        (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{metadata}\n{{"chaos-messages":{ends}}}')
        (checkpoint / "offsets" / f".{batch}.crc").write_bytes(b"\0crc")
    for batch in (0, 1):
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (checkpoint / "commits" / f".{batch}.crc").write_bytes(b"\0crc")
    assert chaos.committed_offsets(checkpoint) == {0: 1000, 1: 1000}


def test_the_report_of_a_failed_run_names_the_run_the_problem_and_every_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    result = chaos.ChaosResult(
        plan=chaos.ChaosPlan(seed=5, router_kills=1, broker_kills=0, refresh_kills=0),
        events=[chaos.Event(3.25, chaos.ROUTER_KILL, "pid 7 | group")],
        counts={"messages sent": "30"},
        problems=["message 3 delivered twice"],
        seconds=61.0,
        load=((0.5, 0.25, 0.125), (2.0, 1.0, 0.5)),
        routed_versions=[1, 2],
    )
    text = result.markdown("python bench/chaos.py --seed 5")
    assert text.startswith("# Chaos run\n\n`python bench/chaos.py --seed 5` on ")
    assert "load average (1/5/15 min) 0.50/0.25/0.12 before, 2.00/1.00/0.50 after. 61 s" in text
    assert "Verdict: **FAIL**.\n- message 3 delivered twice" in text
    assert "| messages sent | 30 |" in text
    assert f"| 3.2 | {chaos.ROUTER_KILL} | pid 7 / group |" in text  # a '|' in a detail cannot split the row


def test_an_aimed_kill_targets_a_batch_past_what_the_checkpoint_planned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    assert chaos.next_batch_id(str(tmp_path / "none")) == 0  # a new checkpoint: batch 0 comes first
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    for name in ("0", "1", "7", ".7.crc", "temp"):
        (offsets / name).write_text("")
    assert chaos.next_batch_id(str(tmp_path / "checkpoint")) == 8
    assert set(chaos.AIMED_POINTS) == {"after_ledger", "after_deliveries", "after_writes"}


def test_the_report_counts_where_each_router_kill_landed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    events = [
        chaos.Event(1.0, chaos.ROUTER_KILL, "run 1, aimed: inside batch 3, at after_ledger; restarted"),
        chaos.Event(2.0, chaos.ROUTER_KILL, "run 2, aimed: inside batch 6, at after_writes; restarted"),
        chaos.Event(3.0, chaos.ROUTER_KILL, "run 3, from outside, after 2 batch(es) of that run; restarted"),
    ]
    result = chaos.ChaosResult(chaos.ChaosPlan(seed=1), events, {}, [], 10.0, ((0, 0, 0), (0, 0, 0)), [])
    assert (result.router_kills_inside(), result.router_kills_inside("after_ledger")) == (2, 1)
    report = result.markdown("python bench/chaos.py")
    assert "| router kills: aimed inside a batch / from outside | 2 / 1 |" in report
    assert "| router kills inside a batch at after_deliveries | 0 |" in report

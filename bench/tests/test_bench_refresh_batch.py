"""``bench/refresh_batch.py`` without Spark: its batches are what it says, and its breakdown adds up.

The benchmark itself needs Spark and Delta for minutes; here its ``--help``, the generated import files
(judged by the refresh job's own reader) and the event-log arithmetic are checked. No timing is asserted.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from routing.settings import load_settings
from routing.subscriptions.events import read_import_file

BENCH = Path(__file__).resolve().parents[1] / "refresh_batch.py"


def load_bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_refresh_batch", BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


def test_a_batch_mixes_new_held_stale_and_malformed_events(tmp_path: Path) -> None:
    bench = load_bench()
    held = [(f"tenant{index}.orders.#", f"seed-{index}") for index in range(50)]
    seeded = set(held)
    path = tmp_path / "batch.jsonl"
    bench.write_batch(path, 3, 100, held, random.Random(1))
    settings = load_settings()
    _, outcomes = read_import_file(path, settings.validator(), max_event_bytes=settings.subscriptions.max_event_bytes)
    assert len(outcomes) == 100
    rejected = collections.Counter(outcome.rejection.reason for outcome in outcomes if outcome.rejection)
    assert sum(rejected.values()) == 2, rejected  # the malformed line and the unknown op
    events = [outcome.event for outcome in outcomes if outcome.event is not None]
    ops = collections.Counter(event.op.value for event in events)
    assert ops["subscribe"] > ops["unsubscribe"] > 0
    # Unsubscribed pairs were held (seeded, or subscribed earlier in the batch) and no longer are; the stale
    # copy is older than any seeded row.
    subscribed = {(event.pattern, event.subscriber) for event in events if event.op.value == "subscribe"}
    unsubscribed = {(event.pattern, event.subscriber) for event in events if event.op.value == "unsubscribe"}
    assert unsubscribed & seeded and unsubscribed <= seeded | subscribed and not unsubscribed & set(held)
    assert min(event.ts_millis for event in events) == 1
    assert json.loads(path.read_text().splitlines()[0])["op"] in ("subscribe", "unsubscribe")


def test_the_breakdown_splits_a_batch_window_into_stages_and_driver_time() -> None:
    bench = load_bench()

    def execution(
        start: int, end: int, *, plan: str = "", details: str = "", root: bool = True, state: bool = False
    ) -> dict[str, Any]:
        return {"start": start, "end": end, "plan": plan, "details": details, "root": root, "state": state}

    arrow = "Dataset.collectAsArrowToPython"
    executions = [
        execution(900, 990, plan="MergeIntoCommand"),  # before the window: not this batch's
        execution(1000, 1200, details=arrow),
        execution(1010, 1100, root=False, state=True),  # inside the collect: counted there and as Delta state
        execution(1300, 1400, details=arrow),
        execution(1400, 1500, details=arrow),
        execution(1600, 2100, plan="Execute MergeIntoCommand (1)"),
        execution(2200, 2500, plan="Execute SaveIntoDataSourceCommand (1)"),
        execution(2550, 2600, plan="Execute DescribeDeltaHistoryCommand (1)"),
    ]
    seconds = bench.breakdown(executions, 1000, 3000)
    assert seconds == pytest.approx(
        {
            "collect events": 0.2,
            "decide: table rows": 0.1,
            "decide: held counts": 0.1,
            "MERGE": 0.5,
            "rejects append": 0.3,
            "other SQL": 0.05,
            "delta state": 0.09,
            "driver": 2.0 - 1.25,
        }
    )

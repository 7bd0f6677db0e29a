"""RunTotals, the run's summary kept batch by batch, against a recount of the last report of each batch."""

from __future__ import annotations

import random
from typing import Any

from routing.router.metrics import TOTALLED, RunTotals

REASONS = ("invalid_key", "payload_too_large", "fanout_exceeded")


def report(rng: random.Random, batch_id: int, version: int) -> dict[str, Any]:
    dead = {reason: rng.randint(1, 5) for reason in REASONS if rng.random() < 0.3}
    return {
        "batch_id": batch_id,
        "snapshot_version": version,
        "input_rows": rng.randint(0, 1000),
        "deliveries": rng.randint(0, 3000),
        "unmatched": rng.randint(0, 100),
        "dead_letters": sum(dead.values()),
        "dead_letters_by_reason": dead,
    }


def recount(reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The oracle: the totals summed afresh over the surviving report of every batch id."""
    dead: dict[str, int] = {}
    versions: list[int] = []
    for row in sorted(reports.values(), key=lambda row: row["order"]):
        for reason, count in row["dead_letters_by_reason"].items():
            dead[reason] = dead.get(reason, 0) + count
        if row["snapshot_version"] not in versions:
            versions.append(row["snapshot_version"])
    return {
        "batches": len(reports),
        **{name: sum(row[name] for row in reports.values()) for name in TOTALLED},
        "dead_letters_by_reason": dead,
        "snapshot_versions": versions,
    }


def test_totals_equal_a_recount_of_each_batchs_last_report() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        totals, version = RunTotals(), 0
        last: dict[int, dict[str, Any]] = {}
        for order in range(rng.randint(1, 60)):
            version += rng.random() < 0.2
            # Mostly new batches; now and then one re-executed (the latest, or one before it).
            batch_id = max(last, default=-1) + 1 if not last or rng.random() < 0.8 else max(last) - rng.randint(0, 1)
            batch_id = max(batch_id, 0)
            row = report(rng, batch_id, version)
            previous = last.get(batch_id)
            totals.add(row, replacing=previous)
            last[batch_id] = {**row, "order": previous["order"] if previous else order}
        expected = recount(last)
        actual = totals.as_dict()
        # A re-executed batch keeps its place among the versions only if another batch used that version first.
        assert {key: value for key, value in actual.items() if key != "snapshot_versions"} == {
            key: value for key, value in expected.items() if key != "snapshot_versions"
        }, seed
        assert sorted(actual["snapshot_versions"]) == sorted(expected["snapshot_versions"]), seed
        assert RunTotals.of(last).as_dict()["batches"] == len(last)


def test_an_empty_run_sums_to_zero() -> None:
    assert RunTotals().as_dict() == {
        "batches": 0,
        "input_rows": 0,
        "deliveries": 0,
        "unmatched": 0,
        "dead_letters": 0,
        "dead_letters_by_reason": {},
        "snapshot_versions": [],
    }

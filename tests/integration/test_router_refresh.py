"""Live refresh: subscription changes reach a running router between micro-batches, without a restart.

The router runs in-process with a processing-time trigger and a one-second
refresh interval. Records are produced, the subscription table is changed
through the refresh job's import path, and more records are produced until a
batch has routed with the new version; then a last round follows. Every
record is checked against the oracle of the version its batch recorded in the
ledger, so the test never depends on when exactly the switch happened, only
that it did, that it stuck, and that the query was the same one throughout.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    Record,
    active_subscriptions,
    apply_subscriptions,
    assert_routed_with_recorded_versions,
    produce,
    router_settings,
)

from routing.reference import ReferenceMatcher
from routing.router.pipeline import Router

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

BEFORE = [("stock.*.msft", "msft-desk"), ("forex.#", "fx"), ("#.ibm", "ibm-watch")]
ADDED = [("stock.#", "equities"), ("", "empty-key")]
REMOVED = [("stock.*.msft", "msft-desk")]
KEYS: list[bytes | None] = [b"stock.nasdaq.msft", b"stock.nyse.ibm", b"forex.eur.usd", b"", b"bond.x", None]


def processed_rows(router: Router) -> int:
    return sum(report.metrics.get("input_rows", 0) for report in list(router.reports.values()))


def wait_until_processed(router: Router, query: Any, rows: int) -> None:
    """Poll until the router has taken ``rows`` records in; a hang guard, not a timing assertion."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while processed_rows(router) < rows:
        assert query.isActive, query.exception()
        assert time.monotonic() < deadline, f"gave up waiting for {rows} processed records"
        time.sleep(0.2)


@pytest.mark.parametrize("deltas", [False, True], ids=["whole snapshots", "deltas over a base"])
def test_new_table_version_is_picked_up_while_running(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path, deltas: bool
) -> None:
    topic = topic_factory(partitions=1)
    job = router_settings(
        settings, tmp_path, [topic], trigger="processing_time", trigger_interval="1 second", refresh_interval_s=1.0
    )
    if deltas:  # even this small table publishes its new versions as deltas, which the executors layer
        job = job.replace(router=dataclasses.replace(job.router, snapshot_deltas_from_pairs=0))
    old_version = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", BEFORE)
    router = Router(spark, job)
    query = router.start()
    query_id = query.id
    records: list[Record] = []
    try:
        records += produce(job, topic, [(key, b"before", []) for key in KEYS * 5])
        wait_until_processed(router, query, len(records))

        new_version = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", ADDED, REMOVED)
        assert new_version > old_version
        # Keep producing until a batch routes with the new version (the next table check picks it up).
        for _ in range(60):
            records += produce(job, topic, [(key, b"during", []) for key in KEYS])
            wait_until_processed(router, query, len(records))
            if any(report.snapshot_version == new_version for report in router.reports.values()):
                break
        switched_at = len(records)
        assert any(report.snapshot_version == new_version for report in router.reports.values())

        # Produced after the switch: routed by the new table.
        records += produce(job, topic, [(key, b"after", []) for key in KEYS * 3])
        wait_until_processed(router, query, len(records))
        assert query.isActive and query.id == query_id  # never restarted
        published = [e for e in router.snapshots.history if e.get("version") == new_version and "mode" in e]
        assert [("base_version" in entry) for entry in published] == [deltas]
    finally:
        query.stop()
        router.close()

    ledger, pinned, expected = assert_routed_with_recorded_versions(spark, job, records)
    assert set(ledger.values()) == {old_version, new_version}
    # Versions only move forward: once a batch used the new table, later batches do too.
    versions_in_order = [ledger[batch] for batch in sorted(ledger)]
    assert versions_in_order == sorted(versions_in_order)
    new_subscriptions = ReferenceMatcher(active_subscriptions(spark, job, new_version)).subscriptions()
    assert sorted(new_subscriptions) == sorted(set(BEFORE + ADDED) - set(REMOVED))
    assert all(pinned[record.coordinates][1] == old_version for record in records[: len(KEYS) * 5])
    assert all(pinned[record.coordinates][1] == new_version for record in records[switched_at:])
    # The switch changed routing for real (the same keys went elsewhere).
    old_targets = {expected[record.coordinates] for record in records[: len(KEYS) * 5]}
    new_targets = {expected[record.coordinates] for record in records[switched_at:]}
    assert old_targets != new_targets

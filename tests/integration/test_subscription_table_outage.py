"""The subscription table unreadable for several refresh intervals: the router keeps routing, then catches up.

A running router (processing-time trigger, one-second refresh) loses its subscription table: the table's
``_delta_log`` is moved away, so every refresh check fails. Records produced meanwhile are routed with the
snapshot published last, and each failed check is logged (``subscription snapshot refresh failed``). Then the
log comes back with a new version committed, and the router publishes it on its own. Every record is checked
against the oracle of the version its batch recorded; the query is the same one throughout.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    Record,
    apply_subscriptions,
    assert_routed_with_recorded_versions,
    produce,
    router_settings,
)

from integration.test_router_refresh import wait_until_processed
from routing.router.pipeline import Router

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

BEFORE = [("stock.#", "equities"), ("forex.#", "fx")]
ADDED = [("#.ibm", "ibm-watch")]
KEYS: list[bytes | None] = [b"stock.nyse.ibm", b"forex.eur.usd", b"bond.ibm"]
#: Failed refresh checks to see before the table comes back (one a second).
FAILED_CHECKS = 3


def failed_refreshes(router: Router) -> int:
    return sum(1 for entry in list(router.snapshots.history) if entry.get("event") == "refresh_failed")


def test_an_unreadable_subscription_table_keeps_the_last_snapshot_and_the_router_catches_up(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = topic_factory(partitions=1)
    job = router_settings(
        settings, tmp_path, [topic], trigger="processing_time", trigger_interval="1 second", refresh_interval_s=1.0
    )
    old_version = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", BEFORE)
    log_dir = Path(job.subscriptions.table_path) / "_delta_log"
    away = log_dir.with_name("_delta_log.away")
    router = Router(spark, job)
    query = router.start()
    query_id = query.id
    records: list[Record] = []
    try:
        records += produce(job, topic, [(key, b"before", []) for key in KEYS * 3])
        wait_until_processed(router, query, len(records))

        with caplog.at_level(logging.ERROR, logger="routing.router.snapshots"):
            shutil.move(log_dir, away)  # the table is gone for the router: every check fails
            deadline = time.monotonic() + WAIT_TIMEOUT_S
            while failed_refreshes(router) < FAILED_CHECKS:
                records += produce(job, topic, [(key, b"during", []) for key in KEYS])
                wait_until_processed(router, query, len(records))
                assert time.monotonic() < deadline, "the refresh checks never failed"
                time.sleep(0.5)
        assert "subscription snapshot refresh failed; batches keep the published version" in caplog.text
        outage_end = len(records)

        shutil.move(away, log_dir)
        new_version = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", ADDED)
        for _ in range(60):  # caught up on its own: a batch routes with the new version
            records += produce(job, topic, [(key, b"after", []) for key in KEYS])
            wait_until_processed(router, query, len(records))
            if any(report.snapshot_version == new_version for report in list(router.reports.values())):
                break
        assert any(report.snapshot_version == new_version for report in router.reports.values())
        assert query.isActive and query.id == query_id  # never restarted
    finally:
        if away.exists() and not log_dir.exists():
            shutil.move(away, log_dir)
        query.stop()
        router.close()

    ledger, pinned, _ = assert_routed_with_recorded_versions(spark, job, records)
    assert set(ledger.values()) == {old_version, new_version}
    # Everything produced before the table came back was routed with the last snapshot published before it went.
    assert all(pinned[record.coordinates][1] == old_version for record in records[:outage_end])

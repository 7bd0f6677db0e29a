"""The ``router.metrics_path`` table: one row per batch, equal to an independent count, written once;
and the run's totals, which cover every batch when older reports and ledger entries are pruned.

The batches are static DataFrames in the Kafka source's shape handed straight to
:meth:`Router.process_batch` (what ``foreachBatch`` does), so no broker is
needed. The oracle judges each record with the :class:`Validator` and matches it
with the regex :class:`ReferenceMatcher` over the subscriptions read back from
the table.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
from router_support import apply_subscriptions, ledger_versions, router_settings

from routing.errors import TopicError
from routing.reference import ReferenceMatcher
from routing.router.columns import SOURCE_DDL
from routing.router.pipeline import Router
from routing.router.tables import DEAD_LETTER_REASONS
from routing.settings import Settings
from routing.subscriptions import read_active

SUBSCRIPTIONS = [("stock.*.msft", "msft"), ("stock.#", "all-stock"), ("forex.usd", "fx"), ("#.eur", "eur")]
KEYS: list[bytes | None] = [
    b"stock.nasdaq.msft",
    b"stock.nyse.ibm",
    b"forex.usd",
    b"forex.eur",
    b"weather.paris",
    None,
    b"\xff.bad",
    b"k" * 300,
    b"a..b",
]


def records(seed: int, count: int, topic: str = "metrics") -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    moment = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
    rows: list[tuple[Any, ...]] = []
    for offset in range(count):
        payload = b"x" * (5000 if rng.random() < 0.05 else 16)
        rows.append((rng.choice(KEYS), payload, topic, seed, offset, moment, []))
    return rows


def batch_frame(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    """A micro-batch as ``foreachBatch`` hands it over (one partition, like a one-partition topic)."""
    return spark.createDataFrame(rows, SOURCE_DDL).coalesce(1)


def expected_counts(rows: list[tuple[Any, ...]], settings: Settings, pairs: list[tuple[str, str]]) -> dict[str, int]:
    validator = settings.validator()
    oracle = ReferenceMatcher(pairs)
    counts: collections.Counter[str] = collections.Counter()
    for key, payload, *_ in rows:
        counts["input_rows"] += 1
        try:
            text = validator.decode_key(key)
            validator.check_payload(payload)
        except TopicError as error:
            counts["dead_letters"] += 1
            counts[f"dead_{error.reason}"] += 1
            continue
        receivers = oracle.lookup(text)
        counts["deliveries"] += len(receivers)
        counts["unmatched"] += not receivers
    return dict(counts)


@pytest.mark.slow
def test_metrics_rows_match_an_independent_count_once_per_batch(spark: Any, settings: Settings, tmp_path: Path) -> None:
    # Two batches retained: batch 2 prunes batch 0's report and ledger entry; the run's totals keep it.
    local = router_settings(
        settings, tmp_path, ["metrics"], metrics_path=str(tmp_path / "router_metrics"), retain_batches=2
    )
    local = local.replace(limits=dataclasses.replace(local.limits, max_payload_bytes=4096))
    version = apply_subscriptions(spark, local, tmp_path / "subs.json", subscribe=SUBSCRIPTIONS)
    pairs = read_active(spark, local.subscriptions.table_path)
    router = Router(spark, local)
    router.snapshots.maybe_refresh(force=True)
    router.bind_query("metrics-test-query")
    batches = {0: records(0, 300), 1: records(1, 200), 2: records(2, 40), 3: records(3, 30)}
    try:
        for batch_id in (0, 1):
            router.process_batch(batch_frame(spark, batches[batch_id]), batch_id)
        router.process_batch(batch_frame(spark, batches[0]), 0)  # Spark re-executing batch 0
        assert router.reports[0].replayed is True  # the in-memory report is the re-execution's
        for batch_id in (2, 3):
            router.process_batch(batch_frame(spark, batches[batch_id]), batch_id)
    finally:
        router.close(progress_wait_s=0)

    assert sorted(router.reports) == [1, 2, 3]
    # Batch 0's re-execution appended through the public writer, so batch 2 waited for the Delta warm it left.
    # Batch 2's first attempt appended every table (deliveries, dead letters, unmatched, metrics) directly
    # (routing.appends.first_append), so it left no warm for batch 3.
    assert {"write_dead_letters", "write_unmatched"} <= set(router.reports[2].stages)
    assert "warm_wait" in router.reports[2].stages and "warm_wait" not in router.reports[3].stages
    assert ledger_versions(spark, local) == [(1, version), (2, version), (3, version)]
    summary = router.run_summary()
    every = [expected_counts(rows, local, pairs) for rows in batches.values()]
    assert summary["batches"] == 4 and summary["snapshot_versions"] == [version]
    for name in ("input_rows", "deliveries", "unmatched", "dead_letters"):
        assert summary[name] == sum(counts.get(name, 0) for counts in every), name
    assert summary["dead_letters_by_reason"] == {
        reason: total
        for reason in DEAD_LETTER_REASONS
        if (total := sum(counts.get(f"dead_{reason}", 0) for counts in every))
    }

    table = spark.read.format("delta").load(local.router.metrics_path)
    written = {row["batch_id"]: row.asDict() for row in table.collect()}
    assert table.count() == 4 and sorted(written) == [0, 1, 2, 3], "one row per batch id, the replay wrote nothing"
    for batch_id, batch_rows in batches.items():
        row = written[batch_id]
        expected = expected_counts(batch_rows, local, pairs)
        assert row["app_id"] == local.router.app_id
        assert row["snapshot_version"] == version and row["replayed_version"] is False
        for name in ("input_rows", "deliveries", "unmatched", "dead_letters"):
            assert row[name] == expected.get(name, 0), name
        for reason in DEAD_LETTER_REASONS:
            assert row[f"dead_{reason}"] == expected.get(f"dead_{reason}", 0), reason
        assert 1 <= row["distinct_keys_per_arrow_batch_sum"] <= row["input_rows"]
        assert row["match_ms"] >= 0 and row["batch_seconds"] > 0 and row["recorded_at"] is not None
        # The snapshot the batch routed with, and where its time went.
        assert row["subscriptions"] == len(pairs) and row["serialized_bytes"] > 0
        assert {"ledger", "write_deliveries"} <= set(row["stage_seconds"])
    # The same numbers as the in-memory report of the first execution and the deliveries table.
    deliveries = spark.read.format("delta").load(local.router.deliveries_path)
    for batch_id in batches:
        assert written[batch_id]["deliveries"] == deliveries.where(f"batch_id = {batch_id}").count()


@pytest.mark.parametrize(("value", "expected"), [("", ""), ("var/delta/router_metrics", "RESOLVED")])
def test_metrics_path_setting_is_optional(value: str, expected: str) -> None:
    from routing.settings import REPO_ROOT, load_settings

    router = load_settings(overrides={"router": {"metrics_path": value}}).router
    assert router.metrics_path == (str(REPO_ROOT / value) if expected == "RESOLVED" else "")
    assert load_settings().router.metrics_path == "", "off by default"

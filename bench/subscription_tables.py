"""Synthetic subscription tables for the benchmarks that publish (``driver_refresh.py``, ``large_tables.py``):
a table of one pattern family written in one commit, the refresh job's changes to it, and the run from the
job's commit to the driver's publish."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.router.snapshots import Published, SnapshotBroadcasts
    from routing.settings import Settings
    from routing.subscriptions.refresh import RunSummary

#: Every table's rows are older than every change event, so the refresh job's changes always win.
EPOCH_SQL = "timestamp_millis(0)"


@dataclass(frozen=True)
class Shape:
    """A pattern family: SQL over ``id`` for the table's columns, and ``pair_of(i)``, the same
    ``(subscriber, pattern)`` in Python (for the change events and the oracles' keys)."""

    subscriber_sql: str
    pattern_sql: str
    has_wildcard_sql: str
    pair_of: Callable[[int], tuple[str, str]]


def build_table(spark: SparkSession, path: str, shape: Shape, rows: int) -> int:
    """The subscription table at ``path`` with ``rows`` active pairs of ``shape`` (change feed on), written in
    one commit; its version."""
    from routing.subscriptions.table import create_table_if_absent, latest_version

    create_table_if_absent(spark, path)
    frame = spark.range(rows).selectExpr(
        f"{shape.subscriber_sql} AS subscriber_id",
        f"{shape.pattern_sql} AS pattern",
        "true AS active",
        f"{EPOCH_SQL} AS updated_at",
        "concat('bench:', id) AS change_id",
        "'import' AS source",
        f"{EPOCH_SQL} AS applied_at",
        "CAST(4 AS INT) AS pattern_word_count",
        f"{shape.has_wildcard_sql} AS has_wildcard",
    )
    frame.write.format("delta").mode("append").save(path)
    return latest_version(spark, path)


#: Changes of the warm-up import before the measured one (:func:`warm_up`).
WARM_UP_CHANGES = 200


def changes_file(
    path: Path, shape: Shape, rows: int, changes: int, *, first_new: int | None = None, skew: int = 0
) -> None:
    """``changes`` events for the refresh job: half unsubscribes of pairs spread over the table (``skew`` shifts
    which), half subscribes of new pairs (ids from ``first_new``, default ``rows``, up)."""
    now = int(time.time() * 1000)
    removed = changes // 2
    first_new = rows if first_new is None else first_new
    events = [("unsubscribe", (j * 7919 + skew) % rows) for j in range(removed)]
    events += [("subscribe", first_new + j) for j in range(changes - removed)]
    lines = []
    for op, i in events:
        subscriber, pattern = shape.pair_of(i)
        lines.append(json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": now}) + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def bench_settings(
    root: Path, spark_conf: dict[str, str] | None = None, *, max_subscriptions: int | None = None
) -> Settings:
    """The repository's settings with every table, checkpoint and snapshot file under ``root``; a table may
    hold ``max_subscriptions`` (``limits.max_subscriptions_per_table``, as a deployer of a larger table sets it)."""
    from routing.settings import load_settings

    limits = {} if max_subscriptions is None else {"limits": {"max_subscriptions_per_table": max_subscriptions}}
    return load_settings(
        overrides={
            **limits,
            "spark": {
                "conf": {
                    "spark.sql.warehouse.dir": str(root / "warehouse"),
                    "spark.local.dir": str(root / "spark-local"),
                    **(spark_conf or {}),
                }
            },
            "subscriptions": {
                "table_path": str(root / "subscriptions"),
                "rejects_path": str(root / "subscription_rejects"),
                "checkpoint_path": str(root / "refresh_checkpoint"),
            },
            "router": {"snapshot_files_path": str(root / "snapshot_files")},
        }
    )


@dataclass(frozen=True)
class ChangePublished:
    """The refresh job's import of a changes file and the driver's publish of the version it committed."""

    summary: RunSummary
    job_s: float
    commit_to_published_s: float
    published: Published
    #: The refresh thread's history entry for the version (mode, changed rows, apply, freeze, total).
    entry: dict[str, Any]
    #: ``time.perf_counter()`` at the commit and at the publish.
    committed_at: float
    published_at: float


def import_and_publish(
    spark: SparkSession, settings: Settings, snapshots: SnapshotBroadcasts, changes: Path, wait_s: float
) -> ChangePublished:
    """Run the refresh job's import of ``changes``, nudge the driver's refresh thread at its commit (as the
    periodic check would, up to ``router.refresh_interval_s`` later) and wait for the publish; a one-line
    error if the job rejected any change."""
    from routing.subscriptions.refresh import import_files

    started = time.perf_counter()
    summary = import_files(spark, settings, [str(changes)])
    committed = time.perf_counter()
    snapshots.request_refresh()
    published = snapshots.wait_published(summary.table_version, wait_s)
    published_at = time.perf_counter()
    if summary.rejected:
        raise RuntimeError(f"the refresh job rejected changes: {summary.rejected}")
    entry = next(entry for entry in reversed(snapshots.history) if entry.get("version") == summary.table_version)
    return ChangePublished(
        summary, committed - started, published_at - committed, published, entry, committed, published_at
    )


def warm_up(
    spark: SparkSession, settings: Settings, snapshots: SnapshotBroadcasts, shape: Shape, rows: int, work: Path
) -> ChangePublished:
    """One small import and publish before the measured one, as a deployment in its steady state has had: a
    router's first change-feed read pays the JVM's warm-up (0.56 s against 0.23 s for the next ones, at 1M rows
    on this machine). Its pairs (:data:`WARM_UP_CHANGES`) are others than the measured change's."""
    path = work / "warm-up-changes.jsonl"
    changes_file(path, shape, rows, WARM_UP_CHANGES, first_new=rows + 10 * rows, skew=1)
    return import_and_publish(spark, settings, snapshots, path, 3600.0)

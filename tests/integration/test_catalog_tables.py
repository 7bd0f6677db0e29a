"""Table settings that name catalog tables: the same routing as with paths, idempotent, shared across processes.

The catalog is the local one, Spark's ``spark_catalog`` without Hive (kept in memory, per process), with
tables in a named database of the test session's warehouse (``spark.sql.warehouse.dir``). The oracle is the
regex matcher's outcomes (``router_support.expected_outcomes``), which every path-based test is held to
too, with every id the SHA-256 of its coordinates and every record in exactly one row of one table, written
by the batch it came in. (No run with paths beside it: held to the same oracle and the same id function, it
could only agree; it doubled the test's time on a machine whose two cores the test workers share.)
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    Record,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    job_flags,
    produce,
    read_routed,
    router_settings,
    run_available_now,
    subscription_event,
)

from integration.test_router_metrics import KEYS, SUBSCRIPTIONS, batch_frame, records
from routing import delta_tables
from routing.router.pipeline import Router
from routing.router.snapshot_files import DEFAULT_DIRECTORY
from routing.settings import REPO_ROOT, Settings
from routing.subscriptions import read_active
from routing.tail import tail

pytestmark = pytest.mark.slow


def named_settings(base: Settings, root: Path, database: str, topics: tuple[str, ...] = ("catalog",)) -> Settings:
    """``router_settings`` with every table setting a name in ``database`` (one of them three-part)."""
    local = router_settings(
        base,
        root,
        topics,
        deliveries_path=f"spark_catalog.{database}.deliveries",
        dead_letters_path=f"{database}.dead_letters",
        unrouted_path=f"{database}.unrouted",
        metrics_path=f"{database}.metrics",
    )
    subscriptions = dataclasses.replace(
        local.subscriptions,
        table_path=f"{database}.subscriptions",
        rejects_path=f"{database}.subscription_rejects",
    )
    return local.replace(subscriptions=subscriptions)


def route_twice_with_a_replay(spark: Any, settings: Settings, batches: dict[int, list[tuple[Any, ...]]]) -> None:
    """Each batch once, then batch 0 again as Spark re-executes it (same query id)."""
    router = Router(spark, settings)
    router.snapshots.maybe_refresh(force=True)
    router.bind_query("catalog-test-query")
    try:
        for batch_id, rows in batches.items():
            router.process_batch(batch_frame(spark, rows), batch_id)
        router.process_batch(batch_frame(spark, batches[0]), 0)
    finally:
        router.close(progress_wait_s=0)


def as_records(rows: list[tuple[Any, ...]]) -> list[Record]:
    return [Record(topic, partition, offset, key, payload) for key, payload, topic, partition, offset, *_ in rows]


def test_named_tables_route_as_the_oracle_says_and_replays_write_nothing(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    database = f"router_{uuid.uuid4().hex[:10]}"
    named = named_settings(settings, tmp_path / "named", database)
    # One batch per partition (the records' partition is the seed), so outcomes key on (partition, offset).
    batches = {0: records(0, 160, "catalog"), 1: records(1, 120, "catalog")}
    # The refresh job's import path: MERGE into the subscription table, rejects appended (none here).
    apply_subscriptions(spark, named, tmp_path / "subs.json", subscribe=SUBSCRIPTIONS)
    route_twice_with_a_replay(spark, named, batches)

    # Every table is in the catalog, in the named database, where Spark would manage it.
    for table in (
        named.subscriptions.table_path,
        named.subscriptions.rejects_path,
        named.router.deliveries_path,
        named.router.dead_letters_path,
        named.router.unrouted_path,
        named.router.metrics_path,
    ):
        assert spark.catalog.tableExists(table), table
        assert delta_tables.location(spark, table).endswith(f"/{database}.db/{table.rsplit('.', 1)[1]}"), table
    assert not any(Path(tmp_path / "named").glob("*/_delta_log")), "a name was written as a path"
    pairs = read_active(spark, named.subscriptions.table_path)
    assert pairs == sorted(SUBSCRIPTIONS)

    # Every output table has rows, each record's rows come from the batch it was in, and the replay of batch 0
    # added none: no (record, subscriber) twice among the deliveries, no record twice among the others.
    routed = read_routed(spark, named)
    assert routed.deliveries and routed.dead_letters and routed.unrouted
    assert {coordinates: batch for coordinates, (batch, _) in routed.versions().items()} == {
        (partition, offset): partition for partition, rows in batches.items() for offset in range(len(rows))
    }
    delivered = [(row["source_partition"], row["source_offset"], row["subscriber_id"]) for row in routed.deliveries]
    assert len(delivered) == len(set(delivered))
    for rows in (routed.dead_letters, routed.unrouted):
        coordinates = [(row["source_partition"], row["source_offset"]) for row in rows]
        assert len(coordinates) == len(set(coordinates))
    assert_ids_exact(routed)
    records_of_both = as_records([*batches[0], *batches[1]])
    assert routed.outcomes() == expected_outcomes(records_of_both, named.router, named.validator(), pairs)

    # A subscriber follows its rows of the named deliveries table as a Delta stream.
    followed: list[dict[str, Any]] = []
    tail(spark, named.router.deliveries_path, "msft", str(tmp_path / "tail"), followed.append, available_now=True)
    mine = sorted(
        (row["source_partition"], row["source_offset"]) for row in routed.deliveries if row["subscriber_id"] == "msft"
    )
    assert mine and sorted((row["source_partition"], row["source_offset"]) for row in followed) == mine

    # The metrics table by name: one row per batch id, the replay wrote none.
    metrics = delta_tables.read(spark, named.router.metrics_path)
    assert sorted(row["batch_id"] for row in metrics.collect()) == [0, 1]
    # The snapshot files went beside the named subscription table's files.
    snapshots = Path(delta_tables.location(spark, named.subscriptions.table_path).removeprefix("file:"))
    assert any((snapshots / DEFAULT_DIRECTORY).glob("*/*.frozen"))  # one directory per table id


def test_the_whole_pipeline_runs_on_named_tables(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    """Events on Kafka -> the refresh job's stream -> named subscription table; messages on Kafka -> the router's
    stream -> named output tables; every record's fate as the regex oracle says."""
    from jobs.refresh_subscriptions import refresh_from_kafka

    events, messages = topic_factory(partitions=1), topic_factory(partitions=2)
    named = named_settings(settings, tmp_path, f"router_{uuid.uuid4().hex[:10]}", (messages,))
    named = named.replace(subscriptions=dataclasses.replace(named.subscriptions, events_topic=events))
    produce(
        named,
        events,
        [(None, subscription_event("subscribe", pattern, subscriber), []) for pattern, subscriber in SUBSCRIPTIONS]
        + [(None, b"{not json", [])],
    )
    summary = refresh_from_kafka(spark, named)
    pairs = read_active(spark, named.subscriptions.table_path)
    assert pairs == sorted(SUBSCRIPTIONS) and summary.table_version >= 1
    rejects = delta_tables.read(spark, named.subscriptions.rejects_path).select("reason").collect()
    assert [row["reason"] for row in rejects] == ["malformed_json"]

    records = produce(named, messages, [(key, b"payload", []) for key in KEYS * 20], partitions=2)
    router = run_available_now(spark, named)
    routed = read_routed(spark, named)
    assert routed.outcomes() == expected_outcomes(records, named.router, named.validator(), pairs)
    assert_ids_exact(routed)
    assert {report.snapshot_version for report in router.reports.values()} == {summary.table_version}


def test_another_process_finds_a_named_table_of_the_session_catalog(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    """The in-memory catalog forgets tables with its process: ``list`` in a new one must still find it."""
    database = f"router_{uuid.uuid4().hex[:10]}"
    named = named_settings(settings, tmp_path, database)
    version = apply_subscriptions(spark, named, tmp_path / "subs.json", subscribe=SUBSCRIPTIONS)
    command = [sys.executable, "-m", "routing", "list", "--json", *job_flags(named)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=WAIT_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = json.loads(done.stdout)
    assert listed["table"] == named.subscriptions.table_path and listed["version"] == version
    assert sorted((entry["pattern"], entry["subscriber"]) for entry in listed["subscriptions"]) == sorted(SUBSCRIPTIONS)


def test_a_missing_named_table_is_a_clear_error(spark: Any, settings: Settings, tmp_path: Path) -> None:
    """``list`` in this process (its session is the test's): a name with no files is refused, nothing is created."""
    from routing.__main__ import main

    database = f"router_{uuid.uuid4().hex[:10]}"
    named = named_settings(settings, tmp_path, database)
    errors: list[str] = []
    assert main(["list", *job_flags(named)], out=errors.append, err=errors.append) == 2
    assert f"Delta table '{named.subscriptions.table_path}' cannot be read" in errors[-1]
    # Spark's own condition for a name with no table (the session catalog registered nothing: no files).
    assert "TABLE_OR_VIEW_NOT_FOUND" in errors[-1]
    assert not spark.catalog.databaseExists(database), "a read registered the database"
    warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    assert not list(warehouse.glob(f"{database}.db")), "a read created its directory"


def test_registrations_are_kept_per_spark_context_not_per_batch_session(spark: Any, settings: Settings) -> None:
    """``foreachBatch`` wraps each batch in a new session object of the same context, whose catalog they all share:
    a name registered once must not be looked up again, nor cached again, for each batch."""
    from pyspark.sql import SparkSession

    table = f"router_{uuid.uuid4().hex[:10]}.deliveries"
    delta_tables.create_if_absent(spark, table, "a INT")
    location = delta_tables.location(spark, table)
    owners, locations = len(delta_tables._registered), len(delta_tables._locations)
    for _ in range(5):
        per_batch = SparkSession(spark.sparkContext, spark._jsparkSession)  # what foreachBatch hands a batch
        assert delta_tables.exists(per_batch, table)
        assert delta_tables.location(per_batch, table) == location
    assert (len(delta_tables._registered), len(delta_tables._locations)) == (owners, locations)
    assert table in delta_tables._registered[spark.sparkContext]

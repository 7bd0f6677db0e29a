"""The router's batch path: one pass and one Delta commit in the common case, bounded output on huge fan-outs.

The batches are static DataFrames in the Kafka source's shape handed straight to
:meth:`Router.process_batch` (what ``foreachBatch`` does), on the real Spark session and real
Delta tables. Nothing here asserts on time: only on counts (rows, Delta commits, Spark jobs,
rows the UDF saw).

* A clean batch (no dead letters, no unmatched messages) costs exactly one Delta commit (the
  deliveries) and one pass of its rows through the UDF; the ledger entry costs no Spark job.
* A batch with dead letters judged in the JVM adds one dead-letter commit, still one UDF pass.
* The issue's two oversized outputs route completely, with no failed batch: 9,000 messages x
  1,000 subscribers x 255-byte ids (2.3 GB of subscriber lists for one Arrow batch) and
  20 messages x 1 MB x fan-out 100 (2 GB of delivery rows).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from router_support import apply_subscriptions, assert_ids_exact, ledger_versions, read_routed, router_settings

from routing import delta_tables
from routing.router.columns import SOURCE_DDL
from routing.router.pipeline import Router
from routing.router.tables import DELIVERIES_STATS_COLUMNS, PARTITION_COLUMN, PLAIN_ENCODED_COLUMNS, output_paths
from routing.settings import Settings

pytestmark = pytest.mark.slow

MOMENT = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
#: Rows per batch of Spark's vectorized Parquet reader.
READER_BATCH_ROWS = "spark.sql.parquet.columnarReaderBatchSize"


def batch_frame(spark: Any, keys: Sequence[bytes | None], payload: bytes = b"p", topic: str = "t") -> Any:
    """A micro-batch as ``foreachBatch`` hands it over (one partition, like a one-partition topic)."""
    rows: list[tuple[Any, ...]] = [(key, payload, topic, 0, offset, MOMENT, []) for offset, key in enumerate(keys)]
    return spark.createDataFrame(rows, SOURCE_DDL).coalesce(1)


def table_version(spark: Any, path: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])


def started_router(spark: Any, settings: Settings, query_id: str) -> Router:
    router = Router(spark, settings)
    router.snapshots.maybe_refresh(force=True)
    router.bind_query(query_id)
    return router


def file_statistics(path: str) -> list[dict[str, Any]]:
    """The ``stats`` of every file a Delta table's log added (what data skipping reads)."""
    import json

    log = Path(path) / "_delta_log"
    actions = [json.loads(line) for commit in sorted(log.glob("*.json")) for line in commit.read_text().splitlines()]
    return [json.loads(action["add"]["stats"]) for action in actions if "add" in action]


def test_a_clean_batch_is_one_pass_and_one_commit(spark: Any, settings: Settings, tmp_path: Path) -> None:
    local = router_settings(settings, tmp_path, ["path"], unrouted_path=str(tmp_path / "unrouted"))
    version = apply_subscriptions(spark, local, tmp_path / "subs.json", [("a.#", "a-all"), ("#.b", "ends-b")])
    router = started_router(spark, local, "one-commit")
    outputs = (local.router.deliveries_path, local.router.dead_letters_path, local.router.unrouted_path)
    tracker = spark.sparkContext.statusTracker()
    try:
        before = [table_version(spark, path) for path in outputs]
        router.process_batch(batch_frame(spark, [b"a.b", b"a", b"x.b", b"a.c"] * 50), 0)
        assert [table_version(spark, path) - old for path, old in zip(outputs, before, strict=True)] == [1, 0, 0]
        clean = router.reports[0].metrics
        assert clean["input_rows"] == clean["udf_rows"] == 200  # every row went through Python exactly once
        assert (clean["deliveries"], clean["unmatched"], clean["dead_letters"]) == (250, 0, 0)
        # Delta's min/max statistics of the deliveries only where they can skip files: not of the hashed
        # delivery_id or the routing key (routing.router.tables, Statistics).
        stats = file_statistics(local.router.deliveries_path)
        assert stats and sum(file["numRecords"] for file in stats) == 250
        for file in stats:
            assert set(file["minValues"]) == set(file["maxValues"]) == set(DELIVERIES_STATS_COLUMNS), file

        # Dead letters judged in the JVM: one more commit, written without the UDF (still one pass through it).
        before = [table_version(spark, path) for path in outputs]
        udf_rows = router.udf_figures()[3]
        router.process_batch(batch_frame(spark, [b"a.b", None, b"\xff", b"a"] * 25), 1)
        assert [table_version(spark, path) - old for path, old in zip(outputs, before, strict=True)] == [1, 1, 0]
        dirty = router.reports[1].metrics
        assert dirty["udf_rows"] == dirty["input_rows"] == router.udf_figures()[3] - udf_rows == 100
        assert (dirty["deliveries"], dirty["unmatched"], dirty["dead_letters"]) == (75, 0, 50)
        assert "dead_letter_id" in file_statistics(local.router.dead_letters_path)[0]["minValues"]  # Delta's default

        # The ledger is a file: recording a batch runs no Spark job. Counted in a job group of this thread: the
        # router's snapshot-refresh thread may poll the subscription table meanwhile (a flake before).
        spark.sparkContext.setJobGroup("ledger-record", "the ledger's record calls")
        try:
            assert router.ledger.record(7, version) == version
            assert router.ledger.record(7, version + 1) == version, "write-once: the first version stays"
        finally:
            spark.sparkContext.setJobGroup(None, None)  # None clears the group
        assert list(tracker.getJobIdsForGroup("ledger-record")) == []
        assert ledger_versions(spark, local) == [(0, version), (1, version), (7, version)]
    finally:
        router.close(progress_wait_s=0)


@pytest.mark.parametrize(
    ("delta_append", "delta_warm"), [("direct", "auto"), ("writer", "background"), ("writer", "inline")]
)
def test_a_steady_batch_appends_with_one_spark_job_and_few_jvm_calls(
    spark: Any,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    delta_append: str,
    delta_warm: str,
) -> None:
    """A batch's append on its path to its visible commit is the one Spark job that writes the rows.

    Direct (a table by path): a first attempt commits its txn version without Delta's check of it, so no batch,
    not even the first on a cold table, reconstructs the table's state and nothing is warmed. Through the
    public writer (where the direct append declines: a catalog table, a Delta without the internal API; forced
    here) the check needs that state: it is computed after the previous batch's commit (warm), on the warmer's
    own thread, while the batch returns (background: the available-now trigger) or before it does (inline: the
    processing-time trigger). And a batch
    reuses its plan's column expressions and their JVM column lists instead of rebuilding them (about 2,100 JVM
    round trips before, then 420)."""
    import threading

    import py4j.clientserver
    from py4j import protocol as proto

    from routing import appends

    trigger = "processing_time" if delta_warm == "inline" else "available_now"
    local = router_settings(settings, tmp_path, ["steady"], trigger=trigger)
    apply_subscriptions(spark, local, tmp_path / "subs.json", [("a.#", "a-all"), ("#.b", "ends-b")])
    router = started_router(spark, local, "steady")
    sc = spark.sparkContext
    jobs: list[tuple[str, str, int]] = []  # (step, table, Spark jobs it ran), in call order
    threads: dict[str, set[str]] = {"append": set(), "first_append": set(), "warm": set()}  # where each step ran
    ended: dict[str, list[float]] = {"append": [], "first_append": [], "warm": []}  # when each call returned
    returned: list[float] = []  # when each process_batch call returned

    def counted(name: str, step: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            # Unique in the session: the tracker keeps old groups' jobs.
            group = f"{name}-{delta_append}-{delta_warm}-{len(jobs)}"
            sc.setJobGroup(group, name)
            try:
                return step(*args, **kwargs)
            finally:
                ended[name].append(time.perf_counter())
                jobs.append((name, str(args[1]), len(sc.statusTracker().getJobIdsForGroup(group))))
                threads[name].add(threading.current_thread().name)
                sc.setJobGroup(None, None)

        return run

    monkeypatch.setattr(appends, "idempotent_append", counted("append", appends.idempotent_append))
    if delta_append == "direct":
        monkeypatch.setattr(appends, "first_append", counted("first_append", appends.first_append))
    else:  # the direct append declines, as it does for a catalog table or without Delta's internal API
        monkeypatch.setattr(appends, "first_append", lambda *args, **kwargs: False)
    monkeypatch.setattr(appends, "warm_append_state", counted("warm", appends.warm_append_state))
    calls = [0]
    # Names the JVM answered as packages: each is a failed class lookup through every jar on the class path.
    packages: list[str] = []
    send = py4j.clientserver.ClientServerConnection.send_command
    lookup = proto.REFLECTION_COMMAND_NAME + proto.REFL_GET_UNKNOWN_SUB_COMMAND_NAME

    def counting(self: Any, command: str) -> Any:
        calls[0] += 1
        answer = send(self, command)
        if command.startswith(lookup) and answer == proto.SUCCESS_PACKAGE:
            packages.append(command.split("\n")[2])
        return answer

    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
    try:
        for batch_id in range(3):
            calls[0] = 0
            packages.clear()
            router.process_batch(batch_frame(spark, [b"a.b", b"a", b"x.b", b"a.c"] * 50), batch_id)
            returned.append(time.perf_counter())
    finally:
        router.close(progress_wait_s=0)  # waits for the last batch's warm
    assert calls[0] > 0, "JVM calls not counted (not a pinned-thread py4j gateway?)"
    # About 170-260 (py4j's releases of dead proxies vary): 420 when each select built its column list
    # call by call, 2,100 when each batch rebuilt its expressions.
    assert calls[0] < 350, f"{calls[0]} JVM round trips for one batch: are the plan's selects or expressions rebuilt?"
    # Every class and method a batch calls by name is held (first_append walked org.apache.spark.sql.delta,
    # scala and java.lang in every batch: thirteen failed class lookups, 6.7-8.4 ms).
    assert packages == [], f"a batch resolved {packages} through py4j package by package"
    assert router.reports[2].metrics["deliveries"] == 250
    assert "count" not in router.reports[2].stages  # the write's observation counted the batch
    deliveries = local.router.deliveries_path
    assert threads["append"] <= {threading.current_thread().name}, threads
    if delta_append == "direct":
        # One job per batch from the first on, and no warm: nothing ever reads the table's set transactions.
        assert jobs == [("first_append", deliveries, 1)] * 3, jobs
        assert threads["first_append"] == {threading.current_thread().name}, threads
        assert not {"warm", "warm_wait"} & {stage for report in router.reports.values() for stage in report.stages}
        # The commits carry the batches' txn versions as the public writer's do: a re-execution skips them.
        committed = delta_tables.read(spark, deliveries).count()
        again = delta_tables.read(spark, deliveries).limit(5)
        appends.idempotent_append(again, deliveries, router.identity.txn_app_id, 2, partition_by=(PARTITION_COLUMN,))
        assert delta_tables.read(spark, deliveries).count() == committed
        return
    assert [(name, path) for name, path, _ in jobs] == [("append", deliveries), ("warm", deliveries)] * 3
    append_jobs = [count for name, _, count in jobs if name == "append"]
    warms = [count for name, _, count in jobs if name == "warm"]
    # Batch 0 found the table cold (its append computed the state first); from then on the append is one job,
    # because each batch's warm did the state reconstruction the next append would have done.
    assert append_jobs[0] > 1 and append_jobs[1:] == [1, 1], append_jobs
    assert all(count > 0 for count in warms), warms
    # Each warm ran on the warmer's thread, not on the batch's own path.
    assert len(threads["warm"]) == 1 and next(iter(threads["warm"])).startswith("delta-warm"), threads
    assert {"plan", "write_deliveries", "observe"} <= set(router.reports[2].stages)
    # Only a warm left running in the background is waited for at the next batch's start.
    assert ("warm_wait" in router.reports[2].stages) == (delta_warm == "background")
    # Inline, each batch's warm ends before the batch returns; in the background, after (it is not waited for).
    done_before_return = [warm < back for warm, back in zip(ended["warm"], returned, strict=True)]
    assert done_before_return == [delta_warm == "inline"] * 3, (ended, returned)
    assert ("warm" in router.reports[2].stages) == (delta_warm == "inline")


def generated_code(frame: Any) -> str:
    """The Java source of ``frame``'s whole-stage code (what Spark compiles and caches by its text)."""
    import contextlib
    import io
    import re

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        frame.explain("codegen")
    return "\n".join(line for line in printed.getvalue().splitlines() if re.match(r"/\* \d+ \*/", line))


def test_every_batch_runs_the_same_compiled_code(spark: Any, settings: Settings, tmp_path: Path) -> None:
    """The per-batch values (snapshot version, batch id, routing time) reach the generated code by reference:
    written into its source they made every batch's deliveries code new, compiled and JIT-warmed again
    (``columns.batch_constant``). The rows still carry each batch's own values."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from routing.router.columns import dead_letters_frame, unrouted_frame

    local = router_settings(settings, tmp_path, ["code"])
    version = apply_subscriptions(spark, local, tmp_path / "subs.json", [("a.#", "a-all")])
    router = started_router(spark, local, "same-code")
    plan = router.plan
    published = router.snapshots.acquire(version)
    try:
        frame = batch_frame(spark, [b"a.b", b"a", b"x.b", b"bad key!", None])
        judged = plan.judged(plan.classified(frame), plan.route_column(published, router._route_udf))
        batches = [(version, 3, MOMENT), (version + 40, 123_456_789, MOMENT + dt.timedelta(days=400, seconds=7))]

        def outputs(batch_version: int, batch_id: int, at: dt.datetime) -> list[Any]:
            observed = judged.observe(Observation(f"same-code-{batch_id}"), *plan.metrics)
            return [
                plan.deliveries(observed, batch_version, batch_id, at),
                dead_letters_frame(judged, batch_version, batch_id, at),
                unrouted_frame(judged, batch_version, batch_id, at),
            ]

        first, second = (outputs(*batch) for batch in batches)
        for name, one, other in zip(("deliveries", "dead letters", "unrouted"), first, second, strict=True):
            code = generated_code(one)
            assert "GeneratedIteratorForCodegenStage" in code, name
            assert code == generated_code(other), f"the {name}' generated code differs between two batches"
        for (batch_version, batch_id, at), frames in zip(batches, (first, second), strict=True):
            for output in frames:
                columns = output.select("snapshot_version", "batch_id", F.unix_micros("routed_at"))
                values = {tuple(row) for row in columns.collect()}
                assert values == {(batch_version, batch_id, int(at.timestamp()) * 1_000_000)}, values
    finally:
        router.snapshots.release(published)
        router.close(progress_wait_s=0)


def test_output_tables_take_deltas_session_default_checkpoint_interval(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    """Delta's own ``spark.databricks.delta.properties.defaults.checkpointInterval`` (a ``[spark.conf]`` key)
    reaches the tables the router creates, with their own properties beside it."""
    from delta.tables import DeltaTable

    local = router_settings(settings, tmp_path, ["props"], unrouted_path=str(tmp_path / "unrouted"))
    key = "spark.databricks.delta.properties.defaults.checkpointInterval"
    spark.conf.set(key, "3")
    try:
        Router(spark, local).close(progress_wait_s=0)
    finally:
        spark.conf.unset(key)
    for path in (local.router.deliveries_path, local.router.dead_letters_path, local.router.unrouted_path):
        properties = DeltaTable.forPath(spark, path).detail().collect()[0]["properties"]
        assert properties.get("delta.checkpointInterval") == "3", (path, properties)
        assert "delta.dataSkippingStatsColumns" in properties or path != local.router.deliveries_path


def test_delivery_and_dead_letter_ids_are_the_coordinates(spark: Any, settings: Settings, tmp_path: Path) -> None:
    local = router_settings(settings, tmp_path, ["ids"])
    apply_subscriptions(spark, local, tmp_path / "subs.json", [("a.#", "a-all"), ("#.b", "ends-b"), ("#", "all")])
    router = started_router(spark, local, "ids")
    try:
        router.process_batch(batch_frame(spark, [b"a.b", None, b"x.b", b"\xff", b"a"] * 20, topic="ids"), 0)
    finally:
        router.close(progress_wait_s=0)
    routed = read_routed(spark, local)
    assert (len(routed.deliveries), len(routed.dead_letters)) == (20 * (3 + 2 + 2), 20 * 2)
    assert_ids_exact(routed)  # checked against Python's own text, row by row
    assert {row["delivery_id"] for row in routed.deliveries if row["source_offset"] == 0} == {
        "ids|0|0|a-all",
        "ids|0|0|ends-b",
        "ids|0|0|all",
    }


#: A repeated value of each column type in the output tables: every column of such rows would get a dictionary.
REPEATED_VALUES = {
    "StringType()": "'same'",
    "BinaryType()": "CAST('p' AS BINARY)",
    "IntegerType()": "3",
    "LongType()": "7L",
    "TimestampType()": "TIMESTAMP'2026-01-05 12:00:00'",
    "DateType()": "DATE'2026-01-05'",
}


@pytest.mark.parametrize("table", sorted(PLAIN_ENCODED_COLUMNS))
def test_output_tables_hand_parquet_their_plain_columns_and_int64_timestamps(
    spark: Any, settings: Settings, tmp_path: Path, table: str
) -> None:
    """The table properties reach the Parquet writer through the router's append (routing.router.tables).

    Distinct values end up plain-encoded either way (Parquet drops a dictionary that does not pay), so the
    properties' effect is seen on rows whose values all repeat, which would otherwise all get a dictionary.
    """
    import pyarrow.parquet as pq

    from routing.appends import first_append
    from routing.router.tables import OUTPUT_TABLES

    local = router_settings(settings, tmp_path, ["dictionary"], unrouted_path=str(tmp_path / "unrouted"))
    Router(spark, local).close(progress_wait_s=0)  # creates the output tables, as a router's start does
    path = output_paths(local.router)[table]
    schema = spark.createDataFrame([], OUTPUT_TABLES[table]).schema
    values = [
        f"CAST(NULL AS {field.dataType.simpleString()})"
        if field.name == "headers"
        else REPEATED_VALUES[str(field.dataType)]
        for field in schema
    ]
    rows = spark.range(200).selectExpr(
        *(f"{value} AS {field.name}" for value, field in zip(values, schema, strict=True))
    )
    assert [(f.name, f.dataType) for f in rows.schema] == [(f.name, f.dataType) for f in schema]
    assert first_append(rows.coalesce(1), path, "dictionary-test", 0)
    files = list(Path(path).rglob("*.parquet"))
    assert files
    plain = set(PLAIN_ENCODED_COLUMNS[table])
    assert plain <= {field.name for field in schema}
    for file in files:
        metadata = pq.ParquetFile(file).metadata
        row_group = metadata.row_group(0)
        columns = {row_group.column(i).path_in_schema: row_group.column(i) for i in range(row_group.num_columns)}
        dictionary = {name for name, column in columns.items() if any("DICTIONARY" in e for e in column.encodings)}
        # Every other column (ids of subscribers, topics, versions, times...) keeps its dictionary.
        assert dictionary == set(columns) - plain - {"headers.list.element.key", "headers.list.element.value"}
        for name in ("kafka_timestamp", "routed_at"):
            column = metadata.schema.column(list(columns).index(name))
            assert (column.physical_type, str(column.logical_type)) == (
                "INT64",
                "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, "
                "force_set_converted_type=false)",
            ), name


def test_long_ids_on_every_message_cut_the_output_by_bytes_and_route_completely(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    local = router_settings(settings, tmp_path, ["wide"], unrouted_path=str(tmp_path / "unrouted"))
    subscribers = [f"{index:0>{local.limits.max_subscriber_bytes}}" for index in range(1_000)]
    apply_subscriptions(spark, local, tmp_path / "subs.json", [("#", subscriber) for subscriber in subscribers])
    router = started_router(spark, local, "wide")
    keys = [f"k.{index % 50}".encode() for index in range(1_200)]
    # One Arrow batch of keys whose lists take over four of the default output cuts: the UDF must split it,
    # and every part must reach the table. The cut, not the total, is what keeps each part below Arrow's
    # 32-bit offsets, so a total past 2 GiB tests nothing more (settings refuse a cut past 2**31 - 1 bytes).
    list_bytes = len(keys) * len(subscribers) * (4 + local.limits.max_subscriber_bytes)
    assert list_bytes > 4 * local.spark.arrow_output_batch_bytes
    try:
        router.process_batch(batch_frame(spark, keys), 0)
    finally:
        router.close(progress_wait_s=0)
    metrics = router.reports[0].metrics
    assert (metrics["input_rows"], metrics["deliveries"], metrics["dead_letters"]) == (1_200, 1_200_000, 0)
    deliveries = spark.read.format("delta").load(local.router.deliveries_path)
    per_message = deliveries.groupBy("source_offset").agg({"subscriber_id": "count"}).collect()
    assert len(per_message) == 1_200 and {row[1] for row in per_message} == {1_000}
    assert deliveries.select("subscriber_id").distinct().count() == 1_000
    # Distinct delivery ids, counted on an 8-byte hash of each instead of the 64-character id: a hash can merge
    # two ids but never split one, so 1,200,000 distinct hashes means 1,200,000 distinct ids.
    assert deliveries.select(F.xxhash64("delivery_id")).distinct().count() == 1_200_000


def test_twenty_one_megabyte_messages_to_a_hundred_subscribers_route_completely(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    local = router_settings(settings, tmp_path, ["large"])
    local = local.replace(limits=dataclasses.replace(local.limits, max_payload_bytes=1_000_000))
    apply_subscriptions(spark, local, tmp_path / "subs.json", [("big.#", f"sub-{index}") for index in range(100)])
    router = started_router(spark, local, "large")
    payload = bytes(range(256)) * (1_000_000 // 256) + b"x" * (1_000_000 % 256)
    try:
        router.process_batch(batch_frame(spark, [b"big.one"] * 20, payload=payload), 0)  # 2 GB of deliveries
    finally:
        router.close(progress_wait_s=0)
    metrics = router.reports[0].metrics
    assert (metrics["input_rows"], metrics["deliveries"], metrics["dead_letters"]) == (20, 2_000, 0)
    # Reading them back, Spark's vectorized Parquet reader fills 4,096 rows a batch by default: up to 4 GB of
    # 1 MB payloads in one column vector (docs/router.md, Memory per batch: reading large payloads).
    previous = spark.conf.get(READER_BATCH_ROWS, None)
    spark.conf.set(READER_BATCH_ROWS, "16")
    try:
        deliveries = spark.read.format("delta").load(local.router.deliveries_path)
        sizes = deliveries.agg(F.count("*"), F.min(F.octet_length("payload")), F.max(F.octet_length("payload")))
        assert tuple(sizes.collect()[0]) == (2_000, 1_000_000, 1_000_000)
    finally:
        if previous is None:
            spark.conf.unset(READER_BATCH_ROWS)
        else:
            spark.conf.set(READER_BATCH_ROWS, previous)


def test_prebuilt_selects_and_jvm_batch_columns_match_the_plain_ones(spark: Any) -> None:
    """:class:`Projection` (a select whose JVM column list is built once) and
    :meth:`routing.jvm.SparkJvm.batch_constants` (the batch constants built without PySpark's wrappers) give
    what the plain select and :func:`batch_columns` give, names, types and values, in every batch they are
    reused for."""
    from pyspark.sql import functions as F
    from pyspark.testing import assertDataFrameEqual

    from routing.jvm import spark_jvm
    from routing.router.columns import Projection, batch_columns, batch_index, batch_values

    frame = batch_frame(spark, [b"a.b", b"c", None])
    columns = [F.col("topic"), F.upper(F.col("topic")).alias("shout"), F.col("offset") + 1]
    projection = Projection(columns)
    index = batch_index()
    internals = spark_jvm(spark)
    assert internals is not None
    at = dt.datetime(2026, 11, 27, 17, 5, 9, 123456, tzinfo=dt.UTC)
    for version, batch_id in [(3, 0), (4, 9_000_000_000)]:
        assertDataFrameEqual(projection(frame), frame.select(*columns), checkRowOrder=True)
        plain = frame.select(*columns[:1], *batch_columns(version, batch_id, at, index), *columns[1:])
        constants = internals.batch_constants(batch_values(version, batch_id, at), index)
        built = projection.with_inserted(frame, 1, constants)
        assert built.schema == plain.schema
        assertDataFrameEqual(built, plain, checkRowOrder=True)
        assert built.select("batch_id").distinct().collect()[0][0] == batch_id


def test_the_direct_append_stands_down_on_a_delta_release_it_was_not_tested_with(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The version check before Delta's internal API, and its fallback: the public writer, idempotent as ever."""
    import logging

    from routing import appends, jvm

    frame = spark.range(3).selectExpr("id", "CAST(id AS STRING) AS text")
    tested, untested = str(tmp_path / "tested"), str(tmp_path / "untested")
    for path in (tested, untested):
        frame.limit(0).write.format("delta").save(path)  # the tables, with their columns
    delta = jvm.delta_jvm(spark)
    assert delta is not None and delta.version.startswith(jvm.TESTED_DELTA)
    monkeypatch.setattr(appends, "_first_append_missing", False)
    assert appends.first_append(frame, tested, "direct", 0) is True
    monkeypatch.setattr(jvm, "TESTED_DELTA", ("0.0.",))
    monkeypatch.setattr(jvm, "_delta_jvm", None)
    monkeypatch.setattr(jvm, "_logged_untested", set())
    with caplog.at_level(logging.WARNING, logger="routing.jvm"):
        assert appends.first_append(frame, untested, "direct", 0) is False
    assert "is not a release this project's fast paths were tested with (0.0.x)" in caplog.text
    assert delta_tables.read(spark, untested).count() == 0  # it wrote nothing
    for _ in range(2):  # the public writer serves, and skips the version it committed
        appends.idempotent_append(frame, untested, "direct", 0)
    assert delta_tables.read(spark, untested).count() == 3 == delta_tables.read(spark, tested).count()

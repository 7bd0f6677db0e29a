"""The Spark side: the Delta tables, validating a micro-batch, and the MERGE.

Every transform takes and returns DataFrames, so the refresh job
(``jobs/refresh_subscriptions.py``) is only plumbing: Kafka micro-batch or
import file -> :func:`validate_kafka_batch` / :func:`validated_frame` ->
:func:`apply_validated`.

Validation runs the pure-Python rules of :mod:`routing.subscriptions.events`
through ``mapInArrow``: one Python call per Arrow batch rather than per row, no
per-row UDF serialisation. Subscription events are few (bounded per batch by
``subscriptions.max_offsets_per_trigger``), so correctness and sharing the one
rule set with the import path and the model matter more than speed here.

:func:`apply_validated` is set-based (windows and joins against the table
pinned at one Delta version) and implements the semantics spelled out
sequentially in :mod:`routing.subscriptions.model`: reduce within the batch,
last writer wins by ``(ts, change_id)``, unsubscribes before subscribes,
subscribes past ``max_subscriptions_per_table`` (``subscription_table_full``) or
``max_subscriptions_per_subscriber`` (``too_many_subscriptions``) rejected in
``(ts, change_id)`` order.

Crash safety. Each batch writes at most two Delta commits: the MERGE (only
when something changes) and the rejects append. Re-running a batch after a
crash is harmless: the MERGE only applies events newer than the row, so
changes already merged are stale no-ops (and with nothing to change no commit
is made); the rejects append carries ``txnAppId``/``txnVersion``
(``refresh_subscriptions:<query id>``, batch id; :func:`routing.streaming.idempotent_append`),
so Delta skips it if it already committed; and the subscription
limits re-evaluated against the merged table reject exactly the same events.
(One nuance: when a crash falls between the MERGE and the rejects append of a
batch where both limits rejected events, a re-run may record an event the
subscriber limit rejected as ``subscription_table_full`` instead, since the
table limit is checked first: the same events are rejected, one reason may
differ.) A kill inside the MERGE itself leaves the table as it was (Delta
commits a MERGE whole or not at all; files it had written are never referenced,
and VACUUM removes them), so the re-run applies the batch as if for the first time.

Concurrency. :func:`apply_validated` decides against one table version and
then MERGEs; if another writer commits in between, the decisions (limits above
all) could be wrong. So the version is checked again right before the MERGE,
and Delta's conflict check covers the MERGE from the version its transaction
reads (the latest when it starts, not the one decided against: measured, Delta
4.4); either raises, and the refresh job decides the batch again against the
new version (:func:`routing.streaming.retry_delta_conflicts`). What is left
is the moment between that check and the MERGE's start, where a commit slips
through unchecked: the rows stay right (the MERGE applies only newer changes)
but a limit could be passed. The refresh runs of one deployment never meet
there, since each holds the lease on its checkpoint
(``jobs/refresh_subscriptions.py``); writers the lease does not cover (another
deployment's refresh job on the same table) can.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from routing import delta_tables
from routing.streaming import (
    AFTER_MERGE,
    BatchCrash,
    ConcurrentTableChange,
    create_delta_table_if_absent,
    idempotent_append,
)
from routing.subscriptions.events import (
    APPLIED_KINDS,
    MATCH_COST_EXCEEDED,
    NOOP_KINDS,
    REFRESHED,
    STALE,
    SUBSCRIBED,
    SUBSCRIPTION_TABLE_FULL,
    SUPERSEDED,
    TOMBSTONED,
    TOO_MANY_SUBSCRIPTIONS,
    UNSUBSCRIBED,
    Op,
    Outcome,
    judge,
    kafka_received,
)
from routing.validation import Validator

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from routing.limits import Limits

# -- schemas ------------------------------------------------------------------------

#: The subscription table. Key: (subscriber_id, pattern); one row per pair ever seen.
TABLE_DDL = ", ".join(
    [
        "subscriber_id STRING NOT NULL",
        "pattern STRING NOT NULL",
        # Soft delete: an unsubscribe keeps the row (active = false) so an older subscribe cannot resurrect it.
        "active BOOLEAN NOT NULL",
        # The winning event's ts; with change_id it orders writes (last writer wins).
        "updated_at TIMESTAMP NOT NULL",
        # The change that last touched the row (deterministic: Kafka coordinates or import file hash + line).
        "change_id STRING NOT NULL",
        # kafka | import
        "source STRING NOT NULL",
        # When the refresh job wrote the row (wall clock, for operators; never used for ordering).
        "applied_at TIMESTAMP NOT NULL",
        # Words in the pattern and whether one is * or #, so readers need not re-parse.
        "pattern_word_count INT NOT NULL",
        "has_wildcard BOOLEAN NOT NULL",
    ]
)

#: Rejected events: one row per rejected change id (appends are idempotent per batch).
REJECTS_DDL = ", ".join(
    [
        "change_id STRING NOT NULL",
        "reason STRING NOT NULL",
        "detail STRING NOT NULL",
        "source STRING NOT NULL",
        "kafka_topic STRING",
        "kafka_partition INT",
        "kafka_offset BIGINT",
        "import_file STRING",
        "import_line BIGINT",
        # The event exactly as received, and a best-effort UTF-8 reading of it (U+FFFD for bad bytes).
        "raw BINARY",
        "raw_text STRING",
        # Set when the event itself was valid (e.g. too_many_subscriptions).
        "op STRING",
        "subscriber_id STRING",
        "pattern STRING",
        "ts TIMESTAMP",
        # Streaming batch id (null for imports).
        "batch_id BIGINT",
        "rejected_at TIMESTAMP NOT NULL",
    ]
)

#: Output of validation: one row per received event, valid (reject_reason null) or not.
VALIDATED_FIELDS: tuple[tuple[str, str], ...] = (
    ("change_id", "string"),
    ("source", "string"),
    ("op", "string"),
    ("subscriber_id", "string"),
    ("pattern", "string"),
    ("ts_millis", "int64"),
    ("pattern_word_count", "int32"),
    ("has_wildcard", "bool"),
    ("reject_reason", "string"),
    ("reject_detail", "string"),
    ("raw", "binary"),
    ("raw_text", "string"),
    ("kafka_topic", "string"),
    ("kafka_partition", "int32"),
    ("kafka_offset", "int64"),
    ("import_file", "string"),
    ("import_line", "int64"),
)
_SPARK_TYPES = {"string": "STRING", "int64": "BIGINT", "int32": "INT", "bool": "BOOLEAN", "binary": "BINARY"}
VALIDATED_DDL = ", ".join(f"{name} {_SPARK_TYPES[kind]}" for name, kind in VALIDATED_FIELDS)

KEY = ("subscriber_id", "pattern")
_CANDIDATE = "candidate"  # a subscribe that would activate a row, before the limit decides


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "bool": pa.bool_(), "binary": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind in VALIDATED_FIELDS])


def _struct(ddl: str) -> StructType:
    from pyspark.sql.types import StructType

    parsed = StructType.fromDDL(ddl)
    assert isinstance(parsed, StructType)
    return parsed


# -- tables -----------------------------------------------------------------------


#: Table property that makes Delta record the change data feed (the router reads changes, not the table).
CHANGE_FEED_PROPERTY = "delta.enableChangeDataFeed"


def create_table_if_absent(spark: SparkSession, path: str) -> None:
    """Create the (empty) subscription table at ``path``, change data feed on, unless a Delta table is there.

    A table created before the change feed existed keeps working: :func:`enable_change_feed` turns it
    on (the refresh job does, see ``jobs/refresh_subscriptions.py``), and until then readers of
    :func:`read_changes` fall back to reading the whole table.
    """
    create_delta_table_if_absent(spark, path, TABLE_DDL, properties={CHANGE_FEED_PROPERTY: "true"})


def change_feed_enabled(spark: SparkSession, path: str) -> bool:
    return str(delta_tables.table_property(spark, path, CHANGE_FEED_PROPERTY)).lower() == "true"


def enable_change_feed(spark: SparkSession, path: str) -> bool:
    """Turn the change data feed on for a table created without it; True when this committed a change.

    Changes are recorded from the new version on; ranges that start earlier stay unreadable as changes
    (:class:`ChangesUnavailable`), so the router loads those versions whole.
    """
    if change_feed_enabled(spark, path):
        return False
    spark.sql(f"ALTER TABLE {delta_tables.sql_identifier(path)} SET TBLPROPERTIES ({CHANGE_FEED_PROPERTY} = true)")
    return True


def create_rejects_table_if_absent(spark: SparkSession, path: str) -> None:
    create_delta_table_if_absent(spark, path, REJECTS_DDL)


def latest_version(spark: SparkSession, path: str) -> int:
    """The table's newest Delta version: the snapshot version the router broadcasts."""
    return delta_tables.latest_version(spark, path)


def _read(spark: SparkSession, path: str, version: int | None) -> DataFrame:
    return delta_tables.read(spark, path, None if version is None else {"versionAsOf": version})


def read_active(spark: SparkSession, path: str, version: int | None = None) -> list[tuple[str, str]]:
    """Sorted (pattern, subscriber) of every active row, at ``version`` (default: latest)."""
    rows = _read(spark, path, version).where("active").select("pattern", "subscriber_id").collect()
    return sorted((row["pattern"], row["subscriber_id"]) for row in rows)


def read_active_arrow(spark: SparkSession, path: str, version: int) -> pa.Table:
    """``pattern``, ``subscriber_id`` of every active row at ``version``, as Arrow (unordered)."""
    return _read(spark, path, version).where("active").select("pattern", "subscriber_id").toArrow()


class ChangesUnavailable(Exception):
    """The change data feed does not cover the asked range (see :func:`read_changes`)."""


#: Delta's error condition for a range the change data feed did not record.
_MISSING_CHANGE_DATA = "DELTA_MISSING_CHANGE_DATA"


def read_changes(spark: SparkSession, path: str, after_version: int, version: int) -> pa.Table:
    """The rows that changed in versions ``(after_version, version]``, each once with its final state.

    Read from Delta's change data feed, so only changed rows are read, not the table. Columns
    ``pattern``, ``subscriber_id``, ``active``: a row whose last change in the range left it active
    is ``active`` (to subscribe), one left inactive or deleted is not (to unsubscribe). Applying
    these to the active set at ``after_version`` gives the active set at ``version``; rows that
    changed and changed back appear too (subscribe and unsubscribe are idempotent).

    Raises :class:`ChangesUnavailable` when the feed did not record part of the range (a table
    created before the feed was enabled, or whose log was cleaned up).
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not after_version < version:
        raise ValueError(f"after_version {after_version} must be below version {version}")
    try:
        feed = delta_tables.read(
            spark,
            path,
            {"readChangeFeed": "true", "startingVersion": after_version + 1, "endingVersion": version},
        )
        images = feed.where(F.col("_change_type") != "update_preimage")
        # Last change per row: the newest commit; within a commit (an overwrite) an insert beats a delete.
        deleted = F.col("_change_type") == "delete"
        last_first = Window.partitionBy(*KEY).orderBy(F.col("_commit_version").desc(), deleted.asc())
        return (
            images.withColumn("_rank", F.row_number().over(last_first))
            .where("_rank = 1")
            .select("pattern", "subscriber_id", (F.col("active") & ~deleted).alias("active"))
            .toArrow()
        )
    except AnalysisException as error:
        condition = error.getCondition() or ""
        if condition == _MISSING_CHANGE_DATA or condition.startswith("DELTA_"):
            raise ChangesUnavailable(f"versions {after_version + 1}..{version}: {condition}") from error
        raise


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The active subscriptions at one table version (what the router broadcasts)."""

    version: int
    pairs: tuple[tuple[str, str], ...]


def read_snapshot(spark: SparkSession, path: str, version: int | None = None) -> Snapshot:
    """Version and active pairs read consistently (the latest version is pinned first)."""
    pinned = latest_version(spark, path) if version is None else version
    return Snapshot(pinned, tuple(read_active(spark, path, pinned)))


def read_rows(
    spark: SparkSession, path: str, version: int | None = None, *, subscriber: str | None = None
) -> dict[tuple[str, str], tuple[bool, int, str]]:
    """Every row (``subscriber``'s only, if given) as {(subscriber, pattern): (active, ts_millis, change_id)}."""
    from pyspark.sql import functions as F

    frame = _read(spark, path, version)
    if subscriber is not None:
        frame = frame.where(F.col("subscriber_id") == subscriber)
    frame = frame.select(
        "subscriber_id", "pattern", "active", F.unix_millis("updated_at").alias("ts_millis"), "change_id"
    )
    return {
        (row["subscriber_id"], row["pattern"]): (row["active"], row["ts_millis"], row["change_id"])
        for row in frame.collect()
    }


# -- validation -------------------------------------------------------------------


def validated_record(outcome: Outcome) -> dict[str, Any]:
    """One row of the validated frame (``VALIDATED_FIELDS``) for an outcome."""
    received = outcome.received
    record: dict[str, Any] = {
        "change_id": received.change_id,
        "source": received.source,
        "raw": received.raw,
        "kafka_topic": received.kafka_topic,
        "kafka_partition": received.kafka_partition,
        "kafka_offset": received.kafka_offset,
        "import_file": None if received.import_file is None else _printable(received.import_file),
        "import_line": received.import_line,
    }
    event = outcome.event
    if event is not None:
        record.update(
            change_id=event.change_id,  # the event's own: an idempotency key replaces the coordinates
            op=event.op.value,
            subscriber_id=event.subscriber,
            pattern=event.pattern,
            ts_millis=event.ts_millis,
            pattern_word_count=event.pattern_word_count,
            has_wildcard=event.has_wildcard,
        )
    else:
        assert outcome.rejection is not None
        raw = received.raw
        record.update(
            reject_reason=outcome.rejection.reason,
            reject_detail=_printable(outcome.rejection.detail),
            raw_text=None if raw is None else raw.decode("utf-8", errors="replace"),
        )
    return record


def _printable(text: str) -> str:
    # Lone surrogates (from file names or JSON escapes) cannot go into Arrow/UTF-8.
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def _validate_arrow(validator: Validator, max_event_bytes: int) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        schema = _arrow_schema()
        for batch in batches:
            columns = batch.to_pydict()
            records = [
                validated_record(
                    judge(kafka_received(topic, partition, offset, value), validator, max_event_bytes=max_event_bytes)
                )
                for value, topic, partition, offset in zip(
                    columns["value"], columns["topic"], columns["partition"], columns["offset"], strict=True
                )
            ]
            yield pa.RecordBatch.from_pylist(records, schema=schema)

    return run


def validate_kafka_batch(batch: DataFrame, validator: Validator, *, max_event_bytes: int) -> DataFrame:
    """Kafka rows (``value``, ``topic``, ``partition``, ``offset``) -> the validated frame."""
    source = batch.select("value", "topic", "partition", "offset")
    return source.mapInArrow(_validate_arrow(validator, max_event_bytes), _struct(VALIDATED_DDL))


def validated_frame(spark: SparkSession, outcomes: Sequence[Outcome]) -> DataFrame:
    """The validated frame for outcomes judged in Python (the import path)."""
    rows = [tuple(record.get(name) for name, _ in VALIDATED_FIELDS) for record in map(validated_record, outcomes)]
    return spark.createDataFrame(rows, schema=_struct(VALIDATED_DDL))


# -- the MERGE --------------------------------------------------------------------


@dataclasses.dataclass
class BatchSummary:
    """What one batch did: outcome counts (kinds of :mod:`events` and reject reasons)."""

    batch_id: int | None
    counts: collections.Counter[str]
    table_version: int
    merged: bool

    @property
    def events(self) -> int:
        return sum(self.counts.values())

    @property
    def rejected(self) -> dict[str, int]:
        known = set(APPLIED_KINDS) | set(NOOP_KINDS)
        return {reason: n for reason, n in sorted(self.counts.items()) if reason not in known}


def _ordered_after(ts: Column, change_id: Column, other_ts: Column, other_change_id: Column) -> Column:
    """(ts, change_id) > (other_ts, other_change_id), the last-writer-wins order."""
    return (ts > other_ts) | ((ts == other_ts) & (change_id > other_change_id))


def _applies_over(ts: Column, change_id: Column, row_ts: Column, row_change_id: Column) -> Column:
    """An event overrides the row: newer by :func:`_ordered_after`, and not a copy of the row's own change (a
    retried keyed event has the row's change id and a later ts)."""
    return _ordered_after(ts, change_id, row_ts, row_change_id) & (change_id != row_change_id)


#: :func:`_applies_over` of a MERGE's event ``s`` over its row ``t``, in SQL (``tests/test_subscription_table``
#: holds the two equal on every ordering case).
APPLIES_OVER_SQL = (
    "(s.updated_at > t.updated_at OR (s.updated_at = t.updated_at AND s.change_id > t.change_id)) "
    "AND s.change_id != t.change_id"
)


def match_cost_column(pattern: Column, max_key_words: int) -> Column:
    """:func:`routing.topic.match_cost` of a pattern column, in Spark SQL (a unit test holds the two equal)."""
    from pyspark.sql import functions as F

    words = F.split(pattern, "[.]", -1)
    count = F.when(pattern == "", F.lit(0)).otherwise(F.size(words)).cast("long")
    first_hash = F.array_position(words, "#")  # 1-based; 0 when there is none
    return F.when(first_hash == 0, count).otherwise((first_hash - 1) + (count - first_hash + 1) * (max_key_words + 1))


@dataclasses.dataclass(frozen=True)
class SubscriberLimits:
    """The per-subscriber limits :func:`decide` applies (from :class:`routing.limits.Limits`)."""

    #: ``max_subscriptions_per_subscriber``.
    count: int
    #: ``max_match_cost_per_subscriber``, or None to leave match cost unchecked.
    match_cost: int | None = None
    #: ``max_key_words``: what a pattern's match cost is counted against.
    max_key_words: int = 32

    @classmethod
    def of(cls, limits: Limits) -> SubscriberLimits:
        return cls(limits.max_subscriptions_per_subscriber, limits.max_match_cost_per_subscriber, limits.max_key_words)


def decide(
    current: DataFrame,
    validated: DataFrame,
    limit: int | SubscriberLimits,
    table_limit: int | None = None,
    *,
    redecide: bool = True,
) -> DataFrame:
    """Each valid event's fate against the table snapshot ``current``, in column ``_kind``.

    Returns the batch's valid events, one row per (subscriber, pattern) winner,
    ``_kind`` one of subscribed/unsubscribed/refreshed/tombstoned/stale/too_many_subscriptions/
    match_cost_exceeded/subscription_table_full, plus ``_holds`` (patterns the subscriber would hold,
    for activations), ``_cost_holds`` (their match cost) and ``_table_holds`` (active rows the table
    would hold, for activations when ``table_limit``).

    ``limit`` is ``max_subscriptions_per_subscriber`` (a bare int leaves match cost unchecked) or
    :class:`SubscriberLimits`; ``table_limit`` (None: unchecked) is ``max_subscriptions_per_table``.

    ``_cost_contended`` marks the activations of subscribers the running totals gave a match-cost
    rejection (those the re-decision below is for). ``redecide=False`` skips that re-decision, and with it
    a Spark job that evaluates the whole plan: the result is exact when no row is ``_cost_contended``, which
    the caller checks on the result it computes anyway (:func:`apply_validated`), deciding again only then.

    Set-based, yet equal to the model's sequential rule (table checked first, then the subscriber's
    count, then its match cost, in ``(ts, change_id)`` order, a rejected subscribe holding nothing):

    * Per subscriber, running totals over its activations in order decide them all at once. That is
      exact until a subscriber's first match-cost rejection, since until then every earlier
      activation was accepted; and a count rejection is final for the rest of the batch. Only the
      subscribers with a match-cost rejection (a cheaper later pattern may still fit) are re-decided
      one by one, on the driver: an abuser's few rows, not the batch.
    * An activation is table-rejected exactly when the table's active rows, minus this batch's
      unsubscribes, plus the activations before it that the per-subscriber rules accept, already
      reach ``table_limit``. Before the first such rejection both rules accept the same events; from
      it on the table stays full, so every later one is rejected.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    limits = limit if isinstance(limit, SubscriberLimits) else SubscriberLimits(limit)
    cost = match_cost_column(F.col("pattern"), limits.max_key_words)
    valid = validated.where(F.col("reject_reason").isNull())
    newest_first = Window.partitionBy(*KEY).orderBy(F.col("ts_millis").desc(), F.col("change_id").desc())
    winners = valid.withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank")
    rows = current.select(
        *KEY,
        F.col("active").alias("_row_active"),
        F.unix_millis("updated_at").alias("_row_ts"),
        F.col("change_id").alias("_row_change_id"),
    )
    joined = winners.join(rows, list(KEY), "left")
    newer = F.col("_row_ts").isNull() | _applies_over(
        F.col("ts_millis"), F.col("change_id"), F.col("_row_ts"), F.col("_row_change_id")
    )
    was_active = F.coalesce(F.col("_row_active"), F.lit(False))
    subscribe = F.col("op") == Op.SUBSCRIBE.value
    kind = (
        F.when(~newer, STALE)
        .when(subscribe & was_active, REFRESHED)
        .when(subscribe, _CANDIDATE)
        .when(was_active, UNSUBSCRIBED)
        .otherwise(TOMBSTONED)
    )
    classified = joined.withColumn("_kind", kind).withColumn("_cost_contended", F.lit(False))
    for column in ("_holds", "_cost_holds", "_table_holds"):
        classified = classified.withColumn(column, F.lit(None).cast("long"))

    held = (
        current.where("active")
        .groupBy("subscriber_id")
        .agg(F.count(F.lit(1)).alias("_held"), F.sum(cost).alias("_held_cost"))
    )
    released = (
        classified.where(F.col("_kind") == UNSUBSCRIBED)
        .groupBy("subscriber_id")
        .agg(F.count(F.lit(1)).alias("_released"), F.sum(cost).alias("_released_cost"))
    )
    oldest_first = Window.partitionBy("subscriber_id").orderBy("ts_millis", "change_id")
    so_far = oldest_first.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    candidates = (
        classified.where(F.col("_kind") == _CANDIDATE)
        .join(held, "subscriber_id", "left")
        .join(released, "subscriber_id", "left")
        .withColumn("_base", F.coalesce("_held", F.lit(0)) - F.coalesce("_released", F.lit(0)))
        .withColumn("_base_cost", F.coalesce("_held_cost", F.lit(0)) - F.coalesce("_released_cost", F.lit(0)))
        .withColumn("_cost", cost)
        .withColumn("_holds", F.col("_base") + F.row_number().over(oldest_first))
        .withColumn("_cost_holds", F.col("_base_cost") + F.sum("_cost").over(so_far))
    )
    over_cost = F.lit(False) if limits.match_cost is None else F.col("_cost_holds") > limits.match_cost
    candidates = candidates.withColumn(
        "_kind",
        F.when(F.col("_holds") > limits.count, TOO_MANY_SUBSCRIPTIONS)
        .when(over_cost, MATCH_COST_EXCEEDED)
        .otherwise(SUBSCRIBED),
    )
    if limits.match_cost is not None:
        contended_subscriber = F.max(F.col("_kind") == MATCH_COST_EXCEEDED).over(Window.partitionBy("subscriber_id"))
        candidates = candidates.withColumn("_cost_contended", contended_subscriber)
        if redecide:
            candidates = _redecide_cost_rejections(candidates, limits)
    candidates = candidates.drop("_held", "_released", "_held_cost", "_released_cost", "_base", "_base_cost", "_cost")
    if table_limit is not None:
        table_held = current.where("active").agg(F.count(F.lit(1)).alias("_table_held"))
        table_released = classified.where(F.col("_kind") == UNSUBSCRIBED).agg(
            F.count(F.lit(1)).alias("_table_released")
        )
        # One global order (bounded by the batch size): activations accepted per subscriber before this one.
        before = Window.orderBy("ts_millis", "change_id").rowsBetween(Window.unboundedPreceding, -1)
        accepted_before = F.coalesce(F.sum(F.when(F.col("_kind") == SUBSCRIBED, 1).otherwise(0)).over(before), F.lit(0))
        candidates = (
            candidates.crossJoin(table_held)
            .crossJoin(table_released)
            .withColumn("_table_holds", F.col("_table_held") - F.col("_table_released") + accepted_before + 1)
            .withColumn(
                "_kind",
                F.when(F.col("_table_holds") > table_limit, SUBSCRIPTION_TABLE_FULL).otherwise(F.col("_kind")),
            )
            .drop("_table_held", "_table_released")
        )
    return classified.where(F.col("_kind") != _CANDIDATE).unionByName(candidates)


def _redecide_cost_rejections(candidates: DataFrame, limits: SubscriberLimits) -> DataFrame:
    """Re-decide, one activation at a time, the subscribers whose running totals hit a match-cost rejection.

    The running totals charge a rejected pattern to the activations after it; the rule does not (a
    rejected subscribe holds nothing). Only these subscribers' activations are collected.
    """
    from pyspark.sql import functions as F

    columns = ["subscriber_id", "pattern", "ts_millis", "change_id", "_base", "_base_cost", "_cost"]
    rows = candidates.where("_cost_contended").select(*columns).collect()
    if not rows:
        return candidates
    assert limits.match_cost is not None
    decisions = []
    accepted: dict[str, tuple[int, int]] = {}
    for row in sorted(rows, key=lambda row: (row["subscriber_id"], row["ts_millis"], row["change_id"])):
        count, spent = accepted.get(row["subscriber_id"], (0, 0))
        holds, cost_holds = row["_base"] + count + 1, row["_base_cost"] + spent + row["_cost"]
        if holds > limits.count:
            kind = TOO_MANY_SUBSCRIPTIONS
        elif cost_holds > limits.match_cost:
            kind = MATCH_COST_EXCEEDED
        else:
            kind = SUBSCRIBED
            accepted[row["subscriber_id"]] = (count + 1, spent + row["_cost"])
        decisions.append((row["subscriber_id"], row["pattern"], kind, holds, cost_holds))
    schema = "subscriber_id STRING, pattern STRING, _fixed_kind STRING, _fixed_holds BIGINT, _fixed_cost_holds BIGINT"
    fixed = candidates.sparkSession.createDataFrame(decisions, schema)
    return (
        candidates.join(fixed, list(KEY), "left")
        .withColumn("_kind", F.coalesce("_fixed_kind", "_kind"))
        .withColumn("_holds", F.coalesce("_fixed_holds", "_holds"))
        .withColumn("_cost_holds", F.coalesce("_fixed_cost_holds", "_cost_holds"))
        .drop("_fixed_kind", "_fixed_holds", "_fixed_cost_holds")
    )


def apply_validated(
    spark: SparkSession,
    validated: DataFrame,
    *,
    table_path: str,
    rejects_path: str,
    validator: Validator,
    txn_app_id: str,
    txn_version: int,
    batch_id: int | None,
    crash: BatchCrash | None = None,
) -> BatchSummary:
    """MERGE one validated batch into the table and append its rejects; see the module doc.

    :class:`routing.streaming.ConcurrentTableChange` (or Delta's own conflict) when another writer
    committed to the table since this batch was decided: run it again
    (:func:`routing.streaming.retry_delta_conflicts`). ``crash`` (tests) kills the job inside the
    MERGE or right after it.
    """
    from pyspark.sql import functions as F

    limit = SubscriberLimits.of(validator.limits)
    table_limit = validator.limits.max_subscriptions_per_table
    validated = validated.persist()
    try:
        version = latest_version(spark, table_path)
        current = _read(spark, table_path, version)
        # Decided without the match-cost re-decision first: exact unless a subscriber is cost-contended (rare),
        # and then decided again with it. The common batch is spared a job that evaluates the whole plan.
        decided = decide(current, validated, limit, table_limit, redecide=False).persist()
        try:
            by_kind = decided.groupBy("_kind", "_cost_contended").count().collect()
            if any(row["_cost_contended"] for row in by_kind):
                decided.unpersist()
                decided = decide(current, validated, limit, table_limit).persist()
                by_kind = decided.groupBy("_kind", "_cost_contended").count().collect()
            counts: collections.Counter[str] = collections.Counter()
            for row in by_kind:
                counts[row["_kind"]] += row["count"]
            # decide() keeps one winner per row; every other valid event was superseded.
            winners = sum(counts.values())
            for row in validated.groupBy("reject_reason").count().collect():
                if row["reject_reason"] is None:
                    counts[SUPERSEDED] = row["count"] - winners
                else:
                    counts[row["reject_reason"]] = row["count"]
            counts = +counts  # drop zero counts

            merged = False
            if any(counts[kind] for kind in APPLIED_KINDS):
                changes = decided.where(F.col("_kind").isin(*APPLIED_KINDS)).select(
                    *KEY,
                    (F.col("op") == Op.SUBSCRIBE.value).alias("active"),
                    F.timestamp_millis("ts_millis").alias("updated_at"),
                    "change_id",
                    "source",
                    F.current_timestamp().alias("applied_at"),
                    "pattern_word_count",
                    "has_wildcard",
                )
                if crash is not None:
                    changes = crash.in_merge(changes)
                # The limits were decided against `version`: a commit since then (a writer outside this run's
                # lease) could make them wrong, so decide again. One after the MERGE has started is Delta's conflict.
                if latest_version(spark, table_path) != version:
                    raise ConcurrentTableChange(f"{table_path} changed after version {version}, which this batch read")
                # Re-checked here, not only in decide(): a concurrent writer can never be overwritten by older data.
                delta_tables.merge(
                    table_path,
                    changes,
                    "ON t.subscriber_id = s.subscriber_id AND t.pattern = s.pattern "
                    f"WHEN MATCHED AND ({APPLIES_OVER_SQL}) THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
                )
                merged = True
                if crash is not None:
                    crash(AFTER_MERGE)

            if sum(counts.values()) - sum(counts[kind] for kind in (*APPLIED_KINDS, *NOOP_KINDS)):
                _append_rejects(
                    spark, validated, decided, rejects_path, (limit, table_limit), txn_app_id, txn_version, batch_id
                )
        finally:
            decided.unpersist()
    finally:
        validated.unpersist()
    return BatchSummary(batch_id, counts, latest_version(spark, table_path) if merged else version, merged)


def _append_rejects(
    spark: SparkSession,
    validated: DataFrame,
    decided: DataFrame,
    rejects_path: str,
    limits: tuple[SubscriberLimits, int],
    txn_app_id: str,
    txn_version: int,
    batch_id: int | None,
) -> None:
    from pyspark.sql import functions as F

    invalid = validated.where(F.col("reject_reason").isNotNull()).select(
        "change_id",
        F.col("reject_reason").alias("reason"),
        F.col("reject_detail").alias("detail"),
        "source",
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "import_file",
        "import_line",
        "raw",
        "raw_text",
        F.lit(None).cast("string").alias("op"),
        F.lit(None).cast("string").alias("subscriber_id"),
        F.lit(None).cast("string").alias("pattern"),
        F.lit(None).cast("timestamp").alias("ts"),
    )
    limit, table_limit = limits
    over_limit = decided.where(
        F.col("_kind").isin(TOO_MANY_SUBSCRIPTIONS, MATCH_COST_EXCEEDED, SUBSCRIPTION_TABLE_FULL)
    ).select(
        "change_id",
        F.col("_kind").alias("reason"),
        F.when(
            F.col("_kind") == SUBSCRIPTION_TABLE_FULL,
            F.format_string(
                "the subscription table would hold %d active subscriptions (limit max_subscriptions_per_table=%d)"
                " [reason=%s]",
                F.col("_table_holds"),
                F.lit(table_limit),
                F.lit(SUBSCRIPTION_TABLE_FULL),
            ),
        )
        .when(
            F.col("_kind") == MATCH_COST_EXCEEDED,
            F.format_string(
                "subscriber '%s' would hold patterns of match cost %d (limit max_match_cost_per_subscriber=%d)"
                " [reason=%s]",
                F.col("subscriber_id"),
                F.col("_cost_holds"),
                F.lit(limit.match_cost),
                F.lit(MATCH_COST_EXCEEDED),
            ),
        )
        .otherwise(
            F.format_string(
                "subscriber '%s' would hold %d patterns (limit max_subscriptions_per_subscriber=%d) [reason=%s]",
                F.col("subscriber_id"),
                F.col("_holds"),
                F.lit(limit.count),
                F.lit(TOO_MANY_SUBSCRIPTIONS),
            )
        )
        .alias("detail"),
        "source",
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "import_file",
        "import_line",
        "raw",
        F.col("raw").cast("string").alias("raw_text"),
        "op",
        "subscriber_id",
        "pattern",
        F.timestamp_millis("ts_millis").alias("ts"),
    )
    rejects = invalid.unionByName(over_limit).select(
        "*",
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.current_timestamp().alias("rejected_at"),
    )
    # Idempotent: Delta skips this append if (app id, version) already committed.
    idempotent_append(rejects, rejects_path, txn_app_id, txn_version)


# -- summaries --------------------------------------------------------------------


def total_counts(summaries: Iterable[BatchSummary]) -> collections.Counter[str]:
    totals: collections.Counter[str] = collections.Counter()
    for summary in summaries:
        totals.update(summary.counts)
    return totals

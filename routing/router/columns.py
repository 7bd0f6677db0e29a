"""The column expressions of a batch's frames: from the Kafka source through classification and the UDF's
verdict to the rows of each output table, and :class:`BatchPlan`, which builds the hot path's once per router."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from routing.jvm import spark_jvm
from routing.router.classify import classify_projections
from routing.router.metrics import observed_metrics, reason_metrics
from routing.router.tables import PARTITION_COLUMN
from udfs.route import FANOUT_REASON, KIND_DEAD_LETTER, KIND_DELIVERY, KIND_UNROUTED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from routing.router.snapshots import Published
    from routing.settings import RouterSettings
    from routing.validation import Validator

#: Columns of the Kafka source the router keeps (``timestampType`` is dropped).
SOURCE_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
CLASSIFIED_DDL = f"{SOURCE_DDL}, routing_key STRING, reason STRING, rule STRING"
SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")
CLASSIFIED_COLUMNS = (*SOURCE_COLUMNS, "routing_key", "reason", "rule")
#: The UDF's per-message columns (see ``udfs.route``) that a judged frame carries besides the classified ones.
ROUTE_COLUMNS = ("subscribers", "fanout")


def judged_columns(max_fanout: int) -> list[Column]:
    """A judged frame's columns over a routed one (the classified columns plus the UDF's struct ``route``).

    The UDF's columns (``subscribers``, ``fanout``) and each message's ``kind``; over-limit fan-outs
    become dead letters (``reason``/``rule`` name the rule). They depend on the limit only, so
    :class:`BatchPlan` builds them once.
    """
    from pyspark.sql import functions as F

    fanout = F.col("route.fanout")
    over_limit = F.coalesce(fanout > F.lit(max_fanout), F.lit(False))
    reason = F.when(over_limit, F.lit(FANOUT_REASON)).otherwise(F.col("reason"))
    rule = F.when(over_limit, F.lit(f"max_fanout={max_fanout}")).otherwise(F.col("rule"))
    # ``reason`` above is not null exactly when the fan-out is over the limit or classification judged the record.
    kind = (
        F.when(over_limit | F.col("reason").isNotNull(), F.lit(KIND_DEAD_LETTER))
        .when(fanout == 0, F.lit(KIND_UNROUTED))
        .otherwise(F.lit(KIND_DELIVERY))
    )
    return [
        *(F.col(name) for name in SOURCE_COLUMNS),
        F.col("routing_key"),
        reason.alias("reason"),
        rule.alias("rule"),
        *[F.col(f"route.{name}").alias(name) for name in ROUTE_COLUMNS],
        kind.alias("kind"),
    ]


def routed_frame(classified: DataFrame, route: Column) -> DataFrame:
    """``classified`` plus the UDF's struct ``route`` (``route`` is the UDF applied to ``routing_key``)."""
    return classified.select(*CLASSIFIED_COLUMNS, route.alias("route"))


def judged_frame(classified: DataFrame, route: Callable[[Column], Column], max_fanout: int) -> DataFrame:
    """``classified`` plus the UDF's columns and each message's ``kind`` (:func:`judged_columns`).

    One row per input record (the UDF is row-aligned).
    """
    from pyspark.sql import functions as F

    return routed_frame(classified, route(F.col("routing_key"))).select(*judged_columns(max_fanout))


def judged_in_jvm(classified: DataFrame) -> DataFrame:
    """The dead letters of ``classified`` that classification alone decided (no UDF, no fan-out)."""
    from pyspark.sql import functions as F

    return classified.where(F.col("reason").isNotNull()).select(
        *CLASSIFIED_COLUMNS, F.lit(None).cast("int").alias("fanout"), F.lit(KIND_DEAD_LETTER).alias("kind")
    )


def _fan_out_columns() -> list[Column]:
    """The columns of :func:`fanned_out`.

    The subscribers of a message that is not a delivery are exploded as null, which gives no row: the
    filter is in the generator, so a batch's plan is one frame (one analysis by Spark) shorter.
    """
    from pyspark.sql import functions as F

    columns = [*(F.col(name) for name in SOURCE_COLUMNS), F.col("routing_key")]
    delivered = F.when(F.col("kind") == F.lit(KIND_DELIVERY), F.col("subscribers"))
    return [*columns, F.explode(delivered).alias("subscriber_id")]


def fanned_out(judged: DataFrame) -> DataFrame:
    """One row per (delivered message, subscriber): ``subscriber_id`` exploded from the message's list."""
    return judged.select(*_fan_out_columns())


def batch_constant(value: object, data_type: str, index: Column) -> Column:
    """``value`` (one per batch: a version, a batch id, a time) as a column the generated code does not spell out.

    Spark writes a ``bigint`` or ``timestamp`` literal into the Java source of its whole-stage code,
    and caches the compiled classes by that source. A literal batch id or ``current_timestamp()``
    therefore made the deliveries' code new in every batch: Janino compiled it again and the JIT
    warmed it from the interpreter again. In an interleaved A/B of one 100k-record batch the
    deliveries write took 1,868 ms so, and 1,472 ms as here. An array literal is passed to the code
    by reference instead, and ``index``, a :func:`batch_index` computed from a column, keeps the
    optimizer from folding the lookup back into a literal, so the code is the same in every batch
    and compiled once.
    """
    from pyspark.sql import functions as F

    return F.element_at(F.array(F.lit(value).cast(data_type)), index)


def batch_index() -> Column:
    """1, computed from ``partition`` (a column of every output frame, never null), so it is not a constant."""
    from pyspark.sql import functions as F

    return F.lit(1) + F.col("partition") * F.lit(0)


def batch_columns(
    version: int, batch_id: int, routed_at: datetime.datetime | None = None, index: Column | None = None
) -> list[Column]:
    """``snapshot_version``, ``batch_id`` and ``routed_at`` (the driver's UTC time when not given): the output
    rows' only per-batch columns, each a :func:`batch_constant` (``index``: a prebuilt :func:`batch_index`)."""
    index = batch_index() if index is None else index
    return [
        batch_constant(value, data_type, index).alias(name)
        for name, value, data_type in batch_values(version, batch_id, routed_at)
    ]


def batch_values(
    version: int, batch_id: int, routed_at: datetime.datetime | None = None
) -> tuple[tuple[str, object, str], ...]:
    """(column, value, type) of each :func:`batch_columns` column; ``routed_at``: the driver's UTC time when None."""
    at = routed_at if routed_at is not None else datetime.datetime.now(datetime.UTC)
    return (("snapshot_version", version, "bigint"), ("batch_id", batch_id, "bigint"), ("routed_at", at, "timestamp"))


def _source_parts() -> tuple[list[Column], list[Column]]:
    """The output columns taken from the source row, before and after the :func:`batch_columns`."""
    from pyspark.sql import functions as F

    before = {
        "source_topic": F.col("topic"),
        "source_partition": F.col("partition"),
        "source_offset": F.col("offset"),
        "kafka_timestamp": F.col("timestamp"),
        "payload": F.col("value"),
        "headers": F.col("headers"),
    }
    return [column.alias(name) for name, column in before.items()], [
        F.to_date(F.col("timestamp")).alias(PARTITION_COLUMN)
    ]


#: The source columns of every output table, in order (:func:`_source_parts` around the :func:`batch_columns`).
SOURCE_OUTPUT_COLUMNS = (
    "source_topic",
    "source_partition",
    "source_offset",
    "kafka_timestamp",
    "payload",
    "headers",
    "snapshot_version",
    "batch_id",
    "routed_at",
    PARTITION_COLUMN,
)


def _source_columns(version: int, batch_id: int, routed_at: datetime.datetime | None) -> dict[str, Column]:
    before, after = _source_parts()
    columns = [*before, *batch_columns(version, batch_id, routed_at), *after]
    return dict(zip(SOURCE_OUTPUT_COLUMNS, columns, strict=True))


def source_id(columns: Sequence[str]) -> Column:
    """An output row's id from its source ``columns`` (routing.router.tables, Delivery ids): their text joined by
    ``|``."""
    from pyspark.sql import functions as F

    return F.concat_ws("|", *columns)


def _delivery_parts() -> tuple[list[Column], list[Column]]:
    """The deliveries' columns before and after the :func:`batch_columns` (see :func:`deliveries_frame`)."""
    from pyspark.sql import functions as F

    delivery_id = source_id(("topic", "partition", "offset", "subscriber_id"))
    before, after = _source_parts()
    return [delivery_id.alias("delivery_id"), F.col("subscriber_id"), F.col("routing_key"), *before], after


def deliveries_frame(
    fanned: DataFrame,
    version: int,
    batch_id: int,
    routed_at: datetime.datetime | None = None,
) -> DataFrame:
    """Deliveries rows from a frame with one row per (message, ``subscriber_id``) (see :func:`fanned_out`)."""
    before, after = _delivery_parts()
    return fanned.select(*before, *batch_columns(version, batch_id, routed_at), *after)


def dead_letters_frame(
    judged: DataFrame,
    version: int,
    batch_id: int,
    routed_at: datetime.datetime | None = None,
) -> DataFrame:
    from pyspark.sql import functions as F

    source = _source_columns(version, batch_id, routed_at)
    dead_letter_id = source_id(("topic", "partition", "offset"))
    columns = {**source, "raw_key": F.col("key")}
    order = ["source_topic", "source_partition", "source_offset", "kafka_timestamp", "raw_key", "payload", "headers"]
    rest = ["snapshot_version", "batch_id", "routed_at", PARTITION_COLUMN]
    return judged.where(F.col("kind") == KIND_DEAD_LETTER).select(
        dead_letter_id.alias("dead_letter_id"),
        F.col("reason"),
        F.col("rule"),
        F.col("fanout"),
        *[columns[name].alias(name) for name in order + rest],
    )


def unrouted_frame(
    judged: DataFrame, version: int, batch_id: int, routed_at: datetime.datetime | None = None
) -> DataFrame:
    from pyspark.sql import functions as F

    source = _source_columns(version, batch_id, routed_at)
    return judged.where(F.col("kind") == KIND_UNROUTED).select(
        F.col("routing_key"), *[column.alias(name) for name, column in source.items()]
    )


class Projection:
    """A ``select`` of fixed columns whose JVM ``Seq`` is built on first use and reused by every batch.

    ``frame.select(*columns)`` builds the ``Seq`` it hands the JVM afresh, and py4j makes a round trip per
    column to fill it: about 120 of the ~240 round trips a batch's plan made (a profile of
    ``BatchPlan``'s frames over an empty source: 86 ``add`` calls and their ``ArrayList``/``toSeq``
    calls). Here a select is one round trip (:meth:`routing.jvm.SparkJvm.select`). :meth:`with_inserted`
    adds a batch's own columns to a copy made in the JVM. Where :func:`routing.jvm.spark_jvm` is None
    (Spark Connect, an untested Spark) it is the plain select.
    """

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = tuple(columns)
        # Built on first use (from the JVM of the frame it is used with), then only read: a race builds it twice.
        self._jcolumns: tuple[Any, Any] | None = None

    def __call__(self, frame: DataFrame) -> DataFrame:
        return self.with_inserted(frame, 0, ())

    def with_inserted(self, frame: DataFrame, at: int, extra: Sequence[Any]) -> DataFrame:
        """``frame.select(*columns[:at], *extra, *columns[at:])`` (``extra``: Python columns, or the JVM
        columns of :meth:`routing.jvm.SparkJvm.batch_constants`)."""
        internals = spark_jvm(frame.sparkSession)
        if internals is None:
            return frame.select(*self.columns[:at], *extra, *self.columns[at:])
        if self._jcolumns is None:
            self._jcolumns = internals.column_list(self.columns)
        return internals.select(frame, self._jcolumns, at, extra)


class BatchPlan:
    """The column expressions of a batch's hot path, built once per router and reused by every batch.

    Each node of a column expression is a round trip from Python to the JVM. Rebuilding
    classification, judging, the counters and the deliveries' columns for every batch took about
    2,100 round trips per batch (0.3 s of driver time per batch on the shared 2-core machine, at any
    batch size: more than the passthrough's whole Spark job for a 2,000-message batch); reused, a whole
    batch (ledger, append and warm included) made about 420, and with each select's JVM column list
    built once (:class:`Projection`) and the batch's constants made without PySpark's call-origin
    bookkeeping (:meth:`routing.jvm.SparkJvm.batch_constants`) it makes 170-260. Only what changes is built
    per batch: the
    three :func:`batch_columns` (snapshot version, batch id, routing time) and, when the published
    snapshot changes, the UDF's projection. The frames are the same as those
    :func:`classify`, :func:`judged_frame`, :func:`fanned_out` and :func:`deliveries_frame` build.
    """

    def __init__(self, router: RouterSettings, validator: Validator) -> None:
        from pyspark.sql import functions as F

        self._classify = [Projection(columns) for columns in classify_projections(router, validator, SOURCE_COLUMNS)]
        self._classified = [F.col(name) for name in CLASSIFIED_COLUMNS]
        self._routing_key = F.col("routing_key")
        self._judge = Projection(judged_columns(validator.limits.max_fanout))
        self.metrics = observed_metrics()
        self.reason_metrics = reason_metrics()
        self._fan_out = Projection(_fan_out_columns())
        before, after = _delivery_parts()
        self._deliveries = Projection([*before, *after])
        self._batch_at = len(before)
        self._batch_index = batch_index()
        self._route: tuple[Published, Projection] | None = None

    def classified(self, batch: DataFrame) -> DataFrame:
        """``batch`` (the source columns) classified: what ``classify(batch).select(*CLASSIFIED_COLUMNS)`` is."""
        for projection in self._classify:
            batch = projection(batch)
        return batch

    def route_column(
        self, published: Published, make_udf: Callable[[Published], Callable[[Column], Column]]
    ) -> Projection:
        """The classified columns plus the UDF of ``published`` on ``routing_key``, aliased ``route`` (rebuilt
        when the snapshot changes)."""
        if self._route is None or self._route[0] is not published:
            route = make_udf(published)(self._routing_key).alias("route")
            self._route = (published, Projection([*self._classified, route]))
        return self._route[1]

    def judged(self, classified: DataFrame, routed: Projection) -> DataFrame:
        """What :func:`judged_frame` makes of ``classified`` with the UDF's projection ``routed``
        (:meth:`route_column`)."""
        return self._judge(routed(classified))

    def deliveries(
        self, judged: DataFrame, version: int, batch_id: int, routed_at: datetime.datetime | None = None
    ) -> DataFrame:
        """``deliveries_frame(fanned_out(judged), version, batch_id, routed_at)``."""
        fanned = self._fan_out(judged)
        internals = spark_jvm(fanned.sparkSession)
        if internals is None:
            batch: list[Any] = batch_columns(version, batch_id, routed_at, self._batch_index)
        else:
            batch = internals.batch_constants(batch_values(version, batch_id, routed_at), self._batch_index)
        return self._deliveries.with_inserted(fanned, self._batch_at, batch)

"""The real-time lane: Kafka to Kafka in Spark's Real-Time Mode, each message matched as it arrives.

Real-Time Mode (Spark 4.1+, ``trigger(realTime=...)``) runs one long-lived task per Kafka partition that
streams records through without waiting for a micro-batch; its "batch" is only a checkpoint interval
(``router.real_time_interval``). It plans a fixed list of operators (Spark's ``RealTimeModeAllowlist``):
projections, filters, ``explode``, ``observe`` and a few more, into a Kafka sink, and no Python UDF. So this
lane is the micro-batch lane's plan with the match moved into the JVM::

    Kafka source -> classify        the key rules as SQL (routing/router/classify.py), as in the micro-batch lane
                 -> route_key(key)  the Java UDF over the native core (udfs/jvm, native/jvm): the same matcher
                 -> judged          the fan-out limit and each message's kind (routing/router/columns.py)
                 -> observe         the conservation counters (routing/router/metrics.py), per checkpoint interval
                 -> explode         one record per output
                 -> Kafka sink      the topic chosen per record

One query, one sink. Its records:

==============  ========================================  ======================  =====================================
output          topic                                     key                     headers, in order
==============  ========================================  ======================  =====================================
delivery        ``router.kafka_sink_topic`` (a topic or   ``topic|partition|      ``delivery_id``, ``snapshot_version``,
                a ``{subscriber}`` template:              offset|subscriber``     then the source's
                :mod:`routing.kafka_sink`)
dead letter     ``router.dead_letter_topic``              ``topic|partition|      ``dead_letter_id``, ``reason``,
                                                          offset``                ``rule``, ``snapshot_version``, then
                                                                                  the source's
unrouted        ``router.unrouted_topic`` (empty: only    ``topic|partition|      ``unrouted_id``, ``snapshot_version``,
                counted)                                  offset``                then the source's
==============  ========================================  ======================  =====================================

The value is the message's payload, unchanged. A source header named like one of the router's (in any letter
case) is renamed ``source.<key>``, so no producer can plant a second ``delivery_id`` (:mod:`routing.kafka_sink`).

**Snapshots.** The driver's refresh thread (:class:`routing.router.snapshots.SnapshotBroadcasts`, file transport)
keeps the live CS-trie current and writes each new version's snapshot file before publishing it; the UDF in each
executor JVM loads the newest file once, and a background thread there looks for a newer one every
``router.refresh_interval_s`` (never per row) and swaps it in without stopping the query. Each record carries the
version it was matched with.

**Semantics.** At-least-once: after a crash the query restarts from its last checkpoint, and the records
since then are routed again, with the same ids (the ids are the message's coordinates and the subscriber, never a
time or a counter). A consumer deduplicates on ``delivery_id`` over a window longer than the checkpoint interval.
A message may be matched with a snapshot a version older or newer than the micro-batch lane would have used for
it: the lanes pick up a publish independently, each within its refresh interval.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from routing import delta_tables, kafka_sink
from routing.checkpoints import CheckpointLease
from routing.jvm import register_route_key
from routing.router.classify import classify
from routing.router.columns import CLASSIFIED_COLUMNS, SOURCE_COLUMNS, judged_columns, source_id
from routing.router.listener import ProgressListener
from routing.router.metrics import metrics_log, observed_metrics
from routing.router.snapshot_files import open_snapshot_files
from routing.router.snapshots import SnapshotBroadcasts
from routing.streaming import kafka_source
from routing.subscriptions import create_table_if_absent
from udfs.route import KIND_DEAD_LETTER, KIND_DELIVERY, KIND_UNROUTED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from routing.settings import RouterSettings, Settings

log = logging.getLogger(__name__)

#: Milliseconds an executor's UDF waits for the first snapshot file (the driver writes it before the query starts).
FIRST_SNAPSHOT_WAIT_MS = 60_000
#: The observation's name in the query's progress (``observedMetrics``).
OBSERVATION = "router"


def udf_name(router: RouterSettings) -> str:
    """The name the UDF is registered under: one per router (a readable part of its app id and a hash of all of
    it, so ``a-b`` and ``a_b`` differ), so two routers in one session never share one."""
    safe = "".join(char if char.isascii() and char.isalnum() else "_" for char in router.app_id)[:40]
    return f"route_key_{safe}_{hashlib.sha256(router.app_id.encode()).hexdigest()[:12]}"


def routed_records(classified: DataFrame, route: Column, max_fanout: int) -> DataFrame:
    """The judged frame of ``classified`` (:func:`routing.router.columns.judged_columns`) plus the version each
    message was matched with; ``route`` is the UDF's struct for the row."""
    from pyspark.sql import functions as F

    routed = classified.select(*CLASSIFIED_COLUMNS, route.alias("route"))
    version = F.col("route.snapshot_version").alias("snapshot_version")
    return routed.select(*judged_columns(max_fanout), version)


def kafka_records(judged: DataFrame, router: RouterSettings) -> DataFrame:
    """One Kafka record (``topic``, ``key``, ``value``, ``headers``) per output of each judged message.

    One ``explode``: a delivered message's subscribers, a null for a dead letter (and an unrouted message when
    ``router.unrouted_topic`` is set), nothing otherwise; then one projection chooses each record's topic, key
    and headers by the message's kind.
    """
    from pyspark.sql import functions as F

    kind = F.col("kind")
    targets = F.when(kind == KIND_DELIVERY, F.col("subscribers")).when(
        kind == KIND_DEAD_LETTER, F.array(F.lit(None).cast("string"))
    )
    if router.unrouted_topic:
        targets = targets.when(kind == KIND_UNROUTED, F.array(F.lit(None).cast("string")))
    exploded = judged.select(
        *SOURCE_COLUMNS, "reason", "rule", "snapshot_version", "kind", F.explode(targets).alias("subscriber_id")
    )
    message_id = source_id(("topic", "partition", "offset"))
    delivery = kind == KIND_DELIVERY
    topic = F.when(delivery, kafka_sink.topic_column(router.kafka_sink_topic)).when(
        kind == KIND_DEAD_LETTER, F.lit(router.dead_letter_topic)
    )
    topic = topic.otherwise(F.lit(router.unrouted_topic))
    key = F.when(delivery, source_id(("topic", "partition", "offset", "subscriber_id"))).otherwise(message_id)
    with_ids = exploded.select(
        "*",
        topic.alias("_topic"),
        key.alias("delivery_id"),
        message_id.alias("dead_letter_id"),
        message_id.alias("unrouted_id"),
    )
    headers = (
        F.when(delivery, kafka_sink.headers_column(kafka_sink.ROUTER_HEADERS))
        .when(kind == KIND_DEAD_LETTER, kafka_sink.headers_column(kafka_sink.DEAD_LETTER_HEADERS))
        .otherwise(kafka_sink.headers_column(kafka_sink.UNROUTED_HEADERS))
    )
    return with_ids.select(
        F.col("_topic").alias("topic"),
        F.col("delivery_id").cast("binary").alias("key"),
        F.col("value"),
        headers.alias("headers"),
    )


def records_stream(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    """The real-time query's frame: the Kafka source through every step of the module docs."""
    router = settings.router
    source = kafka_source(
        spark,
        settings,
        topics=() if router.subscribe_pattern else router.topics,
        pattern=router.subscribe_pattern,
        starting_offsets=router.starting_offsets,
        max_offsets_per_trigger=None,
        fail_on_data_loss=router.fail_on_data_loss,
        include_headers=True,
    ).select(*SOURCE_COLUMNS)
    from pyspark.sql import functions as F

    validator = settings.validator()
    classified = classify(source, router, validator).select(*CLASSIFIED_COLUMNS)
    route = F.call_function(name, F.col("routing_key").cast("binary"))
    judged = routed_records(classified, route, validator.limits.max_fanout)
    observed = judged.observe(OBSERVATION, *observed_metrics())
    return kafka_records(observed, router)


def conservation(progress: dict[str, Any], counts: dict[str, int], router: RouterSettings) -> dict[str, Any]:
    """Whether an interval's records add up: the messages the source read are the ones observed, and the
    records the sink wrote are the deliveries, the dead letters and (when written) the unrouted messages.
    ``conserved`` is None where the progress lacks a figure."""
    read = progress.get("numInputRows")
    written = progress.get("sink", {}).get("numOutputRows", -1)
    expected = counts["deliveries"] + counts["dead_letters"] + (counts["unmatched"] if router.unrouted_topic else 0)
    if read is None or written is None or written < 0:
        return {"conserved": None, "records_written": written, "records_expected": expected}
    return {
        "conserved": read == counts["input_rows"] and written == expected,
        "records_written": written,
        "records_expected": expected,
    }


class RealTimeRouter:
    """The real-time lane's driver: the snapshot publisher, the UDF registration and the query."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        router = settings.router
        table_path = settings.subscriptions.table_path
        create_table_if_absent(spark, table_path)
        table_id = delta_tables.table_id(spark, table_path)
        files = open_snapshot_files(router, delta_tables.location(spark, table_path), table_id)
        if files is None:
            raise RuntimeError(
                "the real-time lane ships snapshots as snapshot files: set router.snapshot_files_path to a "
                "directory the driver can write and every executor can read"
            )
        self.files = files
        self.snapshots = SnapshotBroadcasts(
            spark, table_path, refresh_interval_s=router.refresh_interval_s, files=files, transport="file"
        )
        self.name = udf_name(router)
        self.query: StreamingQuery | None = None
        self.listener: ProgressListener | None = None
        #: This router's hold on its checkpoint, from :meth:`start` to :meth:`close` (the micro-batch lane's lease).
        self.lease: CheckpointLease | None = None
        self._lock = threading.Lock()
        #: The observed counters summed over every checkpoint interval of this run, and the intervals.
        self.totals: dict[str, int] = {}
        self.intervals = 0

    def start(self) -> StreamingQuery:
        """Hold the checkpoint, publish the first snapshot (its file), register the UDF and start the query.

        :class:`routing.checkpoints.CheckpointBusy` when a live router holds the checkpoint: nothing has started
        then. Real-Time Mode's tasks write without a per-batch hook, so a router that loses its lease later is
        stopped by its job's loop (``jobs/route.py``) within a second of the heartbeat noticing.
        """
        router = self.settings.router
        self.lease = CheckpointLease.acquire(self.spark, router.checkpoint_path, job="router", name=router.app_id)
        try:
            self.snapshots.maybe_refresh(force=True)
            register_route_key(
                self.spark,
                self.name,
                self.files.directory,
                self.files.table_id,
                refresh_ms=max(1, round(router.refresh_interval_s * 1000)),
                first_wait_ms=FIRST_SNAPSHOT_WAIT_MS,
                max_fanout=self.settings.validator().limits.max_fanout,
            )
            self.listener = ProgressListener(self.spark, self.log_progress)
            self.spark.streams.addListener(self.listener)
            records = records_stream(self.spark, self.settings, self.name)
            self.query = (
                records.writeStream.format("kafka")
                .options(**self.settings.spark_kafka_options())
                .option("checkpointLocation", router.checkpoint_path)
                .outputMode("update")
                .queryName(f"router-real-time:{router.app_id}")
                .trigger(realTime=router.real_time_interval)  # type: ignore[call-overload]  # not in 4.2's overloads
                .start()
            )
        except BaseException:
            self.lease.release()
            self.lease = None
            raise
        self.lease.bind(str(self.query.id))
        log.info("snapshot version %s published for the real-time query", self.snapshots.current_version)
        return self.query

    def log_progress(self, progress: dict[str, Any]) -> None:
        """One checkpoint interval's counters (the observation), logged as one JSON line and summed."""
        observed = progress.get("observedMetrics", {}).get(OBSERVATION)
        if observed is None:
            return
        counts = {name: int(value or 0) for name, value in observed.items()}
        with self._lock:
            self.intervals += 1
            for name, value in counts.items():
                self.totals[name] = self.totals.get(name, 0) + value
        metrics_log.info(
            "%s",
            {
                "batch_id": progress.get("batchId"),
                "lane": "real_time",
                **conservation(progress, counts, self.settings.router),
                **counts,
            },
        )

    def run_summary(self) -> dict[str, Any]:
        with self._lock:
            return {"lane": "real_time", "intervals": self.intervals, **self.totals}

    def close(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self.listener is not None:
            self.spark.streams.removeListener(self.listener)
        self.snapshots.close()
        if self.lease is not None:  # last: the query has stopped writing
            self.lease.release()
            self.lease = None

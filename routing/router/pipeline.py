"""The streaming router: Kafka in, a broadcast CS-trie snapshot, the Arrow UDF, Delta out.

One micro-batch, in ``foreachBatch`` on the driver (:meth:`Router.process_batch`):

1. **Pin a snapshot version.** A batch id already in the ledger (a batch Spark
   re-executes after a crash) routes with its recorded version; a new batch id
   routes with the current version (checked against the subscription table at
   most every ``refresh_interval_s``) and is recorded in the ledger *before*
   anything else is written (:mod:`routing.router.ledger`: one write-once file,
   no Spark job).
2. **Classify** every record in the JVM (:mod:`routing.router.classify`).
3. **Match** with a scalar Arrow UDF (:mod:`udfs.route`) over the routing key
   alone, with the broadcast frozen matcher of that version; the rest of the
   row stays in the JVM.
4. **Fan out and write** in one pass: the deliveries (an ``explode`` of each
   message's subscribers) are appended to Delta idempotently (``txnAppId`` =
   app id + ``":"`` + query id, ``txnVersion`` = batch id; :mod:`routing.appends`,
   which the refresh job shares), and that very write counts every
   outcome: the UDF adds them to an accumulator from the rows it returns
   (:class:`udfs.route.UdfStats`; on Spark Connect, which has no accumulators,
   an ``Observation`` on the write), and the dead letters' own write counts
   their classification reasons. Only a batch that has dead letters (or
   unmatched messages, when they are written) reads its input a second time
   to write them; a batch whose only dead letters were judged in the JVM
   writes them without the UDF. Deliveries optionally go to Kafka too, published from the same cached
   rows beside the Delta write (:meth:`Router._publish_beside`).
5. **Measure**: the counts, per-stage timers (:class:`routing.router.metrics.StageTimer`) and the
   query's progress make one JSON line per batch (``StreamingQueryListener``).

So the common batch (no dead letters) costs one pass over its input, one Delta
commit and one small ledger file. Its first attempt appends with
:func:`routing.appends.first_append` (on a table by path, classic Spark): the commit
carries the batch's ``txn`` action like the public writer's, without the public writer's
check of it, which would reconstruct the table's state (three Spark jobs): the ledger
entry this attempt created proves no earlier attempt wrote. So its path from trigger to
visible commit is one Spark job. Through the public writer (catalog table names, and
re-executed batches), the state the next batch's check needs is computed once this batch has
committed (:class:`routing.appends.AppendStateWarmer`, in line or in the background:
:func:`warm_in_background`), to the same effect. A batch Spark
re-executes (its id is in the ledger) takes the careful path: a counting pass first,
then every output with rows through the public writer, each skipped by Delta if that
write had committed.

Conservation: every input record becomes exactly one of {one or more
deliveries, one dead letter, one unrouted record}.

On Spark Connect (``spark.remote``) the same batch runs in the server's ``foreachBatch`` worker: the
job's :meth:`Router.start` holds the lease and starts the query with
:class:`routing.router.connect.ConnectBatches`, which builds a router in that worker at its first batch.
There the snapshot travels as its snapshot file (no broadcasts), the UDF's figures stay 0 (no
accumulators), nothing is warmed (no JVM access), and each batch leaves its report in the checkpoint for
the job (:func:`routing.router.connect.batch_records`).

One router per checkpoint: :meth:`Router.start` takes a lease on the checkpoint
(:mod:`routing.checkpoints`), so a second router there, in any process on any
machine, fails to start with :class:`routing.checkpoints.CheckpointBusy`; and a
router whose lease was taken over fails its next batch before writing anything.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, cast

from routing import delta_tables, kafka_sink
from routing.appends import AppendStateWarmer, append_once
from routing.checkpoints import CheckpointLease, first_batch_of_run
from routing.errors import DEAD_LETTER_REASONS
from routing.jvm import spark_jvm
from routing.router.columns import SOURCE_COLUMNS, BatchPlan, dead_letters_frame, judged_in_jvm, unrouted_frame
from routing.router.connect import RUN_TOTALS, ConnectBatches, _report_of, batch_records
from routing.router.ledger import Ledger, ledger_directory, prune_through
from routing.router.listener import ProgressListener
from routing.router.metrics import (
    METRICS_COLUMNS,
    METRICS_DDL,
    BatchReport,
    RunTotals,
    StageTimer,
    _as_counts,
    _completed,
    _take_reasons,
    metrics_log,
    udf_counts,
)
from routing.router.snapshot_files import SnapshotFileRef, open_snapshot_files
from routing.router.snapshots import Published, SnapshotBroadcasts
from routing.router.tables import OUTPUT_TABLES, PARTITION_COLUMN, output_paths, table_properties
from routing.settings import ARROW_BATCH_ROWS
from routing.spark import is_connect
from routing.streaming import (
    AFTER_DELIVERIES,
    AFTER_LEDGER,
    AfterWrites,
    CrashPoints,
    QueryIdentity,
    create_delta_table_if_absent,
    kafka_source,
    start_query,
)
from routing.subscriptions import create_table_if_absent
from udfs.route import FANOUT_REASON, ROUTE_DDL, RouterFactory, UdfStats, UdfStatsParam, make_router

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from routing.settings import RouterSettings, Settings

log = logging.getLogger("routing.router")

#: Added to the driver's nice value for the snapshot refresh thread (Linux: nice is per thread), so that
#: freezing a large snapshot yields the CPUs to running batches.
REFRESH_THREAD_NICE = 10


def warm_in_background(router: RouterSettings) -> bool:
    """Whether the Delta state the next public-writer append needs is computed in the background.

    Under the available-now trigger (a drain: batches run back to back and only throughput counts) it
    overlaps the next batch's start, which waits for it before its write; under processing time it runs
    before the batch returns, off the path from a trigger to its visible commit (measured with a 1 s trigger
    on 2 cores: the background warm slowed the next batch's own work beside it and doubled p99).
    """
    return router.trigger == "available_now"


def kafka_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """The bounded Kafka source the router reads (topics or a pattern, headers included)."""
    router = settings.router
    return kafka_source(
        spark,
        settings,
        topics=() if router.subscribe_pattern else router.topics,
        pattern=router.subscribe_pattern,
        starting_offsets=router.starting_offsets,
        max_offsets_per_trigger=router.max_offsets_per_trigger,
        fail_on_data_loss=router.fail_on_data_loss,
        include_headers=True,
    ).select(*SOURCE_COLUMNS)


class Router:
    """Everything the driver keeps between micro-batches.

    ``make_route`` builds each batch's UDF body from the published snapshot (:func:`udfs.route.make_router`,
    the native matcher); a benchmark passes another to match differently through the same pipeline.
    """

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        *,
        make_route: RouterFactory = make_router,
        after_writes: AfterWrites | None = None,
        crash_points: CrashPoints | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.make_route = make_route
        self.validator = settings.validator()
        router = settings.router
        create_table_if_absent(spark, settings.subscriptions.table_path)
        self.ledger = Ledger.open(
            spark,
            ledger_directory(router.checkpoint_path),
            router.app_id,
            retain_batches=router.retain_batches,
        )
        # The outputs exist from the start, so a batch can skip an append it has no rows for.
        for table, path in output_paths(router).items():
            create_delta_table_if_absent(
                spark,
                path,
                OUTPUT_TABLES[table],
                partition_by=(PARTITION_COLUMN,),
                properties=table_properties(table),
            )
        self.snapshots = SnapshotBroadcasts(
            spark,
            settings.subscriptions.table_path,
            refresh_interval_s=router.refresh_interval_s,
            # Beside the table's files, wherever its path or the catalog puts them; bound to the table's id.
            files=open_snapshot_files(
                router,
                delta_tables.location(spark, settings.subscriptions.table_path),
                delta_tables.table_id(spark, settings.subscriptions.table_path),
            ),
            transport=router.snapshot_transport,
            thread_nice=REFRESH_THREAD_NICE,
            deltas=True,
            deltas_from_pairs=router.snapshot_deltas_from_pairs,
            merge_pairs=router.snapshot_merge_pairs,
        )
        #: The last ``router.retain_batches`` batches' reports, by batch id (all of them when it is 0).
        self.reports: dict[int, BatchReport] = {}
        #: Every batch of this run, summed (the reports themselves are pruned).
        self.totals = RunTotals()
        #: The hot path's column expressions, built once (see :class:`BatchPlan`).
        self.plan = BatchPlan(router, self.validator)
        #: A Spark Connect session: batches run in the server's ``foreachBatch`` worker (:class:`ConnectBatches`).
        self.connect = is_connect(spark)
        #: Each batch's warm of the tables it wrote runs here: waited for at once, or overlapping the next batch's
        #: start (:func:`warm_in_background`). None on Spark Connect, which has no JVM to warm
        #: through; see :class:`routing.appends.AppendStateWarmer`.
        self.warmer = None if self.connect else AppendStateWarmer(spark)
        #: The Kafka sink's publish of a batch's deliveries runs here, beside that batch's Delta write
        #: (:meth:`_publish_beside`); one long-lived thread, as for the warmer. None without a Kafka sink, and on
        #: Spark Connect, whose Observation counts only the write that computes the cached deliveries.
        self.publisher = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-sink")
            if router.kafka_sink_topic and not self.connect
            else None
        )
        #: The UDF's own figures (``udfs.route.UdfStats``), summed by Spark over every task; Spark Connect has no
        #: accumulators, so there the metrics' ``match_ms`` and ``distinct_keys_per_arrow_batch_sum`` stay 0.
        self.udf_stats = None if self.connect else spark.sparkContext.accumulator(UdfStats(), UdfStatsParam())
        self._lock = threading.Lock()
        #: The query the router writes as (``txnAppId`` = app id:query id), known once it has started.
        self.identity = QueryIdentity(router.app_id)
        #: Test hook (:data:`routing.streaming.AfterWrites`): called after the Delta writes and before the
        #: batch returns (so before the checkpoint commits); the crash-recovery test kills the process there.
        self.after_writes = after_writes
        self.crash_points = crash_points
        self.listener: ProgressListener | None = None
        #: This router's hold on its checkpoint (:mod:`routing.checkpoints`), from :meth:`start` to :meth:`close`.
        self.lease: CheckpointLease | None = None
        self.logged_batches: set[int] = set()
        #: On Spark Connect: the first batch id this run processes (see :func:`first_batch_of_run`).
        self._first_batch = 0
        #: The first batch id this router processed (where :attr:`totals` start).
        self._first_processed: int | None = None
        #: The query progress's ``durationMs`` per batch id (filled by the listener, asynchronously).
        self.durations_ms: dict[int, dict[str, int]] = {}

    def close(self, *, progress_wait_s: float = 5.0) -> None:
        """Detach the metrics listener and destroy the broadcasts (after the query has stopped).

        Progress events reach the listener asynchronously, so first wait (briefly) until every
        processed batch has had its metrics line.
        """
        deadline = time.monotonic() + progress_wait_s
        while time.monotonic() < deadline:
            with self._lock:
                if set(self.reports) <= self.logged_batches:
                    break
            time.sleep(0.1)
        if self.listener is not None:
            # The termination event reaches the listener asynchronously too: removed (or the process gone)
            # while the JVM's listener bus is calling it, the call fails there with a py4j stack trace.
            if self.listener.started.is_set():
                self.listener.terminated.wait(max(0.0, deadline - time.monotonic()))
            self.spark.streams.removeListener(self.listener)
            self.listener = None
        if self.warmer is not None:
            self.warmer.close()
        if self.publisher is not None:
            self.publisher.shutdown(wait=True)
        self.snapshots.close()
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def batch_reports(self) -> dict[int, dict[str, Any]]:
        """The batches this router processed, as :meth:`BatchReport.as_dict`, by batch id: the last
        ``router.retain_batches`` of them (every one when it is 0); :meth:`run_summary` has the run's totals.

        On Spark Connect the batches ran in the server's worker: their reports come from :func:`batch_records`,
        which the worker prunes by the same rule.
        """
        if self.connect:
            return {batch_id: _report_of(record) for batch_id, record in self._connect_records().items()}
        with self._lock:
            return {batch_id: report.as_dict() for batch_id, report in self.reports.items()}

    def process_batch(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation

        txn_app_id = self.identity.wait()
        if self.lease is not None:
            self.lease.check()  # another router took the checkpoint over: write nothing more
        started = time.perf_counter()
        # Every row of this batch, in each of its tables, carries this routed_at.
        routed_at = datetime.datetime.now(datetime.UTC)
        timer = StageTimer()
        udf_before = self.udf_figures()
        router = self.settings.router
        with timer("ledger"):
            recorded = self.ledger.recorded_version(batch_id)
        if recorded is None:
            with timer("snapshot"):
                current = self.snapshots.current_version
            with timer("ledger"):
                version, created = self.ledger.record_once(batch_id, current)
            # Another writer recorded this batch first: route like a re-execution (with its version).
            replayed = not created
        else:
            version, replayed = recorded, True
        self._crash_point(batch_id, AFTER_LEDGER)
        with timer("snapshot"):
            published = self.snapshots.acquire(version)
        # With a Kafka sink, the deliveries the Delta write computes are kept for the sink, which would otherwise
        # run the whole pass again (the Kafka read, the classification, the match): the profile of (e) in
        # bench/stream.py. MEMORY_AND_DISK_DESER: a batch bigger than the executors' memory spills, and the rest stays
        # as built (PySpark's MEMORY_AND_DISK is serialized: that was 10 % of (e)'s task time, for a cache read
        # once, within the batch).
        persisted: list[DataFrame] = []
        # The Kafka sink's publish beside the deliveries write, once started.
        publishing: Future[None] | None = None

        def kept(deliveries: DataFrame) -> DataFrame:
            if not router.kafka_sink_topic:
                return deliveries
            from pyspark import StorageLevel

            persisted.append(deliveries.persist(StorageLevel.MEMORY_AND_DISK_DESER))
            return persisted[-1]

        try:
            plan = self.plan
            with timer("plan"):
                classified = plan.classified(batch)
                judged = plan.judged(classified, plan.route_column(published, self._route_udf))
            # The tables appended through Delta's public writer: the next batch's append there warms first.
            written: list[str] = []
            metrics: dict[str, int] | None = None
            # Dead-letter reasons the counters of the deliveries write leave to the dead letters' own write.
            reasons_pending = False
            if not replayed:
                # The hot path: the deliveries write is the one pass, and it counts everything on the way: in
                # the UDF (classic Spark's accumulator) or, on Spark Connect, with an Observation.
                observation = None if self.udf_stats is not None else Observation(f"router_{txn_app_id}_{batch_id}")
                with timer("plan"):
                    counted = judged if observation is None else judged.observe(observation, *plan.metrics)
                    deliveries = kept(plan.deliveries(counted, version, batch_id, routed_at))
                self._wait_for_warm(timer)
                if observation is None and self.publisher is not None:
                    publishing = self._publish_beside(self.publisher, deliveries)
                with timer("write_deliveries"):
                    self._append(deliveries, router.deliveries_path, batch_id, written, first_attempt=True)
                if publishing is not None:
                    # Before the counters are read: a partition the publish computed counts in its task's
                    # accumulator update, which has reached the driver once that job is done.
                    with timer("kafka_sink"):
                        publishing.result()
                self._crash_point(batch_id, AFTER_DELIVERIES)
                with timer("observe"):
                    if observation is None:
                        metrics = udf_counts(udf_before, self.udf_figures())
                        # Records classification judged: their reasons are counted as their dead letters are written.
                        reasons_pending = (
                            metrics is not None and metrics["dead_letters"] > metrics[f"dead_{FANOUT_REASON}"]
                        )
                    else:
                        metrics = _completed(observation)
            if metrics is None:
                # A re-executed batch (or a deliveries write Delta skipped as already committed): count first.
                self._wait_for_warm(timer)
                with timer("count"):
                    metrics = _as_counts(judged.agg(*plan.metrics).collect()[0].asDict())
                if metrics["deliveries"]:
                    with timer("write_deliveries"):
                        deliveries = kept(plan.deliveries(judged, version, batch_id, routed_at))
                        self._append(deliveries, router.deliveries_path, batch_id, written, first_attempt=False)
                self._crash_point(batch_id, AFTER_DELIVERIES)
            udf = self.udf_figures().since(udf_before)  # the figures of the first pass over the input
            metrics.update(
                match_ns=udf.match_ns,
                # The UDF counts distinct keys per Arrow batch; summed, a key in two Arrow batches counts twice.
                distinct_keys_per_arrow_batch_sum=udf.distinct_keys,
                python_ns=udf.python_ns,
                udf_rows=udf.rows,
            )
            # Rows are a function of (batch, snapshot version), so an empty output stays empty on replay.
            if metrics["dead_letters"]:
                # Only a fan-out over the limit needs the matcher; JVM-judged dead letters skip the UDF.
                source = judged if metrics[f"dead_{FANOUT_REASON}"] else judged_in_jvm(classified)
                with timer("write_dead_letters"):
                    dead_letters = dead_letters_frame(source, version, batch_id, routed_at)
                    if reasons_pending:
                        reasons = Observation(f"router_{txn_app_id}_{batch_id}_reasons")
                        dead_letters = dead_letters.observe(reasons, *plan.reason_metrics)
                    self._append(dead_letters, router.dead_letters_path, batch_id, written, first_attempt=not replayed)
                if reasons_pending:
                    with timer("observe"):
                        by_reason = _completed(reasons) or _as_counts(
                            dead_letters.agg(*plan.reason_metrics).collect()[0].asDict()
                        )
                    _take_reasons(metrics, by_reason)
            if router.unrouted_path and metrics["unmatched"]:
                with timer("write_unmatched"):
                    unrouted = unrouted_frame(judged, version, batch_id, routed_at)
                    self._append(unrouted, router.unrouted_path, batch_id, written, first_attempt=not replayed)
            if router.kafka_sink_topic and metrics["deliveries"] and publishing is None:
                with timer("kafka_sink"):
                    self._publish_to_kafka(
                        persisted[-1] if persisted else plan.deliveries(judged, version, batch_id, routed_at)
                    )
            if self.after_writes is not None:
                self.after_writes(batch_id)
        finally:
            if publishing is not None:
                # Done unless the deliveries write failed: then the publish reads the cached frame until it ends
                # (its outcome is moot: the batch fails and Spark re-executes it, publishing again, same ids).
                wait([publishing])
            for frame in persisted:
                frame.unpersist()
            self.snapshots.release(published)
        report = BatchReport(
            batch_id,
            version,
            replayed,
            metrics,
            time.perf_counter() - started,
            timer.seconds,
            subscriptions=published.subscriptions,
            serialized_bytes=published.serialized_bytes,
        )
        if router.metrics_path:
            with timer("metrics"):
                self._write_metrics(report, written)
        if self.warmer is not None and written:
            # Every write is committed: compute the Delta state the next appends need (warm_in_background).
            self.warmer.start(written)
            if not warm_in_background(router):
                with timer("warm"):
                    self.warmer.wait()
        row = report.as_dict()
        with self._lock:
            if self._first_processed is None:
                self._first_processed = batch_id
            replaced = self.reports.get(batch_id)
            self.totals.add(row, replacing=None if replaced is None else replaced.as_dict())
            self.reports[batch_id] = report
            last = prune_through(batch_id, router.retain_batches)
            if last is not None:
                self._forget_through(last)
            # Only a Connect worker hands its totals on (in each batch's record).
            carried = {"first_batch": self._first_processed, "totals": self.totals.as_dict()} if self.connect else None
        if carried is not None and self.identity.query_id:
            # The job's client process has no other way to learn it (see ConnectBatches). Replaced, not
            # written once: a batch Spark re-executes belongs to the run that re-executed it. Each record
            # carries the run's totals so far, so the records can be pruned like the reports.
            records = batch_records(self.spark, router)
            records.write(self.identity.query_id, batch_id, {**row, RUN_TOTALS: carried})
            if last is not None:
                records.prune(self.identity.query_id, last)

    def _forget_through(self, last: int) -> None:
        """Drop what this process keeps of batches up to ``last`` (their report, progress figures, log mark).

        At most twice ``router.retain_batches`` batches are kept, as in the ledger. Called under ``_lock``.
        """
        for kept in (self.reports, self.durations_ms):
            for batch_id in [batch_id for batch_id in kept if batch_id <= last]:
                del kept[batch_id]
        self.logged_batches = {batch_id for batch_id in self.logged_batches if batch_id > last}

    def run_summary(self) -> dict[str, Any]:
        """Totals over every batch this run processed (:class:`RunTotals`), whatever the retention.

        On Spark Connect the batches ran in the server's worker: the totals its last record carries
        (:func:`batch_records`).
        """
        if not self.connect:
            with self._lock:
                return self.totals.as_dict()
        records = self._connect_records()
        if not records:
            return RunTotals().as_dict()
        carried = records[max(records)].get(RUN_TOTALS)
        if carried is not None and carried["first_batch"] == self._first_batch:
            return dict(carried["totals"])
        # Not the totals of this run's batches (a worker that started elsewhere in the run): sum the records
        # there are, which is every batch of the run unless some were pruned.
        log.warning(
            "the server's worker totals do not start at this run's first batch %d: summing the %d batch records kept",
            self._first_batch,
            len(records),
        )
        return RunTotals.of(records).as_dict()  # reads only a report's own fields

    def _connect_records(self) -> dict[int, dict[str, Any]]:
        """On Spark Connect: this run's batch records that are kept (see :meth:`batch_reports`)."""
        if not self.identity.query_id:
            return {}
        # The query's earlier runs left theirs too: this run's batches are those after its last commit.
        records = batch_records(self.spark, self.settings.router)
        return records.read(self.identity.query_id, from_batch=self._first_batch)

    def _wait_for_warm(self, timer: StageTimer) -> None:
        """Let the previous batch's warm finish before this batch's first Spark job (see AppendStateWarmer)."""
        if self.warmer is not None and self.warmer.started:
            with timer("warm_wait"):
                self.warmer.wait()

    def udf_figures(self) -> UdfStats:
        """The UDF's figures summed so far (zeros on Spark Connect, which has no accumulators)."""
        return UdfStats() if self.udf_stats is None else self.udf_stats.value

    def _route_udf(self, published: Published) -> Callable[[Column], Column]:
        """The scalar Arrow UDF matching with the broadcast snapshot ``published``."""
        from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

        limits = self.validator.limits
        broadcast = published.broadcast
        # A snapshot file is mapped by each worker (shared through the page cache); a broadcast is bytes.
        load = broadcast.open_matcher if isinstance(broadcast, SnapshotFileRef) else (lambda: broadcast.value)
        route = self.make_route(
            published.version,
            load,
            max_fanout=limits.max_fanout,
            max_batch_rows=limits.max_batch_rows,
            max_output_bytes=self.settings.spark.arrow_output_batch_bytes,
            table=self.settings.subscriptions.table_path,
            stats=self.udf_stats,
        )
        # Nondeterministic keeps the optimizer from copying the call into each column that reads it.
        with warnings.catch_warnings():
            # Named explicitly, not inferred from type hints (another ``make_route``, as the bench's, may have none).
            warnings.filterwarnings("ignore", "It is preferred to specify type hints", UserWarning)
            udf = arrow_udf(route, ROUTE_DDL, ArrowUDFType.SCALAR_ITER).asNondeterministic()
        return cast("Callable[[Column], Column]", udf)

    def _append(
        self,
        frame: DataFrame,
        path: str,
        batch_id: int,
        written: list[str],
        *,
        first_attempt: bool,
        partition_by: tuple[str, ...] = (PARTITION_COLUMN,),
        merge_schema: bool = False,
    ) -> None:
        """Append the batch's rows to ``path`` once per batch id; adds ``path`` to ``written`` when the public
        writer did it (its next append needs the Delta state a warm computes).

        A first attempt (the batch's ledger entry was created by this attempt) may commit directly
        (:func:`routing.appends.append_once`): the same commit without Delta's check of the txn version,
        which cannot have been committed yet.
        """
        warm = append_once(
            frame,
            path,
            self.identity.txn_app_id,
            batch_id,
            first_attempt=first_attempt,
            partition_by=partition_by,
            merge_schema=merge_schema,
        )
        if warm:
            written.append(path)

    def _write_metrics(self, report: BatchReport, written: list[str]) -> None:
        """Append the batch's report to the ``router.metrics_path`` Delta table, once per batch id.

        Idempotent like the other tables (``txnAppId`` = app id:query id, ``txnVersion`` = batch id): a batch
        Spark re-executes keeps its first row. Written after the data (so ``batch_seconds`` excludes
        it); a failure fails the batch, which is retried like any other write.
        """
        import datetime as dt

        row = report.as_dict()
        values = [
            self.settings.router.app_id,
            *(row[name] for name in METRICS_COLUMNS),
            *(report.metrics.get(f"dead_{reason}", 0) for reason in DEAD_LETTER_REASONS),
            dt.datetime.now(dt.UTC),
            report.subscriptions,
            report.serialized_bytes,
            {stage: round(seconds, 4) for stage, seconds in report.stages.items()},
        ]
        # A table from an older release lacks the newer columns (first_append declines it): merged in.
        self._append(
            self.spark.createDataFrame([tuple(values)], METRICS_DDL),
            self.settings.router.metrics_path,
            report.batch_id,
            written,
            first_attempt=not report.replayed,
            partition_by=(),
            merge_schema=True,
        )

    def _publish_beside(self, publisher: ThreadPoolExecutor, deliveries: DataFrame) -> Future[None]:
        """:meth:`_publish_to_kafka` of the cached ``deliveries`` on the ``publisher``'s thread, started before their
        Delta write so that the two overlap: the publish's tasks queue behind the write's (FIFO, one job's
        tasks before the next's) and run while the driver commits to Delta. Spark computes each cached
        partition once, for whichever task asks first, so the input is still read and matched once.

        The publish carries the caller's local properties (the query's job group, so stopping the query
        cancels it too), as :class:`pyspark.InheritableThread` does. Delivery stays at least once, with the
        ids Delta has: a batch whose Delta write fails after the publish is re-executed and published again.
        """
        internals = spark_jvm(self.spark)
        carried = None if internals is None else internals.carry_local_properties()

        def publish() -> None:
            if carried is not None:
                carried()
            self._publish_to_kafka(deliveries)

        return publisher.submit(publish)

    def _publish_to_kafka(self, deliveries: DataFrame) -> None:
        """Deliveries to Kafka, keyed by the delivery id, the router's headers first (:mod:`routing.kafka_sink`:
        the topic names and headers)."""
        from pyspark.sql import functions as F

        (
            deliveries.select(
                kafka_sink.topic_column(self.settings.router.kafka_sink_topic).alias("topic"),
                F.col("delivery_id").cast("binary").alias("key"),
                F.col("payload").alias("value"),
                kafka_sink.headers_column().alias("headers"),
            )
            .write.format("kafka")
            .options(**{**kafka_sink.BATCH_SINK_PRODUCER, **self.settings.spark_kafka_options()})
            .save()
        )

    def log_progress(self, progress: dict[str, Any]) -> None:
        """One JSON line per batch: our observed counters plus the query's progress figures (``progress``: the
        query progress as its JSON, :meth:`StreamingQueryProgress.json`)."""
        batch_id = int(progress["batchId"])
        with self._lock:
            report = self.reports.get(batch_id)
        line: dict[str, Any] = {"event": "router_batch", "batch_id": batch_id}
        if report is not None:
            line.update(report.as_dict())
        line["num_input_rows"] = int(progress.get("numInputRows", 0))
        # Spark leaves a rate out of the JSON when it is not a number (no input, or no time elapsed).
        line["processed_rows_per_second"] = round(float(progress.get("processedRowsPerSecond", 0.0)), 1)
        line["duration_ms"] = {name: int(ms) for name, ms in (progress.get("durationMs") or {}).items()}
        with self._lock:
            self.durations_ms[batch_id] = dict(line["duration_ms"])
        metrics_log.info(json.dumps(line, sort_keys=True))
        with self._lock:
            self.logged_batches.add(batch_id)

    def start(self) -> StreamingQuery:
        """Start the query (and its metrics listener), holding the checkpoint until :meth:`close`.

        :class:`routing.checkpoints.CheckpointBusy` when a live router (another process, perhaps on
        another machine) holds the checkpoint: nothing has started then.
        """
        router = self.settings.router
        self.lease = CheckpointLease.acquire(self.spark, router.checkpoint_path, job="router", name=router.app_id)
        try:
            # Also on a session this router did not start (Spark Connect, a notebook's): one matcher call per batch.
            self.spark.conf.set(ARROW_BATCH_ROWS, str(self.settings.spark.arrow_batch_rows))
            if self.connect:
                self._first_batch = first_batch_of_run(self.spark, router.checkpoint_path)
                return start_query(
                    kafka_stream(self.spark, self.settings),
                    ConnectBatches(self.settings, new_router=Router, make_route=self.make_route),
                    checkpoint=router.checkpoint_path,
                    bind=self.bind_query,
                    trigger_interval=None if router.trigger == "available_now" else router.trigger_interval,
                    query_name=f"router:{router.app_id}",
                )
            # The first snapshot builds on the refresh thread while the query starts (source, offsets, the
            # first batch's plan): the first batch waits for it in current_version, and a failed build fails
            # that batch, so the job exits 1 naming it. Waiting here put the whole build (seconds at a
            # million subscriptions) before any of that.
            self.snapshots.request_refresh()
            self.listener = ProgressListener(self.spark, self.log_progress)
            self.spark.streams.addListener(self.listener)
            return start_query(
                kafka_stream(self.spark, self.settings),
                self.process_batch,
                checkpoint=router.checkpoint_path,
                bind=self.bind_query,
                trigger_interval=None if router.trigger == "available_now" else router.trigger_interval,
                query_name=f"router:{router.app_id}",
            )
        except BaseException:
            self.lease.release()
            self.lease = None
            raise

    def _crash_point(self, batch_id: int, point: str) -> None:
        """The test-only crash hook at ``point`` of a batch (``crash_points``; nothing in production)."""
        if self.crash_points is not None:
            self.crash_points(batch_id, point)

    def bind_query(self, query_id: str) -> None:
        """Write as the query ``query_id``: its id (kept in the checkpoint) joins the txnAppId.

        A router restarted from its checkpoint keeps its id and so skips batches it already
        committed; one started from a fresh checkpoint (batch ids from 0 again) gets a new id and is
        never mistaken for the old one (:class:`routing.streaming.QueryIdentity`). The ledger is bound
        first: batches start once the identity is.
        """
        self.ledger.bind(query_id)
        if self.lease is not None:
            self.lease.bind(query_id)
        self.identity.bind(query_id)

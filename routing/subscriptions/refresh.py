"""One run of the refresh job: the subscription events since the last run (or import files) MERGEd into the
Delta subscription table, rejects to the rejects table (:mod:`jobs.refresh_subscriptions` is its command line).

:func:`refresh_from_kafka` is the job's Kafka run, which ``python -m routing subscribe --apply`` also runs in its
own process; :func:`apply_import_files` its ``--import`` run. The job's module docstring says what a run
guarantees (one run at a time under the checkpoint's lease, a killed run safe to re-run).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from routing.checkpoints import (
    BatchRecords,
    CheckpointLease,
    checkpoint_query_id,
    first_batch_of_run,
    refresh_summaries,
)
from routing.errors import ForbiddenPatternError
from routing.settings import Settings
from routing.streaming import (
    AfterWrites,
    CrashHook,
    QueryIdentity,
    kafka_source,
    retry_delta_conflicts,
    start_query,
    txn_app_id,
)
from routing.subscriptions.events import (
    APPLIED_KINDS,
    REFRESHED,
    STALE,
    SUBSCRIBED,
    SUPERSEDED,
    TOMBSTONED,
    UNSUBSCRIBED,
    ImportFileError,
    Outcome,
    import_format,
    read_import_file,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from routing.subscriptions.table import BatchSummary

LOG = logging.getLogger(__name__)
FORBIDDEN_PATTERN = ForbiddenPatternError.reason
#: Prefix of the Delta ``txnAppId`` of reject appends (followed by the query id or the file hash).
TXN_APP_PREFIX = "refresh_subscriptions"


@dataclasses.dataclass
class RunSummary:
    """One run: per-batch summaries, their totals and the table version afterwards.

    ``deactivated``: held subscriptions the run's ``[acl]`` sweep deactivated before its first batch.
    """

    batches: list[BatchSummary]
    table_version: int
    deactivated: int = 0

    @property
    def counts(self) -> collections.Counter[str]:
        totals: collections.Counter[str] = collections.Counter()
        for batch in self.batches:
            totals.update(batch.counts)
        return totals

    @property
    def rejected(self) -> dict[str, int]:
        totals: collections.Counter[str] = collections.Counter()
        for batch in self.batches:
            totals.update(batch.rejected)
        return dict(sorted(totals.items()))

    def as_dict(self) -> dict[str, Any]:
        counts = self.counts
        return {
            "batches": len(self.batches),
            "events": sum(counts.values()),
            "applied": {kind: counts[kind] for kind in APPLIED_KINDS},
            "noop": {kind: counts[kind] for kind in (STALE, SUPERSEDED)},
            "rejected": self.rejected,
            "deactivated": self.deactivated,
            "table_version": self.table_version,
        }

    def describe(self) -> str:
        counts = self.counts
        rejected = self.rejected
        reasons = ", ".join(f"{reason}={n}" for reason, n in rejected.items())
        return (
            f"{len(self.batches)} batch(es), {sum(counts.values())} event(s): "
            f"subscribed={counts[SUBSCRIBED]} unsubscribed={counts[UNSUBSCRIBED]} "
            f"refreshed={counts[REFRESHED]} tombstoned={counts[TOMBSTONED]}; "
            f"no-op stale={counts[STALE]} superseded={counts[SUPERSEDED]}; "
            f"rejected={sum(rejected.values())}"
            + (f" ({reasons})" if reasons else "")
            + (f"; deactivated by [acl] ({FORBIDDEN_PATTERN})={self.deactivated}" if self.deactivated else "")
            + f"; table version {self.table_version}"
        )


def prepare_tables(spark: SparkSession, settings: Settings) -> int:
    """Create the tables if absent; turn the change data feed and auto compaction on for a table created without
    them; apply the ``[acl]`` rules to the subscriptions already held.

    The router reads only the changed rows from the feed; a table created before the feed existed
    gets it here (one metadata commit, once), and the router loads the versions before it whole.
    Rows the current ``[acl]`` rules forbid (rules tightened since they were accepted) are deactivated,
    each recorded in the rejects table as ``forbidden_pattern`` (:mod:`routing.subscriptions.acl_sweep`);
    returns how many.
    """
    from routing.subscriptions.acl_sweep import deactivate_forbidden
    from routing.subscriptions.table import (
        create_rejects_table_if_absent,
        create_table_if_absent,
        enable_auto_compaction,
        enable_change_feed,
    )

    subscriptions = settings.subscriptions

    def prepare() -> int:  # each step checks the table afresh, so a retry redoes only what is missing
        create_table_if_absent(spark, subscriptions.table_path)
        if enable_change_feed(spark, subscriptions.table_path):
            LOG.info("enabled the change data feed on %s", subscriptions.table_path)
        if enable_auto_compaction(spark, subscriptions.table_path):
            LOG.info("enabled auto compaction on %s", subscriptions.table_path)
        create_rejects_table_if_absent(spark, subscriptions.rejects_path)
        return deactivate_forbidden(
            spark, table_path=subscriptions.table_path, rejects_path=subscriptions.rejects_path, acl=settings.acl.policy
        )

    deactivated = retry_delta_conflicts(prepare, f"preparing {subscriptions.table_path}")
    if deactivated:
        LOG.warning(
            "deactivated %d subscription(s) the [acl] rules no longer allow (reason %s, one row each in %s)",
            deactivated,
            FORBIDDEN_PATTERN,
            subscriptions.rejects_path,
        )
    return deactivated


def refresh_from_kafka(
    spark: SparkSession,
    settings: Settings,
    *,
    after_writes: AfterWrites | None = None,
    lease: CheckpointLease | None = None,
) -> RunSummary:
    """Process every event that arrived since the last successful run, then return.

    ``after_writes`` (tests) is called with each batch id after its Delta writes, before its checkpoint commit
    (a :class:`routing.streaming.CrashHook` can also kill the job inside the MERGE). ``lease`` (``main()``'s)
    is checked before every batch and learns the query id.
    """
    from routing.spark import is_connect
    from routing.subscriptions.table import latest_version

    subscriptions = settings.subscriptions
    deactivated = prepare_tables(spark, settings)
    # The reject appends' txnAppId is refresh_subscriptions:<query id> (stable across runs sharing a checkpoint,
    # new for a new checkpoint whose batch ids restart at 0); batches wait until start() has bound it.
    identity = QueryIdentity(TXN_APP_PREFIX)
    connect = is_connect(spark)
    apply_batch = EventBatches(settings, None if connect else identity, None if connect else lease, after_writes)
    events = kafka_source(
        spark,
        settings,
        topics=[subscriptions.events_topic],
        starting_offsets=subscriptions.starting_offsets,
        max_offsets_per_trigger=subscriptions.max_offsets_per_trigger,
        fail_on_data_loss=True,
    )

    def bind(query_id: str) -> None:
        if lease is not None:
            lease.bind(query_id)
        identity.bind(query_id)

    first_batch = first_batch_of_run(spark, subscriptions.checkpoint_path) if connect else 0
    query = start_query(events, apply_batch, checkpoint=subscriptions.checkpoint_path, bind=bind)
    LOG.info(
        "reading %s from checkpoint %s (query %s)", subscriptions.events_topic, subscriptions.checkpoint_path, query.id
    )
    query.awaitTermination()
    # On Spark Connect the batches ran in the server's worker, which left their summaries in the checkpoint.
    # Earlier runs on the checkpoint left theirs too: this run's batches are those after its last commit.
    if connect:
        summaries = read_batch_summaries(spark, settings, str(query.id), from_batch=first_batch)
        # Read: delete them, and whatever earlier runs that stopped before reading theirs left.
        read_ids = [summary.batch_id for summary in summaries if summary.batch_id is not None]
        last_read = max(read_ids, default=first_batch - 1)
        batch_records(spark, settings).prune(str(query.id), last_read)
    else:
        summaries = apply_batch.summaries
    return RunSummary(summaries, latest_version(spark, subscriptions.table_path), deactivated)


def batch_records(spark: SparkSession, settings: Settings) -> BatchRecords:
    """Where a run on Spark Connect leaves each batch's summary for its client (see :class:`EventBatches`):
    :func:`routing.checkpoints.refresh_summaries`."""
    return refresh_summaries(spark, settings.subscriptions.checkpoint_path)


def read_batch_summaries(
    spark: SparkSession, settings: Settings, query_id: str, *, from_batch: int = 0
) -> list[BatchSummary]:
    """The summaries a run on Spark Connect left, in batch order, from batch ``from_batch`` on."""
    from routing.subscriptions.table import BatchSummary

    return [
        BatchSummary(entry["batch_id"], collections.Counter(entry["counts"]), entry["table_version"], entry["merged"])
        for entry in batch_records(spark, settings).read(query_id, from_batch=from_batch).values()
    ]


@dataclasses.dataclass
class EventBatches:
    """The refresh job's ``foreachBatch`` function: validate one batch of events, MERGE it, append its rejects.

    In a classic session it runs in this process, with the run's query identity and lease, and keeps each
    batch's summary in :attr:`summaries`. On Spark Connect it is pickled to the server and runs in the
    query's ``foreachBatch`` worker (``identity`` and ``lease`` None: neither pickles, and the lease stays
    with the client): the worker learns the query id from the checkpoint and leaves each summary there
    for the client (:func:`read_batch_summaries`).
    """

    settings: Settings
    identity: QueryIdentity | None
    lease: CheckpointLease | None
    after_writes: AfterWrites | None = None
    summaries: list[BatchSummary] = dataclasses.field(default_factory=list)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from routing.subscriptions.table import apply_validated, validate_kafka_batch

        spark = batch.sparkSession
        subscriptions = self.settings.subscriptions
        if self.identity is not None:
            query_id = None
            writes_as = self.identity.wait()
        else:
            query_id = checkpoint_query_id(spark, subscriptions.checkpoint_path)
            writes_as = txn_app_id(TXN_APP_PREFIX, query_id)
        if self.lease is not None:
            self.lease.check()  # another run took the checkpoint over: write nothing more
        validator = self.settings.validator()
        validated = validate_kafka_batch(batch, validator, max_event_bytes=subscriptions.max_event_bytes)
        after_writes = self.after_writes
        summary = retry_delta_conflicts(
            lambda: apply_validated(
                spark,
                validated,
                table_path=subscriptions.table_path,
                rejects_path=subscriptions.rejects_path,
                validator=validator,
                txn_app_id=writes_as,
                txn_version=batch_id,
                batch_id=batch_id,
                crash=after_writes.at_batch(batch_id) if isinstance(after_writes, CrashHook) else None,
            ),
            f"batch {batch_id} of {subscriptions.table_path}",
        )
        if after_writes is not None:
            after_writes(batch_id)
        if query_id is None:
            self.summaries.append(summary)
        else:
            entry = {**dataclasses.asdict(summary), "counts": dict(summary.counts)}
            batch_records(spark, self.settings).write(query_id, batch_id, entry)
        LOG.info(
            "batch %d: %d event(s) %s, rejected %s, table version %d",
            batch_id,
            summary.events,
            {kind: summary.counts[kind] for kind in APPLIED_KINDS},
            summary.rejected,
            summary.table_version,
        )


@dataclasses.dataclass(frozen=True)
class ImportFile:
    """One import file, read and judged: the bytes that were checked are the bytes that get applied."""

    path: str
    digest: str
    outcomes: list[Outcome]


def read_import_files(settings: Settings, paths: Sequence[str]) -> list[ImportFile]:
    """Every file read (once) and judged, before anything is applied: a file that cannot be read raises
    :class:`ImportFileError` and no file is imported (all or nothing). Needs no Spark."""
    validator = settings.validator()
    files = []
    for path in paths:
        import_format(path)
        if not os.path.isfile(path):
            raise ImportFileError(f"import file {path!r} does not exist or is not a regular file")
        digest, outcomes = read_import_file(
            path,
            validator,
            max_event_bytes=settings.subscriptions.max_event_bytes,
            max_import_bytes=settings.subscriptions.max_import_bytes,
        )
        files.append(ImportFile(path, digest, outcomes))
    return files


def import_files(spark: SparkSession, settings: Settings, paths: Sequence[str]) -> RunSummary:
    """Apply each CSV / JSON-lines file as one batch (idempotent per file content), all read before any applies."""
    return apply_import_files(spark, settings, read_import_files(settings, paths))


def apply_import_files(
    spark: SparkSession,
    settings: Settings,
    files: Sequence[ImportFile],
    *,
    lease: CheckpointLease | None = None,
    crash: CrashHook | None = None,
) -> RunSummary:
    """Apply files read by :func:`read_import_files`, each one batch, in order.

    ``lease`` (``main()``'s) is checked before each file; ``crash`` (tests) counts the files as batches 0, 1, ...

    Each file's MERGE commits on its own (its rejects' Delta ``txnAppId`` is ``refresh_subscriptions:import:<file
    hash>``), so if one fails the log names the files already committed; re-running the same command applies the
    rest (committed ones are no-ops).
    """
    from routing.subscriptions.table import apply_validated, latest_version, validated_frame

    subscriptions = settings.subscriptions
    validator = settings.validator()
    deactivated = prepare_tables(spark, settings)
    summaries: list[BatchSummary] = []

    def apply_file(index: int, imported: ImportFile) -> BatchSummary:
        return apply_validated(
            spark,
            validated_frame(spark, imported.outcomes),
            table_path=subscriptions.table_path,
            rejects_path=subscriptions.rejects_path,
            validator=validator,
            txn_app_id=txn_app_id(TXN_APP_PREFIX, f"import:{imported.digest}"),
            txn_version=0,
            batch_id=None,
            crash=None if crash is None else crash.at_batch(index),
        )

    for index, imported in enumerate(files):
        try:
            if lease is not None:
                lease.check()
            summary = retry_delta_conflicts(
                functools.partial(apply_file, index, imported),
                f"importing {imported.path} into {subscriptions.table_path}",
            )
        except Exception:
            LOG.error(
                "importing %s failed; committed before it: %s; not imported: %s (re-run the same command: "
                "committed files are no-ops)",
                imported.path,
                [done.path for done in files[:index]] or "none",
                [rest.path for rest in files[index:]],
            )
            raise
        summaries.append(summary)
        LOG.info("imported %s: %d event(s), rejected %s", imported.path, summary.events, summary.rejected)
    return RunSummary(summaries, latest_version(spark, subscriptions.table_path), deactivated)

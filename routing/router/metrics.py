"""The router's per-batch figures: the counters over a batch's frames, the stage timer, the batch report, the
run's totals and the ``router.metrics_path`` table's schema."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from routing.errors import DEAD_LETTER_REASONS
from udfs.route import FANOUT_REASON, KIND_DEAD_LETTER, KIND_DELIVERY, KIND_UNROUTED, UdfStats

if TYPE_CHECKING:
    from pyspark.sql import Column

log = logging.getLogger("routing.router")
#: Where the router logs one JSON line per batch (:meth:`routing.router.pipeline.Router.log_progress`).
metrics_log = logging.getLogger("routing.router.metrics")


def observed_metrics() -> list[Column]:
    """The per-batch counters over a judged frame (one row per input record), for an ``Observation`` or ``agg``."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    metrics = [
        F.count(F.lit(1)).alias("input_rows"),
        F.coalesce(F.sum(F.when(kind == KIND_DELIVERY, F.size("subscribers"))), F.lit(0)).alias("deliveries"),
        F.count_if(kind == KIND_UNROUTED).alias("unmatched"),
        F.count_if(kind == KIND_DEAD_LETTER).alias("dead_letters"),
    ]
    metrics += [
        F.count_if((kind == KIND_DEAD_LETTER) & (F.col("reason") == reason)).alias(f"dead_{reason}")
        for reason in DEAD_LETTER_REASONS
    ]
    return metrics


#: Columns of the ``router.metrics_path`` table taken from :meth:`BatchReport.as_dict`, in order.
METRICS_COLUMNS = (
    "batch_id",
    "snapshot_version",
    "replayed_version",
    "input_rows",
    "distinct_keys_per_arrow_batch_sum",
    "deliveries",
    "unmatched",
    "dead_letters",
    "match_ms",
    "batch_seconds",
)
#: The metrics table: one row per (app id, batch id); then a ``dead_<reason>`` count per dead-letter reason.
#: ``distinct_keys_per_arrow_batch_sum`` was ``distinct_keys`` before: a table from then keeps that column (null
#: from then on) and gains this one by schema evolution (Delta appends by column name).
METRICS_DDL = ", ".join(
    [
        "app_id STRING NOT NULL, batch_id BIGINT NOT NULL, snapshot_version BIGINT NOT NULL",
        "replayed_version BOOLEAN NOT NULL, input_rows BIGINT, distinct_keys_per_arrow_batch_sum BIGINT",
        "deliveries BIGINT",
        "unmatched BIGINT, dead_letters BIGINT, match_ms DOUBLE, batch_seconds DOUBLE",
        *(f"dead_{reason} BIGINT" for reason in DEAD_LETTER_REASONS),
        "recorded_at TIMESTAMP",
        # Added later: tables from before get them by schema evolution (``mergeSchema``).
        "subscriptions BIGINT, serialized_bytes BIGINT, stage_seconds MAP<STRING, DOUBLE>",
    ]
)


def udf_counts(before: UdfStats, after: UdfStats) -> dict[str, int] | None:
    """The batch's counters from the UDF's accumulator (:class:`udfs.route.UdfStats`) around its deliveries write.

    The UDF sees every record of the batch (a record classification judged gets a null key), so these are
    :func:`observed_metrics` but for the classification reasons of dead letters, which it cannot tell
    apart: those are 0 here, and the dead letters' own write counts them (:func:`reason_metrics`). None when
    the UDF saw no record: the write did not run it (or the batch is empty), so the batch is counted instead.
    """
    added = after.since(before)
    if added.rows == 0:
        return None
    counts = {
        "input_rows": added.rows,
        "deliveries": added.deliveries,
        "unmatched": added.unmatched,
        "dead_letters": added.null_keys + added.over_limit,
    }
    counts.update({f"dead_{reason}": 0 for reason in DEAD_LETTER_REASONS})
    counts[f"dead_{FANOUT_REASON}"] = added.over_limit
    return counts


def reason_metrics() -> list[Column]:
    """Per-reason counts over a dead letters frame (one row per dead letter), for an ``Observation`` or ``agg``."""
    from pyspark.sql import functions as F

    return [F.count_if(F.col("reason") == F.lit(reason)).alias(f"dead_{reason}") for reason in DEAD_LETTER_REASONS]


def _take_reasons(metrics: dict[str, int], by_reason: dict[str, int]) -> None:
    """Fill ``metrics``' classification reasons from the dead letters' counts (:func:`udf_counts` left them 0).

    The fan-out reason stays the UDF's, and the dead letters written must be the ones the UDF counted:
    a difference is a bug in one of the two counts, logged, never silently averaged away.
    """
    written = sum(by_reason.values())
    if written != metrics["dead_letters"] or by_reason[f"dead_{FANOUT_REASON}"] != metrics[f"dead_{FANOUT_REASON}"]:
        log.error(
            "dead letters written (%s) disagree with the UDF's counts (%s dead letters, %s over the fan-out limit)",
            by_reason,
            metrics["dead_letters"],
            metrics[f"dead_{FANOUT_REASON}"],
        )
    metrics.update({name: count for name, count in by_reason.items() if name != f"dead_{FANOUT_REASON}"})


#: Seconds to wait for an Observation after its write returned (Spark fills it as the write finishes).
OBSERVATION_WAIT_S = 1.0


def _as_counts(row: dict[str, Any]) -> dict[str, int]:
    return {name: int(value or 0) for name, value in row.items()}


def _completed(observation: Any) -> dict[str, int] | None:
    """The observation's counts, or None when its action never ran (Delta skipped a committed write)."""
    if not hasattr(observation, "_jo"):
        # Spark Connect: the write's response carried the metrics, or (a skipped write) nothing at all.
        observed = observation.get
        if not observed:
            log.warning("no observed metrics after the write (already committed?): counting instead")
            return None
        return _as_counts(observed)
    deadline = time.monotonic() + OBSERVATION_WAIT_S
    future = observation._jo.future()
    while not future.isCompleted():
        if time.monotonic() > deadline:
            log.warning("no observed metrics after the write (already committed?): counting instead")
            return None
        time.sleep(0.01)
    return _as_counts(observation.get)


class StageTimer:
    """Driver wall seconds per named stage of one batch (the profile ``bench/stream.py`` prints)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started


@dataclasses.dataclass
class BatchReport:
    batch_id: int
    snapshot_version: int
    replayed: bool
    metrics: dict[str, int]
    seconds: float
    #: Driver wall seconds per stage (ledger, snapshot, each write, metrics).
    stages: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Size of the snapshot the batch routed with: (pattern, subscriber) pairs and broadcast bytes.
    subscriptions: int = 0
    serialized_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        dead = {
            reason: self.metrics.get(f"dead_{reason}", 0)
            for reason in DEAD_LETTER_REASONS
            if self.metrics.get(f"dead_{reason}", 0)
        }
        return {
            "batch_id": self.batch_id,
            "snapshot_version": self.snapshot_version,
            "replayed_version": self.replayed,
            "input_rows": self.metrics.get("input_rows", 0),
            "distinct_keys_per_arrow_batch_sum": self.metrics.get("distinct_keys_per_arrow_batch_sum", 0),
            "deliveries": self.metrics.get("deliveries", 0),
            "unmatched": self.metrics.get("unmatched", 0),
            "dead_letters": self.metrics.get("dead_letters", 0),
            "dead_letters_by_reason": dead,
            "match_ms": round(self.metrics.get("match_ns", 0) / 1e6, 3),
            "batch_seconds": round(self.seconds, 3),
            "subscriptions": self.subscriptions,
            "serialized_bytes": self.serialized_bytes,
            "stage_seconds": {stage: round(seconds, 4) for stage, seconds in self.stages.items()},
        }


#: The counts :class:`RunTotals` sums over a run's batches.
TOTALLED = ("input_rows", "deliveries", "unmatched", "dead_letters")


class RunTotals:
    """Totals over the batches of one run, kept up to date as batches end.

    The router keeps only its last ``router.retain_batches`` reports (a driver that runs for weeks must not
    keep one per batch), so a run's summary cannot be summed from them at the end: it is summed here, batch
    by batch. A batch id reported twice (a batch re-executed in the same process) counts once, as its last
    report says.
    """

    def __init__(self) -> None:
        #: Distinct batch ids counted: a replacement is the same batch again (a set of ids would grow forever).
        self._batches = 0
        self._counts = dict.fromkeys(TOTALLED, 0)
        self._dead_by_reason: dict[str, int] = {}
        #: Snapshot version -> batches that routed with it, in order of first use.
        self._versions: dict[int, int] = {}

    @classmethod
    def of(cls, reports: dict[int, dict[str, Any]]) -> RunTotals:
        """The totals of these reports (:meth:`BatchReport.as_dict`, by batch id)."""
        totals = cls()
        for row in reports.values():
            totals.add(row)
        return totals

    def add(self, row: dict[str, Any], *, replacing: dict[str, Any] | None = None) -> None:
        """Count one batch's report; ``replacing`` is the report it replaces (the same batch id), if any."""
        if replacing is None:
            self._batches += 1
        else:
            self._count(replacing, -1)
        self._count(row, 1)

    def _count(self, row: dict[str, Any], sign: int) -> None:
        for name in TOTALLED:
            self._counts[name] += sign * row[name]
        for reason, count in row["dead_letters_by_reason"].items():
            self._dead_by_reason[reason] = self._dead_by_reason.get(reason, 0) + sign * count
            if not self._dead_by_reason[reason]:
                del self._dead_by_reason[reason]
        version = row["snapshot_version"]
        self._versions[version] = self._versions.get(version, 0) + sign
        if not self._versions[version]:
            del self._versions[version]

    def as_dict(self) -> dict[str, Any]:
        """``batches``, the counts, ``dead_letters_by_reason`` and ``snapshot_versions`` (in order of first use)."""
        return {
            "batches": self._batches,
            **self._counts,
            "dead_letters_by_reason": dict(self._dead_by_reason),
            "snapshot_versions": list(self._versions),
        }

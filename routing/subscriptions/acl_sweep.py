"""Tightened ``[acl]`` rules applied to subscriptions already held: the sweep of the refresh job.

New subscribes are checked as they arrive (the validator's :meth:`~routing.validation.Validator.check_allowed`,
reason ``forbidden_pattern``). Rules can also be tightened after a subscriber got a pattern, so every
refresh run starts by sweeping the table: each active row whose (subscriber, pattern) the current
rules forbid is deactivated, never silently:

* the row becomes inactive (a soft delete, like an unsubscribe), its ``updated_at`` unchanged, its
  ``change_id`` the old one plus :data:`DEACTIVATION_SUFFIX` (so it sorts right after the change it
  overrides and any later event for the pair still wins by last-writer-wins), ``source`` ``acl``;
* the rejects table gets one row per deactivation: reason ``forbidden_pattern``, op ``deactivate``,
  the subscriber and pattern, ``ts`` the row's ``updated_at``, and a detail naming what the rules allow.

A deactivated subscription stays inactive if the rules are loosened again: the subscriber subscribes
again (a newer event), as after an unsubscribe. The rejects are appended first, idempotently (Delta
``txnAppId`` :data:`SWEEP_TXN_APP_ID`, ``txnVersion`` the table version swept), then the MERGE
deactivates only rows still holding the change id that was judged (a concurrent writer wins); a run
killed between the two re-does the MERGE and skips the append.

:func:`forbidden_rows` is the pure rule (the plain-Python model,
:meth:`routing.subscriptions.model.SubscriptionModel.deactivate_forbidden`, uses it too).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from routing.acl import AclRules
from routing.errors import ForbiddenPatternError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

FORBIDDEN_PATTERN = ForbiddenPatternError.reason
#: ``source`` of a row the sweep deactivated, and of its reject.
SOURCE_ACL = "acl"
#: ``op`` of the reject recording a deactivation.
OP_DEACTIVATE = "deactivate"
#: Appended to the change id of a row the sweep deactivated.
DEACTIVATION_SUFFIX = "|acl:" + FORBIDDEN_PATTERN
#: The Delta ``txnAppId`` of the sweep's reject appends.
SWEEP_TXN_APP_ID = "refresh_subscriptions:acl_sweep"


def deactivation_change_id(change_id: str) -> str:
    return change_id + DEACTIVATION_SUFFIX


def deactivation_detail(subscriber: str, pattern: str, acl: AclRules) -> str | None:
    """Why the sweep deactivates (subscriber, pattern), or ``None`` when the rules allow it."""
    why = acl.why_forbidden(subscriber, pattern)
    if why is None:
        return None
    return (
        f"deactivated: subscriber {subscriber[:80]!r} may no longer hold pattern {pattern[:80]!r}: {why} "
        f"[reason={FORBIDDEN_PATTERN}]"
    )


def forbidden_rows(pairs: Iterable[tuple[str, str]], acl: AclRules) -> Iterator[tuple[str, str, str]]:
    """(subscriber, pattern, detail) of every pair the rules forbid; nothing when there are no rules."""
    if not acl.enabled:
        return
    for subscriber, pattern in pairs:
        detail = deactivation_detail(subscriber, pattern, acl)
        if detail is not None:
            yield subscriber, pattern, detail


_FORBIDDEN_DDL = "subscriber_id STRING, pattern STRING, updated_at TIMESTAMP, change_id STRING, detail STRING"


def _forbidden_arrow(acl: AclRules) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            columns = batch.to_pydict()
            keep: dict[str, list[Any]] = {name: [] for name in ("subscriber_id", "pattern", "updated_at", "change_id")}
            details: list[str] = []
            for index, (subscriber, pattern) in enumerate(
                zip(columns["subscriber_id"], columns["pattern"], strict=True)
            ):
                detail = deactivation_detail(subscriber, pattern, acl)
                if detail is None:
                    continue
                for name, values in keep.items():
                    values.append(columns[name][index])
                details.append(detail)
            yield pa.RecordBatch.from_pydict(
                {**keep, "detail": details},
                schema=pa.schema(
                    [
                        ("subscriber_id", pa.string()),
                        ("pattern", pa.string()),
                        ("updated_at", batch.schema.field("updated_at").type),
                        ("change_id", pa.string()),
                        ("detail", pa.string()),
                    ]
                ),
            )

    return run


def deactivate_forbidden(spark: SparkSession, *, table_path: str, rejects_path: str, acl: AclRules) -> int:
    """Deactivate every active row of the subscription table the rules forbid; returns how many.

    No rules: nothing is read and 0 is returned.
    """
    if not acl.enabled:
        return 0
    from pyspark.sql import functions as F

    from routing import delta_tables
    from routing.appends import append_once
    from routing.subscriptions.table import latest_version

    version = latest_version(spark, table_path)
    active = (
        delta_tables.read(spark, table_path, {"versionAsOf": version})
        .where("active")
        .select("subscriber_id", "pattern", "updated_at", "change_id")
    )
    forbidden = active.mapInArrow(_forbidden_arrow(acl), _FORBIDDEN_DDL).persist()
    try:
        count = forbidden.count()
        if not count:
            return 0
        new_change_id = F.concat(F.col("change_id"), F.lit(DEACTIVATION_SUFFIX))
        null = F.lit(None)
        rejects = forbidden.select(
            new_change_id.alias("change_id"),
            F.lit(FORBIDDEN_PATTERN).alias("reason"),
            F.col("detail"),
            F.lit(SOURCE_ACL).alias("source"),
            null.cast("string").alias("kafka_topic"),
            null.cast("int").alias("kafka_partition"),
            null.cast("long").alias("kafka_offset"),
            null.cast("string").alias("import_file"),
            null.cast("long").alias("import_line"),
            null.cast("binary").alias("raw"),
            null.cast("string").alias("raw_text"),
            F.lit(OP_DEACTIVATE).alias("op"),
            "subscriber_id",
            "pattern",
            F.col("updated_at").alias("ts"),
            null.cast("long").alias("batch_id"),
            F.current_timestamp().alias("rejected_at"),
        )
        # Idempotent: Delta skips the append when this app id already committed this (or a later) table version.
        append_once(rejects, rejects_path, SWEEP_TXN_APP_ID, version, first_attempt=False)
        changes = forbidden.select("subscriber_id", "pattern", "change_id", new_change_id.alias("new_change_id"))
        delta_tables.merge(
            table_path,
            changes,
            "ON t.subscriber_id = s.subscriber_id AND t.pattern = s.pattern AND t.change_id = s.change_id "
            "WHEN MATCHED AND t.active THEN UPDATE SET active = false, change_id = s.new_change_id, "
            f"source = '{SOURCE_ACL}', applied_at = current_timestamp()",
        )
        return count
    finally:
        forbidden.unpersist()

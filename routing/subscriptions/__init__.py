"""The subscription table: who subscribed to which pattern, as a Delta table.

Data flow::

    Kafka topic `subscriptions` --(refresh job, availableNow + foreachBatch)--+
    CSV / JSON-lines import files --(refresh job --import)-------------------+
        -> validate (events.py, pure Python; mapInArrow on the Kafka path)
        -> invalid events -> Delta `subscription_rejects` (reason code, raw event, coordinates)
        -> valid events  -> reduce per (subscriber, pattern), last writer wins by (ts, change_id),
                            subscription limit -> MERGE into the Delta subscription table

The table's Delta version is the snapshot version the router broadcasts. The
table records Delta's change data feed, so the router loads one version whole
(:func:`read_active_arrow`) and after that reads only the rows that changed
(:func:`read_changes`); :func:`read_snapshot` / :func:`read_active` read the
active pairs at one version as Python tuples (checks and tests).

Modules:

* :mod:`~routing.subscriptions.events` -- event format, validation and reason
  codes, deterministic change ids, import files. Pure Python.
* :mod:`~routing.subscriptions.model` -- :func:`apply_events_model`, the
  sequential plain-Python model of the table: the semantics, and the tests'
  oracle.
* :mod:`~routing.subscriptions.table` -- Spark: table schemas (documented
  there column by column), the validation and MERGE transforms.

Spark is imported only when a Spark-side name is first used, so the pure parts
stay cheap to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from routing.subscriptions.events import ChangeEvent, EventRejected, Op, Outcome, Received
from routing.subscriptions.model import SubscriptionModel, apply_events_model

if TYPE_CHECKING:
    from routing.subscriptions.table import (
        BatchSummary,
        ChangesUnavailable,
        Snapshot,
        apply_validated,
        create_rejects_table_if_absent,
        create_table_if_absent,
        enable_change_feed,
        latest_version,
        read_active,
        read_active_arrow,
        read_changes,
        read_rows,
        read_snapshot,
        validate_kafka_batch,
        validated_frame,
    )

_TABLE_NAMES = (
    "BatchSummary",
    "ChangesUnavailable",
    "Snapshot",
    "apply_validated",
    "create_rejects_table_if_absent",
    "create_table_if_absent",
    "enable_change_feed",
    "latest_version",
    "read_active",
    "read_active_arrow",
    "read_changes",
    "read_rows",
    "read_snapshot",
    "validate_kafka_batch",
    "validated_frame",
)

__all__ = [
    "BatchSummary",
    "ChangeEvent",
    "ChangesUnavailable",
    "EventRejected",
    "Op",
    "Outcome",
    "Received",
    "Snapshot",
    "SubscriptionModel",
    "apply_events_model",
    "apply_validated",
    "create_rejects_table_if_absent",
    "create_table_if_absent",
    "enable_change_feed",
    "latest_version",
    "read_active",
    "read_active_arrow",
    "read_changes",
    "read_rows",
    "read_snapshot",
    "validate_kafka_batch",
    "validated_frame",
]


def __getattr__(name: str) -> Any:
    if name in _TABLE_NAMES:
        return getattr(importlib.import_module("routing.subscriptions.table"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

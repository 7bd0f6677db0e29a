"""The subscription table: who subscribed to which pattern, as a Delta table.

Data flow::

    Kafka topic `subscriptions` --(refresh job, availableNow + foreachBatch)--+
    CSV / JSON-lines import files --(refresh job --import)-------------------+
        -> validate (events.py, pure Python; mapInArrow on the Kafka path)
        -> invalid events -> Delta `subscription_rejects` (reason code, raw event, coordinates)
        -> valid events  -> reduce per (subscriber, pattern), last writer wins by (ts, change_id),
                            subscription limit -> MERGE into the Delta subscription table

The table's Delta version is the snapshot version the router broadcasts: it
reads :func:`read_snapshot` (or :func:`latest_version` then
:func:`read_active` at that version).

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
        Snapshot,
        apply_validated,
        create_rejects_table_if_absent,
        create_table_if_absent,
        latest_version,
        read_active,
        read_rows,
        read_snapshot,
        validate_kafka_batch,
        validated_frame,
    )

_TABLE_NAMES = (
    "BatchSummary",
    "Snapshot",
    "apply_validated",
    "create_rejects_table_if_absent",
    "create_table_if_absent",
    "latest_version",
    "read_active",
    "read_rows",
    "read_snapshot",
    "validate_kafka_batch",
    "validated_frame",
)

__all__ = [
    "BatchSummary",
    "ChangeEvent",
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
    "latest_version",
    "read_active",
    "read_rows",
    "read_snapshot",
    "validate_kafka_batch",
    "validated_frame",
]


def __getattr__(name: str) -> Any:
    if name in _TABLE_NAMES:
        return getattr(importlib.import_module("routing.subscriptions.table"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

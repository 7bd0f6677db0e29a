"""The routing UDF: ``mapInArrow`` over classified Kafka records, fanned out with Arrow compute.

Input rows are Kafka records that :mod:`routing.router.classify` has already
judged in the JVM: ``routing_key`` (string, null when the record is invalid)
and ``reason``/``rule`` (null when valid). Per Arrow batch the function:

1. matches every valid key at once with the native
   :meth:`~routing.matchers.FrozenMatcher.match_batch` (distinct keys matched
   once, GIL released, no Python per row);
2. dead-letters whole messages whose fan-out exceeds ``max_fanout`` (nulling
   their lists so they never expand: never partly delivered);
3. expands the remaining lists to one row per (message, subscriber) with
   ``list_flatten`` + ``list_parent_indices`` + ``take``;
4. emits unmatched and invalid messages once each, with their kind, and one
   ``stats`` row (input rows, distinct keys, match nanoseconds) that the
   driver sums through an ``Observation``.

Each Python worker keeps the one deserialized matcher of the snapshot it last
used (:class:`MatcherCache`), named by (subscription table, version), and swaps
it when that changes, so a long-lived worker pays ``from_bytes`` once per
version. The table is part of the name because version numbers alone collide:
two routers (or tests) in one Spark application with different tables both
have a version 1, and the reused worker must not route one with the other's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from routing.matchers.native import FrozenMatcher

KIND_DELIVERY = "delivery"
KIND_DEAD_LETTER = "dead_letter"
KIND_UNROUTED = "unrouted"
KIND_STATS = "stats"

FANOUT_REASON = "fanout_limit"

#: Columns of the records the UDF receives (besides any it passes through untouched).
INPUT_FIELDS = ("routing_key", "reason", "rule")

#: What the UDF adds to every input column it passes through.
ADDED_FIELDS = [
    pa.field("kind", pa.string(), nullable=False),
    pa.field("subscriber_id", pa.string()),
    pa.field("fanout", pa.int32()),
    pa.field("match_ns", pa.int64()),
    pa.field("distinct_keys", pa.int64()),
    pa.field("input_rows", pa.int64()),
]
ADDED_DDL = (
    "kind STRING, subscriber_id STRING, fanout INT, match_ns BIGINT, distinct_keys BIGINT, input_rows BIGINT"
)

#: Output batches are cut to this many rows so a large fan-out never builds one huge batch.
OUTPUT_CHUNK_ROWS = 65_536


class MatcherCache:
    """One deserialized matcher per Python worker, replaced when the snapshot (table, version) changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: tuple[str, int] | None = None
        self._matcher: FrozenMatcher | None = None
        self.loads = 0

    def get(self, version: int, load_bytes: Callable[[], bytes], *, table: str = "") -> FrozenMatcher:
        with self._lock:
            if self._snapshot != (table, version) or self._matcher is None:
                self._matcher = FrozenMatcher.from_bytes(load_bytes())
                self._snapshot = (table, version)
                self.loads += 1
            return self._matcher


#: The worker-wide cache (a Python worker process runs many tasks when it is reused).
WORKER_CACHE = MatcherCache()


def _constant(value: Any, length: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type=type_), length)


def _with_added(rows: pa.RecordBatch, kind: str, added: dict[str, pa.Array]) -> pa.RecordBatch:
    """``rows`` plus the added columns (``kind`` constant, others given or null)."""
    length = rows.num_rows
    columns = list(rows.columns)
    names = list(rows.schema.names)
    for field in ADDED_FIELDS:
        if field.name == "kind":
            column = _constant(kind, length, pa.string())
        else:
            column = added.get(field.name, pa.nulls(length, type=field.type))
        columns.append(column)
        names.append(field.name)
    return pa.RecordBatch.from_arrays(columns, names=names)


def _chunks(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, OUTPUT_CHUNK_ROWS):
        yield batch.slice(start, OUTPUT_CHUNK_ROWS)


def route_record_batch(
    matcher: FrozenMatcher, batch: pa.RecordBatch, *, max_fanout: int, max_batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Route one Arrow batch: deliveries, dead letters, unrouted, and one stats row."""
    keys = batch.column("routing_key")
    valid = pc.is_valid(keys)
    started = time.perf_counter_ns()
    matched = matcher.match_batch(keys, max_rows=max_batch_rows)
    match_ns = time.perf_counter_ns() - started

    counts = pc.fill_null(pc.list_value_length(matched), 0)
    over_limit = pc.and_(valid, pc.greater(counts, max_fanout))
    unmatched = pc.and_(valid, pc.equal(counts, 0))

    # Deliveries: lists of over-limit messages are nulled first so they cannot expand.
    deliverable = pc.if_else(over_limit, pa.scalar(None, type=matched.type), matched)
    subscribers = pc.list_flatten(deliverable)
    parents = pc.list_parent_indices(deliverable)
    if len(parents):
        delivered = batch.take(parents)
        fanout = pc.cast(pc.take(counts, parents), pa.int32())
        yield from _chunks(_with_added(delivered, KIND_DELIVERY, {"subscriber_id": subscribers, "fanout": fanout}))

    # Over the fan-out limit: the whole message is dead-lettered, with the limit as its rule.
    over_rows = pc.indices_nonzero(over_limit)
    if len(over_rows):
        dead = batch.take(over_rows)
        reason = _constant(FANOUT_REASON, dead.num_rows, pa.string())
        rule = _constant(f"max_fanout={max_fanout}", dead.num_rows, pa.string())
        dead = dead.set_column(dead.schema.get_field_index("reason"), "reason", reason)
        dead = dead.set_column(dead.schema.get_field_index("rule"), "rule", rule)
        fanout = pc.cast(pc.take(counts, over_rows), pa.int32())
        yield from _chunks(_with_added(dead, KIND_DEAD_LETTER, {"fanout": fanout}))

    # Invalid records (judged upstream) go to dead letters as they are.
    invalid_rows = pc.indices_nonzero(pc.invert(valid))
    if len(invalid_rows):
        yield from _chunks(_with_added(batch.take(invalid_rows), KIND_DEAD_LETTER, {}))

    unmatched_rows = pc.indices_nonzero(unmatched)
    if len(unmatched_rows):
        yield from _chunks(_with_added(batch.take(unmatched_rows), KIND_UNROUTED, {}))

    stats = pa.RecordBatch.from_arrays(
        [pa.nulls(1, type=field.type) for field in batch.schema], schema=_nullable(batch.schema)
    )
    distinct = pc.count_distinct(keys, mode="only_valid").as_py()
    yield _with_added(
        stats,
        KIND_STATS,
        {
            "match_ns": pa.array([match_ns], pa.int64()),
            "distinct_keys": pa.array([distinct], pa.int64()),
            "input_rows": pa.array([batch.num_rows], pa.int64()),
        },
    )


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_nullable(True) for field in schema])


def make_router(
    version: int, load_bytes: Callable[[], bytes], *, max_fanout: int, max_batch_rows: int, table: str = ""
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function for one snapshot version of the subscription table ``table``.

    ``load_bytes`` returns the serialized matcher (normally ``lambda: broadcast.value``);
    it is called at most once per worker per (table, version).
    """

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return route_batches(
            version, load_bytes, batches, max_fanout=max_fanout, max_batch_rows=max_batch_rows, table=table
        )

    return route


def route_batches(
    version: int,
    load_bytes: Callable[[], bytes],
    batches: Iterator[pa.RecordBatch],
    *,
    max_fanout: int,
    max_batch_rows: int,
    table: str = "",
) -> Iterator[pa.RecordBatch]:
    """Route a partition's batches with the worker's cached matcher of (``table``, ``version``).

    Module-level (pickled by reference), so the worker-wide cache it uses is
    the worker's own, never a pickled copy.
    """
    matcher = WORKER_CACHE.get(version, load_bytes, table=table)
    for batch in batches:
        yield from route_record_batch(matcher, batch, max_fanout=max_fanout, max_batch_rows=max_batch_rows)

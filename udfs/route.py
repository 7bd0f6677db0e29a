"""The routing UDF: a scalar Arrow iterator UDF from routing keys to subscriber lists.

Only the routing key crosses into Python. Spark's ``ArrowEvalPython`` keeps
each input row (payload, headers, Kafka coordinates) in the JVM and joins the
UDF's row-aligned result back onto it, so the row itself is the handle: no
payload is serialized to the Python worker and back, and the fan-out (one row
per subscriber) is an ``explode`` in the JVM (:mod:`routing.router.columns`).

Per Arrow batch of keys (``routing_key``, null for records
:mod:`routing.router.classify` has already judged invalid) the function calls
the native :meth:`route_batch` of the snapshot's matcher (GIL released, no
Python per row; a repeated key is matched once while the batch repeats enough
keys to pay for de-duplication, a mostly-distinct batch is matched row by row)
and yields, per key, a struct of:

``subscribers``  the matching subscriber ids; null for a null key and for a
                 message over ``max_fanout`` (dead-lettered whole, never
                 partly delivered)
``fanout``       how many subscribers matched (null for a null key)

Its own figures (matching and Python nanoseconds, the distinct keys of each
Arrow batch, keys routed) and the batch's counters (null keys, unmatched, over
the limit, deliveries) go to the driver in a Spark accumulator
(:class:`UdfStats`), not in the rows.

**Bounded output.** Output batches are cut by bytes as well as rows, following
Spark 4's ``spark.sql.execution.arrow.maxBytesPerOutputBatch`` convention:
``route_batch`` stops before the first key that would take a batch past
``max_output_bytes`` (Arrow buffer bytes, counted from above: 8, plus 9 per
row, plus 4 and the id's UTF-8 bytes per subscriber) and the rest of the keys
go into the next batch, so no fan-out within the limits can overflow Arrow's
32-bit offsets or build an oversized batch. A single row is at most ``17 +
max_fanout x (4 + max_subscriber_bytes)`` bytes (2.6 MB at the defaults) and
goes out alone if it is over the limit on its own.

Each Python worker keeps the one matcher of the snapshot it last used
(:class:`MatcherCache`), named by (subscription table, version), and swaps it
when that changes, so a long-lived worker loads each version once: a snapshot
file is mapped in place and validated (the machine's workers share its pages),
broadcast bytes are validated into the worker's memory. The table is part of
the name because version numbers alone collide: two routers (or tests) in one
Spark application with different tables both have a version 1, and the reused
worker must not route one with the other's.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql.pandas.types import from_arrow_type

from routing import _native
from routing.errors import FanoutLimitError

KIND_DELIVERY = "delivery"
KIND_DEAD_LETTER = "dead_letter"
KIND_UNROUTED = "unrouted"

#: The dead-letter reason of a message over ``max_fanout`` (the error class's code).
FANOUT_REASON = FanoutLimitError.reason

#: The UDF's result per key, as Spark's Arrow conversion types it (list items are named ``element``).
ROUTE_TYPE = pa.struct(
    [
        pa.field("subscribers", pa.list_(pa.field("element", pa.string()))),
        pa.field("fanout", pa.int32()),
    ]
)
#: The same type as the UDF declares it to Spark, derived from :data:`ROUTE_TYPE` so the two cannot disagree
#: (``struct<subscribers:array<string>,fanout:int>``).
ROUTE_DDL = from_arrow_type(ROUTE_TYPE).simpleString()


class UdfStats(NamedTuple):
    """The UDF's own figures, summed over Arrow batches (and by Spark over tasks).

    The last five are the batch's counters, read off the rows the UDF returns, where classification and
    the fan-out limit already decided every message's fate (see :func:`message_counts`). Counted here,
    the router's hot path needs no ``Observation`` of its own: that was a separate, non-generated
    operator between the UDF and the fan-out, which copied every message's row once more (3% of a
    100k-message batch in ``bench/stream.py``). Their exactness is the Observation's: both are
    accumulators Spark merges once per successful task of the write.
    """

    #: Nanoseconds inside the matcher's ``route_batch``.
    match_ns: int = 0
    #: Distinct keys per Arrow batch, summed: a key in two Arrow batches counts twice.
    distinct_keys: int = 0
    #: Nanoseconds in the UDF body, matching included.
    python_ns: int = 0
    #: Keys routed: one per input record.
    rows: int = 0
    #: Null keys: records classification judged dead letters before matching.
    null_keys: int = 0
    #: Valid keys no subscriber matched.
    unmatched: int = 0
    #: Valid keys matching more than ``max_fanout`` subscribers (dead letters).
    over_limit: int = 0
    #: Deliveries: the subscribers of every other key.
    deliveries: int = 0

    def since(self, before: UdfStats) -> UdfStats:
        """The figures added after ``before`` was read (field by field)."""
        return UdfStats(*(now - then for now, then in zip(self, before, strict=True)))


class UdfStatsParam(AccumulatorParam[UdfStats]):
    """Adds :class:`UdfStats` element-wise (a Spark accumulator of the UDF's own figures)."""

    def zero(self, value: UdfStats) -> UdfStats:
        return UdfStats()

    def addInPlace(self, value1: UdfStats, value2: UdfStats) -> UdfStats:
        return UdfStats(*(left + right for left, right in zip(value1, value2, strict=True)))


def message_counts(part: pa.StructArray, max_fanout: int) -> tuple[int, int, int, int]:
    """(null keys, unmatched, over the limit, deliveries) of one :data:`ROUTE_TYPE` array.

    A null key has a null ``fanout``; a key over the limit a ``fanout`` above ``max_fanout`` and null
    ``subscribers``, which hold the deliveries of every other key. The same counts as the router's
    ``observed_metrics`` over the judged rows, with ``max_fanout`` the same limit the JVM judges by.
    """
    fanout = part.field("fanout")

    def true_count(mask: pa.Array) -> int:
        return int(pc.sum(mask).as_py() or 0)

    return (
        fanout.null_count,
        true_count(pc.equal(fanout, 0)),
        true_count(pc.greater(fanout, max_fanout)),
        int(pc.sum(pc.list_value_length(part.field("subscribers"))).as_py() or 0),
    )


#: A UDF body: key batches in, :data:`ROUTE_TYPE` arrays out (what :func:`make_router` returns).
RouteBody = Callable[[Iterator[pa.Array]], Iterator[pa.Array]]
#: Where a worker gets a snapshot's matcher: its bytes (a broadcast's value, decoded into the worker's
#: memory), or the matcher itself (a snapshot file mapped in place and shared by the machine's workers).
MatcherSource = Callable[[], "bytes | _native.FrozenMatcher | _native.LayeredMatcher"]
#: What :class:`routing.router.pipeline.Router` calls for each batch's UDF body, with :func:`make_router`'s
#: arguments. The router takes one as a parameter, so a benchmark can match with something else
#: (``bench/stream.py``'s Python trie) through the same classification, fan-out, ledger and writes.
RouterFactory = Callable[..., RouteBody]


class BatchRouter(Protocol):
    """What the UDF needs of a matcher: ``routing._native.FrozenMatcher.route_batch``'s contract."""

    def route_batch(
        self,
        keys: pa.Array,
        max_rows: int | None = None,
        max_fanout: int | None = None,
        max_bytes: int | None = None,
    ) -> pa.StructArray: ...


#: Long-lived objects a worker may hold outside the frozen heap before its next routing task freezes them.
FREEZE_MIN_OBJECTS = 2_000


def freeze_worker_heap(min_objects: int = FREEZE_MIN_OBJECTS) -> bool:
    """In a Spark task's Python worker, move the long-lived objects out of the garbage collector's reach.

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker, which walks every
    tracked object: about 46,000 after the worker's imports (pyspark, pyarrow, numpy), and 29,000 more that
    its first Arrow task imports (pandas, ``numpy.ma``, pytz), 9-23 ms a collection, two a batch. In
    ``perf`` over a loop of 100k-record router batches that was 10% of all CPU. Whatever survived that
    collection is in the oldest generation when the next task starts, and lives as long as the worker
    (modules, classes, caches): once there are ``min_objects`` of them, ``gc.freeze()`` puts them (and the
    few young objects of the starting task) in the permanent generation, and later collections walk only
    what later tasks make. Objects frozen and later dropped are freed by reference counting, but never as
    cyclic garbage: the threshold keeps that to the young objects of the rare task that freezes. Never on a
    driver (no :class:`TaskContext`). Returns whether it froze.
    """
    if TaskContext.get() is None or len(gc.get_objects(generation=2)) < min_objects:
        return False
    gc.freeze()
    return True


class MatcherCache:
    """One deserialized matcher per Python worker, replaced when the snapshot (table, version) changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: tuple[str, int] | None = None
        self._matcher: _native.FrozenMatcher | _native.LayeredMatcher | None = None
        self.loads = 0

    def get(
        self, version: int, load: MatcherSource, *, table: str = ""
    ) -> _native.FrozenMatcher | _native.LayeredMatcher:
        with self._lock:
            if self._snapshot != (table, version) or self._matcher is None:
                loaded = load()
                if isinstance(loaded, (bytes, bytearray, memoryview)):
                    loaded = _native.FrozenMatcher.from_bytes(bytes(loaded))
                self._matcher = loaded
                self._snapshot = (table, version)
                self.loads += 1
            return self._matcher


#: The worker-wide cache (a Python worker process runs many tasks when it is reused).
WORKER_CACHE = MatcherCache()


def route_keys(
    matcher: BatchRouter,
    keys: pa.Array,
    *,
    max_fanout: int,
    max_batch_rows: int,
    max_output_bytes: int,
    stats: Accumulator[UdfStats] | None = None,
) -> Iterator[pa.Array]:
    """Route one Arrow batch of keys: row-aligned :data:`ROUTE_TYPE` arrays, each within ``max_output_bytes``."""
    entered = time.perf_counter_ns()
    match_ns = 0
    counts = [0, 0, 0, 0]  # message_counts, summed over the parts
    start = 0
    while start < len(keys):
        started = time.perf_counter_ns()
        part = matcher.route_batch(
            keys if start == 0 else keys.slice(start), max_batch_rows, max_fanout, max_output_bytes
        )
        match_ns += time.perf_counter_ns() - started
        if len(part) == 0:  # route_batch always makes progress; never spin if a matcher breaks that
            raise RuntimeError(f"route_batch returned no rows for {len(keys) - start} keys")
        start += len(part)
        if stats is not None:
            for at, count in enumerate(message_counts(part, max_fanout)):
                counts[at] += count
        yield part
    if stats is not None:
        distinct = int(pc.count_distinct(keys, mode="only_valid").as_py())
        stats.add(UdfStats(match_ns, distinct, time.perf_counter_ns() - entered, len(keys), *counts))


def make_router(
    version: int,
    load: MatcherSource,
    *,
    max_fanout: int,
    max_batch_rows: int,
    max_output_bytes: int,
    table: str = "",
    stats: Accumulator[UdfStats] | None = None,
) -> RouteBody:
    """The scalar Arrow iterator UDF body for one snapshot version of the subscription table ``table``.

    ``load`` returns the matcher or its bytes (a snapshot file's ``open_matcher``, or ``lambda: broadcast.value``);
    it is called at most once per worker per (table, version).
    """

    def route(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        return route_batches(
            version,
            load,
            batches,
            max_fanout=max_fanout,
            max_batch_rows=max_batch_rows,
            max_output_bytes=max_output_bytes,
            table=table,
            stats=stats,
        )

    return route


def route_batches(
    version: int,
    load: MatcherSource,
    batches: Iterator[pa.Array],
    *,
    max_fanout: int,
    max_batch_rows: int,
    max_output_bytes: int,
    table: str = "",
    stats: Accumulator[UdfStats] | None = None,
) -> Iterator[pa.Array]:
    """Route a partition's key batches with the worker's cached matcher of (``table``, ``version``).

    Module-level (pickled by reference), so the worker-wide cache it uses is
    the worker's own, never a pickled copy.
    """
    freeze_worker_heap()
    matcher = WORKER_CACHE.get(version, load, table=table)
    for keys in batches:
        yield from route_keys(
            matcher,
            keys,
            max_fanout=max_fanout,
            max_batch_rows=max_batch_rows,
            max_output_bytes=max_output_bytes,
            stats=stats,
        )

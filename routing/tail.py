"""Reading one subscriber's deliveries incrementally: ``python -m routing tail --subscriber S``.

A subscriber consumes its rows of the deliveries table (``router.deliveries_path``) as a Delta
streaming read of its own::

    deliveries (Delta) ──readStream.where(subscriber_id = S)──> foreachBatch: print, flush ──> checkpoint

* **From a checkpoint of its own.** The first run starts from the table's whole history (Delta's
  streaming source reads the snapshot at start, then each new commit); every later run on the same
  checkpoint prints only rows committed since. The default checkpoint is
  ``<parent of router.checkpoint_path>/tail/<subscriber>`` (:func:`default_checkpoint`), beside the
  router's own and never inside it. A tail holds the checkpoint's lease
  (:class:`routing.checkpoints.CheckpointLease`) like every job, so two tails never race one checkpoint.
* **Nothing lost.** A batch's rows are written and flushed to stdout inside ``foreachBatch``, so
  before Spark commits the batch to the checkpoint: a tail killed mid-batch prints that batch again
  on its next run (at least once; ``delivery_id`` dedupes), and a stdout that fails (a closed pipe)
  fails the batch instead of skipping it. ``--limit N`` stops at a batch boundary once N rows were
  printed, so the batch that reaches N is printed whole rather than half-skipped.
* **What it costs.** The subscriber filter sits in the streaming plan, so Spark pushes it into the
  Parquet scan; but the router writes each batch's rows for all subscribers into the same files
  (partitioned by ``kafka_date`` only), so neither Delta's per-file ``subscriber_id`` statistics nor
  Parquet's row-group statistics can exclude anything: the stream reads every new row of the table
  and keeps the subscriber's. :attr:`TailSummary.rows_read` (the streaming progress's
  ``numInputRows``) reports how many, and the README gives the measured figure.

Spark is imported only inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import posixpath
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

#: The order a batch's rows are printed in: the source record's coordinates.
ROW_ORDER = ("source_topic", "source_partition", "source_offset")
#: Characters kept as they are in a checkpoint directory name (the rest become ``_``; a hash keeps names apart).
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Seconds between checks for a stop request or a finished query.
POLL_S = 1


def default_checkpoint(router_checkpoint: str, subscriber: str) -> str:
    """``<parent of the router's checkpoint>/tail/<readable prefix>-<hash>`` for ``subscriber``.

    Any subscriber id is a valid directory name this way (slashes, spaces, 255 UTF-8 bytes), two ids never
    share one (the hash is of the exact id), and the prefix keeps it recognisable. Works for URIs too.
    """
    readable = _UNSAFE.sub("_", subscriber)[:64] or "_"
    digest = hashlib.sha256(subscriber.encode("utf-8")).hexdigest()[:12]
    return posixpath.join(posixpath.dirname(router_checkpoint.rstrip("/")), "tail", f"{readable}-{digest}")


def _text(value: Any) -> Any:
    """A column value as JSON: bytes as base64, times as ISO-8601 UTC."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime):
        # PySpark hands timestamps back naive, in this process's local time zone: astimezone reads them so.
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def row_json(row: dict[str, Any]) -> dict[str, Any]:
    """One delivery row as a JSON object: every column, ``payload`` and header values base64."""
    result = {name: _text(value) for name, value in row.items() if name != "headers"}
    headers = row.get("headers")
    result["headers"] = None if headers is None else [{"key": h["key"], "value": _text(h["value"])} for h in headers]
    return result


def row_line(row: dict[str, Any]) -> str:
    """One delivery row for people: time, routing key, source coordinates and the payload as text if it is."""
    payload = row.get("payload")
    if payload is None:
        shown = "null"
    else:
        try:
            shown = bytes(payload).decode("utf-8")
        except UnicodeDecodeError:
            shown = ""
        if not shown.isprintable() or not shown:
            shown = "base64:" + base64.b64encode(bytes(payload)).decode("ascii")
    return (
        f"{_text(row['kafka_timestamp'])} {row['routing_key']} "
        f"{row['source_topic']}:{row['source_partition']}:{row['source_offset']} {shown}"
    )


@dataclasses.dataclass
class TailSummary:
    """What one tail run did."""

    subscriber: str
    table: str
    checkpoint: str
    #: Rows of the subscriber printed.
    rows: int = 0
    #: Micro-batches that ran (an empty batch included).
    batches: int = 0
    #: Rows the stream read from the table to find them (the progress's ``numInputRows``, summed).
    rows_read: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return (
            f"printed {self.rows} row(s) of {self.subscriber!r} in {self.batches} batch(es); the stream read "
            f"{self.rows_read} row(s) of {self.table} (checkpoint {self.checkpoint})"
        )


def subscriber_stream(spark: SparkSession, table: str, subscriber: str) -> DataFrame:
    """The deliveries of ``subscriber`` as a stream (filtered in the plan, so the scan gets the predicate)."""
    from pyspark.sql import functions as F

    from routing import delta_tables

    return delta_tables.read_stream(spark, table).where(F.col("subscriber_id") == F.lit(subscriber))


def tail(
    spark: SparkSession,
    table: str,
    subscriber: str,
    checkpoint: str,
    emit: Callable[[dict[str, Any]], None],
    *,
    available_now: bool,
    limit: int | None = None,
    stop: threading.Event | None = None,
    flush: Callable[[], None] = lambda: None,
    trigger_interval: str = "1 second",
) -> TailSummary:
    """Follow ``subscriber``'s rows of the Delta table ``table`` from ``checkpoint``, ``emit`` each row in order.

    ``emit`` is called on the driver, inside the batch, and ``flush`` after the batch's last row, both before
    its checkpoint commit (see the module doc).
    Returns once the table is drained (``available_now``), ``limit`` rows were emitted (at a batch
    boundary), or ``stop`` is set; raises what the query failed with. The caller holds the lease.
    """
    from routing.streaming import start_query

    summary = TailSummary(subscriber=subscriber, table=table, checkpoint=checkpoint)
    stop = stop or threading.Event()

    def print_batch(batch: DataFrame, _batch_id: int) -> None:
        row: Row
        # One partition sorted, not orderBy: a range sort samples its input first, which would scan the
        # batch twice; the shuffle moves only the subscriber's rows, filtered where they were read.
        for row in batch.repartition(1).sortWithinPartitions(*ROW_ORDER).toLocalIterator():
            emit(row.asDict(recursive=True))
            summary.rows += 1
        flush()  # what the checkpoint will say was printed has left this process
        if limit is not None and summary.rows >= limit:
            stop.set()

    query = start_query(
        subscriber_stream(spark, table, subscriber),
        print_batch,
        checkpoint=checkpoint,
        bind=lambda _query_id: None,
        trigger_interval=None if available_now else trigger_interval,
    )
    progress: dict[int, int] = {}
    try:
        while query.isActive:
            for update in query.recentProgress:
                progress[update["batchId"]] = int(update["numInputRows"])
            # Stop between batches only, so that a printed batch is also committed.
            if stop.is_set() and not query.status["isTriggerActive"]:
                query.stop()
                break
            query.awaitTermination(POLL_S)
        for update in query.recentProgress:
            progress[update["batchId"]] = int(update["numInputRows"])
        failure = query.exception()
    finally:
        if query.isActive:
            query.stop()
    if failure is not None:
        raise RuntimeError(f"the tail query failed: {failure}")
    summary.batches = len(progress)
    summary.rows_read = sum(progress.values())
    return summary


def json_line(row: dict[str, Any]) -> str:
    return json.dumps(row_json(row), sort_keys=True, ensure_ascii=False)

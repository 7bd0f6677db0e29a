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
  Every file a tail keeps in its checkpoint is declared, read and written by :mod:`routing.checkpoints`
  (the checkpoint's layout); this module decides what they hold.
* **Nothing lost.** A batch's rows are written and flushed to stdout inside ``foreachBatch``, so
  before Spark commits the batch to the checkpoint: a tail killed mid-batch prints that batch again
  on its next run (at least once; ``delivery_id`` dedupes), and a stdout that fails (a closed pipe)
  fails the batch instead of skipping it.
* **``--limit N`` prints at most N rows**, like ``head -n``. When N falls inside a batch, the rows of that
  batch not printed are kept beside the checkpoint (``<checkpoint>/unprinted/rows``, written before the
  batch commits: :class:`_Unprinted`, through :class:`routing.checkpoints.UnprintedRows`) and the next run
  on the checkpoint prints them first, so a limit never skips a row.
* **What it costs.** The subscriber filter sits in the streaming plan, so Spark pushes it into the
  Parquet scan; but the router writes each batch's rows for all subscribers into the same files
  (partitioned by ``kafka_date`` only), so neither Delta's per-file ``subscriber_id`` statistics nor
  Parquet's row-group statistics can exclude anything: the stream reads every new row of the table
  and keeps the subscriber's. :attr:`TailSummary.rows_read` (the streaming progress's
  ``numInputRows``) reports how many, and docs/router.md says what that costs.

* **On Spark Connect** ``foreachBatch`` runs in the server's worker, not here, so the rows are
  handed over through the checkpoint (:class:`HandoffBatches`, through
  :class:`routing.checkpoints.HandoffFiles`): the worker writes a batch's rows as
  ``<checkpoint>/handoff/<batch id>.rows`` (atomically: temp file, then rename) and waits until this
  process has printed and flushed them and written ``<batch id>.done``; only then does the batch
  return and commit. The same guarantees hold: a batch is printed before its commit, whole, in order.

Spark is imported only inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    from routing.checkpoints import tail_checkpoint

    return tail_checkpoint(router_checkpoint, f"{readable}-{digest}")


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
    #: Rows of the subscriber the limit left for the next run on this checkpoint (:class:`_Unprinted`).
    unprinted: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        left = f"; {self.unprinted} row(s) left for the next run (--limit)" if self.unprinted else ""
        return (
            f"printed {self.rows} row(s) of {self.subscriber!r} in {self.batches} batch(es); the stream read "
            f"{self.rows_read} row(s) of {self.table} (checkpoint {self.checkpoint}){left}"
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
    Returns once the table is drained (``available_now``), ``limit`` rows were emitted (the rest of that
    batch kept for the next run, see the module doc), or ``stop`` is set; raises what the query failed with.
    The caller holds the lease.
    """
    from routing.spark import is_connect
    from routing.streaming import start_query

    summary = TailSummary(subscriber=subscriber, table=table, checkpoint=checkpoint)
    stop = stop or threading.Event()
    printer = _Printer(_Unprinted(spark, checkpoint), emit, flush, summary, limit)
    # What an earlier run's limit left unprinted comes first; a limit it reaches again starts no stream.
    if printer.print_rows(printer.unprinted.take()):
        return summary
    handoff = _Handoff(spark, checkpoint, printer) if is_connect(spark) else None

    def print_batch(batch: DataFrame, _batch_id: int) -> None:
        # One partition sorted, not orderBy: a range sort samples its input first, which would scan the
        # batch twice; the shuffle moves only the subscriber's rows, filtered where they were read.
        ordered = batch.repartition(1).sortWithinPartitions(*ROW_ORDER).toLocalIterator()
        if printer.print_rows(row.asDict(recursive=True) for row in ordered):
            stop.set()

    query = start_query(
        subscriber_stream(spark, table, subscriber),
        print_batch if handoff is None else HandoffBatches(handoff.directory),
        checkpoint=checkpoint,
        bind=lambda _query_id: None,
        trigger_interval=None if available_now else trigger_interval,
    )
    # batchId/numInputRows as properties: on Spark Connect the progress may lack the total, which the
    # property then sums over the sources.
    progress: dict[int, int] = {}
    try:
        while query.isActive:
            if handoff is not None and handoff.serve():
                stop.set()
            for update in query.recentProgress:
                progress[int(update.batchId)] = int(update.numInputRows)
            # Stop between batches only, so that a printed batch is also committed.
            if stop.is_set() and not query.status["isTriggerActive"]:
                query.stop()
                break
            if handoff is None:
                query.awaitTermination(POLL_S)
            else:
                time.sleep(HANDOFF_POLL_S)  # a batch waits for this loop: poll more often
        for update in query.recentProgress:
            progress[int(update.batchId)] = int(update.numInputRows)
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


#: Seconds between checks for a handed-over batch (the job) or its acknowledgement (the server's worker).
HANDOFF_POLL_S = 0.2
#: Seconds the server's worker waits for the job to print a batch before it fails the batch (the job died).
HANDOFF_TIMEOUT_S = 600.0


def _encode(value: Any) -> Any:
    """A row value as JSON that :func:`_decode` turns back into the same Python value (tagged objects)."""
    if isinstance(value, bytes | bytearray):
        return {"$b": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        # Naive in the worker's local time zone (as PySpark hands them over): carried as UTC.
        return {"$t": value.astimezone(dt.UTC).isoformat()}
    if isinstance(value, dt.date):
        return {"$d": value.isoformat()}
    if isinstance(value, dict):
        return {"$m": {key: _encode(item) for key, item in value.items()}}
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ValueError(f"not a handed-over value: {value!r}")
    ((tag, inner),) = value.items()
    if tag == "$b":
        return base64.b64decode(inner)
    if tag == "$t":
        return dt.datetime.fromisoformat(inner).astimezone().replace(tzinfo=None)  # naive local, as PySpark's
    if tag == "$d":
        return dt.date.fromisoformat(inner)
    if tag == "$m":
        return {key: _decode(item) for key, item in inner.items()}
    raise ValueError(f"unknown tag {tag!r} in a handed-over value")


@dataclasses.dataclass(frozen=True)
class HandoffBatches:
    """A tail's ``foreachBatch`` on Spark Connect, run by the server's worker: hand the batch to the job.

    Writes the batch's rows, in print order, as JSON lines to ``<batch id>.rows`` in ``directory``
    (atomically), then waits for the job's ``<batch id>.done`` (:class:`_Handoff`), so that the batch
    commits only once it was printed. A batch Spark re-executes is handed over again (at least once).
    """

    directory: str
    timeout_s: float = HANDOFF_TIMEOUT_S

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from routing.checkpoints import HandoffFiles

        files = HandoffFiles(batch.sparkSession, self.directory)
        ordered = batch.repartition(1).sortWithinPartitions(*ROW_ORDER).toLocalIterator()
        lines = [json.dumps(_encode(row.asDict(recursive=True)), ensure_ascii=False) for row in ordered]
        files.hand_over(batch_id, "\n".join(lines).encode())
        deadline = time.monotonic() + self.timeout_s
        while not files.printed(batch_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no tail printed batch {batch_id} within {self.timeout_s:g} s (did it stop?)")
            time.sleep(HANDOFF_POLL_S)
        files.clear(batch_id)


class _Unprinted:
    """The rows of a batch that ``--limit`` left unprinted, in ``<checkpoint>/unprinted/rows`` (JSON lines,
    replaced atomically): written before the batch commits, printed first by the next run on the checkpoint.

    A run killed after printing some of them prints those again (at least once, as for a batch).
    """

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        from routing.checkpoints import UnprintedRows

        self._files = UnprintedRows(spark, checkpoint)
        self._stored = False

    def take(self) -> list[dict[str, Any]]:
        """The rows kept (they stay kept until :meth:`keep` replaces them)."""
        text = self._files.read()
        self._stored = text is not None
        return [] if text is None else [_decode(json.loads(line)) for line in text.split("\n") if line]

    def keep(self, rows: list[dict[str, Any]]) -> None:
        """Replace what is kept with ``rows`` (none: no file)."""
        if rows:
            lines = [json.dumps(_encode(row), ensure_ascii=False) for row in rows]
            self._files.replace("\n".join(lines).encode())
        elif self._stored:
            self._files.delete()
        self._stored = bool(rows)


class _Printer:
    """Emit rows in order up to the limit; what is past it goes to :class:`_Unprinted`."""

    def __init__(
        self,
        unprinted: _Unprinted,
        emit: Callable[[dict[str, Any]], None],
        flush: Callable[[], None],
        summary: TailSummary,
        limit: int | None,
    ) -> None:
        self.unprinted = unprinted
        self._emit, self._flush, self._summary, self._limit = emit, flush, summary, limit
        #: This run's rows past the limit, in order (a batch can start before the stop request is served).
        self._rest: list[dict[str, Any]] = []

    def print_rows(self, rows: Iterable[dict[str, Any]]) -> bool:
        """Emit ``rows`` (then flush) until the limit; keep the rest for the next run. True once the limit is
        reached: the caller stops."""
        summary, limit = self._summary, self._limit
        iterator = iter(rows)
        for row in iterator:
            if limit is not None and summary.rows >= limit:
                self._rest += [row, *iterator]
                break
            self._emit(row)
            summary.rows += 1
        self._flush()  # what the checkpoint will say was printed has left this process
        self.unprinted.keep(self._rest)  # before the batch commits: a limit never skips a row
        summary.unprinted = len(self._rest)
        return limit is not None and summary.rows >= limit


class _Handoff:
    """The job's side of :class:`HandoffBatches`: print each handed-over batch, flush, acknowledge it."""

    def __init__(self, spark: SparkSession, checkpoint: str, printer: _Printer) -> None:
        from routing.checkpoints import HandoffFiles, handoff_directory

        self.directory = handoff_directory(checkpoint)
        self._files = HandoffFiles(spark, self.directory)
        self._printer = printer

    def serve(self) -> bool:
        """Print every batch waiting for this process, in batch order; True once the limit is reached."""
        for batch_id in self._files.waiting():
            text = self._files.rows(batch_id)
            if text is None:
                continue
            # not splitlines(): a row's text may hold U+2028 and its kin
            rows = (_decode(json.loads(line)) for line in text.split("\n") if line)
            reached = self._printer.print_rows(rows)  # printed and flushed before the worker may commit
            self._files.acknowledge(batch_id)
            if reached:
                return True
        return False

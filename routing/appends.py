"""A batch's append to Delta, once per (txnAppId, txnVersion): the policy, both ways to commit, and the warm.

Every job appends through :func:`append_once` (the router's outputs and metrics, the refresh job's rejects,
the ACL sweep's rejects)::

    append_once ──> first_append  (a first attempt, a path table, the tested Delta: one Spark job)
         │             └─ declined (nothing written) ─┐
         └──────────────────────────────────────────> idempotent_append  (the public writer; True: warm it)
                                                                 └─ AppendStateWarmer / warm_append_state,
                                                                    once the batch has committed

* :func:`idempotent_append` -- Delta's public writer with ``txnAppId``/``txnVersion``: Delta commits the
  append once per (app id, version) and skips it when a re-executed batch writes it again; ``save`` for a
  path, ``saveAsTable`` for a catalog name (:mod:`routing.delta_tables`). Delta honours the txn options on both.
* :func:`first_append` -- the same set transaction committed without Delta's check (and its state
  reconstruction), for a first attempt the caller has proved (the router's ledger). Delta's internal
  API, reached through :mod:`routing.jvm`, with its version check and the public writer as fallback.
* :func:`warm_append_state` and :class:`AppendStateWarmer` -- the state the next public append checks its
  txn version against, computed once the batch has committed, so the next batch does not wait for it.

Below the jobs' streaming layer (:mod:`routing.streaming`) and the router, above :mod:`routing.delta_tables`.
Spark is imported only inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from routing import delta_tables, jvm
from routing.table_names import is_table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("routing.appends")


def append_once(
    frame: DataFrame,
    table: str,
    transaction_app_id: str,
    txn_version: int,
    *,
    first_attempt: bool,
    partition_by: Sequence[str] = (),
    merge_schema: bool = False,
) -> bool:
    """Append ``frame`` to ``table`` once per (``transaction_app_id``, ``txn_version``); True when the public
    writer did it (the table's next append then needs the state :class:`AppendStateWarmer` computes).

    ``first_attempt`` says the caller has proved no earlier attempt wrote this version (the router's ledger
    entry, created by this attempt): then :func:`first_append` commits it directly where it can. Otherwise,
    or where it declines, :func:`idempotent_append` does, and skips a version already committed.
    """
    if first_attempt and first_append(frame, table, transaction_app_id, txn_version):
        return False
    idempotent_append(
        frame, table, transaction_app_id, txn_version, partition_by=partition_by, merge_schema=merge_schema
    )
    return True


def idempotent_append(
    frame: DataFrame,
    table: str,
    transaction_app_id: str,
    txn_version: int,
    *,
    partition_by: Sequence[str] = (),
    merge_schema: bool = False,
) -> None:
    """Append ``frame`` once per (``transaction_app_id``, ``txn_version``): Delta skips a version it committed.

    Jobs pass their query's txnAppId (:class:`routing.streaming.QueryIdentity`) and the batch id (an import,
    the file's hash and 0).
    ``merge_schema`` lets the append add columns the table lacks (a table from an older release).
    ``table`` is a path or a catalog name (:mod:`routing.delta_tables`); Delta honours the txn options on both.
    """
    writer = frame.write.format("delta").mode("append")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer = writer.option("txnAppId", transaction_app_id).option("txnVersion", txn_version)
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    if is_table_name(table):
        delta_tables.register(frame.sparkSession, table)
        writer.saveAsTable(table)
    else:
        writer.save(table)


#: Set once :func:`first_append` has found Delta's internal write API not as expected (logged once).
_first_append_missing = False


def first_append(frame: DataFrame, table: str, transaction_app_id: str, txn_version: int) -> bool:
    """Append ``frame`` with the set transaction (``transaction_app_id``, ``txn_version``) and no idempotency
    check; False, having written nothing, where it cannot (then use :func:`idempotent_append`).

    **Only for a version the caller knows no earlier attempt wrote** -- the router's first attempt at a batch,
    proved by creating its ledger entry (:mod:`routing.router.ledger`): the entry is made before any write
    and exactly once, so no attempt before this one reached a write.

    Why: :func:`idempotent_append`'s ``txnAppId`` makes Delta ask the table's latest snapshot which version
    the app id committed last, and Delta 4.4 answers from the snapshot's *full state*: a state
    reconstruction of three Spark jobs over the log since its checkpoint (which lists every file of the
    table), before a row is written. Here the answer is known, so the append skips the question: it
    writes the files and commits them together with the same ``txn`` action the public writer's commit
    carries, through Delta's ``OptimisticTransaction`` (one Spark job, the write). The commit on disk is
    the same, so a re-execution of the batch, which takes :func:`idempotent_append`, finds the version and
    is skipped exactly as before. Nothing is read, so the commit is a blind append: it conflicts with no
    concurrent append.

    Declines (False) on Spark Connect (no JVM here), for catalog table names (the public writer resolves
    them), when the frame's columns are not the table's (in any order; the public writer enforces or merges
    the schema), on a Delta release it was not tested with (:data:`routing.jvm.TESTED_DELTA`), and when
    Delta's internal API differs (both logged once). A failure of the write or the commit
    itself raises, like the public writer's.
    """
    global _first_append_missing
    if _first_append_missing or is_table_name(table):
        return False
    delta = jvm.delta_jvm(frame.sparkSession)
    if delta is None:
        return False  # Spark Connect or an untested Delta (logged once): the public writer serves
    try:
        prepared = delta.prepare_append(table, transaction_app_id, txn_version)
    except Exception as error:
        if not jvm.api_missing(error):
            raise  # a failure of the JVM's or of this code: loud, never a silent switch to the slower writer
        # No such class or method in this Delta: the public writer serves.
        _first_append_missing = True
        log.warning("Delta's transaction API is not as expected (%s); appending through the public writer", error)
        return False
    columns = prepared.columns
    frame_columns = frame.columns
    if sorted(columns) != sorted(frame_columns):
        return False
    # In the table's column order (a frame already in it, as the router's are, needs no select: ~30 JVM calls).
    prepared.commit(frame if frame_columns == columns else frame.select(*columns))
    return True


#: Whether :func:`warm_append_state` has logged that it cannot warm (once per process).
_warm_failure_logged = False


def warm_append_state(spark: SparkSession, table: str) -> bool:
    """Compute now the Delta state the next :func:`idempotent_append` to ``path`` will need; False if it cannot.

    An append with ``txnAppId`` first asks the table's latest snapshot which version that app id
    committed last (``OptimisticTransaction.txnVersion``). Delta 4.4 answers from the snapshot's full
    state, not from the ``.crc`` file that holds the same set transactions, so each new table
    version costs a state reconstruction: three Spark jobs over the log since the last checkpoint
    (``tests/integration/test_router_batch_path.py`` counts them), before the append writes a row. The
    state is cached on the snapshot object, and a snapshot is reused until the table changes, so
    computing it right after a batch's own commit, while the query waits for its next trigger, takes
    those jobs off the next batch's path from trigger to visible commit: its append then runs one
    Spark job. The work is the same, only earlier; nothing is skipped (the append still checks the
    txn version against a snapshot it updates first, so another writer's commit in between is seen).

    Uses Delta's JVM ``DeltaLog`` (no Python API gives a snapshot's set transactions). Any failure is
    logged once and only loses the head start; the next append computes the state itself.
    """
    global _warm_failure_logged
    try:
        snapshot = jvm.jvm_snapshot(spark, delta_tables.location(spark, table))
        if snapshot is None:
            return False  # Spark Connect or an untested Delta: the next append computes the state itself
        snapshot.transactions()
    except Exception as error:
        if not _warm_failure_logged:
            _warm_failure_logged = True
            log.warning("could not warm the Delta state of %s for the next append (only slower): %s", table, error)
        return False
    return True


class AppendStateWarmer:
    """:func:`warm_append_state` in the background: one warm at a time, on one long-lived thread.

    A batch's warm used to run at the end of its own ``foreachBatch`` call: about half a second of
    Spark jobs (a state reconstruction per table version, see :func:`warm_append_state`) between the
    batch's last commit and Spark's offset commit. Nothing in the batch needs it; only the next append
    does. :meth:`start` hands the committed tables to this thread and returns at once, so the warm
    overlaps Spark's commit log, the next trigger's planning and the next batch's ledger, snapshot check
    and plan; the next batch calls :meth:`wait` right before its first append. When the batch runs
    under a processing-time trigger with time to spare, the warm costs the stream nothing at all.

    The work is the same as in line, and in the same order: the warm ends before the next append
    starts, so that append finds the state computed (one Spark job) exactly as before. A warm that
    fails only loses the head start (:func:`warm_append_state` logs it once).

    The router waits at once instead under a processing-time trigger
    (:func:`routing.router.pipeline.warm_in_background`): on 2 cores the warm's Spark jobs beside the
    next batch's ledger, planning and write slowed each of them (planning 2x, the ledger 2x), so batches
    grew and p99 latency doubled at 15,000 msg/s; in line, the warm sits after the commit, off the path from
    a trigger to its visible commit.

    Concurrency contract: :meth:`start`, :meth:`wait` and :meth:`close` are called from one thread (the
    ``foreachBatch`` caller); the warm itself runs on the executor's thread. One thread, not one per
    batch: under PySpark's pinned-thread mode each new Python thread opens a JVM connection of its own.
    """

    def __init__(self, spark: SparkSession) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._spark = spark
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-warm")
        self._pending: Any = None

    def start(self, tables: Sequence[str]) -> None:
        """Warm ``tables`` (in order) on the background thread; first waits for a warm still running."""
        self.wait()
        tables = list(dict.fromkeys(tables))
        if tables:
            self._pending = self._executor.submit(self._warm, tables)

    def _warm(self, tables: list[str]) -> None:
        for table in tables:
            warm_append_state(self._spark, table)

    @property
    def started(self) -> bool:
        """Whether a warm was started and not yet waited for."""
        return self._pending is not None

    def wait(self) -> float:
        """Block until the warm in flight, if any, has finished; the seconds spent waiting."""
        pending, self._pending = self._pending, None
        if pending is None:
            return 0.0
        started = time.perf_counter()
        pending.result()  # warm_append_state never raises: it logs and returns False
        return time.perf_counter() - started

    def close(self) -> None:
        """Wait for the warm in flight and stop the thread (after the query has stopped)."""
        self.wait()
        self._executor.shutdown(wait=True)

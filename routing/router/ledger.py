"""The replay ledger: which subscription snapshot version each micro-batch routed with.

Before a batch writes anything, its snapshot version is written to one small
write-once file per batch id, ``<ledger dir>/<query id>/<batch id>``, like
Spark's own offset log: through Hadoop's ``FileSystem`` (Spark's
``CheckpointFileManager``, via the JVM gateway), or in-process through pyarrow
on a local disk (:class:`routing.checkpoints.CheckpointFiles` picks), so it
works on local disks, HDFS, S3 and ABFS alike, with no Spark job and no Delta
commit. The file is written to a
temporary name and renamed into place without overwriting, so a batch id is
recorded exactly once: a second writer (a re-executed batch racing a zombie)
finds the first one's version. When Spark re-executes a batch after a crash
between the writes and the checkpoint commit, the router finds the recorded
version here and routes with that same version (rebuilt by Delta time travel
if need be), so the re-executed batch produces exactly the same fan-out and
the idempotent writes skip it.

The ledger directory is ``router_ledger`` inside the query's checkpoint, so
it goes (and is copied, and deleted) with it; its files are
:class:`routing.checkpoints.QueryBatchFiles` (the checkpoint's layout is
declared there). The query id level keeps a query apart from an earlier one
of the same checkpoint directory: a new checkpoint numbers its batches from 0
again.

Retention, like Spark's offset log (``spark.sql.streaming.minBatchesToRetain``):
only the batch in flight can be re-executed (Spark commits batch N before it
plans N + 1), so an entry is needed for replay only until its batch commits.
The ledger keeps the last ``retain_batches`` entries of its query anyway, for
audits, and prunes the older ones once every ``retain_batches`` batches: when
batch N is recorded and N is a multiple of it, the entries of batches up to
N - ``retain_batches`` are deleted (one listing and that many deletes, so a
few milliseconds per batch on average, and the directory holds at most twice
``retain_batches`` entries). 0 keeps every entry. A crash between the deletes
leaves some entries for the next prune; temporary files of writes in flight
are never touched.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from routing.checkpoints import CheckpointFiles, QueryBatchFiles, ledger_directory

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.checkpoints import ArrowFiles

log = logging.getLogger("routing.router.ledger")

__all__ = ["Ledger", "ledger_directory", "ledger_entries", "prune_through", "read_ledger"]


def prune_through(batch_id: int, retain_batches: int) -> int | None:
    """The last batch id to prune once ``batch_id`` is recorded, or None (the ledger's and the router's rule).

    Every ``retain_batches`` batches (0: never), everything up to ``batch_id - retain_batches`` goes.
    """
    if retain_batches and batch_id and batch_id % retain_batches == 0:
        return batch_id - retain_batches
    return None


class Ledger:
    """One query's replay ledger. Concurrency contract: one caller at a time (the ``foreachBatch`` thread)."""

    def __init__(self, files: CheckpointFiles | ArrowFiles, app_id: str, *, retain_batches: int = 0) -> None:
        if retain_batches < 0:
            raise ValueError(f"retain_batches must be 0 (keep every entry) or more, got {retain_batches}")
        self._files = QueryBatchFiles(files)
        self._app_id = app_id
        self._retain = retain_batches
        self._query_id: str | None = None
        #: Versions read or written by this process; pruned with the files.
        self._known: dict[int, int] = {}

    @classmethod
    def open(cls, spark: SparkSession, directory: str, app_id: str, *, retain_batches: int = 0) -> Ledger:
        """The ledger in ``directory``, on the checkpoint's filesystem (see :class:`CheckpointFiles`)."""
        return cls(CheckpointFiles(spark, directory), app_id, retain_batches=retain_batches)

    def bind(self, query_id: str) -> None:
        """Record under this query (known only once the query has started)."""
        self._query_id = query_id
        self._known.clear()

    @property
    def _bound_query(self) -> str:
        if self._query_id is None:
            raise RuntimeError("the ledger is not bound to a streaming query yet")
        return self._query_id

    def recorded_version(self, batch_id: int) -> int | None:
        """The version ``batch_id`` recorded, if it did (one file-exists check the first time)."""
        if batch_id not in self._known:
            entry = self._files.read(self._bound_query, batch_id)
            if entry is None:
                return None
            self._known[batch_id] = int(entry["snapshot_version"])
        return self._known[batch_id]

    def record(self, batch_id: int, version: int) -> int:
        """Record ``version`` for ``batch_id`` once; the version on record (another writer's, if it was first)."""
        return self.record_once(batch_id, version)[0]

    def record_once(self, batch_id: int, version: int) -> tuple[int, bool]:
        """:meth:`record`, and whether this call created the entry.

        Created means no attempt at ``batch_id`` before this one recorded it, and since every attempt records
        before it writes anything, none wrote anything either: what lets the router's first attempt append
        without Delta's check of its txn version (:func:`routing.appends.first_append`).
        """
        entry = {
            "app_id": self._app_id,
            "query_id": self._bound_query,
            "batch_id": batch_id,
            "snapshot_version": version,
            "recorded_at": dt.datetime.now(dt.UTC).isoformat(),
        }
        if not self._files.create_once(self._bound_query, batch_id, entry):
            recorded = self.recorded_version(batch_id)
            if recorded is None:
                raise RuntimeError(f"ledger entry of batch {batch_id} exists but cannot be read")
            return recorded, False
        self._known[batch_id] = version
        last = prune_through(batch_id, self._retain)
        if last is not None:
            self.prune(last)
        return version, True

    def prune(self, last: int) -> int:
        """Delete the entries of batches up to ``last`` (inclusive); how many were deleted.

        Only committed batches may be pruned: :meth:`record` prunes at most up to ``retain_batches``
        batches before the one it records, all of which Spark committed before planning that one.
        """
        query = self._bound_query
        deleted = self._files.prune(query, last)
        for batch_id in [batch_id for batch_id in self._known if batch_id <= last]:
            del self._known[batch_id]
        if deleted:
            log.info("ledger: pruned %d entries of batches up to %d (query %s)", deleted, last, query)
        return deleted

    def versions(self) -> dict[int, int]:
        """Every recorded batch id of the bound query -> version (read fresh from the files)."""
        return {batch_id: version for _, batch_id, version in read_ledger(self._files.files, self._bound_query)}


def read_ledger(files: CheckpointFiles | ArrowFiles, query_id: str | None = None) -> list[tuple[str, int, int]]:
    """(query id, batch id, version) of every entry, of one query or of all."""
    ledger = QueryBatchFiles(files)
    entries = []
    for query in [query_id] if query_id is not None else ledger.query_ids():
        for batch_id in ledger.batch_ids(query):  # not a temporary file of a write in flight
            entry = ledger.read(query, batch_id)
            if entry is not None:
                entries.append((query, batch_id, int(entry["snapshot_version"])))
    return sorted(entries)


def ledger_entries(spark: SparkSession, directory: str) -> list[tuple[str, int, int]]:
    """(query id, batch id, version) of every entry under a ledger directory (tests and tooling)."""
    return read_ledger(CheckpointFiles(spark, directory))

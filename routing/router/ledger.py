"""The replay ledger: which subscription snapshot version each micro-batch routed with.

Before a batch writes anything, its snapshot version is written to one small
write-once file per batch id, ``<ledger dir>/<query id>/<batch id>``, like
Spark's own offset log: through Hadoop's ``FileSystem`` (Spark's
``CheckpointFileManager``, via the JVM gateway:
:class:`routing.checkpoints.CheckpointFiles`), so it works on HDFS, S3 and
ABFS alike, with no Spark job and no Delta commit. The file is written to a
temporary name and renamed into place without overwriting, so a batch id is
recorded exactly once: a second writer (a re-executed batch racing a zombie)
finds the first one's version. When Spark re-executes a batch after a crash
between the writes and the checkpoint commit, the router finds the recorded
version here and routes with that same version (rebuilt by Delta time travel
if need be), so the re-executed batch produces exactly the same fan-out and
the idempotent writes skip it.

The ledger directory defaults to ``router_ledger`` inside the query's
checkpoint (``router.ledger_path`` overrides it). The query id level keeps
two queries sharing a directory apart: a new checkpoint numbers its batches
from 0 again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import TYPE_CHECKING

from routing.checkpoints import CheckpointFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The ledger directory's name inside the checkpoint when ``router.ledger_path`` is empty.
DEFAULT_DIRECTORY = "router_ledger"


def ledger_directory(ledger_path: str, checkpoint_path: str) -> str:
    """``ledger_path``, or the default directory inside the checkpoint when it is empty."""
    return ledger_path or os.path.join(checkpoint_path, DEFAULT_DIRECTORY)


class Ledger:
    def __init__(self, spark: SparkSession, directory: str, app_id: str) -> None:
        self._files = CheckpointFiles(spark, directory)
        self._app_id = app_id
        self._query_id: str | None = None
        self._known: dict[int, int] = {}

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
            text = self._files.read(self._bound_query, str(batch_id))
            if text is None:
                return None
            self._known[batch_id] = int(json.loads(text)["snapshot_version"])
        return self._known[batch_id]

    def record(self, batch_id: int, version: int) -> int:
        """Record ``version`` for ``batch_id`` once; the version on record (another writer's, if it was first)."""
        entry = {
            "app_id": self._app_id,
            "query_id": self._bound_query,
            "batch_id": batch_id,
            "snapshot_version": version,
            "recorded_at": dt.datetime.now(dt.UTC).isoformat(),
        }
        if not self._files.create_once(json.dumps(entry, sort_keys=True).encode(), self._bound_query, str(batch_id)):
            recorded = self.recorded_version(batch_id)
            if recorded is None:
                raise RuntimeError(f"ledger entry of batch {batch_id} exists but cannot be read")
            return recorded
        self._known[batch_id] = version
        return version

    def versions(self) -> dict[int, int]:
        """Every recorded batch id of the bound query -> version (read fresh from the files)."""
        return {batch_id: version for _, batch_id, version in read_ledger(self._files, self._bound_query)}


def read_ledger(files: CheckpointFiles, query_id: str | None = None) -> list[tuple[str, int, int]]:
    """(query id, batch id, version) of every entry, of one query or of all."""
    entries = []
    for query in [query_id] if query_id is not None else files.list_names():
        for name in files.list_names(query):
            if not name.isdigit():
                continue  # a temporary file of a write in flight
            text = files.read(query, name)
            if text is not None:
                entries.append((query, int(name), int(json.loads(text)["snapshot_version"])))
    return sorted(entries)


def ledger_entries(spark: SparkSession, directory: str) -> list[tuple[str, int, int]]:
    """(query id, batch id, version) of every entry under a ledger directory (tests and tooling)."""
    return read_ledger(CheckpointFiles(spark, directory))

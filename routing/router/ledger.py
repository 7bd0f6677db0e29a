"""The replay ledger: which subscription snapshot version each micro-batch routed with.

Before a batch writes anything, its (batch id, snapshot version) is appended
to a small Delta table, idempotently (``txnAppId`` = the router's app id and
query id, ``txnVersion`` = the batch id). When Spark re-executes a batch after a crash
between the writes and the checkpoint commit, the router finds the recorded
version here and routes with that same version (rebuilt by Delta time travel
if need be), so the re-executed batch produces exactly the same fan-out and
the idempotent writes skip it.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LEDGER_DDL = (
    "app_id STRING NOT NULL, query_id STRING NOT NULL, batch_id BIGINT NOT NULL, "
    "snapshot_version BIGINT NOT NULL, recorded_at TIMESTAMP"
)


def txn_app_id(app_id: str, query_id: str) -> str:
    """The Delta ``txnAppId`` of a router's writes: its app id *and* its query's id.

    The query id lives in the checkpoint, so it survives restarts; a new checkpoint (whose batch
    ids restart at 0) gets a new one, and its batches are never mistaken for committed ones.
    """
    return f"{app_id}:{query_id}"


class Ledger:
    def __init__(self, spark: SparkSession, path: str, app_id: str) -> None:
        self._spark = spark
        self._path = path
        self._app_id = app_id
        self._query_id: str | None = None
        self._known: dict[int, int] = {}
        self._loaded = False

    def bind(self, query_id: str) -> None:
        """Record under this query (known only once the query has started)."""
        self._query_id = query_id
        self._known.clear()
        self._loaded = False

    @property
    def _bound_query(self) -> str:
        if self._query_id is None:
            raise RuntimeError("the ledger is not bound to a streaming query yet")
        return self._query_id

    def create_if_absent(self) -> None:
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(self._spark, self._path):
            self._spark.createDataFrame([], LEDGER_DDL).write.format("delta").mode("ignore").save(self._path)

    def _load(self) -> None:
        """Read the recorded batches once per process; later batches are tracked in memory."""
        from pyspark.sql import functions as F

        rows = (
            self._spark.read.format("delta")
            .load(self._path)
            .where(F.col("app_id") == self._app_id)
            .where(F.col("query_id") == self._bound_query)
            .select("batch_id", "snapshot_version")
            .collect()
        )
        self._known.update({int(row[0]): int(row[1]) for row in rows})
        self._loaded = True

    def recorded_version(self, batch_id: int) -> int | None:
        if not self._loaded:
            self._load()
        return self._known.get(batch_id)

    def record(self, batch_id: int, version: int) -> None:
        """Append (batch id, version); a re-executed batch's append is skipped by Delta."""
        row = [(self._app_id, self._bound_query, batch_id, version, dt.datetime.now(dt.UTC))]
        (
            self._spark.createDataFrame(row, LEDGER_DDL)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", txn_app_id(self._app_id, self._bound_query))
            .option("txnVersion", batch_id)
            .save(self._path)
        )
        self._known[batch_id] = version

    def versions(self) -> dict[int, int]:
        """Every recorded batch id -> version (read fresh from the table)."""
        self._load()
        return dict(self._known)

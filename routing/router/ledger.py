"""The replay ledger: which subscription snapshot version each micro-batch routed with.

Before a batch writes anything, its (batch id, snapshot version) is appended
to a small Delta table, idempotently (``txnAppId`` = the router's app id,
``txnVersion`` = the batch id). When Spark re-executes a batch after a crash
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

LEDGER_DDL = "app_id STRING NOT NULL, batch_id BIGINT NOT NULL, snapshot_version BIGINT NOT NULL, recorded_at TIMESTAMP"


class Ledger:
    def __init__(self, spark: SparkSession, path: str, app_id: str) -> None:
        self._spark = spark
        self._path = path
        self._app_id = app_id
        self._known: dict[int, int] = {}
        self._loaded = False

    def create_if_absent(self) -> None:
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(self._spark, self._path):
            self._spark.createDataFrame([], LEDGER_DDL).write.format("delta").mode("ignore").save(self._path)

    def _load(self) -> None:
        """Read the recorded batches once per process; later batches are tracked in memory."""
        rows = (
            self._spark.read.format("delta")
            .load(self._path)
            .where(f"app_id = '{self._app_id.replace(chr(39), chr(39) * 2)}'")
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
        row = [(self._app_id, batch_id, version, dt.datetime.now(dt.UTC))]
        (
            self._spark.createDataFrame(row, LEDGER_DDL)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", self._app_id)
            .option("txnVersion", batch_id)
            .save(self._path)
        )
        self._known[batch_id] = version

    def versions(self) -> dict[int, int]:
        """Every recorded batch id -> version (read fresh from the table)."""
        self._load()
        return dict(self._known)

"""The router on Spark Connect: the ``foreachBatch`` function pickled to the server, which builds a router in
its worker, and the batch records through which that worker hands each batch's report to the job."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

from routing.checkpoints import BatchRecords, checkpoint_query_id, router_reports
from udfs.route import RouterFactory, make_router

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from routing.router.snapshots import SnapshotBroadcasts
    from routing.settings import RouterSettings, Settings


class WorkerRouter(Protocol):
    """What :class:`ConnectBatches` uses of the router it builds in the worker
    (a :class:`routing.router.pipeline.Router`)."""

    snapshots: SnapshotBroadcasts

    def bind_query(self, query_id: str) -> None: ...

    def process_batch(self, batch: DataFrame, batch_id: int) -> None: ...


class NewWorkerRouter(Protocol):
    """How :class:`ConnectBatches` builds its worker's router: the ``Router`` class itself (passed down by the
    router that starts the query: this module sits below the router's and never imports it)."""

    def __call__(self, spark: SparkSession, settings: Settings, *, make_route: RouterFactory) -> WorkerRouter: ...


def batch_records(spark: SparkSession, router: RouterSettings) -> BatchRecords:
    """Where a router on Spark Connect leaves each batch's :class:`~routing.router.metrics.BatchReport` (its
    ``as_dict``) for its client: :func:`routing.checkpoints.router_reports`."""
    return router_reports(spark, router.checkpoint_path)


#: A Connect batch record's run totals so far: ``{"first_batch": the worker's first batch, "totals": ...}``.
RUN_TOTALS = "run_totals"


def _report_of(record: dict[str, Any]) -> dict[str, Any]:
    """A Connect batch record without the run totals it carries: the batch's
    :meth:`routing.router.metrics.BatchReport.as_dict`."""
    return {name: value for name, value in record.items() if name != RUN_TOTALS}


#: The routers of this process's ``foreachBatch`` worker (Spark Connect), by checkpoint.
_connect_routers: dict[str, WorkerRouter] = {}


@dataclasses.dataclass(frozen=True)
class ConnectBatches:
    """The ``foreachBatch`` function of a router on Spark Connect: pickled to the server, where it runs.

    Spark Connect runs ``foreachBatch`` in a Python worker the server starts for the query (one process for
    the query's life), with a Connect session of its own; a :class:`routing.router.pipeline.Router` holds
    threads, a lock and the live trie, none of which pickle. So the client sends only the settings (and the
    router's class, pickled by reference), and the worker builds its own
    router at its first batch and keeps it for the next ones: it refreshes the snapshot on its thread,
    ships each version as a snapshot file (no broadcasts over Connect), records the ledger and writes the
    same tables. Its txnAppId binds the query id Spark keeps in ``<checkpoint>/metadata``, the id the
    client's query has. The client holds the checkpoint lease, and reads each batch's report from
    :func:`batch_records`.
    """

    settings: Settings
    #: The router's class (:class:`NewWorkerRouter`), which the worker builds its router with.
    new_router: NewWorkerRouter
    make_route: RouterFactory = make_router

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        router = _connect_routers.get(self.settings.router.checkpoint_path)
        if router is None:
            router = self._worker_router(batch.sparkSession)
            _connect_routers[self.settings.router.checkpoint_path] = router
        router.process_batch(batch, batch_id)

    def _worker_router(self, spark: SparkSession) -> WorkerRouter:
        router = self.new_router(spark, self.settings, make_route=self.make_route)
        router.bind_query(checkpoint_query_id(spark, self.settings.router.checkpoint_path))
        router.snapshots.request_refresh()
        return router

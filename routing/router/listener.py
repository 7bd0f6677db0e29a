"""The router's progress listener: each query progress event reaches the router as its JSON, in two py4j calls
where :func:`routing.jvm.spark_jvm` allows, else through PySpark's own listener bridge."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import QueryStartedEvent, QueryTerminatedEvent, StreamingQueryListener

from routing.jvm import spark_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("routing.router")


class ProgressListener(StreamingQueryListener):
    """The router's metrics listener: each progress event reaches ``on_progress`` (the router's
    :meth:`~routing.router.pipeline.Router.log_progress`) as its JSON, parsed.

    PySpark's own listener bridge converts every progress event with one py4j call per field, and reads
    each Java map (``durationMs``, each source's metrics, ...) by iterating it to its end. The end of a
    py4j iteration is a Java exception, which PySpark's error handler checks against a dozen exception
    classes by name, each a failed class lookup through every jar on the classpath. On the JVM's
    listener thread that took 42 of 48 profiler samples, about 0.1 s of CPU per batch (``bench/stream.py``
    at 100,000 messages a batch: 1 of the router's 16 µs of CPU per message). Here a progress event is
    two py4j calls (the progress, its JSON) and a ``json.loads``. The rare start and end events keep
    PySpark's conversion.
    """

    def __init__(self, spark: SparkSession, on_progress: Callable[[dict[str, Any]], None]) -> None:
        self._spark = spark
        self._on_progress = on_progress
        self._wrapper: Any = None
        #: Set once the query's start and termination events were delivered (the router's ``close`` waits).
        self.started = threading.Event()
        self.terminated = threading.Event()

    @property
    def _jlistener(self) -> Any:
        # What StreamingQueryManager.addListener/removeListener register: the JVM's wrapper around a py4j
        # callback, here :class:`_JsonProgressCallback` instead of PySpark's converting one.
        if self._wrapper is None:
            internals = spark_jvm(self._spark)
            if internals is None:
                self._wrapper = super()._jlistener  # PySpark's converting bridge: onQueryProgress below
            else:
                self._wrapper = internals.progress_listener(_JsonProgressCallback(self))
        return self._wrapper

    def onQueryStarted(self, event: Any) -> None:
        log.info("router query started: id=%s run=%s", event.id, event.runId)
        self.started.set()

    def onQueryProgress(self, event: Any) -> None:
        """PySpark's converted event (the fallback bridge): its progress's JSON."""
        self.on_progress_json(event.progress.json)

    def on_progress_json(self, progress_json: str) -> None:
        try:
            self._on_progress(json.loads(progress_json))
        except Exception:  # a metrics problem must never stop the stream
            log.exception("could not log batch metrics")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        log.info("router query terminated: id=%s exception=%s", event.id, event.exception)
        self.terminated.set()


class _JsonProgressCallback:
    """The py4j callback the JVM's listener bus calls (a ``PythonStreamingQueryListener``).

    See :class:`ProgressListener`.
    """

    def __init__(self, listener: ProgressListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self._listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        self._listener.on_progress_json(jevent.progress().json())

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        self._listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ("org.apache.spark.sql.streaming.PythonStreamingQueryListener",)

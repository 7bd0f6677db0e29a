"""The streaming layer both jobs share: Kafka in, one query's identity, Delta tables, the batch hooks.

The router (:mod:`routing.router.pipeline`, run by ``jobs/route.py``) and the refresh job
(``jobs/refresh_subscriptions.py``) are the same kind of job: one Structured Streaming query
from a Kafka topic, a ``foreachBatch`` function on the driver that writes Delta tables, and a
checkpoint that commits the batch once that function returns::

    kafka_source ──> start_query(foreachBatch) ──> routing.appends.append_once ──> Delta
                          │ batches wait for QueryIdentity (txnAppId = "<app id>:<query id>")
                          └─ after the writes, before the checkpoint commit: the AfterWrites hook

What each piece guarantees:

* :func:`kafka_source` -- Spark's Kafka source with the connection options of ``[kafka]``
  (:meth:`routing.settings.Settings.spark_kafka_options`: security, SASL) and the bounds every
  job sets: where a new checkpoint starts, at most so many records per micro-batch, and whether
  data Kafka deleted before it was read fails the query.
* :class:`QueryIdentity` -- the ``txnAppId`` of a query's idempotent writes is
  :func:`txn_app_id` (app id, query id). The query id lives in the checkpoint, so a job
  restarted from its checkpoint keeps it and Delta skips the batches it already committed; a
  job started from a fresh checkpoint (batch ids from 0 again) gets a new one and is never
  mistaken for the old one. The id is known only once the query has started, so
  :func:`start_query` binds it right after ``start()`` and every batch waits for it.
* :func:`create_delta_table_if_absent` -- an empty Delta table from a DDL string (nullability
  kept), with its partition columns and table properties, unless a Delta table is already
  there: the router's outputs, the subscription table and its rejects are all made here. A table
  is a path or a catalog name (:mod:`routing.delta_tables`, which every read goes through).
* The appends themselves, once per (txnAppId, txnVersion), and the warm of the Delta state the
  next one needs, are :mod:`routing.appends`'s.
* :func:`wait_for_kafka` -- before Spark starts, each job waits at most ``kafka.start_timeout_s``
  for a bootstrap server to accept a connection, and otherwise stops with one clear line and exit
  status 1 (:func:`kafka_exit_status`). Spark's Kafka source itself does not fail fast on a cluster
  that is down: its offset requests time out and retry for minutes first.
* :data:`AfterWrites` -- a hook a job calls with the batch id after a batch's writes and before
  ``foreachBatch`` returns (so before Spark commits the batch to the checkpoint). Tests use it to
  kill a job exactly there and prove the replay writes nothing twice; a test that runs a job as a
  child process sets :data:`CRASH_AFTER_WRITES_ENV`, which the jobs' ``main()`` turn into that hook
  with :func:`crash_after_writes_from_env` (the one place the variable is read). Never set it in
  production. The same variable can name another point of a batch (:class:`CrashHook`): the refresh
  job's inside its MERGE, or between the MERGE and the rejects append; the router's after its ledger
  entry, or between its deliveries and its dead letters (:data:`CrashPoints`).
* :func:`retry_worker_start` -- starts a query again when Spark refused it because the Python
  worker it launched for ``foreachBatch`` (a Spark Connect server does) missed Spark's fixed 10 s
  to connect back, which a busy server can.
* :func:`retry_delta_conflicts` -- re-runs a read-decide-commit step when Delta refuses its commit
  because another writer committed first (``ConcurrentAppendException`` and its kin): the step then
  decides again against the newer table.

  Both are :func:`retry` with their own test of an error and their own pauses.

Spark is imported only inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from routing import delta_tables
from routing.config import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from routing.settings import Settings

log = logging.getLogger("routing.streaming")
T = TypeVar("T")

#: Called with the batch id after a batch's writes, before the batch returns (and its checkpoint commits).
AfterWrites = Callable[[int], None]

#: Test-only: where a job SIGKILLs itself, ``<batch id>[:<point>]`` (see :func:`crash_after_writes_from_env`).
CRASH_AFTER_WRITES_ENV = "ROUTER_TEST_CRASH_AFTER_WRITES"


# -- the Kafka source ---------------------------------------------------------------


def kafka_source(
    spark: SparkSession,
    settings: Settings,
    *,
    topics: Sequence[str] = (),
    pattern: str = "",
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    fail_on_data_loss: bool = True,
    include_headers: bool = False,
) -> DataFrame:
    """A streaming frame over ``topics`` (or the topic regex ``pattern``), with every job's bounds.

    ``starting_offsets`` applies only to a new checkpoint; ``max_offsets_per_trigger`` bounds each
    micro-batch (None: no micro-batches to bound, Real-Time Mode's streaming tasks); ``fail_on_data_loss``
    fails the query on offsets Kafka deleted before they were read.
    """
    if bool(topics) == bool(pattern):
        raise ValueError("kafka_source takes either topics or a pattern")
    reader = spark.readStream.format("kafka").options(**settings.spark_kafka_options())
    reader = reader.option("subscribePattern", pattern) if pattern else reader.option("subscribe", ",".join(topics))
    reader = reader.option("startingOffsets", starting_offsets).option("failOnDataLoss", str(fail_on_data_loss).lower())
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    if include_headers:
        reader = reader.option("includeHeaders", "true")
    return reader.load()


# -- the cluster at start-up -----------------------------------------------------------

#: Seconds one connection attempt may take, and between attempts, while waiting for the cluster.
KAFKA_PROBE_S = 1.0


class KafkaUnavailable(RuntimeError):
    """No bootstrap server accepted a connection within ``kafka.start_timeout_s``; the message says where."""


def bootstrap_addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    """(host, port) of each ``kafka.bootstrap_servers`` entry: ``host:port`` or ``[v6 address]:port``, with an
    optional listener prefix (``SASL_SSL://host:port``) as Kafka's clients allow; :class:`ConfigError` if malformed."""
    addresses = []
    for entry in bootstrap_servers.split(","):
        host, separator, port = entry.strip().split("://", 1)[-1].rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not (separator and host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigError(f"setting kafka.bootstrap_servers: {entry.strip()!r} is not host:port")
        addresses.append((host, int(port)))
    return addresses


def wait_for_kafka(settings: Settings) -> None:
    """Return once some bootstrap server accepts a TCP connection; :class:`KafkaUnavailable` after
    ``kafka.start_timeout_s`` (a broker starting meanwhile is waited for).

    A connection is all it proves: security, authentication and topics stay Spark's to report (a wrong
    password keeps Kafka's own error). It tells "nothing listens there" apart, clearly and in bounded time.
    """
    kafka = settings.kafka
    addresses = bootstrap_addresses(kafka.bootstrap_servers)
    deadline = time.monotonic() + kafka.start_timeout_s
    waiting_logged = False
    while True:
        errors = []
        for host, port in addresses:
            try:
                with socket.create_connection((host, port), timeout=KAFKA_PROBE_S):
                    return
            except OSError as error:
                errors.append(f"{host}:{port}: {error.strerror or error}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaUnavailable(
                f"no Kafka broker accepted a connection at {kafka.bootstrap_servers} (kafka.bootstrap_servers) within "
                f"{kafka.start_timeout_s:g} s (kafka.start_timeout_s): {'; '.join(errors)}; start the broker (the "
                "local one: make kafka-start) or fix kafka.bootstrap_servers, then run the job again"
            )
        if not waiting_logged:
            log.warning(
                "no Kafka broker accepts connections at %s yet (%s); waiting up to %g s (kafka.start_timeout_s)",
                kafka.bootstrap_servers,
                "; ".join(errors),
                kafka.start_timeout_s,
            )
            waiting_logged = True
        time.sleep(min(KAFKA_PROBE_S, remaining))


def kafka_exit_status(settings: Settings, prog: str) -> int | None:
    """For a job's ``main()`` before Spark starts: None once the cluster accepts connections, else the exit
    status after one line on stderr (2 for a malformed ``kafka.bootstrap_servers``, 1 when none answered)."""
    try:
        wait_for_kafka(settings)
    except ConfigError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    except KafkaUnavailable as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    return None


# -- the query and its identity -------------------------------------------------------


def txn_app_id(app_id: str, query_id: str) -> str:
    """The Delta ``txnAppId`` of a query's writes: the job's app id *and* its query's id."""
    return f"{app_id}:{query_id}"


class QueryIdentity:
    """The streaming query a job writes as, known once the query has started; batches wait for it."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self.query_id = ""
        #: ``app_id:query_id`` once bound, ``""`` before.
        self.txn_app_id = ""
        self._bound = threading.Event()

    def bind(self, query_id: str) -> None:
        """Write as the query ``query_id`` from now on (and let waiting batches through)."""
        self.query_id = query_id
        self.txn_app_id = txn_app_id(self.app_id, query_id)
        self._bound.set()

    def wait(self) -> str:
        """The txnAppId, once :meth:`bind` has run (a batch can start before ``start()`` returns)."""
        self._bound.wait()
        return self.txn_app_id


def start_query(
    stream: DataFrame,
    process_batch: Callable[[DataFrame, int], None],
    *,
    checkpoint: str,
    bind: Callable[[str], None],
    trigger_interval: str | None = None,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start ``process_batch`` over ``stream`` as a ``foreachBatch`` query, then ``bind`` its id.

    Available-now (drain what is there, then stop) unless ``trigger_interval`` names a processing-time
    trigger. ``bind`` receives the query id before this returns (:meth:`QueryIdentity.bind`, or a
    function that binds more, like the router's ledger); batches that started earlier wait for it.
    """
    writer = stream.writeStream.foreachBatch(process_batch).option("checkpointLocation", checkpoint)
    if query_name is not None:
        writer = writer.queryName(query_name)
    if trigger_interval is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=trigger_interval)
    query = retry_worker_start(writer.start, f"starting {query_name or 'the query'}")
    bind(str(query.id))
    return query


#: Attempts of a query start whose ``foreachBatch`` Python worker did not connect back in time.
WORKER_START_ATTEMPTS = 3

#: What Spark says when a Python worker it launched did not connect back within its fixed 10 s
#: (``PythonWorkerFactory``; not a setting). A Spark Connect server launches one for every
#: ``foreachBatch`` query it starts, so a busy server refuses the start, before the query exists.
_WORKER_DID_NOT_CONNECT = ("Python worker to connect back", "Python worker failed to connect back")


def worker_did_not_connect(error: BaseException) -> bool:
    """Whether ``error`` is Spark's refusal of a Python worker that was too slow to start."""
    return any(text in str(error) for text in _WORKER_DID_NOT_CONNECT)


def retry(
    step: Callable[[], T],
    what: str,
    *,
    retryable: Callable[[Exception], str | None],
    attempts: int,
    pause_s: Callable[[int], float],
) -> T:
    """``step()``, run again while ``retryable(error)`` says why its failure is worth another try (else None).

    The loop of :func:`retry_worker_start` and :func:`retry_delta_conflicts`: each refusal is logged with
    ``what`` and the reason, then waits ``pause_s(attempt)``; after ``attempts`` refusals, or at an error
    ``retryable`` does not name, the error is raised.
    """
    for attempt in range(1, attempts + 1):
        try:
            return step()
        except Exception as error:
            reason = retryable(error)
            if reason is None or attempt == attempts:
                raise
            pause = pause_s(attempt)
            log.warning("%s: %s; trying again in %.1f s (attempt %d of %d)", what, reason, pause, attempt + 1, attempts)
            time.sleep(pause)
    raise AssertionError("unreachable")


def retry_worker_start(
    start: Callable[[], T], what: str, *, attempts: int = WORKER_START_ATTEMPTS, first_pause_s: float = 2.0
) -> T:
    """``start()``, run again while Spark refuses it because a Python worker did not connect back in time.

    Safe because the refusal comes before the query exists (nothing ran, nothing was committed).
    Pauses double from ``first_pause_s``; after ``attempts`` refusals the last one is raised.
    """

    def slow_worker(error: Exception) -> str | None:
        return "Spark's Python worker did not connect back within its 10 s" if worker_did_not_connect(error) else None

    return retry(
        start,
        what,
        retryable=slow_worker,
        attempts=attempts,
        pause_s=lambda attempt: first_pause_s * 2 ** (attempt - 1),
    )


# -- Delta tables ----------------------------------------------------------------------

#: An empty Delta table (a path or a catalog name) from a DDL string, unless one is there; see the module docs.
create_delta_table_if_absent = delta_tables.create_if_absent


#: Attempts of a step Delta keeps refusing because other writers commit first (see :func:`retry_delta_conflicts`).
DELTA_CONFLICT_ATTEMPTS = 8


class ConcurrentTableChange(RuntimeError):
    """A table changed between the version a step decided against and its commit (retried like Delta's conflicts)."""


def delta_conflict_types() -> tuple[type[BaseException], ...]:
    """Delta's commit-conflict exceptions (as PySpark raises them): another writer committed first."""
    import delta.exceptions as conflicts  # importing it makes PySpark raise these instead of a generic error

    return (
        ConcurrentTableChange,
        conflicts.DeltaConcurrentModificationException,
        conflicts.ConcurrentWriteException,
        conflicts.MetadataChangedException,
        conflicts.ProtocolChangedException,
        conflicts.ConcurrentAppendException,
        conflicts.ConcurrentDeleteReadException,
        conflicts.ConcurrentDeleteDeleteException,
        conflicts.ConcurrentTransactionException,
    )


def retry_delta_conflicts(
    step: Callable[[], T], what: str, *, attempts: int = DELTA_CONFLICT_ATTEMPTS, first_pause_s: float = 0.4
) -> T:
    """``step()``, run again while Delta refuses its commit because another writer committed first.

    ``step`` must read the table afresh each time (it decides against the newer version), and its
    other writes must be idempotent. Pauses double from ``first_pause_s`` (at most 5 s, randomly
    shortened by up to half so that contenders drift apart); after ``attempts`` refusals the last
    conflict is raised.
    """
    conflicts = delta_conflict_types()

    def conflict(error: Exception) -> str | None:
        if not isinstance(error, conflicts):
            return None
        return f"another writer committed first ({type(error).__name__}); deciding again against the new table version"

    def pause_s(attempt: int) -> float:
        return min(5.0, first_pause_s * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)

    return retry(step, what, retryable=conflict, attempts=attempts, pause_s=pause_s)


# -- the test-only crash hook -----------------------------------------------------------

#: Crash points of :class:`CrashHook`. After a batch's writes, before its checkpoint commit (both jobs; the default).
AFTER_WRITES = "after_writes"
#: The refresh job: inside the MERGE, while Delta reads its source (on an executor), before it commits.
IN_MERGE = "in_merge"
#: The refresh job: after the MERGE committed, before the rejects append.
AFTER_MERGE = "after_merge"
#: The router: after the batch's ledger entry (its snapshot version) is recorded, before any output is written.
AFTER_LEDGER = "after_ledger"
#: The router: after the deliveries append, before the dead letters' (and the other tables').
AFTER_DELIVERIES = "after_deliveries"
CRASH_POINTS = (AFTER_WRITES, IN_MERGE, AFTER_MERGE, AFTER_LEDGER, AFTER_DELIVERIES)
#: Called with (batch id, point) at each point of a batch: :class:`CrashHook` (the router's points inside a batch).
CrashPoints = Callable[[int, str], None]


def _kill_job(pid: int, leads_group: bool) -> None:
    """SIGKILL the job: its whole process group (driver, JVM) when it leads one, else only the driver."""
    if leads_group:
        os.killpg(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)


class CrashHook:
    """SIGKILLs the job at ``point`` of batch ``batch_id`` (tests only; see :data:`CRASH_AFTER_WRITES_ENV`).

    Called like an :data:`AfterWrites` hook (batch id; the after-writes point) or with a point. For
    :data:`IN_MERGE`, :meth:`in_merge` wraps the MERGE's source so that the executor that reads it kills
    the driver's process group: the kill lands inside Delta's MERGE command, before its commit.
    An import counts its files as batches 0, 1, ...
    """

    def __init__(self, batch_id: int, point: str = AFTER_WRITES) -> None:
        if point not in CRASH_POINTS:
            raise ValueError(f"{CRASH_AFTER_WRITES_ENV}: unknown crash point {point!r} (one of {CRASH_POINTS})")
        self.batch_id = batch_id
        self.point = point

    def __call__(self, batch_id: int, point: str = AFTER_WRITES) -> None:
        if (batch_id, point) == (self.batch_id, self.point):
            log.warning("%s: killing the job at %s of batch %d", CRASH_AFTER_WRITES_ENV, point, batch_id)
            _kill_job(os.getpid(), os.getpgid(0) == os.getpid())

    def in_merge(self, source: DataFrame, batch_id: int) -> DataFrame:
        """``source``, which kills the job when a task reads it, if this is the batch to kill in its MERGE."""
        if (batch_id, IN_MERGE) != (self.batch_id, self.point):
            return source
        driver, leads_group = os.getpid(), os.getpgid(0) == os.getpid()
        # Logged here, on the driver: an executor's own output may die with the JVM that relays it.
        log.warning(
            "%s: the MERGE of batch %d kills the job when it reads its source", CRASH_AFTER_WRITES_ENV, batch_id
        )

        def kill_on_read(batches: Any) -> Any:
            _kill_job(driver, leads_group)
            yield from batches

        return source.mapInArrow(kill_on_read, source.schema)

    def at_batch(self, batch_id: int) -> BatchCrash:
        """This hook for the points inside batch ``batch_id`` (what the refresh job hands its MERGE step)."""
        return BatchCrash(self, batch_id)


@dataclasses.dataclass(frozen=True)
class BatchCrash:
    """A :class:`CrashHook` for the points inside one batch."""

    hook: CrashHook
    batch_id: int

    def __call__(self, point: str) -> None:
        self.hook(self.batch_id, point)

    def in_merge(self, source: DataFrame) -> DataFrame:
        return self.hook.in_merge(source, self.batch_id)


def crash_after_writes(target_batch: int) -> AfterWrites:
    """A hook that SIGKILLs this process after the writes of ``target_batch`` (tests only)."""
    return CrashHook(target_batch)


def crash_after_writes_from_env() -> CrashHook | None:
    """The :class:`CrashHook` :data:`CRASH_AFTER_WRITES_ENV` asks for, if it is set (tests only).

    Its value is ``<batch id>`` (kill after that batch's writes) or ``<batch id>:<point>``, a point of
    :data:`CRASH_POINTS`.
    """
    target = os.environ.get(CRASH_AFTER_WRITES_ENV)
    if target is None:
        return None
    batch_id, _, point = target.partition(":")
    return CrashHook(int(batch_id), point or AFTER_WRITES)

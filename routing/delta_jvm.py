"""Delta's internal API through py4j: the JVM handles every fast path of this project calls, held once per JVM.

Two fast paths reach past Delta's public API, and both get their classes and methods here:

* the router's direct append (:func:`routing.appends.first_append`): an ``OptimisticTransaction`` that
  commits a batch's files with its ``txn`` action, skipping the public writer's state reconstruction;
* reads of a path table's transaction log (:func:`jvm_snapshot`): its version and properties
  (:func:`routing.delta_tables.latest_version`) and the warm of the state the next append needs
  (:func:`routing.appends.warm_append_state`).

Each has a tested fallback to the public API: the direct append stands down on a Delta release not in
:data:`TESTED_DELTA` or when a call is missing (:func:`delta_api_missing`), and the log reads fall back to
SQL. Classic sessions only: Spark Connect has no JVM in the process.

A leaf: :mod:`routing.delta_tables` (below the appends) reads the log through it, so it imports nothing of
the project's.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The Delta releases (version prefixes) whose internal API this project's fast paths were written and tested
#: against: on any other the direct append stands down and Delta's public writer serves
#: (:func:`routing.appends.first_append`).
TESTED_DELTA = ("4.4.",)


class DeltaJvm:
    """The JVM classes and methods by which this project calls Delta's internal API, looked up once per JVM.

    A name reached as ``jvm.org.apache.spark.sql.delta.DeltaLog.forTable`` is resolved on every use, one
    py4j round trip per step, and the JVM answers each package step (``org``, ``org.apache``, ...) by
    failing to load it as a class, a search of every jar on the class path. The router's append made
    thirteen such steps per batch (6.7-8.4 ms of the driver's time; 0.15-0.24 ms held). Held here, each
    call is one round trip.

    Nothing is checked when this is built: a class this Delta lacks is a py4j ``JavaPackage``, which
    raises ``TypeError`` when called (see :func:`delta_api_missing`).
    """

    def __init__(self, jvm: Any) -> None:
        self.jvm = jvm
        self._delta = jvm.org.apache.spark.sql.delta
        self.for_table = self._delta.DeltaLog.forTable
        self.set_transaction = self._delta.actions.SetTransaction
        self.option = jvm.scala.Option.apply
        self.option_empty = jvm.scala.Option.empty
        self.long_value_of = jvm.java.lang.Long.valueOf

    @functools.cached_property
    def version(self) -> str:
        """The running Delta's release (``io.delta.VERSION``)."""
        return str(self.jvm.io.delta.package.VERSION())

    def tested(self) -> bool:
        """Whether the running Delta is one of :data:`TESTED_DELTA`."""
        return self.version.startswith(TESTED_DELTA)

    @functools.cached_property
    def append_operation(self) -> Any:
        """``DeltaOperations.Write(mode = Append, the rest their defaults)``, as the public append's commit
        names it (an immutable case class, so one serves every commit)."""
        write_operation = getattr(getattr(self._delta, "DeltaOperations$Write$"), "MODULE$")
        defaults = [getattr(write_operation, f"apply$default${index}")() for index in range(2, 10)]
        return write_operation.apply(self.jvm.org.apache.spark.sql.SaveMode.Append, *defaults)


#: The :class:`DeltaJvm` of the process's JVM (PySpark keeps one gateway per process; rebuilt if it changes).
_delta_jvm: DeltaJvm | None = None


def delta_jvm(spark: SparkSession) -> DeltaJvm:
    """The held :class:`DeltaJvm` of ``spark``'s JVM (classic sessions). Threads may race to build it: the
    loser's copy is dropped, which is harmless."""
    global _delta_jvm
    jvm: Any = spark.sparkContext._jvm
    held = _delta_jvm
    if held is None or held.jvm is not jvm:
        held = _delta_jvm = DeltaJvm(jvm)
    return held


def jvm_snapshot(spark: SparkSession, path: str) -> Any:
    """Delta's ``Snapshot`` of the table at ``path`` as of now, through the JVM's ``DeltaLog`` (classic sessions;
    Delta's internal API, so callers fall back when it raises). Version -1: no table there."""
    delta = delta_jvm(spark)
    none = delta.option_empty()
    log = delta.for_table(spark._jsparkSession, path)
    # update(stalenessAcceptable = false, checkIfUpdatedSinceTs = None, catalogTableOpt = None): list the log now.
    return log.update(False, none, none)


def delta_api_missing(error: BaseException) -> bool:
    """Whether ``error`` says a class or method reached through py4j (:func:`routing.appends.first_append`) is missing.

    py4j reports a missing method as a ``Py4JError`` (not a ``Py4JJavaError``, which is an exception the JVM
    threw), and a missing class as a package: calling it raises a ``TypeError`` naming ``JavaPackage``.
    Anything else (an error of this module's own, such as the ``TypeError`` of a schema it misread) is a bug
    and must not switch the fast path off for the whole process, as it once did.
    """
    from py4j.protocol import Py4JError, Py4JJavaError

    if isinstance(error, Py4JJavaError):
        return False
    return isinstance(error, Py4JError) or (isinstance(error, TypeError) and "JavaPackage" in str(error))

"""Every call this project makes past Spark's and Delta's public Python API, through py4j, in one module.

A classic session's driver talks to its JVM through py4j, and a few hot paths go around PySpark's and
Delta's public API to save JVM round trips or whole Spark jobs per batch. They all live here, each behind
a check of the running release and each with a fallback to the public API that the tests run:

===============================  ==========================================  ==========================================
Fast path (caller)               What it saves                               Fallback (untested release, Connect)
===============================  ==========================================  ==========================================
:meth:`SparkJvm.select`          ~120 round trips a batch: a select's JVM    ``DataFrame.select``
(``router.columns.Projection``)  column list is built once
:meth:`SparkJvm.batch_constants` ~75 round trips a batch: PySpark's          PySpark's ``functions``
(``router.columns.BatchPlan``)   call-origin bookkeeping per function
:meth:`SparkJvm.carry_local_`    a new Python thread, and so a new JVM       the publish runs without the query's job
``properties`` (the Kafka sink)  connection, per batch's Kafka publish       group (the batch still waits for it)
:meth:`SparkJvm.progress_`       ~0.1 s of CPU a batch: PySpark converts     PySpark's own listener bridge
``listener`` (router.listener)  each progress event field by field
:class:`HadoopFiles`             (no public API: Spark's                     pyarrow's filesystems
(``routing.checkpoints``)        ``CheckpointFileManager``)                  (``checkpoints.ArrowFiles``)
:meth:`DeltaJvm.prepare_append`  Delta's state reconstruction (three Spark   Delta's public writer with ``txnAppId``
(``appends.first_append``)       jobs) before a first attempt's append
:func:`jvm_snapshot`             a SQL ``DESCRIBE`` per version or property  ``DESCRIBE HISTORY`` / ``DESCRIBE DETAIL``
(``delta_tables``, the warm)     read; the next append's state, computed
                                 early
===============================  ==========================================  ==========================================

Besides those, :func:`register_route_key` registers the real-time lane's Java UDF (the project's own class, whose
constructor takes the snapshot directory and limits: ``spark.udf.registerJavaFunction`` can only make a UDF with no
arguments). It has no fallback: the real-time lane needs a classic session's JVM.

The checks: :func:`spark_jvm` and :func:`delta_jvm` return None (and log once) when the running Spark or
Delta is not one of :data:`TESTED_SPARK` / :data:`TESTED_DELTA`, and on Spark Connect (no JVM in the
process). A call that a tested release lacks after all is told from a real failure by :func:`api_missing`.

Each handle holds the JVM classes and methods it calls: a name reached as ``jvm.org.apache...`` is
resolved on every use, one round trip per package step, each a failed class lookup through every jar.

A leaf: it imports nothing of the project's, so every layer may use it.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The Spark releases (version prefixes) the Spark fast paths were written and tested against.
TESTED_SPARK = ("4.2.",)
#: The Delta releases (version prefixes) the Delta fast paths were written and tested against.
TESTED_DELTA = ("4.4.",)

#: The (library, version) pairs already logged as untested (once per process each).
_logged_untested: set[tuple[str, str]] = set()


def _tested(library: str, version: str, tested: tuple[str, ...]) -> bool:
    if version.startswith(tested):
        return True
    if (library, version) not in _logged_untested:
        _logged_untested.add((library, version))
        log.warning(
            "%s %s is not a release this project's fast paths were tested with (%s): using the public API",
            library,
            version,
            ", ".join(f"{prefix}x" for prefix in tested),
        )
    return False


def api_missing(error: BaseException) -> bool:
    """Whether ``error`` says a class or method reached through py4j is missing from the running release.

    py4j reports a missing method as a ``Py4JError`` (not a ``Py4JJavaError``, which is an exception the JVM
    threw), and a missing class as a package: calling it raises a ``TypeError`` naming ``JavaPackage``.
    Anything else (an error of the caller's own, such as a ``TypeError`` of a schema it misread) is a bug
    and must not switch a fast path off for the whole process.
    """
    from py4j.protocol import Py4JError

    if is_java_error(error):
        return False
    return isinstance(error, Py4JError) or (isinstance(error, TypeError) and "JavaPackage" in str(error))


def is_java_error(error: BaseException) -> bool:
    """Whether ``error`` is an exception the JVM threw (py4j's ``Py4JJavaError``)."""
    from py4j.protocol import Py4JJavaError

    return isinstance(error, Py4JJavaError)


def _is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (as :func:`routing.spark.is_connect`; this module is a leaf)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class SparkJvm:
    """Spark's JVM classes and methods held for one JVM (a classic session on a tested release)."""

    def __init__(self, spark: SparkSession, version: str) -> None:
        jvm: Any = spark.sparkContext._jvm
        self.jvm = jvm
        self._jspark: Any = spark._jsparkSession
        self.version = version
        self._array_list = jvm.java.util.ArrayList
        self._to_seq = jvm.PythonUtils.toSeq
        functions = jvm.org.apache.spark.sql.functions
        self._lit, self._array, self._element_at = functions.lit, functions.array, functions.element_at

    def column_list(self, columns: Sequence[Column]) -> tuple[Any, Any]:
        """The JVM ``ArrayList`` of ``columns`` and its ``Seq``: what :meth:`select` takes, built once."""
        jlist = self._array_list([column._jc for column in columns])
        return jlist, self._to_seq(jlist)

    def select(self, frame: DataFrame, columns: tuple[Any, Any], at: int = 0, extra: Sequence[Any] = ()) -> DataFrame:
        """``frame.select`` of the :meth:`column_list` ``columns`` with ``extra`` (Python or JVM columns)
        inserted at ``at``: one round trip, plus one per extra column."""
        from pyspark.sql import Column as PythonColumn
        from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

        jlist, jseq = columns
        if extra:
            copy = self._array_list(jlist)
            for offset, column in enumerate(extra):
                copy.add(at + offset, column._jc if isinstance(column, PythonColumn) else column)
            jseq = self._to_seq(copy)
        return ClassicDataFrame(frame._jdf.select(jseq), frame.sparkSession)

    def batch_constants(self, values: Sequence[tuple[str, object, str]], index: Column) -> list[Any]:
        """PySpark's ``functions``                    of ``values`` (name, value, type), as JVM columns
        made by direct calls of Spark's ``functions``: ``element_at(array(lit(v).cast(t)), index)``."""
        jindex = index._jc
        constants = []
        for name, value, data_type in values:
            literal = self._lit(value).cast(data_type)
            array = self._array(self._to_seq(self._array_list([literal])))
            constants.append(self._element_at(array, jindex).alias(name))
        return constants

    def carry_local_properties(self) -> Callable[[], None]:
        """The calling thread's local properties (the query's job group among them), cloned now; calling the
        result on another thread gives it those properties, as :class:`pyspark.InheritableThread` does for a
        thread of its own (this serves a long-lived pool thread, which PySpark's pinned-thread mode makes
        cheaper than a new thread, and so a new JVM connection, per use)."""
        context = self._jspark.sparkContext()
        properties = context.getLocalProperties().clone()

        def apply() -> None:
            context.setLocalProperties(properties)

        return apply

    def progress_listener(self, callback: Any) -> Any:
        """The JVM's listener wrapper around a py4j ``PythonStreamingQueryListener`` callback (what PySpark's
        ``addListener`` registers, here with a callback of the caller's)."""
        return self.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(callback)

    def default_fs(self) -> str:
        """Hadoop's ``fs.defaultFS`` as the session resolves it."""
        return str(self._jspark.sparkContext().hadoopConfiguration().get("fs.defaultFS", "file:///"))

    def checkpoint_file_manager(self, directory: str) -> tuple[Any, Any, Any]:
        """Spark's ``CheckpointFileManager`` for ``directory``, Hadoop's ``Path`` class and the directory's path."""
        path_class = self.jvm.org.apache.hadoop.fs.Path
        root = path_class(directory)
        conf = self._jspark.sessionState().newHadoopConf()
        manager = self.jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
        return manager.create(root, conf), path_class, root

    def read_utf8(self, stream: Any) -> str:
        return str(self.jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))


#: The :class:`SparkJvm` of the process's JVM, or None for an untested release (rebuilt if the JVM changes).
_spark_jvm: tuple[Any, SparkJvm | None] | None = None


def spark_jvm(spark: SparkSession) -> SparkJvm | None:
    """The held :class:`SparkJvm` of ``spark``'s JVM; None on Spark Connect or a Spark not in :data:`TESTED_SPARK`.
    Threads may race to build it: the loser's copy is dropped, which is harmless."""
    global _spark_jvm
    if _is_connect(spark):
        return None
    jvm = spark.sparkContext._jvm
    held = _spark_jvm
    if held is None or held[0] is not jvm:
        version = str(spark.version)
        handle = SparkJvm(spark, version) if _tested("Spark", version, TESTED_SPARK) else None
        held = _spark_jvm = (jvm, handle)
    return held[1]


class HadoopFiles:
    """Spark's ``CheckpointFileManager`` for one directory: write-once files on any Hadoop FS.

    Write-once is as atomic as the filesystem's rename without overwrite: atomic on HDFS and ABFS; on
    Hadoop's local filesystem racing writers can both pass its exists-check, and the later rename replaces
    the earlier one's file (so :class:`routing.checkpoints.CheckpointFiles` gives local directories to pyarrow).
    """

    def __init__(self, internals: SparkJvm, directory: str) -> None:
        self._internals = internals
        self._manager, self._path_class, self._directory = internals.checkpoint_file_manager(directory)

    def _path(self, *names: str) -> Any:
        path = self._directory
        for name in names:
            path = self._path_class(path, name)
        return path

    def path(self, *names: str) -> str:
        return str(self._path(*names))

    def read(self, *names: str) -> str | None:
        path = self._path(*names)
        if not self._manager.exists(path):
            return None
        try:
            stream = self._manager.open(path)
        except Exception as error:
            if "FileNotFoundException" in str(error):
                return None  # deleted since the exists() check
            raise
        try:
            return self._internals.read_utf8(stream)
        finally:
            stream.close()

    def create_once(self, data: bytes, *names: str) -> bool:
        path = self._path(*names)
        if self._manager.exists(path):
            return False
        self._manager.mkdirs(path.getParent())
        stream = self._manager.createAtomic(path, False)
        try:
            stream.write(bytearray(data))
            stream.close()
        except Exception as error:
            stream.cancel()
            if "FileAlreadyExistsException" in str(error):
                return False
            raise
        return True

    def replace(self, data: bytes, *names: str) -> None:
        path = self._path(*names)
        self._manager.mkdirs(path.getParent())  # as ArrowFiles does: a first record creates its directory
        stream = self._manager.createAtomic(path, True)
        try:
            stream.write(bytearray(data))
            stream.close()
        except Exception:
            stream.cancel()
            raise

    def delete(self, *names: str) -> None:
        self._manager.delete(self._path(*names))

    def list_names(self, *names: str) -> list[str]:
        path = self._path(*names)
        if not self._manager.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in self._manager.list(path))


class DeltaJvm:
    """Delta's JVM classes and methods held for one JVM (a classic session on a tested Delta).

    Nothing is checked when this is built: a class this Delta lacks is a py4j ``JavaPackage``, which
    raises ``TypeError`` when called (see :func:`api_missing`).
    """

    def __init__(self, spark: SparkSession, version: str) -> None:
        jvm: Any = spark.sparkContext._jvm
        self.jvm = jvm
        self.version = version
        self._jspark: Any = spark._jsparkSession
        self._delta = jvm.org.apache.spark.sql.delta
        self._for_table = self._delta.DeltaLog.forTable
        self._set_transaction = self._delta.actions.SetTransaction
        self._option = jvm.scala.Option.apply
        self._option_empty = jvm.scala.Option.empty
        self._long_value_of = jvm.java.lang.Long.valueOf

    @functools.cached_property
    def _append_operation(self) -> Any:
        """``DeltaOperations.Write(mode = Append, the rest their defaults)``, as the public append's commit
        names it (an immutable case class, so one serves every commit)."""
        write_operation = getattr(getattr(self._delta, "DeltaOperations$Write$"), "MODULE$")
        defaults = [getattr(write_operation, f"apply$default${index}")() for index in range(2, 10)]
        return write_operation.apply(self.jvm.org.apache.spark.sql.SaveMode.Append, *defaults)

    def snapshot(self, path: str) -> Any:
        """Delta's ``Snapshot`` of the table at ``path`` as of now (version -1: no table there)."""
        none = self._option_empty()
        # update(stalenessAcceptable = false, checkIfUpdatedSinceTs = None, catalogTableOpt = None): list the log now.
        return self._for_table(self._jspark, path).update(False, none, none)

    def prepare_append(self, path: str, app_id: str, txn_version: int) -> PreparedAppend:
        """An ``OptimisticTransaction`` on the table at ``path`` that will commit one append with the set
        transaction (``app_id``, ``txn_version``), and the table's columns in order (none before its first
        commit)."""
        transaction = self._for_table(self._jspark, path).startTransaction()
        # The schema's JSON in one call (its fieldNames array would be read one element per JVM round trip).
        schema = transaction.metadata().schemaString()
        columns = [field["name"] for field in json.loads(schema)["fields"]] if schema else []
        now = self._option(self._long_value_of(int(time.time() * 1000)))
        set_transaction = self._set_transaction(app_id, txn_version, now)
        return PreparedAppend(transaction, columns, set_transaction, self._append_operation)


class PreparedAppend:
    """A transaction :meth:`DeltaJvm.prepare_append` opened: :meth:`commit` writes a frame's files and
    commits them with the set transaction, as the public writer's commit would."""

    def __init__(self, transaction: Any, columns: list[str], set_transaction: Any, operation: Any) -> None:
        self._transaction = transaction
        #: The table's columns, in order.
        self.columns = columns
        self._set_transaction = set_transaction
        self._operation = operation

    def commit(self, frame: DataFrame) -> None:
        """Write ``frame`` (the table's columns, in order) and commit its files with the set transaction."""
        files = self._transaction.writeFiles(frame._jdf)
        self._transaction.commit(getattr(files, "$colon$plus")(self._set_transaction), self._operation)


#: The :class:`DeltaJvm` of the process's JVM, or None for an untested Delta (rebuilt if the JVM changes).
_delta_jvm: tuple[Any, DeltaJvm | None] | None = None


def delta_jvm(spark: SparkSession) -> DeltaJvm | None:
    """The held :class:`DeltaJvm` of ``spark``'s JVM; None on Spark Connect or a Delta not in
    :data:`TESTED_DELTA`. Threads may race to build it: the loser's copy is dropped, which is harmless."""
    global _delta_jvm
    if _is_connect(spark):
        return None
    jvm: Any = spark.sparkContext._jvm
    held = _delta_jvm
    if held is None or held[0] is not jvm:
        version = str(jvm.io.delta.package.VERSION())
        handle = DeltaJvm(spark, version) if _tested("Delta", version, TESTED_DELTA) else None
        held = _delta_jvm = (jvm, handle)
    return held[1]


def jvm_snapshot(spark: SparkSession, path: str) -> Any | None:
    """Delta's ``Snapshot`` of the table at ``path`` as of now, or None where :func:`delta_jvm` is None.
    Version -1: no table there. Raises what the JVM raises (callers fall back)."""
    delta = delta_jvm(spark)
    return None if delta is None else delta.snapshot(path)


#: Milliseconds after its last lookup that an executor frees a table's snapshot (:func:`register_route_key`): long
#: enough that a live query never reloads, short enough that an executor outliving its queries lets them go.
SNAPSHOT_IDLE_MS = 10 * 60 * 1000


def register_route_key(
    spark: SparkSession,
    name: str,
    directory: str,
    table_id: str,
    *,
    refresh_ms: int,
    first_wait_ms: int,
    max_fanout: int,
    idle_ms: int = SNAPSHOT_IDLE_MS,
) -> None:
    """Register ``sparktopicrouter.udfs.RouteKey`` (udfs/jvm) as ``name`` in ``spark``'s function registry.

    Each executor JVM checks ``directory`` for a newer snapshot every ``refresh_ms``, and frees the table's
    matcher ``idle_ms`` after its last lookup (a stopped query's; a later lookup loads the newest file again).
    """
    jvm: Any = spark._jvm
    jvm.sparktopicrouter.udfs.RouteKey.register(
        spark._jsparkSession,
        name,
        directory,
        table_id,
        refresh_ms,
        idle_ms,
        first_wait_ms,
        max_fanout,
    )


def loaded_snapshot_sources(spark: SparkSession) -> int:
    """How many tables' snapshots the driver's JVM holds for the real-time UDF (in local mode, the executors')."""
    jvm: Any = spark._jvm
    return int(jvm.sparktopicrouter.udfs.RouteKey.loadedSnapshotSources())

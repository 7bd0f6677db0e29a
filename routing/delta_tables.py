"""Where a Delta table lives: a path, or a name in the session's catalog. Every access but an append goes through here.

Each table setting (``subscriptions.table_path`` and ``rejects_path``; ``router.deliveries_path``,
``dead_letters_path``, ``unrouted_path`` and ``metrics_path``) takes either form:

* **a path**: absolute, relative (to the settings file that wrote it), or a URI such as
  ``s3a://bucket/deliveries``. Read with ``load``, written with ``save`` (:mod:`routing.appends`),
  created at that location.
* **a table name**: two or three dot-separated identifiers, ``schema.table`` or
  ``catalog.schema.table`` (the Hive metastore's two levels, Unity Catalog's three), resolved in the
  session's catalog. Read with ``table``, written with ``saveAsTable`` (:mod:`routing.appends`), created with
  ``CREATE TABLE IF NOT EXISTS ... USING delta``. The schema (database) must exist, as a catalog's
  owner would want: nothing here creates one, except in the session-scoped catalog below.

A single word (``deliveries``) stays a relative path, as it always was: write a table of the
default database as ``default.deliveries``, and a relative path with dots as ``./my.tables``.
Identifiers are unquoted SQL identifiers (letters, digits, ``_``; not starting with a digit).

**Idempotence is the same in both forms.** ``txnAppId``/``txnVersion`` are write options that
Delta honours on ``saveAsTable`` as on ``save``: an append re-executed with a version its app id
already committed is skipped (``tests/integration/test_catalog_tables.py`` replays one).

**The session-scoped catalog.** Spark without Hive support keeps ``spark_catalog`` in memory
(``spark.sql.catalogImplementation = in-memory``, this project's local default): a table one process
creates is unknown to the next, and Delta refuses to create a managed table over the files the
previous process left (``DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION``). There, a ``spark_catalog``
name is registered in each session as an *external* table at the place Spark would manage it,
``<database location>/<table>`` (``<warehouse>/<schema>.db/<table>``), after ``CREATE DATABASE IF
NOT EXISTS``. Every process of a deployment computes the same place, so the refresh job, the
router, ``tail`` and ``list`` share one table as they would through a metastore. Dropping such a
table keeps its files. With a persistent catalog names are used as they are.

**Spark Connect.** A Connect session (``spark.remote``) has no JVM in the process, so nothing here
may use Delta's Python ``DeltaTable`` there (it drives the JVM; its Connect flavour needs a server
plugin Delta does not publish for Spark 4.2): existence, creation, :func:`detail` and
:func:`latest_version` are SQL (``DESCRIBE DETAIL``, ``DESCRIBE HISTORY``, ``CREATE TABLE``), the same
statements in both modes, MERGE is SQL too (:func:`merge`), and only :func:`delta_table` is classic-only.

**The transaction log, read directly.** In a classic session, :func:`latest_version` and
:func:`table_property` of a path table ask Delta's ``DeltaLog`` in the JVM instead (one listing of
``_delta_log``, no Spark job): about 13 ms against 300 ms for ``DESCRIBE HISTORY ... LIMIT 1``, whose
four SQL executions and one job read commit files the caller never looks at. The refresh job asks for
the version three times per batch and the router polls it, so this was a tenth of the test suite's time.
``DeltaLog`` is Delta's internal API: if this Delta lacks the calls, the first failure logs a warning
and the SQL statements serve from then on. Names keep the SQL path (a catalog may own their commits).

Spark and Delta are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from routing.jvm import is_java_error, jvm_snapshot
from routing.table_names import is_table_name as is_table_name  # below the settings, which check table names

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

#: The catalog of names with two parts, and the only one that can be session-scoped.
SESSION_CATALOG = "spark_catalog"


def sql_identifier(table: str) -> str:
    """``table`` as a SQL table identifier: each part of a name back-quoted, a path as ``delta.`path```."""
    if is_table_name(table):
        return ".".join(f"`{part}`" for part in table.split("."))
    return "delta.`" + table.replace("`", "``") + "`"


def _sql_string(value: str) -> str:
    """A SQL string literal (Spark's parser reads backslash escapes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _session_scoped(spark: SparkSession, name: str) -> tuple[str, str] | None:
    """(schema, table) of a ``spark_catalog`` name when that catalog lives in memory, else None."""
    parts = name.split(".")
    if len(parts) == 3:
        if parts[0].lower() != SESSION_CATALOG:
            return None
        parts = parts[1:]
    if spark.conf.get("spark.sql.catalogImplementation", "in-memory") != "in-memory":
        return None
    return parts[0], parts[1]


#: Names registered (or found registered) in each catalog, and their locations: both cost catalog round trips.
#: Kept per :func:`_catalog_owner`, weakly, so a stopped context takes its entries with it.
_registered: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()
_locations: weakref.WeakKeyDictionary[object, dict[str, str]] = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


def _catalog_owner(spark: SparkSession) -> object:
    """What holds the catalog of ``spark``: its SparkContext, whose catalog every session of it shares
    (``foreachBatch`` hands each batch a session object of its own, which must not repeat the lookups),
    or the session itself where there is no context (Spark Connect)."""
    return getattr(spark, "_sc", None) or spark


def _managed_location(spark: SparkSession, schema: str, table: str) -> str:
    """Where Spark keeps ``schema.table`` as a managed table: its database's location, else where ``CREATE
    DATABASE`` would put one (``<warehouse>/<schema>.db``); names lower-cased as Spark's catalog stores them."""
    if spark.catalog.databaseExists(schema):
        root = spark.catalog.getDatabase(schema).locationUri
    else:
        warehouse = spark.conf.get("spark.sql.warehouse.dir") or "spark-warehouse"  # Spark's own default
        root = f"{warehouse.rstrip('/')}/{schema.lower()}.db"
    return f"{root.rstrip('/')}/{table.lower()}"


def _connect(spark: SparkSession) -> bool:
    from routing.spark import is_connect

    return is_connect(spark)


def is_delta_location(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table is at ``path`` (a path or URI, not a name)."""
    if not _connect(spark):
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(spark, path))
    from pyspark.errors import AnalysisException

    try:
        row = spark.sql(f"DESCRIBE DETAIL {sql_identifier(path)}").select("format").head()
    except AnalysisException:  # DELTA_MISSING_DELTA_TABLE, PATH_NOT_FOUND
        return False
    return row is not None and str(row["format"]).lower() == "delta"


def _create_database(spark: SparkSession, schema: str) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{schema}`")


def register(spark: SparkSession, table: str) -> None:
    """Make a name of the session-scoped catalog known to this session if its files exist (see module docs).

    A no-op for paths, for names already known, and for persistent catalogs.
    """
    if not is_table_name(table):
        return
    with _registered_lock:
        if table in _registered.get(_catalog_owner(spark), ()):
            return
    scoped = _session_scoped(spark, table)
    if scoped is not None and not spark.catalog.tableExists(table):
        schema, name = scoped
        location = _managed_location(spark, schema, name)
        if not is_delta_location(spark, location):
            return  # nothing to register yet: create_if_absent makes it, readers get Spark's TABLE_OR_VIEW_NOT_FOUND
        _create_database(spark, schema)
        spark.sql(f"CREATE TABLE IF NOT EXISTS {sql_identifier(table)} USING delta LOCATION {_sql_string(location)}")
    with _registered_lock:
        _registered.setdefault(_catalog_owner(spark), set()).add(table)


def exists(spark: SparkSession, table: str) -> bool:
    """Whether there is a Delta table at the path, or a table of that name."""
    if not is_table_name(table):
        return is_delta_location(spark, table)
    register(spark, table)
    return bool(spark.catalog.tableExists(table))


def create_if_absent(
    spark: SparkSession,
    table: str,
    ddl: str,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
) -> None:
    """An empty Delta table with the columns of ``ddl`` (nullability kept), unless the table exists."""
    from pyspark.sql.types import StructType

    if exists(spark, table):
        return
    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    if is_table_name(table) or _connect(spark):
        # SQL, not DeltaTable's builder: its table name parser stops at two parts (no catalog), and it
        # needs the JVM (Spark Connect has none here).
        columns = ", ".join(
            f"`{field.name}` {field.dataType.simpleString()}{'' if field.nullable else ' NOT NULL'}"
            for field in schema.fields
        )
        statement = [f"CREATE TABLE IF NOT EXISTS {sql_identifier(table)} ({columns}) USING delta"]
        if partition_by:
            statement.append("PARTITIONED BY (" + ", ".join(f"`{column}`" for column in partition_by) + ")")
        if properties:
            pairs = ", ".join(f"{_sql_string(key)} = {_sql_string(value)}" for key, value in properties.items())
            statement.append(f"TBLPROPERTIES ({pairs})")
        scoped = _session_scoped(spark, table) if is_table_name(table) else None
        if scoped is not None:
            statement.append(f"LOCATION {_sql_string(_managed_location(spark, *scoped))}")
            _create_database(spark, scoped[0])
        spark.sql(" ".join(statement))
    else:
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(spark).location(table)
        for field in schema.fields:
            builder = builder.addColumn(field.name, field.dataType, nullable=field.nullable)
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        for name, value in (properties or {}).items():
            builder = builder.property(name, value)
        builder.execute()
    register(spark, table)


def read(spark: SparkSession, table: str, options: Mapping[str, Any] | None = None) -> DataFrame:
    """The table as a DataFrame, with Delta reader ``options`` (``versionAsOf``, ``readChangeFeed``, ...)."""
    reader = spark.read.format("delta")
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    if is_table_name(table):
        register(spark, table)
        return reader.table(table)
    return reader.load(table)


def read_stream(spark: SparkSession, table: str) -> DataFrame:
    """The table as a streaming source."""
    reader = spark.readStream.format("delta")
    if is_table_name(table):
        register(spark, table)
        return reader.table(table)
    return reader.load(table)


def merge(table: str, source: DataFrame, clauses: str) -> None:
    """``MERGE INTO <table> AS t USING <source> AS s <clauses>``, in the source's session.

    SQL rather than ``DeltaTable.merge``, so that one statement serves classic sessions and Spark Connect
    alike; ``source`` becomes a temporary view for the statement's length (a unique name, dropped after).
    """
    import uuid

    spark = source.sparkSession
    view = f"merge_source_{uuid.uuid4().hex}"
    register(spark, table)
    source.createOrReplaceTempView(view)
    try:
        spark.sql(f"MERGE INTO {sql_identifier(table)} AS t USING `{view}` AS s {clauses}")
    finally:
        spark.catalog.dropTempView(view)


def delta_table(spark: SparkSession, table: str) -> DeltaTable:
    """The ``DeltaTable`` handle (classic sessions only: see the module docs; :func:`merge` serves both)."""
    from delta.tables import DeltaTable

    if _connect(spark):
        raise NotImplementedError(f"Delta's DeltaTable API for {table} needs a classic Spark session")

    if is_table_name(table):
        register(spark, table)
        return DeltaTable.forName(spark, table)
    return DeltaTable.forPath(spark, table)


def location(spark: SparkSession, table: str) -> str:
    """Where the table's files are: the path itself, or the location the catalog gives a name."""
    if not is_table_name(table):
        return table
    with _registered_lock:
        known = _locations.get(_catalog_owner(spark), {}).get(table)
    if known is None:
        known = str(detail(spark, table)["location"])
        with _registered_lock:
            _locations.setdefault(_catalog_owner(spark), {})[table] = known
    return known


LOG = logging.getLogger(__name__)
#: Set once this Delta turned out to lack the internal calls :func:`_log_snapshot` makes (then SQL serves).
_log_calls_missing = False


def _log_snapshot(spark: SparkSession, table: str) -> Any | None:
    """Delta's current snapshot of a path table, from its transaction log through the JVM; None where the SQL
    statements must serve: Spark Connect (no JVM here), table names, no Delta table at the path (their errors
    are the SQL statements'), or a Delta whose internal API differs (see the module docs)."""
    global _log_calls_missing
    if _log_calls_missing or is_table_name(table) or _connect(spark):
        return None
    try:
        snapshot = jvm_snapshot(spark, table)
        return snapshot if snapshot is not None and snapshot.version() >= 0 else None
    except Exception as error:
        if is_java_error(error):  # the log itself failed (missing, unreadable): the SQL statement reports it
            return None
        _log_calls_missing = True  # no such class or method in this Delta
        LOG.warning("Delta's DeltaLog API is not as expected (%s); reading table versions with SQL", error)
        return None


def table_property(spark: SparkSession, table: str, key: str) -> str | None:
    """One table property (``TBLPROPERTIES``), or None when the table does not set it."""
    snapshot = _log_snapshot(spark, table)
    if snapshot is not None:
        value = snapshot.metadata().configuration().get(key)
        return None if value.isEmpty() else str(value.get())
    properties = detail(spark, table)["properties"] or {}
    value = properties.get(key)
    return None if value is None else str(value)


def table_id(spark: SparkSession, table: str) -> str:
    """The table's Delta id (``metaData.id``: a UUID fixed when the table is created; a table dropped and
    created again gets a new one)."""
    snapshot = _log_snapshot(spark, table)
    if snapshot is not None:
        return str(snapshot.metadata().id())
    return str(detail(spark, table)["id"])


def detail(spark: SparkSession, table: str) -> Any:
    """The table's ``DESCRIBE DETAIL`` row (location, properties, partition columns, ...)."""
    register(spark, table)
    row = spark.sql(f"DESCRIBE DETAIL {sql_identifier(table)}").head()
    assert row is not None, f"DESCRIBE DETAIL {table} returned no row"
    return row


def latest_version(spark: SparkSession, table: str) -> int:
    """The table's newest Delta version: from its log (:func:`_log_snapshot`), else ``DESCRIBE HISTORY ... LIMIT 1``."""
    snapshot = _log_snapshot(spark, table)
    if snapshot is not None:
        return int(snapshot.version())
    register(spark, table)
    newest = spark.sql(f"DESCRIBE HISTORY {sql_identifier(table)} LIMIT 1").select("version").head()
    assert newest is not None, f"Delta table {table} has no history"
    return int(newest[0])

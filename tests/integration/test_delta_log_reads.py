"""Table versions and properties read from Delta's log (``routing.delta_tables``), held to the SQL statements.

In a classic session :func:`~routing.delta_tables.latest_version` and
:func:`~routing.delta_tables.table_property` of a path table ask the JVM's ``DeltaLog``; ``DESCRIBE HISTORY``
and ``DESCRIBE DETAIL``, run here by hand, are the oracle after every kind of commit. The point of the log
path is that it runs no Spark job, which a job group counts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from routing import delta_tables

pytestmark = pytest.mark.slow

PROPERTY = "delta.enableChangeDataFeed"


def history_version(spark: Any, path: str) -> int:
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").agg({"version": "max"}).head()[0])


def detail_property(spark: Any, path: str, key: str) -> str | None:
    value = (spark.sql(f"DESCRIBE DETAIL delta.`{path}`").head()["properties"] or {}).get(key)
    return None if value is None else str(value)


def test_versions_and_properties_from_the_log_equal_the_sql_statements(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    commits: list[Callable[[], object]] = [
        lambda: spark.range(3).write.format("delta").save(path),
        lambda: spark.range(2).write.format("delta").mode("append").save(path),
        lambda: spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({PROPERTY} = true)"),
        lambda: spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 1"),
        lambda: spark.range(1).write.format("delta").mode("overwrite").save(path),
        lambda: spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ({PROPERTY})"),
    ]
    seen = []
    for commit in commits:
        commit()
        version = delta_tables.latest_version(spark, path)
        assert version == history_version(spark, path)
        assert delta_tables.table_property(spark, path, PROPERTY) == detail_property(spark, path, PROPERTY)
        seen.append((version, delta_tables.table_property(spark, path, PROPERTY)))
    assert [version for version, _ in seen] == list(range(len(commits)))
    assert [value for _, value in seen] == [None, None, "true", "true", "true", None]
    assert delta_tables.table_property(spark, path, "no.such.property") is None


def test_the_log_path_runs_no_spark_job_where_describe_history_runs_some(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    spark.range(3).write.format("delta").save(path)
    tracker = spark.sparkContext.statusTracker()

    def jobs_of(group: str, call: Any) -> int:
        spark.sparkContext.setJobGroup(group, group)
        try:
            for _ in range(3):
                call()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    assert jobs_of("log-reads", lambda: delta_tables.latest_version(spark, path)) == 0
    assert jobs_of("log-properties", lambda: delta_tables.table_property(spark, path, PROPERTY)) == 0
    assert jobs_of("sql-history", lambda: history_version(spark, path)) > 0


def test_a_path_without_a_table_fails_as_the_sql_statement_does(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException):
        delta_tables.latest_version(spark, str(tmp_path / "nothing-here"))

"""Idempotent writes are keyed by (app id, query id): a fresh checkpoint is never mistaken for an old one.

A router restarted from its checkpoint keeps its query id, so Spark re-executing a committed batch
writes nothing; a router started from a *new* checkpoint with the same ``router.app_id`` numbers
its batches from 0 again, and with the app id alone Delta would silently skip all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from router_support import apply_subscriptions, router_settings

from integration.test_router_metrics import SUBSCRIPTIONS, batch_frame, records
from routing.router.pipeline import Router
from routing.settings import Settings


def delivery_count(spark: Any, settings: Settings) -> int:
    return int(spark.read.format("delta").load(settings.router.deliveries_path).count())


@pytest.mark.slow
def test_same_query_skips_a_replay_but_a_new_query_writes(spark: Any, settings: Settings, tmp_path: Path) -> None:
    local = router_settings(settings, tmp_path, ["txn"])
    apply_subscriptions(spark, local, tmp_path / "subs.json", subscribe=SUBSCRIPTIONS)
    rows = records(3, 120)

    first = Router(spark, local)
    try:
        first.bind_query("checkpoint-a")
        first.process_batch(batch_frame(spark, rows), 0)
        once = delivery_count(spark, local)
        first.process_batch(batch_frame(spark, rows), 0)  # Spark re-executing batch 0 of the same query
        assert once > 0 and delivery_count(spark, local) == once
    finally:
        first.close(progress_wait_s=0)

    fresh = Router(spark, local)  # same app id, a new checkpoint: batch ids start at 0 again
    try:
        fresh.bind_query("checkpoint-b")
        fresh.process_batch(batch_frame(spark, rows), 0)
    finally:
        fresh.close(progress_wait_s=0)
    assert delivery_count(spark, local) == 2 * once, "the new query's batch 0 was skipped as already written"


def test_only_a_missing_delta_class_or_method_switches_the_fast_append_off(spark: Any) -> None:
    """Real py4j errors: a missing method (Py4JError) and a missing class (a JavaPackage called) mean Delta's
    API is not as expected; an exception the JVM threw (which PySpark hands over as its own captured
    exception, not py4j's), or this code's own TypeError, is not, and is raised."""
    import json
    from typing import cast

    from py4j.protocol import Py4JError, Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    from routing.jvm import api_missing as delta_api_missing

    jvm = spark.sparkContext._jvm

    def raised(call: Any) -> BaseException:
        with pytest.raises(Exception) as caught:
            call()
        return caught.value

    missing_method = raised(lambda: jvm.java.lang.Integer.noSuchMethodAnywhere(1))
    missing_class = raised(lambda: jvm.org.apache.spark.sql.delta.NoSuchDeltaClass.forTable("x"))
    thrown_by_the_jvm = raised(lambda: jvm.java.lang.Integer.parseInt("not a number"))
    own_bug = raised(lambda: json.loads(cast(str, None)))  # the TypeError of a schema read as None
    assert isinstance(missing_method, Py4JError) and not isinstance(missing_method, Py4JJavaError)
    assert isinstance(missing_class, TypeError) and isinstance(thrown_by_the_jvm, (CapturedException, Py4JJavaError))
    assert delta_api_missing(missing_method) and delta_api_missing(missing_class)
    assert not delta_api_missing(thrown_by_the_jvm) and not delta_api_missing(own_bug)


def test_first_append_declines_what_the_public_writer_must_handle(spark: Any, tmp_path: Path) -> None:
    """Columns that are not the table's (the writer enforces or merges the schema) and catalog names (the
    writer resolves them): declined, and nothing written; the table's columns in any order commit the txn
    version."""
    from routing import delta_tables
    from routing.appends import first_append, idempotent_append

    path = str(tmp_path / "table")
    spark.range(3).selectExpr("id", "cast(id as string) as name").write.format("delta").save(path)
    assert not first_append(spark.range(3).selectExpr("id"), path, "app", 0)
    assert not first_append(spark.range(3).selectExpr("id", "'x' as name", "1 as extra"), path, "app", 0)
    assert not first_append(spark.range(3).selectExpr("id", "'x' as name"), "some_catalog_table", "app", 0)
    assert delta_tables.read(spark, path).count() == 3
    assert first_append(spark.range(2).selectExpr("'new' as name", "id"), path, "app", 0)
    assert sorted(tuple(row) for row in delta_tables.read(spark, path).where("name = 'new'").collect()) == [
        (0, "new"),
        (1, "new"),
    ]
    # The commit carries (app, 0): the public writer's re-execution of it is skipped, the next version is not.
    idempotent_append(spark.range(2).selectExpr("id", "'again' as name"), path, "app", 0)
    assert delta_tables.read(spark, path).where("name = 'again'").count() == 0
    idempotent_append(spark.range(2).selectExpr("id", "'next' as name"), path, "app", 1)
    assert delta_tables.read(spark, path).where("name = 'next'").count() == 2

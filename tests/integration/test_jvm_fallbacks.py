"""Every py4j fast path of :mod:`routing.jvm` and its public-API fallback, on the real session.

The pinned Spark and Delta get their handles; a release the fast paths were not tested with (simulated by
moving :data:`routing.jvm.TESTED_SPARK` / :data:`routing.jvm.TESTED_DELTA` away from the running ones) gets
None, one warning per library, and the same results through the public API: a routed batch's rows, the
progress events the router's listener hears, the checkpoint files and the Delta log reads.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from router_support import apply_subscriptions, read_routed, router_settings

from routing import delta_tables, jvm
from routing.checkpoints import CheckpointFiles
from routing.router.columns import SOURCE_DDL
from routing.router.listener import ProgressListener
from routing.router.pipeline import Router
from routing.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def untested(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if neither the running Spark nor the running Delta were a tested release (the handles rebuilt)."""
    monkeypatch.setattr(jvm, "TESTED_SPARK", ("0.0.",))
    monkeypatch.setattr(jvm, "TESTED_DELTA", ("0.0.",))
    monkeypatch.setattr(jvm, "_spark_jvm", None)
    monkeypatch.setattr(jvm, "_delta_jvm", None)
    monkeypatch.setattr(jvm, "_logged_untested", set())
    yield
    monkeypatch.undo()
    jvm._spark_jvm = jvm._delta_jvm = None  # the next use builds the tested handles again


def test_the_pinned_releases_get_handles(spark: Any) -> None:
    internals, delta = jvm.spark_jvm(spark), jvm.delta_jvm(spark)
    assert internals is not None and internals.version.startswith(jvm.TESTED_SPARK)
    assert delta is not None and delta.version.startswith(jvm.TESTED_DELTA)
    assert jvm.spark_jvm(spark) is internals and jvm.delta_jvm(spark) is delta  # held, not rebuilt


def test_an_untested_release_gets_none_and_one_warning_per_library(
    spark: Any, untested: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="routing.jvm"):
        for _ in range(3):
            assert jvm.spark_jvm(spark) is None and jvm.delta_jvm(spark) is None
            assert jvm.jvm_snapshot(spark, "/nowhere") is None
    warnings = [record.getMessage() for record in caplog.records if record.name == "routing.jvm"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(f"Spark {spark.version} is not a release this project's fast paths were tested")
    assert warnings[1].startswith("Delta ") and warnings[1].endswith("(0.0.x): using the public API")


def route_one_batch(spark: Any, settings: Settings, root: Path) -> dict[str, list[dict[str, Any]]]:
    """A batch of every outcome (deliveries, unmatched, dead letters) routed by a fresh router under ``root``;
    its rows without the routing time (the only column that differs between two runs)."""
    root.mkdir()
    local = router_settings(settings, root, ["path"], unrouted_path=str(root / "unrouted"))
    apply_subscriptions(spark, local, root / "subs.json", [("a.#", "a-all"), ("#.b", "ends-b"), ("*", "one")])
    keys: list[bytes | None] = [b"a.b", b"a", b"x.b", b"zz.q", None, b"\xff", b"a..b", b"x"] * 5
    moment = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
    rows: list[tuple[Any, ...]] = [(key, b"p", "t", 0, offset, moment, []) for offset, key in enumerate(keys)]
    router = Router(spark, local)
    try:
        router.snapshots.maybe_refresh(force=True)
        router.bind_query("fallbacks")
        router.process_batch(spark.createDataFrame(rows, SOURCE_DDL).coalesce(1), 0)
    finally:
        router.close(progress_wait_s=0)
    routed = read_routed(spark, local)
    return {
        "deliveries": sorted(routed.deliveries, key=lambda row: (row["source_offset"], row["subscriber_id"])),
        "dead_letters": sorted(routed.dead_letters, key=lambda row: row["source_offset"]),
        "unrouted": sorted(routed.unrouted, key=lambda row: row["source_offset"]),
    }


def test_a_batch_routes_to_the_same_rows_through_the_public_api(
    spark: Any, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = route_one_batch(spark, settings, tmp_path / "fast")
    monkeypatch.setattr(jvm, "TESTED_SPARK", ("0.0.",))
    monkeypatch.setattr(jvm, "TESTED_DELTA", ("0.0.",))
    monkeypatch.setattr(jvm, "_spark_jvm", None)
    monkeypatch.setattr(jvm, "_delta_jvm", None)
    try:
        public = route_one_batch(spark, settings, tmp_path / "public")
    finally:
        monkeypatch.undo()
        jvm._spark_jvm = jvm._delta_jvm = None
    assert public == fast
    # a.b and a..b (an empty word is a word): a-all, ends-b; a: a-all, one; x.b: ends-b; x: one; zz.q: none.
    # Dead letters: None and \xff.
    assert (len(fast["deliveries"]), len(fast["dead_letters"]), len(fast["unrouted"])) == (40, 10, 5)


def listened_progress(spark: Any, source: Path, checkpoint: Path) -> list[dict[str, Any]]:
    """The progress events a :class:`ProgressListener` hears over an available-now query of two files."""
    heard: list[dict[str, Any]] = []
    listener = ProgressListener(spark, heard.append)
    spark.streams.addListener(listener)
    query = None
    try:
        stream = spark.readStream.schema("n LONG").option("maxFilesPerTrigger", 1).json(str(source))
        query = stream.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        query = query.trigger(availableNow=True).start()
        query.awaitTermination(120)
        assert listener.terminated.wait(60), "the listener never heard the query end"
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.streams.removeListener(listener)
    return heard


def test_the_listener_hears_each_progress_both_ways(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for index in range(2):
        (source / f"{index}.json").write_text('{"n": 1}\n{"n": 2}\n')
    fast = listened_progress(spark, source, tmp_path / "fast")
    jvm.TESTED_SPARK, saved = ("0.0.",), jvm.TESTED_SPARK
    jvm._spark_jvm = None
    try:
        public = listened_progress(spark, source, tmp_path / "public")
    finally:
        jvm.TESTED_SPARK, jvm._spark_jvm = saved, None
    for heard in (fast, public):
        batches = [event for event in heard if event["numInputRows"] > 0]
        assert [event["batchId"] for event in batches] == [0, 1], heard
        assert [event["numInputRows"] for event in batches] == [2, 2]


def test_checkpoint_files_take_pyarrow_without_the_jvm_handle(spark: Any, tmp_path: Path, untested: None) -> None:
    files = CheckpointFiles(spark, str(tmp_path / "ledger"))
    assert files.backend == "arrow"
    assert files.create_once(b"first", "q", "0") and not files.create_once(b"second", "q", "0")
    assert files.read("q", "0") == "first"
    with pytest.raises(ValueError, match="backend 'hadoop' needs a classic session on a tested Spark"):
        CheckpointFiles(spark, str(tmp_path / "other"), backend="hadoop")


def test_delta_log_reads_give_the_same_answers_through_sql(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    spark.range(2).write.format("delta").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('router.note' = 'kept')")
    spark.range(1).write.format("delta").mode("append").save(path)

    def answers() -> tuple[int, str | None, str | None]:
        return (
            delta_tables.latest_version(spark, path),
            delta_tables.table_property(spark, path, "router.note"),
            delta_tables.table_property(spark, path, "router.absent"),
        )

    fast = answers()
    jvm.TESTED_DELTA, saved = ("0.0.",), jvm.TESTED_DELTA
    jvm._delta_jvm = None
    try:
        assert jvm.jvm_snapshot(spark, path) is None
        public = answers()
    finally:
        jvm.TESTED_DELTA, jvm._delta_jvm = saved, None
    assert fast == public == (2, "kept", None)

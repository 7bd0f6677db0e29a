"""The driver's incremental snapshot refresh (``routing.router.snapshots``) on real Spark and Delta tables.

Changes go through the refresh job's import path (so the table is written exactly as in production).
Oracle: the active pairs read back from the table at each version (``read_active``, plain Spark
rows) and the regex :class:`~routing.reference.ReferenceMatcher`. Every wait is on a condition or an
event with a hang guard, never a sleep; nothing asserts on time.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import WAIT_TIMEOUT_S, apply_subscriptions

from routing import _native
from routing.matchers import FrozenMatcher
from routing.reference import ReferenceMatcher
from routing.router.snapshot_files import SnapshotFileRef, SnapshotFiles
from routing.router.snapshots import Published, SnapshotBroadcasts
from routing.spark import BACKGROUND_POOL, STREAM_MIN_SHARE
from routing.streaming import create_delta_table_if_absent
from routing.subscriptions.table import (
    TABLE_DDL,
    change_feed_enabled,
    latest_version,
    read_active,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

KEYS = ["stock.nyse.msft", "stock.msft", "forex.eur.usd", "", "a.b.c", "audit.x", "t1.orders.new"]
#: Refreshes in these tests happen only when asked (request_refresh / maybe_refresh(force=True)).
NEVER_S = 3600.0


@pytest.fixture
def job(settings: Settings, tmp_path: Path) -> Settings:
    subscriptions = dataclasses.replace(
        settings.subscriptions,
        table_path=str(tmp_path / "subscriptions"),
        rejects_path=str(tmp_path / "subscription_rejects"),
        checkpoint_path=str(tmp_path / "refresh_checkpoint"),
    )
    return settings.replace(subscriptions=subscriptions)


@pytest.fixture
def make_snapshots(spark: SparkSession, job: Settings) -> Iterator[Callable[[], SnapshotBroadcasts]]:
    made: list[SnapshotBroadcasts] = []

    def make() -> SnapshotBroadcasts:
        snapshots = SnapshotBroadcasts(spark, job.subscriptions.table_path, refresh_interval_s=NEVER_S)
        made.append(snapshots)
        return snapshots

    yield make
    for snapshots in made:
        snapshots.close()


def matcher_of(published: Published) -> Any:
    """What a worker routes ``published`` with: a snapshot file's matcher (a delta over its base, or a base), or a
    broadcast's bytes decoded."""
    if isinstance(published.broadcast, SnapshotFileRef):
        return published.broadcast.open_matcher()
    value = published.broadcast.value
    assert isinstance(value, bytes)
    assert published.serialized_bytes == len(value)
    return FrozenMatcher.from_bytes(value)


def assert_matches_table(spark: SparkSession, job: Settings, published: Published) -> None:
    """The published matcher holds exactly the table's active pairs at its version, and matches like the oracle."""
    active = read_active(spark, job.subscriptions.table_path, published.version)
    matcher = matcher_of(published)
    assert set(matcher.subscriptions()) == set(active)
    assert published.subscriptions == len(set(active)) == len(matcher)
    oracle = ReferenceMatcher(active)
    for key in KEYS + [pattern for pattern, _ in active]:
        assert matcher.lookup(key) == oracle.lookup(key), key


def append_rows(spark: SparkSession, path: str, rows: list[tuple[str, str, bool]]) -> int:
    """Write rows (subscriber, pattern, active) with a plain append, as another writer could; the new version."""
    # The epoch: older than every event the import path writes, so those always win.
    now = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    frame = spark.createDataFrame(
        [
            (subscriber, pattern, active, now, f"direct:{i}", "import", now, 1, False)
            for i, (subscriber, pattern, active) in enumerate(rows)
        ],
        TABLE_DDL,
    )
    frame.write.format("delta").mode("append").save(path)
    return latest_version(spark, path)


def test_new_versions_apply_only_the_changed_rows(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> None:
    first = [("stock.*.msft", "desk"), ("forex.#", "fx"), ("#", "audit"), ("t1.orders.#", "t1")]
    v1 = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", first)
    assert change_feed_enabled(spark, job.subscriptions.table_path)
    snapshots = make_snapshots()
    assert snapshots.maybe_refresh(force=True)
    assert snapshots.current_version == v1
    assert snapshots.history[-1]["mode"] == "full"
    assert_matches_table(spark, job, snapshots.acquire(v1))

    added = [("stock.#", "equities"), ("", "empty-key"), ("*.*.*", "three")]
    removed = [("forex.#", "fx")]
    v2 = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", added, removed)
    snapshots.request_refresh()
    published = snapshots.wait_published(v2, WAIT_TIMEOUT_S)
    assert published.version == v2
    entry = snapshots.history[-1]
    assert (entry["mode"], entry["after_version"]) == ("changes", v1)
    assert (entry["changed_rows"], entry["added"], entry["removed"], entry["skipped_rows"]) == (4, 3, 1, 0)
    assert entry["subscriptions"] == published.subscriptions == len(first) + len(added) - len(removed)
    assert entry["serialized_bytes"] == published.serialized_bytes
    assert_matches_table(spark, job, published)

    # Two versions in one refresh: a pair subscribed and unsubscribed again nets out.
    apply_subscriptions(spark, job, tmp_path / "v3.jsonl", [("x.y", "flip")])
    v4 = apply_subscriptions(spark, job, tmp_path / "v4.jsonl", [], [("x.y", "flip"), ("#", "audit")])
    snapshots.request_refresh()
    published = snapshots.wait_published(v4, WAIT_TIMEOUT_S)
    entry = snapshots.history[-1]
    assert (entry["mode"], entry["after_version"], entry["changed_rows"]) == ("changes", v2, 2)
    assert_matches_table(spark, job, published)
    assert snapshots.maybe_refresh(force=True)  # the version moved since this caller last looked
    assert not snapshots.maybe_refresh(force=True)  # nothing new: no rebuild
    assert snapshots.history[-1] is entry


def test_a_batch_routes_with_the_published_version_while_the_next_one_builds(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> None:
    v1 = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", [("a.#", "s1")])
    snapshots = make_snapshots()
    snapshots.maybe_refresh(force=True)
    building = threading.Event()
    proceed = threading.Event()

    def hold(version: int) -> None:
        building.set()
        assert proceed.wait(WAIT_TIMEOUT_S)

    snapshots.before_publish = hold
    v2 = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", [("a.b", "s2")])
    snapshots.request_refresh()
    assert building.wait(WAIT_TIMEOUT_S)
    # The build of v2 is held: "batches" on another thread still get v1, and do not wait.
    seen: list[int] = []
    batch = threading.Thread(target=lambda: seen.append(snapshots.current_version))
    batch.start()
    batch.join(WAIT_TIMEOUT_S)
    assert seen == [v1]
    published = snapshots.acquire(v1)
    assert matcher_of(published).lookup("a.b") == {"s1"}
    snapshots.release(published)
    assert snapshots.live_broadcasts == [v1]

    proceed.set()
    published = snapshots.wait_published(v2, WAIT_TIMEOUT_S)
    assert snapshots.current_version == v2
    assert matcher_of(published).lookup("a.b") == {"s1", "s2"}
    # The previous version stays until a batch releases (one could be about to acquire it).
    assert snapshots.live_broadcasts == [v1, v2]
    snapshots.release(snapshots.acquire(v2))
    assert snapshots.live_broadcasts == [v2]


def test_the_refresh_runs_its_spark_jobs_in_the_background_pool_and_batches_keep_the_default_one(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> None:
    context = spark.sparkContext
    # The session's fair scheduler has both pools, the stream's default one always served first.
    scheduler = context._jsc.sc()
    assert scheduler.getSchedulingMode().toString() == "FAIR"
    assert scheduler.getPoolForName(BACKGROUND_POOL).isDefined()
    assert scheduler.getPoolForName("default").get().minShare() == STREAM_MIN_SHARE
    pools: list[str | None] = []
    apply_subscriptions(spark, job, tmp_path / "v1.jsonl", [("a.#", "s1")])
    snapshots = make_snapshots()
    # Called on the refresh thread after it read the table (its Spark jobs), before the publish.
    snapshots.before_publish = lambda _: pools.append(context.getLocalProperty("spark.scheduler.pool"))
    snapshots.maybe_refresh(force=True)
    v2 = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", [("b", "s2")])
    snapshots.request_refresh()
    assert matcher_of(snapshots.wait_published(v2, WAIT_TIMEOUT_S)).lookup("b") == {"s2"}
    assert pools == [BACKGROUND_POOL, BACKGROUND_POOL]
    # The pool is the refresh thread's alone: the caller's (a batch's) jobs stay in the default pool.
    assert context.getLocalProperty("spark.scheduler.pool") is None


def refreshed_past_a_version(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> tuple[int, int, SnapshotBroadcasts]:
    """What a replay meets: the table at v1 (a.* s1, b s2), then at v2 (c.# s3 in, a.* s1 out), and snapshots
    refreshed to v2; (v1, v2, the snapshots)."""
    v1 = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", [("a.*", "s1"), ("b", "s2")])
    v2 = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", [("c.#", "s3")], [("a.*", "s1")])
    snapshots = make_snapshots()
    snapshots.maybe_refresh(force=True)
    assert snapshots.current_version == v2
    return v1, v2, snapshots


def test_a_replayed_batch_gets_its_recorded_version_by_time_travel(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> None:
    v1, v2, snapshots = refreshed_past_a_version(spark, job, tmp_path, make_snapshots)
    replayed = snapshots.acquire(v1)
    assert replayed.version == v1
    assert_matches_table(spark, job, replayed)
    assert snapshots.live_broadcasts == [v1, v2]
    snapshots.release(replayed)
    assert snapshots.live_broadcasts == [v2]
    snapshots.close()
    assert snapshots.live_broadcasts == []


def test_a_replayed_batch_whose_version_was_vacuumed_fails_loudly_and_routes_nothing_with_another(
    spark: SparkSession,
    job: Settings,
    tmp_path: Path,
    make_snapshots: Callable[[], SnapshotBroadcasts],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/operations.md: without a snapshot file, a vacuumed version cannot be rebuilt, so the batch fails."""
    from routing.router.snapshots import ReplayVersionGone

    v1, v2, snapshots = refreshed_past_a_version(spark, job, tmp_path, make_snapshots)
    # Delta's own VACUUM, at once: retention 0 needs its check off, and its listing job would run 10,000 tasks.
    vacuum_conf = {
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    }
    before = {name: spark.conf.get(name, None) for name in vacuum_conf}
    for name, value in vacuum_conf.items():
        spark.conf.set(name, value)
    try:
        spark.sql(f"VACUUM delta.`{job.subscriptions.table_path}` RETAIN 0 HOURS").collect()
    finally:
        for name, earlier in before.items():
            if earlier is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, earlier)
    with pytest.raises(ReplayVersionGone, match=rf"recorded subscription version {v1}, which has no snapshot file"):
        snapshots.acquire(v1)
    assert f"cannot rebuild snapshot version {v1} for a replayed batch" in caplog.text
    assert snapshots.live_broadcasts == [v2]  # nothing half-built left behind; the current version still routes
    assert snapshots.acquire(v2).version == v2


def test_a_table_without_the_change_feed_is_loaded_whole_until_the_refresh_job_enables_it(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> None:
    path = job.subscriptions.table_path
    create_delta_table_if_absent(spark, path, TABLE_DDL)  # as tables were created before the change feed
    assert not change_feed_enabled(spark, path)
    v1 = append_rows(spark, path, [("s1", "a.#", True), ("s2", "b", True)])
    snapshots = make_snapshots()
    snapshots.maybe_refresh(force=True)
    assert snapshots.current_version == v1
    # Another writer's row with an empty subscriber: skipped loudly, the rest still applies.
    v2 = append_rows(spark, path, [("s3", "c.*", True), ("", "bad", True)])
    snapshots.request_refresh()
    published = snapshots.wait_published(v2, WAIT_TIMEOUT_S)
    entry = snapshots.history[-1]
    assert (entry["mode"], entry["skipped_rows"]) == ("full", 1)
    assert matcher_of(published).subscriptions() == {("a.#", "s1"), ("b", "s2"), ("c.*", "s3")}

    # The refresh job turns the feed on (one commit), then later versions are read as changes.
    v3 = apply_subscriptions(spark, job, tmp_path / "v3.jsonl", [("d", "s4")], [("b", "s2")])
    assert change_feed_enabled(spark, path)
    snapshots.request_refresh()
    published = snapshots.wait_published(v3, WAIT_TIMEOUT_S)
    entry = snapshots.history[-1]
    assert (entry["mode"], entry["after_version"], entry["changed_rows"]) == ("changes", v2, 2)
    assert matcher_of(published).subscriptions() == {("a.#", "s1"), ("c.*", "s3"), ("d", "s4")}


def test_a_churned_table_compacts_its_small_files_and_routes_the_same(
    spark: SparkSession, job: Settings, tmp_path: Path, make_snapshots: Callable[[], SnapshotBroadcasts]
) -> None:
    """Each refresh batch's MERGE adds a file; past ``autoCompact.minNumFiles`` Delta compacts them (in the soak,
    hundreds of files an hour slowed every reader). Compaction versions change no data: the change feed skips them."""
    path = job.subscriptions.table_path
    min_files = "spark.databricks.delta.autoCompact.minNumFiles"
    earlier = spark.conf.get(min_files, None)
    spark.conf.set(min_files, "4")  # Delta's 50 would take 50 refresh batches here
    try:
        first = apply_subscriptions(spark, job, tmp_path / "v0.jsonl", [("t0.#", "s0")])
        snapshots = make_snapshots()
        snapshots.maybe_refresh(force=True)
        assert snapshots.current_version == first
        for index in range(1, 9):
            apply_subscriptions(spark, job, tmp_path / f"v{index}.jsonl", [(f"t{index}.#", f"s{index}")], [])
    finally:
        if earlier is None:
            spark.conf.unset(min_files)
        else:
            spark.conf.set(min_files, earlier)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert "OPTIMIZE" in {row["operation"] for row in history}
    files = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["numFiles"]
    assert files < 9, f"{files} files after 9 merges: nothing was compacted"
    latest = latest_version(spark, path)
    snapshots.request_refresh()
    published = snapshots.wait_published(latest, WAIT_TIMEOUT_S)
    entry = snapshots.history[-1]
    assert (entry["mode"], entry["after_version"], entry["added"]) == ("changes", first, 8)
    assert_matches_table(spark, job, published)


def test_a_restart_publishes_its_first_snapshot_from_the_file_of_that_version(
    spark: SparkSession,
    job: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from routing import delta_tables
    from routing.router.snapshot_files import file_name
    from routing.subscriptions import create_table_if_absent

    table = job.subscriptions.table_path
    create_table_if_absent(spark, table)
    files = SnapshotFiles(str(tmp_path / "snapshot_files"), keep=3, table_id=delta_tables.table_id(spark, table))
    own = Path(files.directory)
    made: list[SnapshotBroadcasts] = []
    # The refresh thread alone runs at a lower priority (Linux: nice is per thread).
    nices: set[int] = set()
    process_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def start() -> SnapshotBroadcasts:
        snapshots = SnapshotBroadcasts(
            spark, job.subscriptions.table_path, refresh_interval_s=NEVER_S, files=files, thread_nice=3
        )
        snapshots.before_publish = lambda _: nices.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        made.append(snapshots)
        snapshots.maybe_refresh(force=True)  # waits for the attempt, the file write after the publish included
        return snapshots

    try:
        v1 = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", [("a.*", "s1"), ("#", "s2"), ("b.#", "s3")])
        first = start()
        built = first.history[-1]
        assert (built["mode"], built["version"]) == ("full", v1)
        assert built["file"] is not None
        assert [file.version for file in files.files()] == [v1]

        # A restart on the same version: no build, the file's bytes are what is broadcast, and the driver
        # does not decode them (the digest and the header vouch for them; the workers decode).
        decodes: list[int] = []
        from_bytes = FrozenMatcher.from_bytes

        def counted(data: bytes) -> FrozenMatcher:
            decodes.append(len(data))
            return from_bytes(data)

        monkeypatch.setattr(FrozenMatcher, "from_bytes", counted)
        second = start()
        monkeypatch.undo()
        assert decodes == []
        loaded = second.history[-1]
        assert (loaded["mode"], loaded["version"]) == ("file", v1)
        assert (loaded["subscriptions"], loaded["subscribers"], loaded["patterns"]) == (3, 3, None)
        published = second.acquire(v1)
        assert published.broadcast.value == first.acquire(v1).broadcast.value
        assert_matches_table(spark, job, published)
        second.release(published)

        # The trie was never loaded: the next version is loaded whole, then changes apply incrementally.
        v2 = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", [("c", "s4")], [("#", "s2")])
        second.request_refresh()
        assert_matches_table(spark, job, second.wait_published(v2, WAIT_TIMEOUT_S))
        assert second.history[-1]["mode"] == "full"
        v3 = apply_subscriptions(spark, job, tmp_path / "v3.jsonl", [("d.*", "s5")])
        second.request_refresh()
        assert_matches_table(spark, job, second.wait_published(v3, WAIT_TIMEOUT_S))
        assert (second.history[-1]["mode"], second.history[-1]["after_version"]) == ("changes", v2)

        # A replay of v1 reads its file; with the file damaged, it falls back to time travel.
        second.maybe_refresh(force=True)
        assert [file.version for file in files.files()] == [v3, v2, v1]
        replayed = second.acquire(v1)
        assert_matches_table(spark, job, replayed)
        second.release(replayed)
        assert second.history[-1] == {"event": "replay_rebuild", "version": v1, "source": "file"}
        sealed = {file.version: (own / file.name).read_bytes() for file in files.files()}
        for file in files.files():
            (own / file.name).write_bytes(b"damaged")
        replayed = second.acquire(v2)
        assert_matches_table(spark, job, replayed)
        assert second.history[-1] == {"event": "replay_rebuild", "version": v2, "source": "table"}

        # A restart whose file is damaged, beside v1's bytes renamed to v3 (with their true digest), refuses both,
        # builds from the table, and matches it all the same.
        (own / file_name(v3, sealed[v1])).write_bytes(sealed[v1])
        with caplog.at_level("WARNING", logger="routing.router.snapshot_files"):
            third = start()
        assert f"version {v1}, not table {files.table_id!r} version {v3}" in caplog.text
        assert (third.history[-1]["mode"], third.history[-1]["version"]) == ("full", v3)
        assert_matches_table(spark, job, third.acquire(v3))
        assert nices == {min(19, process_nice + 3)}
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == process_nice
    finally:
        for snapshots in made:
            snapshots.close()


def test_a_large_table_publishes_deltas_over_a_base_and_merges_a_new_base_in_the_background(
    spark: SparkSession, job: Settings, tmp_path: Path
) -> None:
    """Deltas from the first pair on (``deltas_from_pairs=0``) and a merge after 4 changed pairs: every version
    routes exactly like the table, a worker maps only the delta over a base it keeps, and a restart and a replay
    read a delta's file with its base."""
    from routing import delta_tables
    from routing.router import snapshot_files
    from routing.subscriptions import create_table_if_absent

    table = job.subscriptions.table_path
    create_table_if_absent(spark, table)
    files = SnapshotFiles(str(tmp_path / "snapshot_files"), keep=2, table_id=delta_tables.table_id(spark, table))
    made: list[SnapshotBroadcasts] = []

    def start() -> SnapshotBroadcasts:
        snapshots = SnapshotBroadcasts(
            spark,
            table,
            refresh_interval_s=NEVER_S,
            files=files,
            transport="file",
            deltas=True,
            deltas_from_pairs=0,
            merge_pairs=4,
        )
        made.append(snapshots)
        snapshots.maybe_refresh(force=True)
        return snapshots

    def publish(snapshots: SnapshotBroadcasts, version: int) -> Published:
        snapshots.request_refresh()
        published = snapshots.wait_published(version, WAIT_TIMEOUT_S)
        assert published.version == version
        assert_matches_table(spark, job, published)
        return published

    try:
        v1 = apply_subscriptions(
            spark, job, tmp_path / "v1.jsonl", [("a.*", "s1"), ("#", "s2"), ("b.#", "s3"), ("a.b", "s4")]
        )
        router = start()
        assert (router.history[-1]["mode"], "base_version" in router.history[-1]) == ("full", False)
        first = router.acquire(v1)
        assert isinstance(first.broadcast, SnapshotFileRef) and first.broadcast.base is None
        opened = first.broadcast.open_matcher()
        assert isinstance(opened, _native.FrozenMatcher) and opened.is_mapped, "a base is mapped, not copied"
        assert_matches_table(spark, job, first)
        router.release(first)

        # A change of two pairs: a delta over v1's base, which the worker maps once and keeps.
        v2 = apply_subscriptions(spark, job, tmp_path / "v2.jsonl", [("c.*", "s5")], [("#", "s2")])
        second = publish(router, v2)
        assert isinstance(second.broadcast, SnapshotFileRef)
        assert second.broadcast.base == first.broadcast.name
        assert second.broadcast.name.endswith(".delta")
        assert (router.history[-1]["base_version"], router.history[-1]["delta_pairs"]) == (v1, 2)
        mapped_bases = len(snapshot_files._WORKER_BASES)
        assert_matches_table(spark, job, second)
        assert len(snapshot_files._WORKER_BASES) == mapped_bases, "the base is mapped once per worker"

        # Two more changed pairs reach merge_pairs: with v3's delta, a new base is frozen in the background.
        v3 = apply_subscriptions(spark, job, tmp_path / "v3.jsonl", [("d", "s6"), ("e", "s8")])
        publish(router, v3)
        assert {"event": "merge_started", "version": v3, "delta_pairs": 4} in router.history
        assert router.wait_merged(WAIT_TIMEOUT_S) == v3
        # The next version's delta is over the merged base, and holds only the change after it.
        v4 = apply_subscriptions(spark, job, tmp_path / "v4.jsonl", [], [("a.b", "s4")])
        fourth = publish(router, v4)
        entry = next(entry for entry in reversed(router.history) if entry.get("version") == v4 and "mode" in entry)
        assert (entry["rebased_onto"], entry["base_version"], entry["delta_pairs"]) == (v3, v3, 1)
        assert isinstance(fourth.broadcast, SnapshotFileRef)
        assert fourth.broadcast.base is not None and fourth.broadcast.base.startswith(f"{v3}-")
        # Pruning keeps the newest two versions and the bases their deltas need.
        files.prune(protect={v4})
        kept = {(file.version, file.is_delta) for file in files.files()}
        assert {(v4, True), (v3, False), (v3, True), (v1, False)} == kept

        # A restart on v4 publishes its delta file over its base, without a build; a replay of v3 reads its file.
        restarted = start()
        assert (restarted.history[-1]["mode"], restarted.history[-1]["version"]) == ("file", v4)
        assert_matches_table(spark, job, restarted.acquire(v4))
        replayed = restarted.acquire(v3)
        assert_matches_table(spark, job, replayed)
        # And the first change after the restart loads the trie whole and publishes a new base.
        v5 = apply_subscriptions(spark, job, tmp_path / "v5.jsonl", [("e.#", "s7")])
        fifth = publish(restarted, v5)
        assert restarted.history[-1]["mode"] == "full"
        assert isinstance(fifth.broadcast, SnapshotFileRef) and fifth.broadcast.base is None
    finally:
        for snapshots in made:
            snapshots.close()

"""Driver side: the live CS-trie, its frozen snapshots, and their broadcasts.

How a new subscription-table version reaches the stream, off the batch path:

* A background thread on the driver (``snapshot-refresh``) owns the live
  :class:`~routing.matchers.CSTrieMatcher` and is its only writer. Every
  ``refresh_interval_s``, or when nudged (:meth:`SnapshotBroadcasts.maybe_refresh`,
  :meth:`~SnapshotBroadcasts.request_refresh`), it reads the table's latest
  Delta version. When the version moved past the trie's, it reads **only the
  rows that changed** in between, as Arrow, from Delta's change data feed
  (:func:`routing.subscriptions.table.read_changes`: each changed row once,
  with its final state), and applies them with the bulk calls
  ``unsubscribe_many`` then ``subscribe_many`` (no Python per row, GIL
  released). Then it takes an O(1) snapshot of the trie, freezes it,
  serializes it, broadcasts the bytes and *publishes* that version.
* When the change feed does not cover the range (a table created before the
  feed was enabled, or whose log was cleaned up) or the trie's state is
  unknown (first load, an apply that failed halfway), it loads the whole
  active set at that version into a fresh trie instead (``mode="full"``).
* A batch routes with the newest **published** version
  (:attr:`SnapshotBroadcasts.current_version`) and never waits for a build;
  only the very first version, before which there is nothing to route with,
  and :meth:`~SnapshotBroadcasts.maybe_refresh` ``(force=True)`` (the
  router's start) wait.
* A batch pins the version it routes with (:meth:`SnapshotBroadcasts.acquire`);
  once it is done (:meth:`~SnapshotBroadcasts.release`), every broadcast that
  is neither the current version nor pinned is destroyed. A replayed batch
  that recorded a version no longer (or never) published gets it rebuilt
  from Delta time travel, straight from Arrow (``FrozenMatcher.from_arrow``),
  on the calling thread: the replay must route with exactly that version.

* Every snapshot built here is also written, after its publish, as a
  content-addressed file beside the table (:mod:`routing.router.snapshot_files`,
  ``router.snapshot_files_path``). A trie in an unknown state (the first load) first
  looks for the version's file: a router restarting at a million subscriptions
  then publishes by mapping and validating it as a worker does (``mode="file"``;
  with broadcasts: a read, a digest check and a header check) instead
  of a full build, and loads the trie whole only when the table next
  changes. Replays read the file of their version before falling back to time
  travel.

* With the file transport (``router.snapshot_transport = file``, the default, and the only one on
  Spark Connect), the snapshot file *is* the transport: it is written before the version is
  published, and the UDF gets a :class:`~routing.router.snapshot_files.SnapshotFileRef` that each
  Python worker maps once per version. Pruning then keeps every version still published or pinned.

* **Deltas** (file transport, ``deltas=True``, and a table of at least ``deltas_from_pairs``
  pairs). A freeze costs O(table), so a large table's versions are published as a delta over the
  last whole snapshot, its *base* (``native/core/src/layered.rs``): the refresh records each
  version's changed rows in a :class:`~routing.matchers.native.DeltaBuilder` and freezes only the
  delta, O(changed pairs), and a worker that has the base maps only the delta. Once
  ``merge_pairs`` pairs changed since the base, a new base is frozen from an O(1) snapshot of the
  trie on a thread of its own (``snapshot-merge``): deltas keep being published over the old base
  meanwhile, so neither batches nor publishes wait for a merge, and the next publish after it moves
  the builder onto the new base. A version is still one file (plus its base), so a replay routes
  with exactly its recorded version. A full reload of the trie (no change feed, a restart) publishes
  a new base.

Every publish logs the snapshot's memory (serialized bytes, pairs, patterns,
subscribers) and how it was built, and appends the same to :attr:`history`.
Tests wait for a publish with :meth:`~SnapshotBroadcasts.wait_published`
(deterministic: a condition variable, no sleeping) and can hold a build
before it publishes with the :attr:`~SnapshotBroadcasts.before_publish` hook.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from routing.matchers.native import (
    BulkRowError,
    CSTrieMatcher,
    DeltaBuilder,
    FrozenFormatError,
    FrozenMatcher,
    LayeredMatcher,
)
from routing.router.snapshot_files import SnapshotFileMissing, SnapshotFileRef, SnapshotFiles
from routing.subscriptions import ChangesUnavailable, latest_version, read_active_arrow, read_changes

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Seconds :meth:`SnapshotBroadcasts.close` waits for a build in flight to finish.
CLOSE_TIMEOUT_S = 300.0


class Carrier(Protocol):
    """How a snapshot's bytes reach the UDF: a Spark broadcast, or a snapshot file (Spark Connect)."""

    @property
    def value(self) -> bytes: ...

    def destroy(self) -> None: ...


@dataclasses.dataclass
class Published:
    """One shipped snapshot: how the UDF gets the version's matcher.

    ``broadcast`` is the version's snapshot file (:class:`~routing.router.snapshot_files.SnapshotFileRef`, whose
    ``open_matcher`` each worker calls: a base, or a delta over its base) with the file transport, the only one in
    a Spark Connect session; else a Spark broadcast of a whole matcher's bytes (``value``).
    """

    version: int
    broadcast: Carrier
    subscriptions: int
    serialized_bytes: int
    users: int = 0


@dataclasses.dataclass(frozen=True)
class FromFile:
    """A version's snapshot found in its file: what carries it to the UDF, and what the publish records."""

    carrier: Carrier
    pairs: int
    #: Subscribers, where the file tells them without a pass over its pairs (a base).
    subscribers: int | None
    #: The matcher's bytes (a delta's own, without its base's).
    size: int
    #: A delta's base file, else None.
    base: str | None


@dataclasses.dataclass(frozen=True)
class Base:
    """The whole snapshot the published deltas are over: its version, its file and its matcher (mapped)."""

    version: int
    name: str
    matcher: FrozenMatcher


class RefreshFailed(RuntimeError):
    """The background refresh could not publish a version a caller waits for (the cause is chained)."""


class ReplayVersionGone(RuntimeError):
    """A replayed batch's recorded version has no snapshot file and the table cannot be read as of it (vacuumed)."""

    def __init__(self, version: int, table_path: str, cause: BaseException) -> None:
        first = next((line.strip() for line in str(cause).splitlines() if line.strip()), type(cause).__name__)
        super().__init__(
            f"the replayed batch recorded subscription version {version}, which has no snapshot file and which "
            f"{table_path!r} can no longer be read as of (vacuumed?): {first[:300]}. Routing it with another version "
            "would change its deliveries: keep delta.deletedFileRetentionDuration longer than a router can be down, "
            "or start from a new checkpoint to give up this batch's exactness"
        )
        self.version = version


class SnapshotBroadcasts:
    """The published snapshot, the broadcasts batches still use, and the thread that builds the next one.

    Thread-safe: batches (the ``foreachBatch`` thread) call :attr:`current_version`,
    :meth:`acquire` and :meth:`release` while the refresh thread publishes.
    """

    def __init__(
        self,
        spark: SparkSession,
        table_path: str,
        *,
        refresh_interval_s: float,
        files: SnapshotFiles | None = None,
        transport: str = "broadcast",
        thread_nice: int = 0,
        deltas: bool = False,
        deltas_from_pairs: int = 100_000,
        merge_pairs: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spark = spark
        self._table_path = table_path
        self._refresh_interval_s = refresh_interval_s
        self._files = files
        self._thread_nice = thread_nice
        self._clock = clock
        from routing.spark import is_connect

        #: Spark Connect has no broadcasts: there the snapshot files must carry the snapshots to the UDF.
        self._connect = is_connect(spark)
        if self._connect and (files is None or transport != "file"):
            raise ValueError(
                "a Spark Connect session ships snapshots as snapshot files: set router.snapshot_transport = file "
                "and a snapshot_files_path pyarrow can open"
            )
        #: The snapshot files carry the snapshots (``router.snapshot_transport = file``), else broadcasts.
        self._files_carry = files is not None and transport == "file"
        #: Versions go out as deltas over a base once the table holds ``deltas_from_pairs`` pairs (files only).
        self._deltas = deltas and self._files_carry
        self._deltas_from_pairs = deltas_from_pairs
        self._merge_pairs = merge_pairs
        # Guards everything below except the trie, which only the refresh thread touches.
        self._cond = threading.Condition()
        self._current: Published | None = None
        self._previous: Published | None = None
        self._published: dict[int, Published] = {}
        self._checked_at: float | None = None
        self._seen_version: int | None = None
        self._requested = 0  # refresh requests made (timer polls included)
        self._finished = 0  # requests covered by a finished attempt
        self._failure: BaseException | None = None  # the last attempt's, None when it succeeded
        self._closed = False
        self._thread: threading.Thread | None = None
        # Refresh thread only: the live trie and the table version it mirrors (None: unknown).
        self._trie = CSTrieMatcher()
        self._trie_version: int | None = None
        # Refresh thread only: the base deltas are published over, the changes since it, and a merge (a
        # new base being frozen on the merge thread) in flight. None: whole snapshots are published.
        self._base: Base | None = None
        self._delta: DeltaBuilder | None = None
        self._merging: concurrent.futures.Future[Base] | None = None
        self._merge_pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: One entry per publish (and per failed attempt): what was built, how, and its memory.
        self.history: list[dict[str, Any]] = []
        #: Test hook, called on the refresh thread with the version about to be published, after the
        #: trie was updated and before the snapshot is frozen; batches keep routing meanwhile.
        self.before_publish: Callable[[int], None] | None = None

    # -- what batches call ---------------------------------------------------------------

    @property
    def current_version(self) -> int:
        """The newest published version (waits only if none was ever published)."""
        self.maybe_refresh()
        with self._cond:
            if self._current is None:
                raise RefreshFailed("the snapshot broadcasts are closed")
            return self._current.version

    def maybe_refresh(self, *, force: bool = False) -> bool:
        """Ask the refresh thread to check the table, at most every refresh interval unless ``force``.

        Returns at once, except when nothing is published yet or ``force`` is set: then it waits
        until the check (and the build of a new version, if any) is done, and raises
        :class:`RefreshFailed` if it failed. True when the published version changed since the
        previous call.
        """
        now = self._clock()
        with self._cond:
            due = self._checked_at is None or now - self._checked_at >= self._refresh_interval_s
            wait = force or self._current is None
            if due or wait:
                self._checked_at = now
                ticket = self._request_locked()
                if wait:
                    self._wait_finished_locked(ticket)
            version = None if self._current is None else self._current.version
            changed = version != self._seen_version
            self._seen_version = version
            return changed

    def request_refresh(self) -> None:
        """Nudge the refresh thread to check the table now; never waits."""
        with self._cond:
            self._request_locked()

    def acquire(self, version: int) -> Published:
        """Pin the broadcast of ``version`` for one batch (rebuilt by time travel if it is not live)."""
        with self._cond:
            published = self._published.get(version)
            if published is not None:
                published.users += 1
                return published
        loaded = self._time_travel(version)
        broadcast = loaded.carrier
        with self._cond:
            published = self._published.get(version)
            if published is None:
                published = Published(version, broadcast, loaded.pairs, loaded.size)
                self._published[version] = published
                log.info("rebuilt snapshot version %s from time travel for a replayed batch", version)
            else:  # published meanwhile by the refresh thread: use that one
                broadcast.destroy()
            published.users += 1
            return published

    def release(self, published: Published) -> None:
        """Unpin after a batch; destroy broadcasts no batch uses that are not current."""
        with self._cond:
            published.users -= 1
            self._destroy_unused_locked(keep=(self._current,))

    @property
    def live_broadcasts(self) -> list[int]:
        with self._cond:
            return sorted(self._published)

    @property
    def current(self) -> Published | None:
        """The newest published snapshot (None before the first publish); never waits."""
        with self._cond:
            return self._current

    def wait_published(self, version: int, timeout: float) -> Published:
        """Wait until a version >= ``version`` is published and return it (for tests and tools).

        Raises :class:`RefreshFailed` when the refresh thread is idle after a failed attempt, and
        ``TimeoutError`` after ``timeout`` seconds. It does not ask for a refresh itself.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                current = self._current
                if current is not None and current.version >= version:
                    return current
                if self._failure is not None and self._finished == self._requested:
                    raise RefreshFailed(f"snapshot version {version} was not published") from self._failure
                if self._closed:
                    raise RefreshFailed("the snapshot broadcasts are closed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"snapshot version {version} not published within {timeout} s")
                self._cond.wait(remaining)

    def wait_merged(self, timeout: float) -> int | None:
        """Wait for the background merge in flight, if any, and return the version of the base it froze (tests and
        tools; the next publish moves the deltas onto it). Raises what the merge raised, or ``TimeoutError``."""
        merging = self._merging
        return None if merging is None else merging.result(timeout).version

    def close(self) -> None:
        """Stop the refresh thread (after a build in flight) and destroy every broadcast."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_TIMEOUT_S)
            if thread.is_alive():
                log.warning("the snapshot refresh thread did not stop within %s s", CLOSE_TIMEOUT_S)
        if self._merge_pool is not None:
            self._merge_pool.shutdown(wait=True, cancel_futures=True)
        with self._cond:
            for published in self._published.values():
                published.broadcast.destroy()
            self._published.clear()
            self._current = self._previous = None

    # -- the refresh thread ----------------------------------------------------------------

    def _request_locked(self) -> int:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="snapshot-refresh", daemon=True)
            self._thread.start()
        self._requested += 1
        self._cond.notify_all()
        return self._requested

    def _wait_finished_locked(self, ticket: int) -> None:
        while self._finished < ticket and not self._closed:
            self._cond.wait()
        if self._closed:
            raise RefreshFailed("the snapshot broadcasts are closed")
        if self._failure is not None:
            raise RefreshFailed("the subscription snapshot refresh failed") from self._failure

    def _run(self) -> None:
        lower_thread_priority(self._thread_nice)
        from routing.spark import run_in_background_pool

        # The refresh's own Spark jobs (the change-feed read) take the task slots batches leave idle.
        run_in_background_pool(self._spark)
        while True:
            with self._cond:
                while not self._closed and self._finished == self._requested:
                    if not self._cond.wait(self._refresh_interval_s):
                        self._requested += 1  # the periodic check
                if self._closed:
                    return
                target = self._requested
            failure: BaseException | None = None
            try:
                self._refresh()
            except Exception as error:
                failure = error
                log.exception("subscription snapshot refresh failed; batches keep the published version")
                self.history.append({"event": "refresh_failed", "error": repr(error)})
            with self._cond:
                self._finished = target
                self._failure = failure
                self._cond.notify_all()

    def _refresh(self) -> None:
        version = latest_version(self._spark, self._table_path)
        with self._cond:
            current = self._current
        if current is not None and current.version == version:
            return
        started = time.perf_counter()
        entry: dict[str, Any] = {"version": version}
        # A trie in an unknown state (the first load) would be loaded whole: a file of the version is cheaper.
        loaded = self._read_file(version, entry) if self._trie_version is None else None
        patterns: int | None
        subscribers: int | None
        base_name: str | None = None
        frozen: FrozenMatcher | None = None
        if loaded is not None:
            # Patterns are not counted: the pass over the nodes that would is what a file load saves.
            subscriptions, patterns, subscribers, size = loaded.pairs, None, loaded.subscribers, loaded.size
            self._base = self._delta = None  # the trie is unknown: its next load publishes a base
            applied = time.perf_counter()
            if self.before_publish is not None:
                self.before_publish(version)
        else:
            changes = self._bring_trie_to(version, entry)
            applied = time.perf_counter()
            if self.before_publish is not None:
                self.before_publish(version)
            if changes is not None and self._delta is not None and self._base is not None:
                self._adopt_merge(entry)
                removed, added = changes
                self._delta.record(
                    removed.column("pattern"), removed.column("subscriber_id"), active=False, version=version
                )
                self._delta.record(added.column("pattern"), added.column("subscriber_id"), active=True, version=version)
                delta = self._delta.freeze()
                data, base_name = delta.to_bytes(), self._base.name
                layered = LayeredMatcher(self._base.matcher, delta)
                subscriptions, patterns, subscribers = len(layered), None, None
                entry.update(base_version=self._base.version, delta_pairs=len(self._delta))
            else:
                frozen = self._trie.snapshot().freeze()
                data = frozen.to_bytes()
                subscriptions, patterns, subscribers = len(frozen), frozen.pattern_count, frozen.subscriber_count
            size = len(data)
        frozen_at = time.perf_counter()
        broadcast = loaded.carrier if loaded is not None else self._ship(version, data, base=base_name)
        if frozen is not None:
            self._start_deltas(version, broadcast, frozen)
        self._maybe_merge(version)  # before the publish, so whoever sees the version sees its merge
        with self._cond:
            if self._closed:
                broadcast.destroy()
                return
            existing = self._published.get(version)
            if existing is not None:  # a replay rebuilt this version first: same contents
                broadcast.destroy()
                published = existing
            else:
                published = Published(version, broadcast, subscriptions, size)
                self._published[version] = published
            if self._current is not published:
                self._previous, self._current = self._current, published
            # A batch may be between reading current_version and acquire(previous): keep that one.
            self._destroy_unused_locked(keep=(self._current, self._previous))
            entry.update(
                subscriptions=subscriptions,
                patterns=patterns,
                subscribers=subscribers,
                serialized_bytes=size,
                apply_s=round(applied - started - entry.get("read_s", 0.0), 3),
                freeze_s=round(frozen_at - applied, 3),
                seconds=round(time.perf_counter() - started, 3),
                published_at_ms=time.time_ns() // 1_000_000,  # wall clock: set beside a table commit's time
            )
            self.history.append(entry)
            self._cond.notify_all()
        log.info("published snapshot %s", entry)
        if loaded is None and self._files is not None and not self._files_carry:
            # After the publish, so batches never wait for it; the next start of a router loads it.
            written_at = time.perf_counter()
            entry["file"] = self._files.write(version, data)
            entry["file_write_s"] = round(time.perf_counter() - written_at, 3)

    # -- deltas ----------------------------------------------------------------------------------

    def _start_deltas(self, version: int, carrier: Carrier, frozen: FrozenMatcher) -> None:
        """After a whole snapshot: make it the base of the next versions' deltas, if deltas are on for its size."""
        self._base = self._delta = None
        if self._merging is not None:
            self._merging.cancel()
            self._merging = None
        if not self._deltas or len(frozen) < self._deltas_from_pairs or not isinstance(carrier, SnapshotFileRef):
            return
        assert self._files is not None
        try:
            matcher = self._files.open_base(carrier.name, version)
        except SnapshotFileMissing as why:
            log.warning("publishing whole snapshots: the base file of version %s cannot be opened (%s)", version, why)
            return
        self._base = Base(version, carrier.name, matcher)
        self._delta = DeltaBuilder(matcher)

    def _maybe_merge(self, version: int) -> None:
        """Start freezing a new base on the merge thread once enough pairs changed since the current one."""
        if self._delta is None or self._merging is not None or len(self._delta) < self._merge_pairs:
            return
        if self._merge_pool is None:
            self._merge_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="snapshot-merge")
        # O(1), at exactly ``version``: the trie moves on while the merge freezes this view.
        snapshot = self._trie.snapshot()
        self._merging = self._merge_pool.submit(self._merge, version, snapshot)
        self.history.append({"event": "merge_started", "version": version, "delta_pairs": len(self._delta)})

    def _merge(self, version: int, snapshot: Any) -> Base:
        """The merge thread: freeze ``snapshot`` (of ``version``) whole, write its file, map it."""
        lower_thread_priority(self._thread_nice)
        assert self._files is not None
        started = time.perf_counter()
        frozen = snapshot.freeze()
        data = frozen.to_bytes()
        del frozen
        with self._cond:
            protect = {version, *self._published}
        name = self._files.write(version, data, protect=protect, verify=True)
        if name is None:
            raise RefreshFailed(f"could not write the base snapshot file of version {version}")
        base = Base(version, name, self._files.open_base(name, version))
        self.history.append(
            {
                "event": "merged",
                "version": version,
                "serialized_bytes": len(data),
                "seconds": round(time.perf_counter() - started, 3),
            }
        )
        return base

    def _adopt_merge(self, entry: dict[str, Any]) -> None:
        """A finished merge's base becomes the one deltas are over (the changes it holds are dropped)."""
        if self._merging is None or not self._merging.done() or self._delta is None:
            return
        merging, self._merging = self._merging, None
        try:
            base = merging.result()
        except Exception as error:
            log.warning(
                "the background merge failed; deltas stay over the base of version %s (%s)",
                self._base and self._base.version,
                error,
            )
            self.history.append({"event": "merge_failed", "error": repr(error)})
            return
        self._delta.rebase(base.matcher, through=base.version)
        self._base = base
        entry["rebased_onto"] = base.version

    def _ship(self, version: int, data: bytes, *, base: str | None = None) -> Carrier:
        """What carries ``data`` to the UDF: a broadcast, or (Spark Connect) the version's snapshot file.

        A file is written first. One that cannot be written fails the refresh (or the replay) on Spark Connect,
        as a failed broadcast would; a classic session broadcasts that version instead (logged).
        """
        if self._files_carry:
            assert self._files is not None
            with self._cond:
                protect = {version, *self._published}
            name = self._files.write(version, data, base=base, protect=protect, verify=True)
            if name is not None:
                return self._files.ref(version, name, base)
            if base is not None:
                raise RefreshFailed(f"could not write the snapshot delta file of version {version}")
            if self._connect:
                raise RefreshFailed(
                    f"could not write the snapshot file of version {version} to {self._files.directory}"
                )
            log.warning("broadcasting snapshot version %s: its file could not be written", version)
        return self._spark.sparkContext.broadcast(data)

    def _read_file(self, version: int, entry: dict[str, Any]) -> FromFile | None:
        """``version``'s snapshot from its file, if a valid one exists (see ``self._files``), with what carries it.

        When the files carry the snapshots, the file itself does: it is opened here as a worker opens it (mapped,
        its claim checked, its matcher validated), never read into Python, and a delta is matched over its base.
        At a million subscriptions that is 0.08 s; reading, hashing and naming the 150 MB took 0.48 s, all of
        it before a restarted router's first batch could run. A broadcast ships a base's bytes: those are read
        whole and checked against the digest in the file's name, and their header against this build's format.
        """
        if self._files is None:
            return None
        started = time.perf_counter()
        loaded: FromFile
        if self._files_carry:
            opened = self._files.open_snapshot(version)
            if opened is None:
                return None
            subscribers = opened.matcher.subscriber_count if isinstance(opened.matcher, FrozenMatcher) else None
            carrier = self._files.ref(version, opened.name, opened.base)
            loaded = FromFile(carrier, len(opened.matcher), subscribers, opened.matcher_bytes, opened.base)
        else:
            data = self._files.read(version)
            if data is None:
                return None
            try:
                header = FrozenMatcher.header(data)
            except FrozenFormatError as error:  # a file of another codec version
                log.warning(
                    "snapshot file of version %s is unreadable here (%s); building from the table",
                    version,
                    error,
                )
                return None
            broadcast = self._spark.sparkContext.broadcast(data)
            loaded = FromFile(broadcast, header.pairs, header.subscribers, len(data), None)
        entry.update(mode="file", after_version=self._trie_version, changed_rows=0, added=0, removed=0, skipped_rows=0)
        entry["read_s"] = round(time.perf_counter() - started, 3)
        return loaded

    def _bring_trie_to(self, version: int, entry: dict[str, Any]) -> tuple[pa.Table, pa.Table] | None:
        """Update the live trie to ``version``: the changed rows when possible, else the whole table.

        Returns the rows applied from the change feed, (unsubscribed, subscribed), or None when the trie was
        loaded whole (or left as it was).
        """
        after = self._trie_version
        if after == version:  # applied by an attempt that failed later (freeze or broadcast)
            entry.update(mode="unchanged", after_version=after, changed_rows=0, added=0, removed=0, skipped_rows=0)
            self._base = self._delta = None  # its changes may be half recorded: publish a base
            return None
        if after is not None and after < version:
            try:
                started = time.perf_counter()
                changes = read_changes(self._spark, self._table_path, after, version)
                entry["read_s"] = round(time.perf_counter() - started, 3)
            except ChangesUnavailable as why:
                log.info(
                    "no change feed for the refresh from version %s: loading version %s whole (%s)", after, version, why
                )
            else:
                self._trie_version = None  # unknown until every change is in
                import pyarrow.compute as pc

                active = changes.column("active")
                removed, skipped_removed, unsubscribed = _apply(
                    self._trie.unsubscribe_many, changes.filter(pc.invert(active))
                )
                added, skipped_added, subscribed = _apply(self._trie.subscribe_many, changes.filter(active))
                self._trie_version = version
                entry.update(
                    mode="changes",
                    after_version=after,
                    changed_rows=changes.num_rows,
                    added=added,
                    removed=removed,
                    skipped_rows=skipped_removed + skipped_added,
                )
                return unsubscribed, subscribed
        self._trie_version = None
        self._base = self._delta = None
        started = time.perf_counter()
        table = read_active_arrow(self._spark, self._table_path, version)
        entry["read_s"] = round(time.perf_counter() - started, 3)
        trie = CSTrieMatcher()
        added, skipped, _ = _apply(trie.subscribe_many, table)
        self._trie, self._trie_version = trie, version
        entry.update(
            mode="full", after_version=after, changed_rows=table.num_rows, added=added, removed=0, skipped_rows=skipped
        )
        return None

    def _time_travel(self, version: int) -> FromFile:
        """``version``'s snapshot from its file, else built whole from the table as of then (and shipped)."""
        loaded = self._read_file(version, {})
        if loaded is not None:
            self.history.append({"event": "replay_rebuild", "version": version, "source": "file"})
            return loaded
        try:
            table = read_active_arrow(self._spark, self._table_path, version)
        except Exception as error:  # Spark's FileNotFound of a vacuumed file, or Delta's own refusal
            log.error("cannot rebuild snapshot version %s for a replayed batch: %s", version, error)
            raise ReplayVersionGone(version, self._table_path, error) from error
        try:
            frozen = FrozenMatcher.from_arrow(table.column("pattern"), table.column("subscriber_id"))
        except BulkRowError as error:
            kept = _without_rows(table, error)
            frozen = FrozenMatcher.from_arrow(kept.column("pattern"), kept.column("subscriber_id"))
        self.history.append({"event": "replay_rebuild", "version": version, "source": "table"})
        data = frozen.to_bytes()
        return FromFile(self._ship(version, data), len(frozen), frozen.subscriber_count, len(data), None)

    def _destroy_unused_locked(self, keep: tuple[Published | None, ...]) -> None:
        for version, candidate in list(self._published.items()):
            if candidate.users > 0 or any(candidate is kept for kept in keep):
                continue
            candidate.broadcast.destroy()
            del self._published[version]
            log.info("destroyed the broadcast of snapshot version %s", version)


def lower_thread_priority(increment: int) -> int | None:
    """Add ``increment`` to the calling thread's nice value; the new value, or None where it cannot be done.

    Linux keeps a nice value per thread (``setpriority`` on a thread id), so only the refresh thread
    yields: a freeze of a million-subscription snapshot otherwise takes a core from the batches' tasks.
    Elsewhere (or when refused) the thread keeps the process's priority, with one log line.
    """
    if increment <= 0:
        return None
    if not sys.platform.startswith("linux"):
        log.info("the refresh thread's nice increment is ignored on %s (nice is per process there)", sys.platform)
        return None
    thread = threading.get_native_id()
    try:
        nice = min(19, os.getpriority(os.PRIO_PROCESS, thread) + increment)
        os.setpriority(os.PRIO_PROCESS, thread, nice)
    except OSError as error:
        log.warning("cannot lower the snapshot refresh thread's priority: %s", error)
        return None
    return nice


def _without_rows(table: pa.Table, error: BulkRowError) -> pa.Table:
    """The table minus the rows ``error`` reported (logged, never silent)."""
    import pyarrow as pa

    log.error("skipping %d bad row(s) of the subscription table: %s", len(error.rows), error)
    bad = {row for row, _, _ in error.rows}
    keep = pa.array([row not in bad for row in range(table.num_rows)], type=pa.bool_())
    return table.filter(keep)


def _apply(bulk: Callable[..., int], table: pa.Table) -> tuple[int, int, pa.Table]:
    """``bulk(patterns, subscribers)`` over a table's rows: (pairs changed, bad rows skipped, the rows applied)."""
    try:
        return bulk(table.column("pattern"), table.column("subscriber_id")), 0, table
    except BulkRowError as error:
        # The refresh job never writes such rows; if another writer did, skip them loudly rather than
        # stop every refresh. The bulk call applied nothing, so applying the rest is exact.
        kept = _without_rows(table, error)
        return bulk(kept.column("pattern"), kept.column("subscriber_id")), len(error.rows), kept

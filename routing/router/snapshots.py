"""Driver side: the live CS-trie, its frozen snapshots, and their broadcasts.

The driver keeps one :class:`~routing.matchers.CSTrieMatcher` mirroring the
subscription table. At most every ``refresh_interval_s`` it reads the table's
latest Delta version; when that changed, it applies the difference between
the old and new active (pattern, subscriber) sets to the live trie, takes an
O(1) snapshot, freezes it, serializes it and broadcasts the bytes. All of this
happens between micro-batches (``foreachBatch`` runs on the driver), so the
running query is never restarted.

A batch pins the version it routes with (:meth:`SnapshotBroadcasts.acquire`);
once it is done (:meth:`release`), every broadcast that is neither the
current version nor pinned is destroyed. A replayed batch that recorded an
older version gets that version rebuilt from Delta time travel.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from routing.matchers.native import CSTrieMatcher
from routing.subscriptions import latest_version, read_active

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Published:
    """One broadcast snapshot: what the UDF receives is ``broadcast.value`` (the matcher bytes)."""

    version: int
    broadcast: Broadcast[bytes]
    subscriptions: int
    serialized_bytes: int
    users: int = 0


class SnapshotBroadcasts:
    """The current snapshot and the broadcasts batches still use."""

    def __init__(
        self,
        spark: SparkSession,
        table_path: str,
        *,
        refresh_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spark = spark
        self._table_path = table_path
        self._refresh_interval_s = refresh_interval_s
        self._clock = clock
        self._trie = CSTrieMatcher()
        self._pairs: frozenset[tuple[str, str]] = frozenset()
        self._current: Published | None = None
        self._published: dict[int, Published] = {}
        self._checked_at: float | None = None
        self.history: list[dict[str, Any]] = []

    @property
    def current_version(self) -> int:
        self.maybe_refresh()
        assert self._current is not None
        return self._current.version

    def maybe_refresh(self, *, force: bool = False) -> bool:
        """Check the table for a new version (at most every refresh interval); True when it changed."""
        now = self._clock()
        fresh = self._checked_at is not None and now - self._checked_at < self._refresh_interval_s
        if not force and self._current is not None and fresh:
            return False
        self._checked_at = now
        version = latest_version(self._spark, self._table_path)
        if self._current is not None and version == self._current.version:
            return False
        self._current = self._publish_live(version)
        return True

    def _publish_live(self, version: int) -> Published:
        """Bring the live trie to ``version`` by applying the difference, then freeze and broadcast."""
        started = time.perf_counter()
        pairs = frozenset(read_active(self._spark, self._table_path, version))
        removed, added = self._pairs - pairs, pairs - self._pairs
        for pattern, subscriber in removed:
            self._trie.unsubscribe(pattern, subscriber)
        for pattern, subscriber in added:
            self._trie.subscribe(pattern, subscriber)
        self._pairs = pairs
        published = self._broadcast(version, self._trie.snapshot().freeze().to_bytes(), len(pairs))
        self.history.append(
            {
                "version": version,
                "subscriptions": len(pairs),
                "added": len(added),
                "removed": len(removed),
                "serialized_bytes": published.serialized_bytes,
                "seconds": round(time.perf_counter() - started, 3),
            }
        )
        log.info("snapshot %s", self.history[-1])
        return published

    def _broadcast(self, version: int, data: bytes, subscriptions: int) -> Published:
        existing = self._published.get(version)
        if existing is not None:
            return existing
        published = Published(version, self._spark.sparkContext.broadcast(data), subscriptions, len(data))
        self._published[version] = published
        return published

    def acquire(self, version: int) -> Published:
        """Pin the broadcast of ``version`` for one batch (rebuilt by time travel if it is not live)."""
        published = self._published.get(version)
        if published is None:
            pairs = read_active(self._spark, self._table_path, version)
            trie = CSTrieMatcher()
            for pattern, subscriber in pairs:
                trie.subscribe(pattern, subscriber)
            published = self._broadcast(version, trie.freeze().to_bytes(), len(pairs))
            log.info("rebuilt snapshot version %s from time travel for a replayed batch", version)
        published.users += 1
        return published

    def release(self, published: Published) -> None:
        """Unpin after a batch; destroy broadcasts no batch uses that are not current."""
        published.users -= 1
        for version, candidate in list(self._published.items()):
            if candidate is self._current or candidate.users > 0:
                continue
            candidate.broadcast.destroy()
            del self._published[version]
            log.info("destroyed the broadcast of snapshot version %s", version)

    @property
    def live_broadcasts(self) -> list[int]:
        return sorted(self._published)

    def close(self) -> None:
        for published in self._published.values():
            published.broadcast.destroy()
        self._published.clear()
        self._current = None

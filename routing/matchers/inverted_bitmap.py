"""The inverted bitmap matcher: one roaring bitmap per known topic, over subscription ids.

Algorithm
---------
Every (pattern, subscriber) pair gets a small integer id. The matcher keeps a
*topic index*: for each routing key it knows, a roaring bitmap of the ids
whose pattern matches that key. For the seed's example (topics ``forex.usd``,
``stock.nyse``; subscriptions 0 = ``forex.*``, 1 = ``stock.nyse``, 2 = ``*.*``)::

    topic        0  1  2
    forex.usd    1  0  1
    stock.nyse   0  1  1

* ``subscribe`` allocates an id and sets its bit in the bitmap of every indexed
  topic the pattern matches: O(indexed topics) DP matches. Writes are
  expensive so that reads are cheap.
* ``unsubscribe`` clears the id's bit from every indexed bitmap and returns the
  id to a free list (lowest id first), so ids stay dense and bitmaps do not
  grow forever under churn.
* ``lookup`` of an indexed topic is one dict probe plus mapping the set bits
  back to subscribers.

The topic space may be given up front (``topics=``). A key outside it is still
answered correctly: its bitmap is computed against every live subscription
(O(subscriptions) DP matches, the seed's "reindexing" cost) and cached, so the
next lookup of that key is cheap. The index is bounded by
``max_indexed_topics`` (default :data:`DEFAULT_MAX_INDEXED_TOPICS`): once it is
full, further unknown keys are computed the same way but not cached, so memory
stays bounded and answers stay correct; only their latency suffers. Topics
given up front count against the cap too (a ``ValueError`` if they exceed it).

Memory is O(indexed topics x matching subscriptions): the price of the fastest
lookups, and why this matcher only suits a small, known topic space.

Concurrency: one lock around everything; a lookup may index its key, so it
takes the same lock as the writers.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Iterator

from pyroaring import BitMap

from routing.topic import check_subscriber, key_words, pattern_words, words_match

#: Default cap on the number of topics the index caches (given up front or learnt from lookups).
DEFAULT_MAX_INDEXED_TOPICS = 100_000


class SubscriptionTable:
    """Dense integer ids for (pattern, subscriber) pairs, with id reuse.

    Shared by the two bitmap matchers. Not thread-safe on its own: the owning
    matcher's lock guards it.
    """

    __slots__ = ("_by_id", "_free", "_ids")

    def __init__(self) -> None:
        #: (pattern, subscriber) -> id.
        self._ids: dict[tuple[str, str], int] = {}
        #: id -> (pattern words, subscriber), or None for a free id. Invariant:
        #: ``_by_id[i] is None`` exactly when ``i`` is in ``_free``.
        self._by_id: list[tuple[list[str], str] | None] = []
        #: Free ids, a min-heap: the lowest is reused first so ids stay dense.
        self._free: list[int] = []

    def add(self, pattern: str, words: list[str], subscriber: str) -> int | None:
        """Allocate an id for a new pair; None if the pair is already held."""
        pair = (pattern, subscriber)
        if pair in self._ids:
            return None
        if self._free:
            sid = heapq.heappop(self._free)
            self._by_id[sid] = (words, subscriber)
        else:
            sid = len(self._by_id)
            self._by_id.append((words, subscriber))
        self._ids[pair] = sid
        return sid

    def remove(self, pattern: str, subscriber: str) -> tuple[int, list[str]] | None:
        """Release a pair's id; returns (id, pattern words), or None if the pair is absent."""
        sid = self._ids.pop((pattern, subscriber), None)
        if sid is None:
            return None
        entry = self._by_id[sid]
        assert entry is not None
        self._by_id[sid] = None
        heapq.heappush(self._free, sid)
        return sid, entry[0]

    def words(self, sid: int) -> list[str]:
        entry = self._by_id[sid]
        assert entry is not None
        return entry[0]

    def subscriber(self, sid: int) -> str:
        entry = self._by_id[sid]
        assert entry is not None
        return entry[1]

    def subscribers(self, ids: Iterable[int]) -> frozenset[str]:
        by_id = self._by_id
        return frozenset(by_id[sid][1] for sid in ids)  # type: ignore[index]

    def live(self) -> Iterator[tuple[int, list[str]]]:
        """(id, pattern words) for every held pair."""
        for sid, entry in enumerate(self._by_id):
            if entry is not None:
                yield sid, entry[0]

    def pairs(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._ids)

    def id_capacity(self) -> int:
        """Ids ever allocated (live + free): the width of the bitmaps."""
        return len(self._by_id)

    def __len__(self) -> int:
        return len(self._ids)


class InvertedBitmapMatcher:
    def __init__(self, topics: Iterable[str] = (), *, max_indexed_topics: int = DEFAULT_MAX_INDEXED_TOPICS) -> None:
        if isinstance(max_indexed_topics, bool) or not isinstance(max_indexed_topics, int) or max_indexed_topics < 0:
            raise ValueError(f"max_indexed_topics must be an int >= 0, not {max_indexed_topics!r}")
        self.max_indexed_topics = max_indexed_topics
        self._table = SubscriptionTable()
        # Invariant: for every indexed key, the bitmap holds exactly the live ids
        # whose pattern matches it. At most max_indexed_topics entries.
        self._index: dict[str, tuple[list[str], BitMap]] = {}
        self._lock = threading.Lock()
        known = dict.fromkeys(topics)  # de-duplicated, order kept
        if len(known) > max_indexed_topics:
            raise ValueError(f"{len(known)} known topics exceed max_indexed_topics={max_indexed_topics}")
        for topic in known:
            self._index[topic] = (key_words(topic), BitMap())

    def subscribe(self, pattern: str, subscriber: str) -> None:
        words = pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            sid = self._table.add(pattern, words, subscriber)
            if sid is None:
                return
            for topic_words, bitmap in self._index.values():
                if words_match(words, topic_words):
                    bitmap.add(sid)

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            removed = self._table.remove(pattern, subscriber)
            if removed is None:
                return
            sid, _ = removed
            # Clear the bit everywhere before the id can be reused: discarding an
            # absent bit is cheaper than re-running the DP to find where it is set.
            for _, bitmap in self._index.values():
                bitmap.discard(sid)

    def lookup(self, key: str) -> frozenset[str]:
        words = key_words(key)
        with self._lock:
            indexed = self._index.get(key)
            if indexed is not None:
                return self._table.subscribers(indexed[1])
            bitmap = BitMap(sid for sid, pattern in self._table.live() if words_match(pattern, words))
            if len(self._index) < self.max_indexed_topics:
                self._index[key] = (words, bitmap)
            return self._table.subscribers(bitmap)

    def indexed_topics(self) -> frozenset[str]:
        """The keys whose bitmaps are cached (given up front or learnt from lookups)."""
        with self._lock:
            return frozenset(self._index)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        with self._lock:
            return self._table.pairs()

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)

"""The optimized inverted bitmap matcher: per-position roaring bitmaps, ANDed.

Algorithm
---------
Instead of one bitmap per topic, there is one small table per word *position*.
Subscription ids come from :class:`~routing.matchers.inverted_bitmap.SubscriptionTable`
(dense, reused after unsubscribe). For position ``p`` the table holds:

``rows[word]``  ids whose pattern has the literal ``word`` at ``p``
``star``        ids whose pattern has ``*`` at ``p`` (the seed's "other" row:
                it matches any word, so literal words nobody subscribed to need
                no row of their own)
``null``        ids of patterns that have *no* word at ``p`` (they are shorter)
``any``         ids of patterns whose first ``#`` is at or before ``p``

A pattern is indexed positionally only up to its first ``#`` (its *prefix*);
from that position on it sits in ``any``, which is ORed into every row of the
position, ``null`` included. The seed only handles ``*``; ``any`` is how ``#``
is supported.

Lookup of a key of ``n`` words over ``P`` positions::

    candidates = AND over p < min(n, P) of (rows[key[p]] | star | any)
             AND AND over n <= p < P  of (null | any)
             AND (hash_ids, only if n > P: longer keys can match only '#' patterns)

stopping as soon as the running AND is empty. Patterns without ``#``
("exact" patterns) in the result are matches as they stand: every position
was checked and the ``null`` rows pin their length. Patterns with ``#`` are
only *candidates* (their prefix fits and nothing rules them out) and are
verified with the DP :func:`routing.topic.words_match`. That is the cost of
``#``: a workload heavy in ``#`` patterns with short prefixes degrades
towards the naive matcher's scan; exact and ``*`` patterns never pay it.

Positions are created on demand, up to the longest prefix subscribed so far
(the seed instead fixes a maximum topic size up front), and never shrink. When
position ``P`` is created every existing pattern is shorter than it, so its
``null`` row starts as a copy of all exact ids and its ``any`` row as a copy of
all ``#`` ids. Rows emptied by unsubscribe are dropped.

Costs: subscribe and unsubscribe touch O(P) bitmaps; a lookup ORs and ANDs at
most 3P bitmaps; memory is one bit per (pattern, position) plus a row per
distinct literal word per position, far less than one bitmap per topic.

Concurrency: one lock around everything; a lookup computes under the lock.
"""

from __future__ import annotations

import threading

from pyroaring import BitMap

from routing.matchers.inverted_bitmap import SubscriptionTable
from routing.topic import HASH, STAR, check_subscriber, key_words, pattern_words, words_match


class _Position:
    __slots__ = ("any", "null", "rows", "star")

    def __init__(self, null: BitMap, any_: BitMap) -> None:
        #: Literal word -> ids with that word here (before their first '#'). No empty rows.
        self.rows: dict[str, BitMap] = {}
        #: Ids with '*' here (before their first '#').
        self.star = BitMap()
        #: Ids of exact ('#'-free) patterns shorter than this position + 1.
        self.null = null
        #: Ids of patterns whose first '#' is at or before this position.
        self.any = any_


def _prefix_length(words: list[str]) -> int:
    """Index of the first '#', or the word count if there is none."""
    try:
        return words.index(HASH)
    except ValueError:
        return len(words)


class OptimizedInvertedBitmapMatcher:
    def __init__(self) -> None:
        self._table = SubscriptionTable()
        self._positions: list[_Position] = []
        #: Live ids of patterns without '#'.
        self._exact_ids = BitMap()
        #: Live ids of patterns with at least one '#'.
        self._hash_ids = BitMap()
        self._lock = threading.Lock()

    def _grow(self, count: int) -> None:
        while len(self._positions) < count:
            # Every existing pattern is shorter than the new position, or has its '#' before it.
            self._positions.append(_Position(null=BitMap(self._exact_ids), any_=BitMap(self._hash_ids)))

    def subscribe(self, pattern: str, subscriber: str) -> None:
        words = pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            sid = self._table.add(pattern, words, subscriber)
            if sid is None:
                return
            prefix = _prefix_length(words)
            self._grow(prefix)
            for p, position in enumerate(self._positions):
                if p < prefix:
                    word = words[p]
                    if word == STAR:
                        position.star.add(sid)
                    else:
                        row = position.rows.get(word)
                        if row is None:
                            row = position.rows[word] = BitMap()
                        row.add(sid)
                elif prefix < len(words):
                    position.any.add(sid)
                else:
                    position.null.add(sid)
            (self._hash_ids if prefix < len(words) else self._exact_ids).add(sid)

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            removed = self._table.remove(pattern, subscriber)
            if removed is None:
                return
            sid, words = removed
            prefix = _prefix_length(words)
            for p, position in enumerate(self._positions):
                if p < prefix:
                    word = words[p]
                    if word == STAR:
                        position.star.discard(sid)
                    else:
                        row = position.rows[word]
                        row.discard(sid)
                        if not row:
                            del position.rows[word]
                elif prefix < len(words):
                    position.any.discard(sid)
                else:
                    position.null.discard(sid)
            (self._hash_ids if prefix < len(words) else self._exact_ids).discard(sid)

    def lookup(self, key: str) -> frozenset[str]:
        words = key_words(key)
        n = len(words)
        with self._lock:
            positions = self._positions
            candidates: BitMap | None = None
            if n > len(positions):
                candidates = BitMap(self._hash_ids)
            for p, position in enumerate(positions):
                # Union only the non-empty rows: most positions have one, and then no copy is made
                # (the row is only read; '&' below always builds a new bitmap).
                if p < n:
                    parts = [b for b in (position.rows.get(words[p]), position.star, position.any) if b]
                else:
                    parts = [b for b in (position.null, position.any) if b]
                if not parts:
                    return frozenset()
                allowed = parts[0] if len(parts) == 1 else BitMap.union(*parts)
                candidates = allowed if candidates is None else candidates & allowed
                if not candidates:
                    return frozenset()
            if candidates is None:
                # No positions at all: only the empty pattern and '#'-first patterns exist.
                candidates = self._exact_ids | self._hash_ids
            table = self._table
            hash_ids = self._hash_ids
            found = {
                table.subscriber(sid)
                for sid in candidates
                if sid not in hash_ids or words_match(table.words(sid), words)
            }
        return frozenset(found)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        with self._lock:
            return self._table.pairs()

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)

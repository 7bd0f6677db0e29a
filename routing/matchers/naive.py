"""The naive matcher: a hashmap of pattern -> subscribers, scanned on every lookup.

Algorithm
---------
``subscribe`` adds the subscriber to the pattern's entry (O(1)); ``unsubscribe``
removes it and drops the entry when it empties (O(1)). ``lookup`` walks every
entry and runs the polynomial DP :func:`routing.topic.words_match` of the
pattern's words against the key's words, so a lookup costs
O(patterns x pattern words x key words): fine for a handful of subscriptions,
hopeless for thousands. It is the baseline the other matchers are measured
against, and, being nearly impossible to get wrong, a second oracle.

Concurrency: one lock around the map; a lookup scans under the lock.
"""

from __future__ import annotations

import threading

from routing.topic import check_subscriber, key_words, pattern_words, words_match


class _Entry:
    """A pattern's split words (computed once) and its subscribers (never empty while stored)."""

    __slots__ = ("subscribers", "words")

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.subscribers: set[str] = set()


class NaiveMatcher:
    def __init__(self) -> None:
        # Invariant: every entry has at least one subscriber.
        self._entries: dict[str, _Entry] = {}
        # Invariant: equals the sum of len(entry.subscribers).
        self._count = 0
        self._lock = threading.Lock()

    def subscribe(self, pattern: str, subscriber: str) -> None:
        words = pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            entry = self._entries.get(pattern)
            if entry is None:
                entry = self._entries[pattern] = _Entry(words)
            if subscriber not in entry.subscribers:
                entry.subscribers.add(subscriber)
                self._count += 1

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            entry = self._entries.get(pattern)
            if entry is None or subscriber not in entry.subscribers:
                return
            entry.subscribers.discard(subscriber)
            self._count -= 1
            if not entry.subscribers:
                del self._entries[pattern]

    def lookup(self, key: str) -> frozenset[str]:
        words = key_words(key)
        found: set[str] = set()
        with self._lock:
            for entry in self._entries.values():
                if words_match(entry.words, words):
                    found.update(entry.subscribers)
        return frozenset(found)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        with self._lock:
            return frozenset((p, s) for p, entry in self._entries.items() for s in entry.subscribers)

    def __len__(self) -> int:
        with self._lock:
            return self._count

"""The reference matcher: an oracle written independently of every real matcher.

Each pattern is translated to a regular expression over an encoding of the key
in which every word is preceded by a dot: zero words encode as ``""`` and
``"a.b"`` as ``".a.b"``. Then a literal word ``w`` is ``\\.w``, ``*`` is one
``\\.[^.]*`` and ``#`` is any number of them. No trie, no dynamic programming,
no shared code with the matchers it checks: it is slow (and exponential on
pathological patterns), so it belongs in tests and in the end-to-end checks of
the stream, never on a hot path.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from functools import lru_cache

from routing.topic import HASH, STAR, check_subscriber, key_words, pattern_words


def encode_key(key: str) -> str:
    """``""`` -> ``""``; otherwise ``"." + key`` (one dot before every word)."""
    return "".join("." + word for word in key_words(key))


@lru_cache(maxsize=65536)
def pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for word in pattern_words(pattern):
        if word == STAR:
            parts.append(r"\.[^.]*")
        elif word == HASH:
            parts.append(r"(?:\.[^.]*)*")
        else:
            parts.append(re.escape("." + word))
    return re.compile("".join(parts), re.DOTALL)


def reference_matches(pattern: str, key: str) -> bool:
    return pattern_regex(pattern).fullmatch(encode_key(key)) is not None


class ReferenceMatcher:
    """The oracle, with the matcher protocol so tests can drive it like the others."""

    def __init__(self, subscriptions: Iterable[tuple[str, str]] = ()) -> None:
        self._pairs: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        for pattern, subscriber in subscriptions:
            self.subscribe(pattern, subscriber)

    def subscribe(self, pattern: str, subscriber: str) -> None:
        pattern_regex(pattern)
        check_subscriber(subscriber)
        with self._lock:
            self._pairs.add((pattern, subscriber))

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        pattern_words(pattern)
        check_subscriber(subscriber)
        with self._lock:
            self._pairs.discard((pattern, subscriber))

    def lookup(self, key: str) -> frozenset[str]:
        encoded = encode_key(key)
        with self._lock:
            pairs = list(self._pairs)
        return frozenset(sub for pattern, sub in pairs if pattern_regex(pattern).fullmatch(encoded))

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        with self._lock:
            return frozenset(self._pairs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pairs)

"""The matcher protocol every matcher implements (the four classic ones and the CS-trie).

Semantics are those of :mod:`routing.topic`. A matcher checks only the grammar
(``str`` and UTF-8); policies and limits belong to :mod:`routing.validation`.
Every matcher is safe to share between threads.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Matcher(Protocol):
    def subscribe(self, pattern: str, subscriber: str) -> None:
        """Add (pattern, subscriber). Idempotent."""

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        """Remove (pattern, subscriber). Removing an absent pair is a no-op."""

    def lookup(self, key: str) -> frozenset[str]:
        """Every subscriber with at least one pattern matching ``key``, once each."""

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        """All (pattern, subscriber) pairs currently held."""

    def __len__(self) -> int:
        """Number of (pattern, subscriber) pairs."""

"""Topic matchers. One protocol (:class:`Matcher`), six implementations.

==================================  ==================================================
``NaiveMatcher``                    hashmap of pattern -> subscribers, scanned per lookup
``InvertedBitmapMatcher``           one roaring bitmap per known topic
``OptimizedInvertedBitmapMatcher``  per-position roaring bitmaps, ANDed
``TrieMatcher``                     word trie under one lock
``CSTrieMatcher``                   lock-free concurrent subscription trie (Rust)
``FrozenMatcher``                   compact read-only matcher frozen from a CS-trie snapshot (Rust)
==================================  ==================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from routing.matchers.base import Matcher

if TYPE_CHECKING:
    from routing.matchers.inverted_bitmap import InvertedBitmapMatcher
    from routing.matchers.naive import NaiveMatcher
    from routing.matchers.native import CSTrieMatcher, FrozenMatcher, Snapshot
    from routing.matchers.optimized_bitmap import OptimizedInvertedBitmapMatcher
    from routing.matchers.trie import TrieMatcher

# Imported on first use, so the pure-Python matchers work even where the
# native extension is not built (and importing this package stays cheap).
_LAZY = {
    "NaiveMatcher": "routing.matchers.naive",
    "InvertedBitmapMatcher": "routing.matchers.inverted_bitmap",
    "OptimizedInvertedBitmapMatcher": "routing.matchers.optimized_bitmap",
    "TrieMatcher": "routing.matchers.trie",
    "CSTrieMatcher": "routing.matchers.native",
    "FrozenMatcher": "routing.matchers.native",
    "Snapshot": "routing.matchers.native",
}

CLASSIC_MATCHERS = ("NaiveMatcher", "InvertedBitmapMatcher", "OptimizedInvertedBitmapMatcher", "TrieMatcher")

__all__ = [
    "CLASSIC_MATCHERS",
    "CSTrieMatcher",
    "FrozenMatcher",
    "InvertedBitmapMatcher",
    "Matcher",
    "NaiveMatcher",
    "OptimizedInvertedBitmapMatcher",
    "Snapshot",
    "TrieMatcher",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'routing.matchers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

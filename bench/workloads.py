"""Workloads shared by the benchmarks: the realistic vocabulary, patterns and matching keys."""

from __future__ import annotations

import random
from collections.abc import Sequence


def vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 8))))
    return sorted(words)


def realistic_pattern(rng: random.Random, vocab: Sequence[str]) -> str:
    words = [rng.choice(vocab) for _ in range(5)]
    roll = rng.random()
    if roll < 0.10:
        words[rng.randrange(5)] = "*"
    elif roll < 0.15:
        # Two or three literal words first: a one-word prefix ("a.#") would catch a third of all
        # random keys once there are a few thousand of them, and the hit rate would no longer be ~30%.
        prefix = rng.randint(2, 3)
        # Half end in '#', half keep a literal last word after it: "a.b.#" or "a.b.#.e".
        words = [*words[:prefix], "#"] if rng.random() < 0.5 else [*words[:prefix], "#", words[4]]
    return ".".join(words)


def realistic_hit(rng: random.Random, vocab: Sequence[str], pattern: str) -> str:
    """A 5-word key the pattern matches ('*' and '#' filled with vocabulary words)."""
    words = pattern.split(".")
    fixed = sum(1 for w in words if w != "#")
    out: list[str] = []
    for word in words:
        if word == "*":
            out.append(rng.choice(vocab))
        elif word == "#":
            out.extend(rng.choice(vocab) for _ in range(max(0, 5 - fixed)))
        else:
            out.append(word)
    return ".".join(out)


def hostile_patterns(count: int, seed: int, *, max_hash_words: int = 16) -> list[str]:
    """Distinct patterns, each within the per-pattern limits, whose trie a key of ``a`` words meets at
    nearly every node and position: the probe that made one subscriber stall every key (issue 13)."""
    rng = random.Random(seed)
    found: set[str] = set()
    while len(found) < count:
        words = [rng.choice(["a", "*", "#", "a"]) for _ in range(rng.randrange(8, 24))]
        if words.count("#") <= max_hash_words:
            found.add(".".join(words))
    return sorted(found)

"""Bulk paths from Arrow: ``CSTrieMatcher.subscribe_many``/``unsubscribe_many`` and ``FrozenMatcher.from_arrow``.

Oracles: the regex :class:`~routing.reference.ReferenceMatcher` for matching and a plain Python set for
the pairs held; :class:`~routing.validation.Validator` (pure Python) for which rows are bad and why.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import keys, patterns, subscribers

from routing.errors import TopicError
from routing.limits import Limits
from routing.matchers import CSTrieMatcher, FrozenMatcher
from routing.matchers.native import BulkRowError
from routing.reference import ReferenceMatcher
from routing.validation import Validator

STRING_TYPES = (pa.string(), pa.large_string(), pa.string_view())
string_types = st.sampled_from(STRING_TYPES)
pairs_lists = st.lists(st.tuples(patterns, subscribers), max_size=30)


def columns(pairs: list[tuple[str, str]], string_type: pa.DataType = STRING_TYPES[0]) -> tuple[pa.Array, pa.Array]:
    return (
        pa.array([pattern for pattern, _ in pairs], type=string_type),
        pa.array([subscriber for _, subscriber in pairs], type=string_type),
    )


def chunked(array: pa.Array) -> pa.ChunkedArray:
    cut = len(array) // 2
    return pa.chunked_array([array.slice(0, cut), array.slice(cut)], type=array.type)


@settings(max_examples=150, deadline=None)
@given(
    added=pairs_lists,
    removed=pairs_lists,
    probe=st.lists(keys, max_size=15),
    string_type=string_types,
    use_chunks=st.booleans(),
)
def test_bulk_calls_agree_with_the_oracle(
    added: list[tuple[str, str]],
    removed: list[tuple[str, str]],
    probe: list[str],
    string_type: pa.DataType,
    use_chunks: bool,
) -> None:
    # Remove some of what was added, plus pairs never added.
    removed = added[::2] + removed
    trie = CSTrieMatcher()
    add_p, add_s = columns(added, string_type)
    del_p, del_s = columns(removed, string_type)
    if use_chunks:
        add_p, add_s, del_p, del_s = map(chunked, (add_p, add_s, del_p, del_s))
    assert trie.subscribe_many(add_p, add_s) == len(set(added))
    held = set(added)
    assert trie.unsubscribe_many(del_p, del_s) == len(held & set(removed))
    held -= set(removed)
    assert trie.subscriptions() == held
    assert len(trie) == len(held)
    oracle = ReferenceMatcher(sorted(held))
    frozen = FrozenMatcher.from_arrow(*columns(sorted(held) * 2, string_type))  # duplicates are harmless
    assert frozen.subscriptions() == held
    # The same contents encode to the same bytes, however they were built.
    assert frozen.to_bytes() == FrozenMatcher(held).to_bytes() == trie.freeze().to_bytes()
    for key in probe + [pattern for pattern, _ in added]:
        assert trie.lookup(key) == oracle.lookup(key) == frozen.lookup(key), key


def test_counts_of_duplicate_and_absent_rows() -> None:
    trie = CSTrieMatcher()
    assert trie.subscribe_many(*columns([("a.#", "x"), ("a.#", "x"), ("b", "y")])) == 2
    assert trie.subscribe_many(*columns([("a.#", "x")])) == 0
    assert trie.unsubscribe_many(*columns([("a.#", "x"), ("a.#", "x"), ("nope", "x")])) == 1
    assert trie.subscriptions() == {("b", "y")}
    assert trie.subscribe_many(*columns([])) == 0


def test_bad_rows_are_each_reported_and_nothing_is_applied() -> None:
    trie = CSTrieMatcher()
    trie.subscribe("keep", "k")
    before = trie.freeze().to_bytes()
    limits = Limits(max_pattern_bytes=10, max_pattern_words=3, max_hash_words=1, max_subscriber_bytes=4)
    rows = [
        ("ok", "s"),
        (None, "s"),
        ("ok", None),
        ("a" * 11, "s"),
        ("a.b.c.d", "s"),
        ("#.x.#", "s"),
        ("ok", ""),
        ("ok", "toolong"),
        ("#.bb.cccc", "abcd"),  # exactly at every limit: fine
    ]
    expected = [
        (1, "null_pattern"),
        (2, "null_subscriber"),
        (3, "pattern_too_long"),
        (4, "pattern_too_many_words"),
        (5, "too_many_hash_words"),
        (6, "invalid_subscriber"),
        (7, "invalid_subscriber"),
    ]
    for string_type in STRING_TYPES:
        p = pa.array([pattern for pattern, _ in rows], type=string_type)
        s = pa.array([subscriber for _, subscriber in rows], type=string_type)
        for call in (trie.subscribe_many, trie.unsubscribe_many):
            with pytest.raises(BulkRowError, match="7 of 9 rows are invalid, nothing was applied") as caught:
                call(p, s, limits=limits)
            assert [(row, reason) for row, reason, _ in caught.value.rows] == expected
            assert "max_pattern_bytes=10, got 11" in caught.value.rows[2][2]
            assert "row 3: pattern is too long" in str(caught.value)
            assert trie.freeze().to_bytes() == before
        with pytest.raises(BulkRowError):
            FrozenMatcher.from_arrow(p, s, limits=limits)
    # Without limits only the grammar applies: nulls and the empty subscriber.
    with pytest.raises(BulkRowError) as caught:
        trie.subscribe_many(*columns(rows))  # type: ignore[arg-type]
    assert [row for row, _, _ in caught.value.rows] == [1, 2, 6]
    assert trie.subscriptions() == {("keep", "k")}


def test_a_long_report_lists_every_row_but_prints_ten() -> None:
    trie = CSTrieMatcher()
    with pytest.raises(BulkRowError) as caught:
        trie.subscribe_many(pa.array(["p"] * 50), pa.array([""] * 50))
    assert [row for row, _, _ in caught.value.rows] == list(range(50))
    assert "and 40 more (all in .rows)" in str(caught.value)
    assert len(trie) == 0


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.one_of(st.none(), patterns, st.text(st.sampled_from("ab#*.é"), max_size=14)),
    subscriber=st.one_of(st.none(), st.sampled_from(["", "s", "abcd", "abcde", "éé", "ééé"])),
)
def test_row_verdicts_agree_with_the_python_validator(pattern: str | None, subscriber: str | None) -> None:
    limits = Limits(max_pattern_bytes=9, max_pattern_words=4, max_hash_words=2, max_subscriber_bytes=4)
    validator = Validator(limits=limits)
    expected: str | None
    if pattern is None:
        expected = "null_pattern"
    else:
        try:
            validator.validate_pattern(pattern)
        except TopicError as error:
            expected = error.reason
        else:
            if subscriber is None:
                expected = "null_subscriber"
            else:
                try:
                    validator.validate_subscriber(subscriber)
                except TopicError as error:
                    expected = error.reason
                else:
                    expected = None
    p, s = pa.array([pattern], type=pa.string()), pa.array([subscriber], type=pa.string())
    trie = CSTrieMatcher()
    if expected is None:
        assert trie.subscribe_many(p, s, limits=limits) == 1
        assert FrozenMatcher.from_arrow(p, s, limits=limits).subscriptions() == {(pattern, subscriber)}
    else:
        with pytest.raises(BulkRowError) as caught:
            trie.subscribe_many(p, s, limits=limits)
        assert [(row, reason) for row, reason, _ in caught.value.rows] == [(0, expected)]
        assert len(trie) == 0


def test_column_errors_fail_the_whole_call() -> None:
    trie = CSTrieMatcher()
    with pytest.raises(ValueError, match="patterns has 1 rows but subscribers has 2"):
        trie.subscribe_many(pa.array(["a"]), pa.array(["s", "t"]))
    with pytest.raises(TypeError, match="subscribers must be a pyarrow string"):
        trie.subscribe_many(pa.array(["a"]), pa.array([1]))
    with pytest.raises(TypeError):
        trie.subscribe_many(["a"], pa.array(["s"]))
    # Invalid UTF-8 in the buffers: caught by full validation before any value is read.
    offsets = pa.py_buffer(pa.array([0, 2], type=pa.int32()).buffers()[1])
    broken = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    with pytest.raises(ValueError, match="patterns is a malformed Arrow array"):
        trie.subscribe_many(broken, pa.array(["s"]))
    with pytest.raises(ValueError, match="subscribers is a malformed Arrow array"):
        FrozenMatcher.from_arrow(pa.array(["a"]), broken)
    with pytest.raises(ValueError, match="patterns is a malformed Arrow array"):
        trie.unsubscribe_many(broken, pa.array(["s"]))
    assert len(trie) == 0


def test_sliced_columns_read_from_their_offset() -> None:
    pairs = [(f"t{i}.#", f"s{i % 3}") for i in range(20)]
    p, s = columns(pairs)
    trie = CSTrieMatcher()
    trie.subscribe_many(p.slice(5, 10), s.slice(5, 10))
    assert trie.subscriptions() == set(pairs[5:15])
    assert FrozenMatcher.from_arrow(p.slice(5, 10), s.slice(5, 10)).subscriptions() == set(pairs[5:15])


def test_hot_patterns_with_shared_sets_agree_with_the_oracle() -> None:
    """Sets of two ids or more are shared sets (``native/core/src/cstrie/idset.rs``), written in place: sets grow to
    hundreds of ids and shrink to nothing, one pair and one batch at a time, with snapshots taken on the way
    that later writes must not change."""
    rng = random.Random(20261129)
    hot = ["audit.#", "stock.*.msft", "orders", "", "t.x.#"]
    keys_to_probe = ["audit.x.y", "stock.nasdaq.msft", "orders", "", "t.x", "t.x.y", "other"]
    trie = CSTrieMatcher()
    held: set[tuple[str, str]] = set()
    snapshots = []
    for round_ in range(12):
        growing = round_ % 3 != 2
        batch = [(rng.choice(hot), f"sub-{rng.randrange(400)}") for _ in range(rng.randrange(50, 400))]
        if growing:
            assert trie.subscribe_many(*columns(batch)) == len(set(batch) - held)
            held |= set(batch)
        else:
            assert trie.unsubscribe_many(*columns(batch)) == len(set(batch) & held)
            held -= set(batch)
        for _ in range(300):
            pair = (rng.choice(hot), f"sub-{rng.randrange(400)}")
            if rng.random() < (0.6 if growing else 0.2):
                trie.subscribe(*pair)
                held.add(pair)
            else:
                trie.unsubscribe(*pair)
                held.discard(pair)
        snapshots.append((trie.snapshot(), frozenset(held)))
    assert max(sum(1 for pattern, _ in held if pattern == p) for p in hot) >= 64, "no set grew past one level"
    for snapshot, then in snapshots:
        assert snapshot.subscriptions() == then
        assert len(snapshot) == len(then)
        assert snapshot.freeze().to_bytes() == FrozenMatcher(then).to_bytes()
        oracle = ReferenceMatcher(sorted(then))
        for key in keys_to_probe:
            assert snapshot.lookup(key) == oracle.lookup(key), key
    # Empty every set: each shared set is tombed and dropped from its holder.
    assert trie.unsubscribe_many(*columns(sorted(held))) == len(held)
    assert len(trie) == 0 and trie.subscriptions() == frozenset()
    assert trie.node_count() == 1, "every emptied set was dropped from its holder"


def test_a_load_large_enough_to_be_copied_into_group_order_agrees_with_the_oracle() -> None:
    """From 16,384 pairs (``GROUP_ORDER_MIN`` in ``native/core/src/cstrie/bulk_load.rs``) a load is sorted by its
    patterns' first words and copied before the walk: the result must be that of one subscribe per pair."""
    rng = random.Random(20261129)
    words = ["a", "b", "c", "dd", "eee", "*", "#", "a-long-word-past-the-inline-size-of-ids"]
    pairs: list[tuple[str, str]] = []
    while len(pairs) < 40_000:
        pattern = ".".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
        # Runs of one pattern, as a table read in order gives them; ids repeat, so some pairs are duplicates.
        pairs += [(pattern, f"sub-{rng.randrange(20_000)}") for _ in range(rng.choice([1, 1, 1, 3, 50]))]
    bulk = CSTrieMatcher()
    assert bulk.subscribe_many(*columns(pairs)) == len(set(pairs))
    one_by_one = CSTrieMatcher()
    for pattern, subscriber in pairs:
        one_by_one.subscribe(pattern, subscriber)
    assert bulk.subscriptions() == one_by_one.subscriptions() == set(pairs)
    assert bulk.freeze().to_bytes() == one_by_one.freeze().to_bytes()
    oracle = ReferenceMatcher(sorted(set(pairs)))
    for _ in range(200):
        key = ".".join(rng.choice(words[:5]) for _ in range(rng.randint(1, 6)))
        assert bulk.lookup(key) == oracle.lookup(key), key


_RESIDENT_AFTER_LOAD = """
import gc, sys
import pyarrow as pa
from routing.matchers import CSTrieMatcher

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

rows = int(sys.argv[1])
patterns = pa.array([f"t{i % 20000}.svc{i}.k{i % 8}.#" for i in range(rows)])
subscribers = pa.array([f"t{i % 20000}-{i}" for i in range(rows)])
gc.collect()
before = rss()
trie = CSTrieMatcher()
trie.subscribe_many(patterns, subscribers)
print((rss() - before) / rows)
"""


def test_a_large_bulk_load_hands_its_freed_scratch_back_to_the_os() -> None:
    """The driver's RSS after loading a table is the trie, not the trie plus the load's freed scratch: the
    extension decommits it after a bulk call of over 100,000 rows (``native/python/src/allocator.rs``).
    Measured in a fresh process; before, this shape kept ~390 B a pair resident, ~200 B after."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _RESIDENT_AFTER_LOAD, "300000"], capture_output=True, text=True, check=True, timeout=300
    )
    resident_per_pair = float(run.stdout.strip())
    assert resident_per_pair < 290, f"{resident_per_pair:.0f} resident bytes a pair after the load"

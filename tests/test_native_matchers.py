"""The native matchers (CS-trie, snapshots, frozen matcher) against independent oracles.

Oracles: the regex :class:`routing.reference.ReferenceMatcher`, the four classic
pure-Python matchers, and a plain ``set`` model of the pairs. The frozen
matcher and its bytes are checked against the CS-trie they came from.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import keys, patterns, scripts, subscribers

from routing.errors import InvalidKeyError, InvalidPatternError, InvalidSubscriberError
from routing.matchers import (
    CLASSIC_MATCHERS,
    CSTrieMatcher,
    FrozenMatcher,
    InvertedBitmapMatcher,
    Matcher,
    NaiveMatcher,
    OptimizedInvertedBitmapMatcher,
    Snapshot,
    TrieMatcher,
)
from routing.matchers.native import FORMAT_VERSION, BulkRowError, DeltaBuilder, FrozenFormatError, LayeredMatcher
from routing.reference import ReferenceMatcher

CLASSIC = (NaiveMatcher, InvertedBitmapMatcher, OptimizedInvertedBitmapMatcher, TrieMatcher)


def test_classic_list_is_complete() -> None:
    assert {cls.__name__ for cls in CLASSIC} == set(CLASSIC_MATCHERS)


def test_cstrie_is_a_matcher() -> None:
    assert isinstance(CSTrieMatcher(), Matcher)


@settings(max_examples=200, deadline=None)
@given(script=scripts)
def test_cstrie_agrees_with_oracle_and_classic_matchers(script: list[tuple[str, str, str]]) -> None:
    native, oracle = CSTrieMatcher(), ReferenceMatcher()
    classic = [cls() for cls in CLASSIC]
    model: set[tuple[str, str]] = set()
    for step, (op, text, subscriber) in enumerate(script):
        if op == "lookup":
            want = oracle.lookup(text)
            assert native.lookup(text) == want, f"step {step}: lookup({text!r})"
            for other in classic:
                assert other.lookup(text) == want, f"step {step}: {type(other).__name__}.lookup({text!r})"
            continue
        for matcher in (native, oracle, *classic):
            getattr(matcher, op)(text, subscriber)
        (model.add if op == "subscribe" else model.discard)((text, subscriber))
        assert len(native) == len(model), f"step {step}: len after {op}"
    assert native.subscriptions() == frozenset(model)

    # Freezing keeps every answer; so does the round trip through bytes.
    frozen = native.freeze()
    thawed = FrozenMatcher.from_bytes(frozen.to_bytes())
    snapshot = native.snapshot()
    for frozen_matcher in (frozen, thawed):
        assert frozen_matcher.subscriptions() == frozenset(model)
        assert len(frozen_matcher) == len(model)
    assert snapshot.subscriptions() == frozenset(model)
    for key in {text for _, text, _ in script} | {"", "a", "a.b", "é.#b"}:
        want = oracle.lookup(key)
        for reader in (frozen, thawed, snapshot):
            assert reader.lookup(key) == want, f"{type(reader).__name__}.lookup({key!r})"


@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(st.tuples(patterns, subscribers), max_size=25), probe=st.lists(keys, max_size=15))
def test_frozen_from_pairs_matches_oracle(pairs: list[tuple[str, str]], probe: list[str]) -> None:
    frozen = FrozenMatcher(pairs)
    oracle = ReferenceMatcher(pairs)
    assert frozen.subscriptions() == oracle.subscriptions()
    assert frozen.subscriber_count == len({s for _, s in pairs})
    assert frozen.pattern_count == len({p for p, _ in pairs})
    for key in probe:
        assert frozen.lookup(key) == oracle.lookup(key)


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(patterns, subscribers), max_size=25))
def test_the_header_counts_what_the_bytes_hold(pairs: list[tuple[str, str]]) -> None:
    frozen = FrozenMatcher(pairs)
    data = frozen.to_bytes()
    header = FrozenMatcher.header(data)
    thawed = FrozenMatcher.from_bytes(data)
    assert header.pairs == len(set(pairs)) == len(thawed)
    assert header.subscribers == len({s for _, s in pairs}) == thawed.subscriber_count
    assert (header.words, header.nodes) == (thawed.word_count, thawed.node_count)


def test_the_header_refuses_what_it_can_see_and_says_what_it_does_not_check() -> None:
    data = FrozenMatcher([("a.*", "s1"), ("#", "s2")]).to_bytes()
    for bad in (b"", b"junk", b"X" + data[1:], data[:-1], data + b"\0"):
        with pytest.raises(FrozenFormatError):
            FrozenMatcher.header(bad)
    with pytest.raises(TypeError):
        FrozenMatcher.header("not bytes")  # type: ignore[arg-type]
    # Damage behind the header is left to from_bytes (the checksum): the header is O(1).
    damaged = data[:-8] + bytes(b ^ 0xFF for b in data[-8:-4]) + data[-4:]
    assert FrozenMatcher.header(damaged) == FrozenMatcher.header(data)
    with pytest.raises(FrozenFormatError):
        FrozenMatcher.from_bytes(damaged)


def test_equal_contents_give_equal_bytes() -> None:
    pairs = [("stock.*.msft", "a"), ("#", "b"), ("forex.#", "a"), ("", "c")]
    m = CSTrieMatcher()
    for pattern, subscriber in reversed(pairs):
        m.subscribe(pattern, subscriber)
    assert m.freeze().to_bytes() == FrozenMatcher(pairs).to_bytes() == m.snapshot().freeze().to_bytes()


def test_issue_example() -> None:
    m = CSTrieMatcher()
    m.subscribe("forex.usd", "1")
    m.subscribe("forex.*", "2")
    m.subscribe("stock.nasdaq.msft", "3")
    frozen = m.freeze()
    expected = {
        "forex.gbp": {"2"},
        "stock.nyse.ibm": set(),
        "forex.usd": {"1", "2"},
        "stock.nasdaq.msft": {"3"},
    }
    for key, want in expected.items():
        assert m.lookup(key) == want
        assert frozen.lookup(key) == want


@pytest.mark.timeout(10)
def test_fifteen_hashes_against_a_31_word_key_answers() -> None:
    m = CSTrieMatcher()
    m.subscribe(".".join(["#"] * 15 + ["x"]), "s")
    frozen = m.freeze()
    for matcher in (m, frozen):
        assert matcher.lookup(".".join(["a"] * 30 + ["x"])) == {"s"}
        assert matcher.lookup(".".join(["a"] * 31)) == frozenset()


# --- grammar errors: the same exceptions as the pure-Python matchers ---------------------------------------------

BAD_CALLS = [
    ("subscribe", (None, "s"), TypeError),
    ("subscribe", ("a.b", 1), TypeError),
    ("subscribe", ("a.\ud800", "s"), InvalidPatternError),
    ("subscribe", ("a.b", ""), InvalidSubscriberError),
    ("subscribe", ("a.b", "\udfff"), InvalidSubscriberError),
    ("unsubscribe", ("a.b", ""), InvalidSubscriberError),
    ("unsubscribe", (None, "s"), TypeError),
    ("lookup", (None,), TypeError),
    ("lookup", (b"a.b",), TypeError),
    ("lookup", ("a.\ud800",), InvalidKeyError),
]


@pytest.mark.parametrize(("method", "args", "error"), BAD_CALLS)
def test_grammar_errors_match_the_classic_trie(method: str, args: tuple[object, ...], error: type[Exception]) -> None:
    for matcher in (CSTrieMatcher(), TrieMatcher()):
        matcher.subscribe("a.#", "s")
        with pytest.raises(error):
            getattr(matcher, method)(*args)
        assert matcher.subscriptions() == {("a.#", "s")}


@pytest.mark.parametrize(("key", "error"), [(None, TypeError), ("x.\ud800", InvalidKeyError), (3, TypeError)])
def test_read_only_lookups_check_the_key(key: object, error: type[Exception]) -> None:
    m = CSTrieMatcher()
    m.subscribe("#", "s")
    for reader in (m.snapshot(), m.freeze()):
        with pytest.raises(error):
            reader.lookup(key)  # type: ignore[arg-type]


def test_snapshot_queries_check_their_argument() -> None:
    snapshot = CSTrieMatcher().snapshot()
    with pytest.raises(InvalidPatternError):
        snapshot.subscribers("\ud800")
    with pytest.raises(InvalidSubscriberError):
        snapshot.topics("")
    with pytest.raises(TypeError):
        snapshot.topics(None)  # type: ignore[arg-type]


def test_frozen_constructor_checks_pairs() -> None:
    with pytest.raises(InvalidPatternError):
        FrozenMatcher([("a.\ud800", "s")])
    with pytest.raises(InvalidSubscriberError):
        FrozenMatcher([("a", "")])
    with pytest.raises(TypeError):
        FrozenMatcher([(None, "s")])  # type: ignore[list-item]
    assert len(FrozenMatcher()) == 0
    assert FrozenMatcher().lookup("") == frozenset()


# --- snapshots ----------------------------------------------------------------------------------------------------


def test_snapshot_is_isolated_from_later_writes() -> None:
    m = CSTrieMatcher()
    rng = random.Random(5)
    model: set[tuple[str, str]] = set()
    words = ["a", "b", "*", "#", ""]
    snapshots: list[tuple[Snapshot, frozenset[tuple[str, str]]]] = []
    for step in range(400):
        pattern = ".".join(rng.choice(words) for _ in range(rng.randrange(4)))
        pair = (pattern, f"s{rng.randrange(5)}")
        if rng.random() < 0.6:
            m.subscribe(*pair)
            model.add(pair)
        else:
            m.unsubscribe(*pair)
            model.discard(pair)
        if step % 40 == 0:
            snapshots.append((m.snapshot(), frozenset(model)))
    for snapshot, state in snapshots:
        assert snapshot.subscriptions() == state
        assert len(snapshot) == len(state)
        oracle = ReferenceMatcher(state)
        for key in ("", "a", "a.b", "b.a.b", "x.y.z"):
            assert snapshot.lookup(key) == oracle.lookup(key)
        for pattern in {p for p, _ in state} | {"nope"}:
            assert snapshot.subscribers(pattern) == {s for p, s in state if p == pattern}
        for subscriber in ("s0", "s3", "absent"):
            assert snapshot.topics(subscriber) == {p for p, s in state if s == subscriber}


def test_unsubscribing_everything_prunes_the_trie_back_to_its_root() -> None:
    m = CSTrieMatcher()
    empty_nodes = m.node_count()
    rng = random.Random(9)
    pairs = {
        (".".join(rng.choice(["a", "b", "c", "*", "#", ""]) for _ in range(rng.randrange(6))), f"s{rng.randrange(20)}")
        for _ in range(2000)
    }
    for pattern, subscriber in pairs:
        m.subscribe(pattern, subscriber)
    assert m.node_count() > empty_nodes
    assert len(m) == len(pairs)
    for pattern, subscriber in pairs:
        m.unsubscribe(pattern, subscriber)
    assert len(m) == 0
    assert len(m.snapshot()) == 0
    assert m.node_count() == empty_nodes == 1


# --- the binary format --------------------------------------------------------------------------------------------


def sample_bytes() -> bytes:
    return FrozenMatcher([("stock.*.msft", "alice"), ("stock.#", "bob"), ("#.#", "carol"), ("", "dave")]).to_bytes()


def test_bytes_round_trip_and_pickle() -> None:
    data = sample_bytes()
    thawed = FrozenMatcher.from_bytes(data)
    assert thawed.to_bytes() == data
    assert FrozenMatcher.from_bytes(bytearray(data)).to_bytes() == data
    assert FrozenMatcher.from_bytes(memoryview(data)).to_bytes() == data
    unpickled = pickle.loads(pickle.dumps(thawed))
    assert unpickled.subscriptions() == thawed.subscriptions()
    assert unpickled.lookup("stock.x.msft") == {"alice", "bob", "carol"}
    assert int.from_bytes(data[8:10], "little") == FORMAT_VERSION


def test_every_truncation_is_rejected() -> None:
    data = sample_bytes()
    for length in range(len(data)):
        with pytest.raises(FrozenFormatError):
            FrozenMatcher.from_bytes(data[:length])


def test_every_byte_flip_is_rejected() -> None:
    data = sample_bytes()
    for index in range(len(data)):
        corrupt = bytearray(data)
        corrupt[index] ^= 0x5A
        with pytest.raises(FrozenFormatError):
            FrozenMatcher.from_bytes(bytes(corrupt))


def test_foreign_bytes_are_rejected_with_a_clear_message() -> None:
    rng = random.Random(1)
    for _ in range(200):
        with pytest.raises(FrozenFormatError):
            FrozenMatcher.from_bytes(rng.randbytes(rng.randrange(300)))
    with pytest.raises(FrozenFormatError, match="magic"):
        FrozenMatcher.from_bytes(b"PK\x03\x04" + sample_bytes()[4:])
    newer = bytearray(sample_bytes())
    newer[8] = FORMAT_VERSION + 1
    with pytest.raises(FrozenFormatError, match="version"):
        FrozenMatcher.from_bytes(bytes(newer))
    assert issubclass(FrozenFormatError, ValueError)
    with pytest.raises(TypeError):
        FrozenMatcher.from_bytes("not bytes")  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_huge_keys_and_deep_patterns_are_answered() -> None:
    """No recursion limits: a 20,000-word key and a 20,000-word pattern, against the Python trie."""
    long_key = "a." * 20_000 + "x"
    deep = ".".join(["w"] * 20_000)
    pairs = [("#.x", "s"), ("a.#.a.x", "t"), ("*", "u"), (deep, "deep"), ("w.#", "w")]
    native, trie = CSTrieMatcher(), TrieMatcher()
    for pattern, subscriber in pairs:
        native.subscribe(pattern, subscriber)
        trie.subscribe(pattern, subscriber)
    frozen = FrozenMatcher.from_bytes(native.freeze().to_bytes())
    for key in (long_key, deep, "x", "w"):
        want = trie.lookup(key)
        assert native.lookup(key) == want
        assert native.snapshot().lookup(key) == want
        assert frozen.lookup(key) == want
    native.unsubscribe(deep, "deep")
    assert native.freeze().lookup(deep) == {"w"}


# --- mapped files, bases and deltas --------------------------------------------------------------------------------


def test_a_mapped_file_matches_like_its_bytes_and_refuses_damage(tmp_path: Path) -> None:
    pairs = [(f"t{i}.orders.#", f"s{i % 7}") for i in range(200)] + [("*.x", "star"), ("#", "all")]
    frozen = FrozenMatcher(pairs)
    path = tmp_path / "matcher.bin"
    path.write_bytes(b"\0" * 16 + frozen.to_bytes())
    mapped = FrozenMatcher.open(path, 16)
    assert mapped.is_mapped and not frozen.is_mapped
    assert mapped.to_bytes() == frozen.to_bytes()
    oracle = ReferenceMatcher(pairs)
    for key in ("t7.orders.new", "t7.x", "t300.orders", "", "a.b.c"):
        assert mapped.lookup(key) == oracle.lookup(key)
    with pytest.raises(ValueError, match="non-negative"):
        FrozenMatcher.open(path, -8)
    with pytest.raises(OSError, match="not a multiple of 8"):
        FrozenMatcher.open(path, 4)
    with pytest.raises(OSError):
        FrozenMatcher.open(tmp_path / "absent.bin")
    damaged = bytearray(path.read_bytes())
    damaged[200] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(FrozenFormatError, match="checksum"):
        FrozenMatcher.open(path, 16)


@settings(max_examples=80, deadline=None)
@given(
    base=st.lists(st.tuples(patterns, subscribers), max_size=20),
    versions=st.lists(st.lists(st.tuples(st.tuples(patterns, subscribers), st.booleans()), max_size=8), max_size=4),
    rebase_at=st.integers(min_value=0, max_value=4),
)
def test_a_delta_over_its_base_matches_the_whole_table_at_every_version(
    base: list[tuple[str, str]], versions: list[list[tuple[tuple[str, str], bool]]], rebase_at: int
) -> None:
    """The driver's use: record each version's final states, freeze a delta, layer it over the base; once, move onto
    a new base frozen from the model. Oracle: a set model of the pairs and the regex matcher."""
    model = set(base)
    builder = DeltaBuilder(FrozenMatcher(model))
    probe = {"", "a", "a.b", "é.#b"} | {pattern for pattern, _ in base}
    for version, changes in enumerate(versions, start=1):
        final = dict(changes)  # a change feed holds each changed pair once, in its final state
        for active in (False, True):
            rows = [pair for pair, state in final.items() if state is active]
            patterns_column = pa.array([pattern for pattern, _ in rows], pa.string())
            subscribers_column = pa.array([subscriber for _, subscriber in rows], pa.string())
            assert builder.record(patterns_column, subscribers_column, active=active, version=version) == len(rows)
            (model.update if active else model.difference_update)(rows)
        probe |= {pattern for pattern, _ in final}
        if version == rebase_at:
            builder.rebase(FrozenMatcher(model), through=version)
            assert len(builder) == 0
        delta = FrozenMatcher.from_bytes(builder.freeze().to_bytes())
        layered = LayeredMatcher(builder.base, delta)
        assert layered.subscriptions() == frozenset(model)
        assert len(layered) == len(model)
        oracle = ReferenceMatcher(sorted(model))
        for key in probe:
            assert layered.lookup(key) == oracle.lookup(key), (version, key)
        batch = layered.match_batch(pa.array(sorted(probe), pa.string())).to_pylist()
        assert [set(row) for row in batch] == [oracle.lookup(key) for key in sorted(probe)]


def test_a_delta_is_refused_over_another_base_or_as_a_base() -> None:
    one, other = FrozenMatcher([("a", "s")]), FrozenMatcher([("b", "s")])
    builder = DeltaBuilder(one)
    builder.record(pa.array(["a"]), pa.array(["s"]), active=False, version=1)
    delta = builder.freeze()
    assert LayeredMatcher(one, delta).lookup("a") == frozenset()
    with pytest.raises(FrozenFormatError, match="another base"):
        LayeredMatcher(other, delta)
    with pytest.raises(FrozenFormatError, match="itself a delta"):
        LayeredMatcher(delta, delta)
    with pytest.raises(FrozenFormatError):
        DeltaBuilder(delta)
    with pytest.raises(BulkRowError):
        builder.record(pa.array(["a"]), pa.array([""]), active=True, version=2)
    assert len(builder) == 1, "a refused batch records nothing"

"""The four classic matchers against the regex oracle, validity tables and each other.

Every table is parametrized over the four matchers (plus inverted-bitmap
variants: topics known up front, and a zero cache cap) AND the oracle
:class:`routing.reference.ReferenceMatcher`, so a wrong expectation in a table
fails on the oracle too instead of silently agreeing with a buggy matcher.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from concurrency import run_writers_and_readers
from hypothesis import given, settings
from strategies import scripts
from validity import VALIDITY

from routing.errors import InvalidKeyError, InvalidPatternError, InvalidSubscriberError
from routing.matchers import (
    InvertedBitmapMatcher,
    Matcher,
    NaiveMatcher,
    OptimizedInvertedBitmapMatcher,
    TrieMatcher,
)
from routing.reference import ReferenceMatcher

Factory = Callable[[], Matcher]

ISSUE_KEYS = ("forex.gbp", "stock.nyse.ibm", "stock.nyse.ge", "forex.eur", "forex.usd", "stock.nasdaq.msft")

MATCHERS: dict[str, Factory] = {
    "naive": NaiveMatcher,
    "inverted_bitmap": InvertedBitmapMatcher,
    # The same matcher with the issue's topic space known up front (subscribe fills the bitmaps) ...
    "inverted_bitmap_known_topics": lambda: InvertedBitmapMatcher(topics=ISSUE_KEYS),
    # ... and with caching disabled (every lookup computes against all subscriptions).
    "inverted_bitmap_no_cache": lambda: InvertedBitmapMatcher(max_indexed_topics=0),
    "optimized_bitmap": OptimizedInvertedBitmapMatcher,
    "trie": TrieMatcher,
}
WITH_ORACLE: dict[str, Factory] = {**MATCHERS, "oracle": ReferenceMatcher}

matchers = pytest.mark.parametrize("factory", list(MATCHERS.values()), ids=list(MATCHERS))
matchers_and_oracle = pytest.mark.parametrize("factory", list(WITH_ORACLE.values()), ids=list(WITH_ORACLE))


def assert_same(got: Iterable[object], want: Iterable[object], context: str) -> None:
    got, want = set(got), set(want)
    missing, unexpected = want - got, got - want
    shown = {name: sorted(values, key=repr) for name, values in (("missing", missing), ("unexpected", unexpected))}
    assert not missing and not unexpected, f"{context}: missing {shown['missing']}, unexpected {shown['unexpected']}"


# --- the issue's example ---------------------------------------------------------------------------------------


@matchers_and_oracle
def test_issue_example(factory: Factory) -> None:
    m = factory()
    m.subscribe("forex.usd", "1")
    m.subscribe("forex.*", "2")
    m.subscribe("stock.nasdaq.msft", "3")
    expected = {
        "forex.gbp": {"2"},
        "stock.nyse.ibm": set(),
        "stock.nyse.ge": set(),
        "forex.eur": {"2"},
        "forex.usd": {"1", "2"},
        "stock.nasdaq.msft": {"3"},
    }
    for key, subscribers in expected.items():
        result = m.lookup(key)
        assert isinstance(result, frozenset)
        assert_same(result, subscribers, f"lookup({key!r})")


# --- validity table (tests/validity.tsv): one pattern, one key, expected ----------------------------------------


@matchers_and_oracle
@pytest.mark.parametrize(("pattern", "key", "expected"), VALIDITY)
def test_validity_table(factory: Factory, pattern: str, key: str, expected: bool) -> None:
    m = factory()
    m.subscribe(pattern, "s")
    assert m.lookup(key) == (frozenset({"s"}) if expected else frozenset())


# --- RabbitMQ's topic-exchange binding table (rabbit_exchange_type_topic tests) -------------------------------

RABBIT_BINDINGS = {
    "t1": "a.b.c",
    "t2": "a.*.c",
    "t3": "a.#.b",
    "t4": "a.b.b.c",
    "t5": "#",
    "t6": "#.#",
    "t7": "#.b",
    "t8": "*.*",
    "t9": "a.*",
    "t10": "*.b.c",
    "t11": "a.#",
    "t12": "a.#.#",
    "t13": "b.b.c",
    "t14": "a.b.b",
    "t15": "a.b",
    "t16": "b.c",
    "t17": "",
    "t18": "*.*.*",
    "t19": "vodka.martini",
    "t20": "a.b.c",
    "t21": "*.#",
    "t22": "#.#.#",
    "t23": "*",
    "t24": "#.b.#",
}
RABBIT_ROUTES = {
    "a.b.c": "t1 t2 t5 t6 t10 t11 t12 t18 t20 t21 t22 t24",
    "a.b": "t3 t5 t6 t7 t8 t9 t11 t12 t15 t21 t22 t24",
    "a.b.b": "t3 t5 t6 t7 t11 t12 t14 t18 t21 t22 t24",
    "": "t5 t6 t17 t22",
    "b.c.c": "t5 t6 t18 t21 t22 t24",
    "a.a.a.a.a": "t5 t6 t11 t12 t21 t22",
    "vodka.gin": "t5 t6 t8 t21 t22",
    "vodka.martini": "t5 t6 t8 t19 t21 t22",
    "b.b.c": "t5 t6 t10 t13 t18 t21 t22 t24",
    "nothing.here.at.all": "t5 t6 t21 t22",
    "oneword": "t5 t6 t21 t22 t23",
}


@matchers_and_oracle
def test_rabbitmq_binding_table(factory: Factory) -> None:
    m = factory()
    for subscriber, pattern in RABBIT_BINDINGS.items():
        m.subscribe(pattern, subscriber)
    for key, route in RABBIT_ROUTES.items():
        assert_same(m.lookup(key), route.split(), f"lookup({key!r})")
    # Unbinding half of them leaves exactly the other half routed.
    for subscriber in list(RABBIT_BINDINGS)[::2]:
        m.unsubscribe(RABBIT_BINDINGS[subscriber], subscriber)
    kept = set(list(RABBIT_BINDINGS)[1::2])
    for key, route in RABBIT_ROUTES.items():
        assert_same(m.lookup(key), set(route.split()) & kept, f"lookup({key!r}) after unbinding")


# --- protocol details ---------------------------------------------------------------------------------------------


@matchers_and_oracle
def test_subscriber_with_several_matching_patterns_appears_once(factory: Factory) -> None:
    m = factory()
    for pattern in ("stock.#", "stock.*.msft", "#", "stock.nasdaq.msft"):
        m.subscribe(pattern, "alice")
    m.subscribe("stock.*.*", "bob")
    assert m.lookup("stock.nasdaq.msft") == frozenset({"alice", "bob"})
    assert len(m) == 5
    # Removing one of alice's patterns keeps her routed through the others.
    m.unsubscribe("#", "alice")
    assert m.lookup("stock.nasdaq.msft") == frozenset({"alice", "bob"})
    assert m.lookup("bond") == frozenset()


@matchers_and_oracle
def test_subscribe_is_idempotent_and_unsubscribe_absent_is_a_noop(factory: Factory) -> None:
    m = factory()
    m.subscribe("a.*", "s")
    m.subscribe("a.*", "s")
    assert len(m) == 1
    assert m.subscriptions() == frozenset({("a.*", "s")})
    m.unsubscribe("a.*", "other")
    m.unsubscribe("b.*", "s")
    m.unsubscribe("a", "s")
    assert m.subscriptions() == frozenset({("a.*", "s")})
    m.unsubscribe("a.*", "s")
    m.unsubscribe("a.*", "s")
    assert len(m) == 0
    assert m.subscriptions() == frozenset()
    assert m.lookup("a.b") == frozenset()


@matchers_and_oracle
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda m: m.subscribe(b"a.b", "s"), TypeError),
        (lambda m: m.subscribe("a.b", 7), TypeError),
        (lambda m: m.subscribe("a.\ud800", "s"), InvalidPatternError),
        (lambda m: m.subscribe("a.b", ""), InvalidSubscriberError),
        (lambda m: m.subscribe("a.b", "\udfff"), InvalidSubscriberError),
        (lambda m: m.unsubscribe(None, "s"), TypeError),
        (lambda m: m.unsubscribe("a.b", ""), InvalidSubscriberError),
        (lambda m: m.lookup(None), TypeError),
        (lambda m: m.lookup(b"a.b"), TypeError),
        (lambda m: m.lookup("a.\ud800"), InvalidKeyError),
    ],
)
def test_grammar_errors_are_raised_and_leave_state_unchanged(
    factory: Factory, call: Callable[[Matcher], object], error: type[Exception]
) -> None:
    m = factory()
    m.subscribe("a.#", "s")
    with pytest.raises(error):
        call(m)
    assert m.subscriptions() == frozenset({("a.#", "s")})
    assert m.lookup("a.b") == frozenset({"s"})


# --- many '#' never go exponential ----------------------------------------------------------------------------


@matchers  # not the oracle: its regex backtracks exponentially here, by design
@pytest.mark.timeout(10)
def test_fifteen_hashes_against_a_31_word_key_answers(factory: Factory) -> None:
    m = factory()
    m.subscribe(".".join(["#"] * 15 + ["x"]), "s")
    # Matches exactly when the last word is 'x': 30 words of 'a' then 'x' do, 31 of 'a' do not.
    assert m.lookup(".".join(["a"] * 30 + ["x"])) == frozenset({"s"})
    assert m.lookup(".".join(["a"] * 31)) == frozenset()
    assert m.lookup(".".join(["x"] + ["a"] * 30)) == frozenset()


# --- properties against the oracle --------------------------------------------------------------------------------


@matchers
@settings(max_examples=300, deadline=None)
@given(script=scripts)
def test_matches_oracle_through_interleaved_script(factory: Factory, script: list[tuple[str, str, str]]) -> None:
    m, oracle = factory(), ReferenceMatcher()
    model: set[tuple[str, str]] = set()
    for step, (op, text, subscriber) in enumerate(script):
        if op == "lookup":
            assert_same(m.lookup(text), oracle.lookup(text), f"step {step}: lookup({text!r})")
            continue
        getattr(m, op)(text, subscriber)
        getattr(oracle, op)(text, subscriber)
        (model.add if op == "subscribe" else model.discard)((text, subscriber))
        assert len(m) == len(model), f"step {step}: len after {op}({text!r}, {subscriber!r})"
    assert_same(m.subscriptions(), model, "subscriptions()")
    assert len(m) == len(model)
    # The final state answers every text the script used (patterns included, read as keys) like the oracle.
    for key in {text for _, text, _ in script}:
        assert_same(m.lookup(key), oracle.lookup(key), f"final lookup({key!r})")


# --- concurrency ----------------------------------------------------------------------------------------------

CONCURRENT_PATTERNS = ("a.b", "a.*", "#", "a.#", "*.b", "#.b.#", "*.*.*", "a..b", "b", "")
CONCURRENT_KEYS = ("a.b", "a", "b", "", "a.b.c", "x.b.y", "a..b", "c.c.c")


@matchers
@pytest.mark.timeout(60)
def test_concurrent_writers_and_readers_end_in_the_sequential_state(factory: Factory) -> None:
    m = factory()

    def read_once() -> None:
        for key in CONCURRENT_KEYS:
            result = m.lookup(key)
            assert isinstance(result, frozenset)
            assert all(isinstance(s, str) for s in result)
        m.subscriptions()
        len(m)

    final = run_writers_and_readers(m, CONCURRENT_PATTERNS, read_once, writers=4, ops_per_writer=300)
    assert_same(m.subscriptions(), final, "subscriptions() after concurrent writes")
    assert len(m) == len(final)
    oracle = ReferenceMatcher(final)
    for key in CONCURRENT_KEYS:
        assert_same(m.lookup(key), oracle.lookup(key), f"lookup({key!r}) after concurrent writes")


# --- matcher-specific ----------------------------------------------------------------------------------------


def test_inverted_bitmap_indexes_unknown_topics_on_first_sight() -> None:
    m = InvertedBitmapMatcher(topics=["forex.usd", "forex.gbp"])
    m.subscribe("forex.*", "fx")
    m.subscribe("stock.#", "st")
    assert m.indexed_topics() == frozenset({"forex.usd", "forex.gbp"})
    assert m.lookup("stock.nyse.ibm") == frozenset({"st"})
    assert m.indexed_topics() == frozenset({"forex.usd", "forex.gbp", "stock.nyse.ibm"})
    # The learnt topic's bitmap is maintained by later writes like the known ones.
    m.subscribe("*.nyse.*", "ny")
    m.unsubscribe("stock.#", "st")
    assert m.lookup("stock.nyse.ibm") == frozenset({"ny"})
    assert m.lookup("forex.usd") == frozenset({"fx"})


def test_inverted_bitmap_cap_bounds_the_index_but_not_correctness() -> None:
    m = InvertedBitmapMatcher(topics=["a"], max_indexed_topics=3)
    m.subscribe("#", "all")
    m.subscribe("*.*", "two")
    keys = ["a", "b.c", "d", "e.f", "g", ""]
    for key in keys:
        expected = {"all", "two"} if key.count(".") == 1 else {"all"}
        assert m.lookup(key) == frozenset(expected)
    # 'a' was known; the next two unknown keys filled the cap; the rest were answered uncached.
    assert m.indexed_topics() == frozenset({"a", "b.c", "d"})
    m.unsubscribe("#", "all")
    for key in keys:
        assert m.lookup(key) == (frozenset({"two"}) if key.count(".") == 1 else frozenset())
    assert len(m.indexed_topics()) == 3


@pytest.mark.parametrize("cap", [-1, 1.5, "10", True])
def test_inverted_bitmap_rejects_a_bad_cap(cap: object) -> None:
    with pytest.raises(ValueError, match="max_indexed_topics"):
        InvertedBitmapMatcher(max_indexed_topics=cap)  # type: ignore[arg-type]


def test_inverted_bitmap_rejects_more_known_topics_than_the_cap() -> None:
    with pytest.raises(ValueError, match="3 known topics exceed max_indexed_topics=2"):
        InvertedBitmapMatcher(topics=["a", "b", "c", "a"], max_indexed_topics=2)
    assert InvertedBitmapMatcher(topics=["a", "b", "a"], max_indexed_topics=2).indexed_topics() == {"a", "b"}


@pytest.mark.parametrize(
    "factory", [InvertedBitmapMatcher, OptimizedInvertedBitmapMatcher], ids=["inverted", "optimized"]
)
def test_bitmap_subscription_ids_are_reused_after_unsubscribe(factory: Factory) -> None:
    m = factory()
    for round_ in range(200):
        m.subscribe("a.*", "keep")
        m.subscribe(f"a.{round_}", "churn")
        m.lookup(f"a.{round_}")
        assert m.lookup(f"a.{round_}") == frozenset({"keep", "churn"})
        m.unsubscribe(f"a.{round_}", "churn")
    # Two live pairs at most at any time, so at most two ids were ever needed.
    assert m._table.id_capacity() == 2  # type: ignore[attr-defined]
    assert m.subscriptions() == frozenset({("a.*", "keep")})


def test_trie_prunes_empty_nodes_on_unsubscribe() -> None:
    m = TrieMatcher()
    patterns = ["a.b.c", "a.*.c", "a.#", "#", "*.*", "a..b", ""]
    for pattern in patterns:
        m.subscribe(pattern, "s")
    m.subscribe("a.b.c", "t")
    for pattern in patterns:
        m.unsubscribe(pattern, "s")
    assert m.subscriptions() == frozenset({("a.b.c", "t")})
    m.unsubscribe("a.b.c", "t")
    assert m._root.is_empty()


def test_optimized_bitmap_drops_emptied_rows() -> None:
    m = OptimizedInvertedBitmapMatcher()
    m.subscribe("a.b.#", "s")
    m.subscribe("a.c", "s")
    m.unsubscribe("a.b.#", "s")
    m.unsubscribe("a.c", "s")
    positions = m._positions
    assert all(not p.rows and not p.star and not p.null and not p.any for p in positions)
    assert m.lookup("a.b.c") == frozenset()


def test_naive_drops_patterns_left_without_subscribers() -> None:
    m = NaiveMatcher()
    m.subscribe("a.*", "s")
    m.subscribe("a.*", "t")
    m.unsubscribe("a.*", "s")
    assert list(m._entries) == ["a.*"]
    m.unsubscribe("a.*", "t")
    assert not m._entries

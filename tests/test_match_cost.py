"""``limits.max_match_cost_per_subscriber``: one subscriber's patterns cannot make every key's lookup slow.

The bound is on work, counted exactly: the native walk reports the ``(node, key position)`` states
it visited (``FrozenMatcher.lookup_states``), and :func:`routing.topic.match_cost` must bound what a
set of patterns can add to that count. The probe that found the problem (10,000 valid patterns from
one subscriber making every distinct 32-word key cost 16 ms) is kept as a regression: with the
default limits the sequential model rejects the patterns past the budget, and the states a hostile
key visits fall from millions to under the budget.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import MAX_WORDS, keys, patterns

from routing.errors import MatchCostError
from routing.limits import DEFAULT_LIMITS, Limits
from routing.matchers.native import FrozenMatcher
from routing.subscriptions.events import MATCH_COST_EXCEEDED, SUBSCRIBED, Received, kafka_received
from routing.subscriptions.model import SubscriptionModel
from routing.topic import match_cost, split_words
from routing.validation import Validator

BENCH = Path(__file__).resolve().parent.parent / "bench"
L = DEFAULT_LIMITS.max_key_words  # 32: a word from the first # on costs L + 1 = 33

MATCH_COST_CASES = [
    # (pattern, cost with max_key_words = 32)
    ("", 0),
    ("a", 1),
    ("a.b.c", 3),
    ("*.*.*", 3),
    ("#", 33),
    ("a.#", 1 + 33),
    ("tenant.42.#", 2 + 33),
    ("#.a", 2 * 33),
    ("a.#.b.#", 1 + 3 * 33),
    ("#.#.#", 3 * 33),
    ("a..b", 3),
    ("a#.#b", 2),  # glued wildcard characters are literals
]


@pytest.mark.parametrize(("pattern", "cost"), MATCH_COST_CASES)
def test_match_cost_counts_words_before_and_from_the_first_hash(pattern: str, cost: int) -> None:
    assert match_cost(split_words(pattern), L) == cost
    assert Validator().match_cost(pattern) == cost


def test_match_cost_scales_with_max_key_words() -> None:
    assert match_cost(["a", "#", "b"], 4) == 1 + 2 * 5
    assert Validator(limits=Limits(max_key_words=4)).match_cost("a.#.b") == 11


def test_check_match_cost_at_the_limit_and_one_past_it() -> None:
    validator = Validator(limits=Limits(max_match_cost_per_subscriber=100))
    validator.check_match_cost("s", 100)
    with pytest.raises(MatchCostError, match="max_match_cost_per_subscriber=100") as raised:
        validator.check_match_cost("s", 101)
    assert raised.value.reason == MATCH_COST_EXCEEDED == "match_cost_exceeded"


@settings(max_examples=300, deadline=None)
@given(
    base=st.lists(patterns, max_size=12),
    added=st.lists(patterns, min_size=1, max_size=8),
    probe_keys=st.lists(keys, min_size=1, max_size=8),
)
def test_match_cost_bounds_the_states_a_lookup_visits(base: list[str], added: list[str], probe_keys: list[str]) -> None:
    """Against the native walk's own count: the root plus every pattern's cost bound a lookup, and one
    subscriber's patterns never add more states to any key than their costs' sum."""
    before = FrozenMatcher((pattern, "base") for pattern in base)
    after = FrozenMatcher([*((pattern, "base") for pattern in base), *((pattern, "new") for pattern in added)])
    for key in probe_keys:
        assert len(split_words(key)) <= MAX_WORDS
        assert before.lookup_states(key) <= 1 + sum(match_cost(split_words(p), MAX_WORDS) for p in set(base))
        added_states = after.lookup_states(key) - before.lookup_states(key)
        assert 0 <= added_states <= sum(match_cost(split_words(p), MAX_WORDS) for p in set(added))


def subscribes(subscriber: str, pattern_list: list[str]) -> list[Received]:
    """One batch of subscribe events, in this order (``ts`` ascending)."""
    return [
        kafka_received(
            "subs",
            0,
            offset,
            json.dumps({"op": "subscribe", "subscriber": subscriber, "pattern": p, "ts": offset}).encode(),
        )
        for offset, p in enumerate(pattern_list)
    ]


def test_one_subscriber_cannot_make_every_key_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe: 10,000 valid patterns of one subscriber. Unbounded, a 32-word key visits 1.7 million
    states; with the default limits, the patterns past the budget are rejected (``match_cost_exceeded``)
    and no key visits more than the budget (plus the root)."""
    monkeypatch.syspath_prepend(str(BENCH))
    from workloads import hostile_patterns  # the benchmark's probe (bench/match_cost.py)

    hostile = hostile_patterns(10_000, seed=20261124)
    validator = Validator()
    for pattern in hostile:
        validator.validate_pattern(pattern)  # every one passes the per-pattern limits
    hostile_key = ".".join(["a"] * L)
    unbounded = FrozenMatcher((pattern, "hog") for pattern in hostile)
    assert unbounded.lookup_states(hostile_key) > 20 * DEFAULT_LIMITS.max_match_cost_per_subscriber

    model = SubscriptionModel(validator, max_event_bytes=4096)
    model.apply_batch(subscribes("hog", hostile))
    kept = sorted(pattern for pattern, subscriber in model.active_pairs() if subscriber == "hog")
    assert 0 < len(kept) < len(hostile)
    assert set(model.rejects.values()) == {MATCH_COST_EXCEEDED}
    assert sum(validator.match_cost(pattern) for pattern in kept) <= DEFAULT_LIMITS.max_match_cost_per_subscriber
    bounded = FrozenMatcher((pattern, "hog") for pattern in kept)
    rng = random.Random(7)
    probe = [hostile_key, *(".".join(rng.choice(["a", "b"]) for _ in range(rng.randrange(L + 1))) for _ in range(50))]
    assert max(bounded.lookup_states(key) for key in probe) <= 1 + DEFAULT_LIMITS.max_match_cost_per_subscriber


def test_a_rejected_pattern_holds_nothing() -> None:
    """Greedy, in (ts, change_id) order: after a costly subscribe is rejected, a cheaper one still fits."""
    validator = Validator(limits=Limits(max_key_words=4, max_match_cost_per_subscriber=12))
    model = SubscriptionModel(validator, max_event_bytes=4096)
    # Costs with max_key_words = 4: "a.#" = 1 + 5, "#.b" = 10, "c.d" = 2, "e" = 1, "#" = 5.
    counts = model.apply_batch(subscribes("s", ["a.#", "#.b", "c.d", "e", "#"]))
    assert {pattern for pattern, _ in model.active_pairs()} == {"a.#", "c.d", "e"}  # 6 + 2 + 1 = 9
    assert counts[SUBSCRIBED] == 3 and counts[MATCH_COST_EXCEEDED] == 2  # "#.b" (9 + 10) and "#" (9 + 5)

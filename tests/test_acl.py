"""routing.acl: exact containment of AMQP topic patterns, and the ``[acl]`` rules on top of it.

The decision procedure is checked three ways: a table of tricky cases (``#`` matching zero
words, empty words, glued wildcards, the one-word key ``['']`` that does not exist), Hypothesis
against brute-force enumeration of every key over a small alphabet and bounded length, and
algebraic properties (reflexive, transitive, monotone in the allowed set).
"""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.acl import (
    ALLOW_ALL,
    AclRule,
    AclRules,
    AclSettings,
    RuleAutomaton,
    RulesTooComplex,
    allowed_by_any,
    automaton_of,
    contains,
    search,
)
from routing.config import ConfigError
from routing.errors import ForbiddenPatternError, InvalidPatternError
from routing.topic import HASH, STAR, matches

# -- tables ---------------------------------------------------------------------------

CONTAINS = [
    # (allowed, pattern, contained)
    ("#", "#", True),
    ("#", "", True),
    ("#", "a.*.#", True),
    ("a.#", "a", True),  # '#' matches zero words
    ("a.#", "a.b.c", True),
    ("a.#", "a.#", True),
    ("a.#", "#", False),
    ("a.#", "b", False),
    ("a.*", "a", False),
    ("a.*", "a.#", False),  # 'a' itself
    ("a.*.#", "a.#", False),
    ("a.#", "a.*", True),
    ("*", "a", True),
    ("*", "", False),  # zero words
    ("*", "#", False),
    ("*", "*", True),
    ("#", "*", True),
    ("*.#", "#", False),  # '#' matches the empty key
    ("*.#", "#.*", True),
    ("#.*", "*.#", True),
    ("*.#", "#.*.#", True),
    ("#.#", "#", True),
    ("#", "#.#", True),
    ("a.#.b", "a.b", True),
    ("a.#.b", "a.*.b", True),
    ("a.#.b", "a.#.b.#.b", True),
    ("a.#.b", "a.#.b.#", False),  # 'a.b.c'
    ("#.a.#", "*.a.*", True),
    ("*.a.*", "#.a.#", False),
    ("#.a.#.a.#", "a.a", True),
    ("#.a.#.a.#", "#.a.#", False),
    ("a*", "a", False),  # glued wildcards are literals
    ("a", "a*", False),
    ("a*", "a*", True),
    ("*", "a*", True),
    ("#b", "#b", True),
    ("#", "simply#carrots", True),
    ("", "", True),
    ("", "#", False),
    ("", "*", False),
    (".", ".", True),  # two empty words
    ("*.*", ".", True),
    (".", "*.*", False),
    ("*", ".", False),  # '.' is two words
    ("#.", "*.", True),
    ("*.", "#.", False),  # 'a.b.' has three words
    ("tenant.42.#", "tenant.42.orders.*", True),
    ("tenant.42.#", "tenant.*.orders", False),
    ("tenant.42.#", "tenant.#", False),
    ("tenant.42.#", "#.tenant.42.#", False),
]


@pytest.mark.parametrize(("allowed", "pattern", "expected"), CONTAINS)
def test_contains_table(allowed: str, pattern: str, expected: bool) -> None:
    assert contains(allowed, pattern) is expected
    assert brute_contains((allowed,), pattern, 6) is expected


UNION = [
    # (allowed patterns, pattern, covered)
    ((), "a", False),
    ((), "", False),
    (("a", "a.*.#"), "a.#", True),  # neither alone, both together
    (("a", "a.*"), "a.#", False),  # 'a.b.c'
    (("a.*", "a.*.*.#"), "a.*.#", True),
    (("", "*.#"), "#", True),
    (("*.#",), "#", False),
    (("a.#", "b.#"), "*.#", False),
    (("a.#", "b.#"), "a.b", True),
    (("#.a", "#.b"), "#.*", False),
    (("*", "*.*.#"), "#", False),  # the empty key
    (("", "*", "*.*.#"), "#", True),
    # The one-word key whose word is empty does not exist ("" has zero words), so '#.' is covered by these,
    # although its NFA accepts [''].
    (("*.", "*.*.#"), "#.", True),
    (("*.",), "#.", False),  # 'a.b.'
    (("x.#", "*.y.#"), "*.*.#", False),
    (("x.*", "*.y"), "x.y", True),
    (("x.*", "*.y"), "*.*", False),
    (("a*", "*"), "a*", True),
]


@pytest.mark.parametrize(("allowed", "pattern", "expected"), UNION)
def test_allowed_by_any_table(allowed: tuple[str, ...], pattern: str, expected: bool) -> None:
    assert allowed_by_any(allowed, pattern) is expected
    assert brute_contains(allowed, pattern, 6) is expected


def test_union_is_more_than_containment_in_one() -> None:
    assert not contains("a", "a.#") and not contains("a.*.#", "a.#")
    assert allowed_by_any(["a", "a.*.#"], "a.#")


# -- brute force ----------------------------------------------------------------------

#: Literal words of the generated patterns: the empty word, a glued wildcard and a plain word.
LITERALS = ("", "a", "a*")
#: Patterns of at most 3 words; every shortest counterexample then fits in this many key words.
MAX_PATTERN_WORDS = 3
MAX_KEY_WORDS = 5


#: A word no pattern names: stands for every other word.
OTHER = "\u00a7other"


@functools.cache
def all_keys(words: tuple[str, ...], max_words: int) -> tuple[str, ...]:
    """Every routing key of at most ``max_words`` words over ``words``, as text (so ``['']`` is ``""``)."""
    texts = {".".join(key) for n in range(max_words + 1) for key in itertools.product(words, repeat=n)}
    return tuple(sorted(texts))


def brute_contains(allowed: tuple[str, ...], pattern: str, max_words: int = MAX_KEY_WORDS) -> bool:
    """Enumerate every key over the patterns' literal words plus OTHER, up to ``max_words`` words."""
    literals = {word for text in (*allowed, pattern) for word in text.split(".") if word not in (STAR, HASH)}
    keys = all_keys((*sorted(literals), OTHER), max_words)
    return all(any(matches(text, key) for text in allowed) for key in keys if matches(pattern, key))


small_patterns = st.lists(st.sampled_from((*LITERALS, STAR, HASH)), max_size=MAX_PATTERN_WORDS).map(".".join)


@settings(max_examples=300, deadline=None)
@given(allowed=small_patterns, pattern=small_patterns)
def test_contains_is_brute_force(allowed: str, pattern: str) -> None:
    assert contains(allowed, pattern) is brute_contains((allowed,), pattern)


@settings(max_examples=300, deadline=None)
@given(allowed=st.lists(small_patterns, max_size=3), pattern=small_patterns)
def test_allowed_by_any_is_brute_force(allowed: list[str], pattern: str) -> None:
    assert allowed_by_any(allowed, pattern) is brute_contains(tuple(allowed), pattern)


# -- algebra --------------------------------------------------------------------------

patterns = st.lists(st.sampled_from(("", "a", "b", "a*", STAR, HASH)), max_size=5).map(".".join)


@settings(max_examples=200, deadline=None)
@given(pattern=patterns)
def test_reflexive_and_hash_contains_everything(pattern: str) -> None:
    assert contains(pattern, pattern)
    assert contains(HASH, pattern)


@settings(max_examples=200, deadline=None)
@given(a=patterns, b=patterns, c=patterns)
def test_transitive(a: str, b: str, c: str) -> None:
    if contains(a, b) and contains(b, c):
        assert contains(a, c)


@settings(max_examples=200, deadline=None)
@given(allowed=st.lists(patterns, max_size=3), extra=patterns, pattern=patterns)
def test_monotone_and_consistent_with_single(allowed: list[str], extra: str, pattern: str) -> None:
    if allowed_by_any(allowed, pattern):
        assert allowed_by_any([*allowed, extra], pattern)
    if any(contains(one, pattern) for one in allowed):
        assert allowed_by_any(allowed, pattern)


def test_long_patterns_stay_cheap() -> None:
    """Patterns at the default limits (32 words, 16 '#') decide quickly."""
    allowed = ".".join(["#", "x"] * 8)  # keys ending in 'x' with at least 8 'x' words
    pattern = ".".join(["#", "x", "*"] * 10 + ["x"])
    assert contains(allowed, pattern) is True
    assert contains(pattern, allowed) is False


#: Patterns a subscriber picks to be expensive, each at the default limits (at most 32 words, 255 bytes): the
#: issue's example, "an a k words from the end" (2^k subsets when the pattern is determinized), and the
#: same with the rule's own literals everywhere.
EXPENSIVE_PATTERNS = [
    ".".join(["tenant", "42", "#", "l0", "l1", "a", *[STAR] * 24]),
    ".".join(["tenant", "42", "#", "a", *[STAR] * 28]),
    ".".join(["tenant", "42", *[HASH, "a"] * 15]),
    ".".join(["tenant", "42", *[HASH, STAR] * 15]),
]


def linear_bound(automaton: RuleAutomaton, pattern: str) -> int:
    """The triples a check of ``pattern`` may visit: 3 tags x (words + 1) x DFA states."""
    return 3 * (len(pattern.split(".")) + 1) * automaton.states


@pytest.mark.parametrize("pattern", EXPENSIVE_PATTERNS)
def test_a_pattern_built_to_be_expensive_is_decided_within_the_linear_bound(pattern: str) -> None:
    """The pattern is never determinized: its check is linear in its words times the rules' automaton."""
    rules = AclRules(rules=(AclRule("t-*", ("tenant.42.#", "tenant.42.x.*")), AclRule("t-1", ("other.#",))))
    automaton = rules.automaton
    assert automaton.states <= 8  # the rules are small, whatever the pattern
    assert rules.is_allowed("t-1", pattern)  # tenant.42.# covers every one of them
    for allowed, covered in ((["tenant.42.#"], True), (["tenant.42.x.*"], False), (["other.#", "tenant.4"], False)):
        own = automaton_of(tuple(allowed))
        assert own.states <= automaton.states  # a subscriber's automaton is a projection of the whole one
        decided, visited = search(own, pattern)
        assert decided is covered and visited <= linear_bound(own, pattern), (allowed, visited)
    # Against rules that do not cover them the counterexample is found, never given up on.
    assert not allowed_by_any(["tenant.42.x.#", "tenant.42.*.y"], pattern)
    assert allowed_by_any(["tenant.42.x.#", "tenant.#"], pattern)


def test_rules_whose_automaton_is_past_the_limit_are_a_settings_error() -> None:
    """'an a 20 words from the end' needs 2^20 states: the operator hears it at start-up, in one line."""
    rule = AclRule("t-*", (".".join(["#", "a", *[STAR] * 20]),))
    with pytest.raises(RulesTooComplex, match=r"acl\.max_rule_states=100000 states") as raised:
        AclSettings(rules=[rule])
    assert isinstance(raised.value, ConfigError) and "\n" not in str(raised.value)
    small = AclRule("t-*", (".".join(["#", "a", *[STAR] * 3]),))
    assert AclSettings(rules=[small], max_rule_states=16).policy.automaton.states == 16  # 2^(3+1)
    with pytest.raises(RulesTooComplex, match=r"acl\.max_rule_states=15 "):
        AclSettings(rules=[small], max_rule_states=15)
    for bad in (0, -1, 10_000_001, True, "many"):
        with pytest.raises(ConfigError, match=r"setting acl\.max_rule_states must be (an integer|between 1 and)"):
            AclSettings(rules=[small], max_rule_states=bad)  # type: ignore[arg-type]


# -- rules ----------------------------------------------------------------------------

RULES = AclRules(
    rules=(
        AclRule("tenant-42-*", ("tenant.42.#",)),
        AclRule("tenant-42-billing", ("billing.42.*",)),
        AclRule("audit", ("#",)),
    )
)


@pytest.mark.parametrize(
    ("subscriber", "pattern", "allowed"),
    [
        ("tenant-42-web", "tenant.42.orders.*", True),
        ("tenant-42-web", "tenant.42", True),
        ("tenant-42-web", "tenant.43.#", False),
        ("tenant-42-web", "#", False),
        ("tenant-42-web", "billing.42.x", False),
        ("tenant-42-billing", "billing.42.x", True),  # union of both rules it matches
        ("tenant-42-billing", "tenant.42.#", True),
        ("audit", "#", True),
        ("audit-2", "#", False),  # matches no rule: default deny
        ("TENANT-42-web", "tenant.42.x", False),  # globs are case-sensitive
    ],
)
def test_rules(subscriber: str, pattern: str, allowed: bool) -> None:
    assert RULES.is_allowed(subscriber, pattern) is allowed
    if allowed:
        RULES.check(subscriber, pattern)
    else:
        with pytest.raises(ForbiddenPatternError) as caught:
            RULES.check(subscriber, pattern)
        assert caught.value.reason == "forbidden_pattern"
        assert isinstance(caught.value, InvalidPatternError)


def test_no_rules_allow_everything_and_default_allow() -> None:
    assert not ALLOW_ALL.enabled
    assert ALLOW_ALL.is_allowed("anyone", "#")
    assert AclRules(default_allow=False).is_allowed("anyone", "#")
    lenient = AclRules(rules=RULES.rules, default_allow=True)
    assert lenient.is_allowed("someone-else", "#")
    assert not lenient.is_allowed("tenant-42-web", "#")  # a matching rule still binds

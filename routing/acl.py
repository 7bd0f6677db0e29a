"""Subscription ACLs: exact containment of AMQP topic patterns, and the rules built on it.

Containment
-----------

``contains(allowed, pattern)`` is true iff every routing key that ``pattern`` matches is also
matched by ``allowed``; ``allowed_by_any(allowed_patterns, pattern)`` is true iff every such key
is matched by *some* pattern of ``allowed_patterns`` (union containment). The two differ: ``a.#``
is contained in neither ``a`` nor ``a.*.#`` but in their union, since ``#`` matches zero words.
Both are decided exactly (no heuristics), for the grammar of :mod:`routing.topic`: words split on
``.``, ``*`` is exactly one word, ``#`` zero or more, empty words are real words and a wildcard
glued to other text is a literal.

The algorithm:

1. *Finite alphabet.* Let ``L`` be the literal words (neither ``*`` nor ``#``) of all the
   patterns involved. A word outside ``L`` is matched only by ``*`` and ``#``, and all such words
   are matched alike, so every key can be rewritten over ``L + {OTHER}`` without changing which
   of these patterns match it; conversely every sequence over ``L + {OTHER}`` stands for a real
   key (``OTHER`` is any non-empty word outside ``L``).
2. *NFAs.* A pattern of ``n`` words is an NFA with states ``0..n`` (state ``i``: the first ``i``
   pattern words consumed). At a ``#`` word the NFA may skip it (epsilon to ``i + 1``) or consume
   one word and stay; ``*`` consumes any one word; a literal consumes that word only. State ``n``
   accepts. This is :func:`routing.topic.words_match` as an automaton.
3. *Search for a counterexample.* A breadth-first search over pairs (set of states of
   ``pattern``'s NFA, set of states of the union of the allowed NFAs) -- the subset construction
   of both, run in step -- looks for a key that ``pattern`` accepts and no allowed pattern does.
   Pairs are finite (at most ``2^(n+1)`` times ``2^(sum of allowed sizes + ...)`` in principle,
   in practice a few hundred for patterns of the configured limits), so the search ends; the
   answer is "contained" iff no reachable pair is a counterexample.
4. *The one key that does not exist.* The key ``""`` has zero words, so the one-word key whose
   word is empty (``['']``) is not a routing key. If the empty word is in ``L``, the search keeps
   track of whether the word read so far is exactly ``['']`` and does not count it as a
   counterexample: ``#.`` (keys ending in an empty word) *is* covered by ``{*., *.*.#}``.

The subset construction can blow up exponentially on adversarial inputs (``#.a.*.*.*...``, "an
``a`` k words from the end", needs ``2^k`` subsets), and a subscriber chooses its pattern, so the
search is bounded: past :data:`MAX_SEARCH_STATES` pairs it stops and raises
:class:`ContainmentUndecided`; the ACL then refuses the pattern (fail closed, with a detail saying
so). Patterns of ordinary shape decide in well under a millisecond; the bound only bites on ones
built to be expensive. Results are cached (:func:`functools.lru_cache`), since a refresh checks the
same few rule patterns against many subscriptions.

Rules
-----

The ``[acl]`` settings section (:class:`AclSettings`)::

    [acl]
    default_allow = false
    rules = [
      { subscribers = "tenant-42-*", patterns = ["tenant.42.#"] },
      { subscribers = "audit", patterns = ["#"] },
    ]

(or one ``[[acl.rules]]`` table per rule, without the ``rules = []`` line; from the environment or
``--set acl.rules=...`` the rules are JSON text of the same shape).

:class:`AclRules` holds the ``[acl]`` settings' rules: each names subscriber ids by an
``fnmatch``-style glob (``fnmatch.fnmatchcase``: case-sensitive, ``*``, ``?``, ``[...]``) and the
patterns they may hold. A subscriber that matches one or more rules may hold a pattern iff the
pattern is covered by the *union* of those rules' patterns (:func:`allowed_by_any`). A subscriber
that matches no rule may hold anything if ``default_allow`` is true, else nothing. With no rules
at all everything is allowed (the behaviour before ACLs existed).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

from routing.config import ConfigError
from routing.errors import ForbiddenPatternError
from routing.topic import HASH, STAR, split_words

#: Pairs of subset states the containment search may visit before giving up (:class:`ContainmentUndecided`).
MAX_SEARCH_STATES = 20_000


class ContainmentUndecided(ValueError):
    """The containment search hit :data:`MAX_SEARCH_STATES` before deciding."""


#: Stand-in for every word that is not a literal of the patterns being compared.
_OTHER: object = object()
_Word = str | object


def _closure(words: Sequence[str], states: Iterable[int]) -> frozenset[int]:
    """``states`` plus everything reachable by skipping ``#`` words (zero-word matches)."""
    result = set()
    for state in states:
        while True:
            result.add(state)
            if state < len(words) and words[state] == HASH:
                state += 1
            else:
                break
    return frozenset(result)


def _step(words: Sequence[str], states: frozenset[int], word: _Word) -> frozenset[int]:
    moved = set()
    for state in states:
        if state == len(words):
            continue
        current = words[state]
        if current == HASH:
            moved.add(state)
        elif current in (STAR, word):
            moved.add(state + 1)
    return _closure(words, moved)


@functools.lru_cache(maxsize=65536)
def _covered(allowed: tuple[str, ...], pattern: str) -> bool | None:
    """True if covered, False if a counterexample exists, None if the search budget ran out."""
    pattern_w = split_words(pattern)
    allowed_w = [split_words(text) for text in allowed]
    literals = {word for words in (pattern_w, *allowed_w) for word in words if word not in (STAR, HASH)}
    alphabet: list[_Word] = [*sorted(literals), _OTHER]

    def union_step(states: frozenset[tuple[int, int]], word: _Word) -> frozenset[tuple[int, int]]:
        result: set[tuple[int, int]] = set()
        for index, words in enumerate(allowed_w):
            mine = frozenset(state for which, state in states if which == index)
            if mine:
                result.update((index, state) for state in _step(words, mine, word))
        return frozenset(result)

    def union_accepts(states: frozenset[tuple[int, int]]) -> bool:
        return any(state == len(allowed_w[index]) for index, state in states)

    start_p = _closure(pattern_w, [0])
    start_a = frozenset((index, state) for index, words in enumerate(allowed_w) for state in _closure(words, [0]))
    # tag: 0 = nothing read yet, 1 = read exactly [''] (not a routing key), 2 = anything else.
    start = (start_p, start_a, 0)
    seen = {start}
    queue = deque([start])
    while queue:
        states_p, states_a, tag = queue.popleft()
        if len(pattern_w) in states_p and tag != 1 and not union_accepts(states_a):
            return False
        for word in alphabet:
            next_p = _step(pattern_w, states_p, word)
            if not next_p:
                continue  # pattern can no longer match: no counterexample down this path
            next_tag = 1 if tag == 0 and word == "" else 2
            item = (next_p, union_step(states_a, word), next_tag)
            if item not in seen:
                if len(seen) >= MAX_SEARCH_STATES:
                    return None
                seen.add(item)
                queue.append(item)
    return True


def allowed_by_any(allowed_patterns: Iterable[str], pattern: str) -> bool:
    """Whether every routing key ``pattern`` matches is matched by some pattern of ``allowed_patterns``.

    Raises :class:`ContainmentUndecided` when the search needs more than :data:`MAX_SEARCH_STATES`.
    """
    allowed = tuple(sorted(set(allowed_patterns)))
    if pattern in allowed or HASH in allowed:
        return True
    if not allowed:
        return False
    covered = _covered(allowed, pattern)
    if covered is None:
        raise ContainmentUndecided(
            f"deciding whether {pattern[:80]!r} is covered needs more than {MAX_SEARCH_STATES} search states"
        )
    return covered


def contains(allowed: str, pattern: str) -> bool:
    """Whether every routing key ``pattern`` matches is matched by ``allowed``."""
    return allowed_by_any((allowed,), pattern)


@dataclasses.dataclass(frozen=True)
class AclRule:
    """Subscribers whose id matches the glob ``subscribers`` may hold patterns inside ``patterns``."""

    subscribers: str
    patterns: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class AclRules:
    """The ACL: rules plus what a subscriber matching none of them may hold.

    Empty rules allow everything, whatever ``default_allow`` says.
    """

    rules: tuple[AclRule, ...] = ()
    default_allow: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def allowed_patterns(self, subscriber: str) -> tuple[str, ...] | None:
        """Patterns of every rule ``subscriber`` matches, or ``None`` when it matches none."""
        matched = [rule for rule in self.rules if fnmatch.fnmatchcase(subscriber, rule.subscribers)]
        if not matched:
            return None
        return tuple(pattern for rule in matched for pattern in rule.patterns)

    def why_forbidden(self, subscriber: str, pattern: str) -> str | None:
        """``None`` if ``subscriber`` may hold ``pattern``, else a one-line reason."""
        if not self.rules:
            return None
        allowed = self.allowed_patterns(subscriber)
        if allowed is None:
            if self.default_allow:
                return None
            return "no [acl] rule names this subscriber and acl.default_allow is false"
        try:
            if allowed_by_any(allowed, pattern):
                return None
        except ContainmentUndecided as error:
            return f"refused, too complex to check against the [acl] rules: {error}"
        shown = ", ".join(repr(text) for text in allowed) or "nothing"
        return f"not covered by the patterns [acl] allows this subscriber ({shown[:200]})"

    def is_allowed(self, subscriber: str, pattern: str) -> bool:
        return self.why_forbidden(subscriber, pattern) is None

    def check(self, subscriber: str, pattern: str) -> None:
        """Raise :class:`~routing.errors.ForbiddenPatternError` unless ``subscriber`` may hold ``pattern``."""
        why = self.why_forbidden(subscriber, pattern)
        if why is not None:
            raise ForbiddenPatternError(pattern, f"subscriber {subscriber[:80]!r} may not hold it: {why}")


#: The ACL of a deployment without ``[acl]`` rules: everything allowed.
ALLOW_ALL = AclRules()


def _rule_from(index: int, raw: object) -> AclRule:
    where = f"setting acl.rules[{index}]"
    if isinstance(raw, AclRule):
        return raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f'{where} must be a table {{subscribers = "glob", patterns = [...]}}, got {raw!r:.80}')
    unknown = sorted(set(raw) - {"subscribers", "patterns"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r:.80} (known: patterns, subscribers)")
    if "subscribers" not in raw or "patterns" not in raw:
        raise ConfigError(f"{where} must name both subscribers (a glob) and patterns (a list)")
    subscribers, patterns = raw["subscribers"], raw["patterns"]
    if not isinstance(subscribers, str) or not subscribers:
        raise ConfigError(f"{where}.subscribers must be a non-empty glob string, got {subscribers!r:.80}")
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(item, str) for item in patterns):
        raise ConfigError(f"{where}.patterns must be a list of pattern strings, got {patterns!r:.80}")
    for text in (subscribers, *patterns):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{where} holds text that is not valid UTF-8") from None
    return AclRule(subscribers, tuple(patterns))


@dataclasses.dataclass(frozen=True)
class AclSettings:
    """``[acl]``: which subscriber ids (globs) may hold which patterns. No rules: everything is allowed.

    A subscriber matching one or more rules may hold a pattern iff the union of those rules'
    patterns covers it (:func:`allowed_by_any`); one matching none may hold anything iff
    ``default_allow`` (ignored while there are no rules).
    """

    SECTION: ClassVar[str] = "acl"

    default_allow: bool = False
    """What a subscriber that no rule names may hold: everything (true) or nothing (false)."""
    rules: Sequence[AclRule] = ()
    """Which subscribers (a glob) may hold which patterns: ``[{subscribers = "glob", patterns = ["..."]}, ...]``
    in the file; JSON text from the environment or ``--set``."""

    def __post_init__(self) -> None:
        raw: object = self.rules
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else []
            except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
                raise ConfigError("setting acl.rules must be JSON text of a list of rules when given as text") from None
        if not isinstance(raw, (list, tuple)):
            raise ConfigError(f"setting acl.rules must be a list of rules, got {raw!r:.80}")
        object.__setattr__(self, "rules", tuple(_rule_from(index, item) for index, item in enumerate(raw)))

    @property
    def policy(self) -> AclRules:
        """The rules as an :class:`AclRules` to check subscriptions with."""
        return AclRules(tuple(self.rules), self.default_allow)

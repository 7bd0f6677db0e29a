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

The algorithm (containment of an NFA in a DFA, the classic polynomial case):

1. *Finite alphabet.* Let ``L`` be the literal words (neither ``*`` nor ``#``) of the allowed
   patterns. A word outside ``L`` is matched alike by every allowed pattern (only their ``*`` and
   ``#`` take it), so it is one letter, ``OTHER``, to them.
2. *NFAs.* A pattern of ``n`` words is an NFA with states ``0..n`` (state ``i``: the first ``i``
   pattern words consumed). At a ``#`` word the NFA may skip it (epsilon to ``i + 1``) or consume
   one word and stay; ``*`` consumes any one word; a literal consumes that word only. State ``n``
   accepts. This is :func:`routing.topic.words_match` as an automaton.
3. *The rules, once.* :class:`RuleAutomaton` determinizes the union of the allowed patterns (the
   subset construction over (pattern index, NFA state), over ``L + {OTHER}``); a DFA state accepts
   iff one of them does, and is *universal* when every state it reaches accepts. The rules are the
   operator's, not a subscriber's: the automaton of every rule pattern at once is built when the
   settings load, and more than ``acl.max_rule_states`` states is a settings error. A subscriber's
   checks use the automaton of the patterns its rules allow (built once per such set, cached). It
   has no more states than the whole one: each of its states is the projection of one of those.
4. *A pattern, in linear time.* ``pattern`` is covered iff no key takes its NFA to ``n`` and the
   DFA to a state that does not accept. That is reachability over triples (NFA state,
   DFA state, tag) -- single NFA states, never subsets of them -- so a check visits at most
   ``3 (n + 1) |D|`` triples and follows each DFA edge once per triple: **O(n x edges of the rule
   automaton)**, whatever the pattern's shape. A DFA state stores only the literals that leave it
   differently from ``OTHER``, so a ``*`` of the pattern follows a handful of edges, not ``|L|``,
   and the search never enters a universal state (no counterexample lies beyond one).
5. *The one key that does not exist.* The key ``""`` has zero words, so the one-word key whose
   word is empty (``['']``) is not a routing key. The tag records whether the words read so far are
   nothing (0), exactly ``['']`` (1) or anything else (2), and a triple of tag 1 is never a
   counterexample: ``#.`` (keys ending in an empty word) *is* covered by ``{*., *.*.#}``. ``OTHER``
   stands for a non-empty word, so only a literal empty word leads to tag 1.

The subset construction of step 3 is exponential in the worst case (the rule ``#.a.*.*.*``, "an
``a`` three words from the end", needs 2^3 subsets), which is why its bound is a setting the
operator meets at start-up, not a subscriber at run time. Before, the pattern was determinized
too, per check, and a subscriber could pick a pattern that cost a CPU-second before the search
gave up. Answers are cached per (allowed patterns, pattern). A batch's uncached checks share a budget
of search states (``acl.max_check_states_per_batch``, :meth:`AclRules.for_batch`): the subscribes
after it is spent are refused, so a batch's ACL work is bounded whatever its events are.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import ClassVar

from routing.config import ConfigError
from routing.errors import ForbiddenPatternError
from routing.topic import HASH, STAR, split_words

#: States the automaton of the ``[acl]`` rules may have (``acl.max_rule_states``'s default).
DEFAULT_MAX_RULE_STATES = 100_000
#: The most ``acl.max_rule_states`` may be raised to (each state is a dict and a few ints of the driver's memory).
MAX_RULE_STATES_LIMIT = 10_000_000


class RulesTooComplex(ConfigError):
    """The ``[acl]`` rules' automaton needs more states than ``acl.max_rule_states``."""


#: Stand-in for every word that is not a literal of the allowed patterns.
_OTHER: object = object()
_Word = str | object
_NFAState = tuple[int, int]  # (allowed pattern index, words consumed)


def _closure(words: Sequence[str], state: int) -> Iterator[int]:
    """``state`` and every state reachable from it by skipping ``#`` words (zero-word matches)."""
    while True:
        yield state
        if state < len(words) and words[state] == HASH:
            state += 1
        else:
            return


class RuleAutomaton:
    """The DFA of the union of ``patterns`` (module docs, step 3).

    Invariants: ``edges[d]`` maps a literal to the state it leads to from ``d`` and holds every literal
    whose target differs from ``default[d]`` (the target of ``OTHER``); ``accepts[d]`` iff a pattern
    accepts in ``d``; ``universal[d]`` iff every state reachable from ``d`` (``d`` too) accepts. State 0
    is the start. At most ``max_states`` states.
    """

    def __init__(self, patterns: Sequence[str], *, max_states: int = DEFAULT_MAX_RULE_STATES) -> None:
        self.patterns = tuple(patterns)
        words = [split_words(text) for text in self.patterns]
        self.edges: list[dict[str, int]] = []
        self.default: list[int] = []
        self.accepts: list[bool] = []
        index: dict[frozenset[_NFAState], int] = {}
        pending: list[frozenset[_NFAState]] = []

        def state_of(subset: frozenset[_NFAState]) -> int:
            found = index.get(subset)
            if found is None:
                if len(index) >= max_states:
                    raise RulesTooComplex(
                        f"setting acl.rules: their automaton needs more than acl.max_rule_states={max_states} states; "
                        "simplify the rules (a '*' after a '#' is what multiplies them) or raise the limit"
                    )
                found = index[subset] = len(index)
                pending.append(subset)
            return found

        def closed(moved: Iterable[_NFAState]) -> frozenset[_NFAState]:
            return frozenset((which, state) for which, at in moved for state in _closure(words[which], at))

        state_of(closed((which, 0) for which in range(len(words))))
        while len(self.edges) < len(pending):  # pending[d] is state d's subset; the ones before are built
            subset = pending[len(self.edges)]
            anything: list[_NFAState] = []  # what any word moves to (OTHER's target)
            literal: dict[str, list[_NFAState]] = {}
            accepts = False
            for which, state in subset:
                pattern = words[which]
                if state == len(pattern):
                    accepts = True
                    continue
                word = pattern[state]
                if word == HASH:
                    anything.append((which, state))
                elif word == STAR:
                    anything.append((which, state + 1))
                else:
                    literal.setdefault(word, []).append((which, state + 1))
            default = closed(anything)
            edges: dict[str, int] = {}
            self.edges.append(edges)
            self.accepts.append(accepts)
            self.default.append(state_of(default))
            for word, moved in literal.items():
                edges[word] = state_of(default | closed(moved))

        self.universal = self._universal()
        #: Per state, the states one word of any kind leads to, universal ones left out (nothing lies beyond them).
        self.successors = [
            frozenset(target for target in {default, *edges.values()} if not self.universal[target])
            for edges, default in zip(self.edges, self.default, strict=True)
        ]
        self._answers: dict[str, bool] = {}

    def _universal(self) -> list[bool]:
        """Per state, whether every state it reaches accepts: not reaching back from a rejecting one."""
        sources: list[list[int]] = [[] for _ in self.edges]
        for state, (edges, default) in enumerate(zip(self.edges, self.default, strict=True)):
            for target in {default, *edges.values()}:
                sources[target].append(state)
        universal = list(self.accepts)
        pending = [state for state, accepts in enumerate(self.accepts) if not accepts]
        while pending:
            for source in sources[pending.pop()]:
                if universal[source]:
                    universal[source] = False
                    pending.append(source)
        return universal

    @property
    def states(self) -> int:
        return len(self.edges)

    def covers(self, pattern: str) -> bool:
        """Whether every routing key ``pattern`` matches is accepted (module docs, step 4); cached."""
        known = self.known(pattern)
        return self.decide(pattern)[0] if known is None else known

    def known(self, pattern: str) -> bool | None:
        """The cached answer for ``pattern``, or None when it has not been decided (or was evicted)."""
        return self._answers.get(pattern)

    def decide(self, pattern: str) -> tuple[bool, int]:
        """:func:`search`, with the answer cached (the cache is cleared past :data:`CACHED_ANSWERS`)."""
        answer = search(self, pattern)
        if len(self._answers) >= CACHED_ANSWERS:
            self._answers.clear()
        self._answers[pattern] = answer[0]
        return answer


#: Answers an automaton keeps (per pattern): a refresh checks the same few patterns against many subscriptions.
CACHED_ANSWERS = 65_536


def search(automaton: RuleAutomaton, pattern: str) -> tuple[bool, int]:
    """(whether ``pattern`` is covered, the search states it visited): step 4, uncached.

    The triples of tag 0 and 1 (at most one word read) are searched one by one; those of tag 2, almost all
    of them, as one set of DFA states per pattern position, swept left to right (a pattern's NFA only moves
    right, or stays at a ``#``), so each step is a set operation over the position's states.
    """
    words = split_words(pattern)
    last = len(words)
    edges, default, accepts, universal = automaton.edges, automaton.default, automaton.accepts, automaton.universal
    anything = automaton.successors
    later: list[set[int]] = [set() for _ in range(last + 1)]  # tag 2: DFA states at each position
    seen: set[tuple[int, int, int]] = set()
    stack: list[tuple[int, int, int]] = []

    def reach(at: int, state: int, tag: int) -> None:
        if universal[state]:
            return  # every key from here on is allowed: no counterexample beyond
        if tag == 2:
            later[at].add(state)  # the sweep takes it from here (and skips the '#' after it)
            return
        for skipped in _closure(words, at):
            item = (skipped, state, tag)
            if item not in seen:
                seen.add(item)
                stack.append(item)

    reach(0, 0, 0)
    while stack:  # at most one word read: the empty word read alone is the key that does not exist
        at, state, tag = stack.pop()
        if at == last:
            if tag == 0 and not accepts[state]:
                return False, len(seen)  # the key of no words
            continue
        word = words[at]
        if word in (HASH, STAR):
            after = at if word == HASH else at + 1
            reach(after, default[state], 2)  # OTHER: a non-empty word outside the literals
            for literal, target in edges[state].items():
                reach(after, target, 1 if tag == 0 and literal == "" else 2)
        else:
            reach(at + 1, edges[state].get(word, default[state]), 1 if tag == 0 and word == "" else 2)

    visited = len(seen)
    for at in range(last):
        states = later[at]
        if not states:
            continue
        word = words[at]
        if word == HASH:  # any words, staying here: every state reachable from these
            fresh = states
            while fresh:
                fresh = set().union(*(anything[state] for state in fresh)) - states
                states |= fresh
            later[at + 1] |= states  # and the '#' may match no word
        elif word == STAR:
            later[at + 1].update(*(anything[state] for state in states))
        else:
            moved = (edges[state].get(word, default[state]) for state in states)
            later[at + 1].update(state for state in moved if not universal[state])
        visited += len(states)
    visited += len(later[last])
    return not any(not accepts[state] for state in later[last]), visited


@functools.lru_cache(maxsize=4096)
def automaton_of(allowed: tuple[str, ...], max_states: int = DEFAULT_MAX_RULE_STATES) -> RuleAutomaton:
    """The automaton of the distinct patterns ``allowed`` (sorted), cached per set."""
    return RuleAutomaton(allowed, max_states=max_states)


def allowed_by_any(allowed_patterns: Iterable[str], pattern: str) -> bool:
    """Whether every routing key ``pattern`` matches is matched by some pattern of ``allowed_patterns``.

    Raises :class:`RulesTooComplex` when ``allowed_patterns``' automaton needs more than
    :data:`DEFAULT_MAX_RULE_STATES` states.
    """
    allowed = tuple(sorted(set(allowed_patterns)))
    if pattern in allowed or HASH in allowed:
        return True
    if not allowed:
        return False
    return automaton_of(allowed).covers(pattern)


def contains(allowed: str, pattern: str) -> bool:
    """Whether every routing key ``pattern`` matches is matched by ``allowed``."""
    return allowed_by_any((allowed,), pattern)


#: Search states (module docs, step 4) one batch's uncached checks may visit on one task.
DEFAULT_MAX_CHECK_STATES_PER_BATCH = 60_000_000


@dataclasses.dataclass
class AclBudget:
    """The search states a batch's checks have visited so far (cached answers cost nothing)."""

    spent: int = 0


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
    max_rule_states: int = DEFAULT_MAX_RULE_STATES
    max_check_states_per_batch: int = DEFAULT_MAX_CHECK_STATES_PER_BATCH
    #: What this batch's checks have spent (:meth:`for_batch`); None: unbounded (a CLI check, a test).
    budget: AclBudget | None = dataclasses.field(default=None, compare=False, repr=False)

    def for_batch(self) -> AclRules:
        """These rules with a fresh budget of ``max_check_states_per_batch`` (one per batch, on each task)."""
        return dataclasses.replace(self, budget=AclBudget()) if self.rules else self

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    @functools.cached_property
    def _rules_by_prefix(self) -> dict[str, tuple[int, ...]]:
        """Rule indices by their glob's literal start (up to its first ``*``, ``?`` or ``[``), in rule order."""
        grouped: dict[str, list[int]] = {}
        for at, rule in enumerate(self.rules):
            glob = rule.subscribers
            cut = min((found for found in (glob.find(mark) for mark in "*?[") if found >= 0), default=len(glob))
            grouped.setdefault(glob[:cut], []).append(at)
        return {prefix: tuple(indices) for prefix, indices in grouped.items()}

    @property
    def automaton(self) -> RuleAutomaton:
        """Every rule's patterns as one automaton (module docs, step 3); built once per process (cached)."""
        patterns = tuple(sorted({pattern for rule in self.rules for pattern in rule.patterns}))
        return automaton_of(patterns, self.max_rule_states)

    def allowed_patterns(self, subscriber: str) -> tuple[str, ...] | None:
        """Patterns of every rule ``subscriber`` matches, or ``None`` when it matches none."""
        by_prefix = self._rules_by_prefix
        candidates = sorted(
            at for length in range(len(subscriber) + 1) for at in by_prefix.get(subscriber[:length], ())
        )  # the rules whose glob's literal start the id has: a glob matches nothing else
        matched = [self.rules[at] for at in candidates if fnmatch.fnmatchcase(subscriber, self.rules[at].subscribers)]
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
        if pattern in allowed or HASH in allowed:
            return None
        automaton = automaton_of(tuple(sorted(set(allowed))), self.max_rule_states)
        covered = automaton.known(pattern)
        if covered is None:
            if self.budget is not None and self.budget.spent >= self.max_check_states_per_batch:
                return (
                    f"refused: this batch's ACL checks used their budget "
                    f"(acl.max_check_states_per_batch={self.max_check_states_per_batch} search states); "
                    "subscribe again in a later batch"
                )
            covered, visited = automaton.decide(pattern)
            if self.budget is not None:
                self.budget.spent += visited
        if covered:
            return None
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
    INT_RANGES: ClassVar[Mapping[str, tuple[int, int, str]]] = {
        "max_check_states_per_batch": (1, 2**31 - 1, ""),
        "max_rule_states": (1, MAX_RULE_STATES_LIMIT, ""),
    }

    default_allow: bool = False
    """What a subscriber that no rule names may hold: everything (true) or nothing (false)."""
    rules: Sequence[AclRule] = ()
    """Which subscribers (a glob) may hold which patterns: ``[{subscribers = "glob", patterns = ["..."]}, ...]``
    in the file; JSON text from the environment or ``--set``."""
    max_check_states_per_batch: int = DEFAULT_MAX_CHECK_STATES_PER_BATCH
    """Search states the uncached ACL checks of one batch may visit (on each task): a check costs at most
    3 x (its pattern's words + 1) x the states of its subscriber's automaton. The subscribes after the budget
    is spent are rejected (forbidden_pattern, a detail naming this setting), never left undecided."""
    max_rule_states: int = DEFAULT_MAX_RULE_STATES
    """States the rules' automaton may have (routing/acl.py: every check costs at most the pattern's words times
    its edges). Rules past it are a settings error at start-up; only a '*' after a '#' multiplies states."""

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
        for name, (low, high, _) in self.INT_RANGES.items():  # routing.settings' integer rule (it imports this)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"setting acl.{name} must be an integer, got {value!r:.80}")
            if not low <= value <= high:
                raise ConfigError(f"setting acl.{name} must be between {low} and {high}, got {value}")
        if self.rules:
            self.policy.automaton  # noqa: B018  # built now, so rules past the limit fail at start-up

    @functools.cached_property
    def policy(self) -> AclRules:
        """The rules as an :class:`AclRules` to check subscriptions with."""
        return AclRules(tuple(self.rules), self.default_allow, self.max_rule_states, self.max_check_states_per_batch)

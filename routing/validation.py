"""The validation layer: policies and limits, applied where data enters the system.

Matchers check only the grammar (:mod:`routing.topic`). Everything a deployment
may want to bound or forbid lives here, so the subscription table and the
stream reject the same inputs for the same reasons. The rules themselves, their
order, limits, policies and reason codes, are declared in :mod:`routing.grammar`;
a :class:`Validator` applies them with one policy and one set of limits:

* ``amqp`` (the default) accepts everything RabbitMQ accepts, within the limits:
  any UTF-8 text, empty words, control characters.
* ``strict`` also requires every word to match ``[A-Za-z0-9_-]+`` (patterns may
  additionally use the words ``*`` and ``#``), which rejects empty words and
  control characters. The empty key (zero words) has no words to reject.

Each failure raises a :class:`~routing.errors.TopicError` subclass whose
``reason`` is the code the dead-letter and reject tables record.

A validator also carries the ``[acl]`` rules (:mod:`routing.acl`; none by default, which allows
everything): :meth:`Validator.check_allowed` is where a subscribe is refused ``forbidden_pattern``.
"""

from __future__ import annotations

import dataclasses

from routing.acl import ALLOW_ALL, AclRules
from routing.errors import error_for
from routing.grammar import (
    FANOUT_RULE,
    HASH,
    HOLDING_RULES,
    KEY_RULES,
    MATCH_COST_EXCEEDED,
    PATTERN_RULES,
    PAYLOAD_RULES,
    SUBSCRIBER_RULES,
    TOO_MANY_SUBSCRIPTIONS,
    WILDCARDS,
    Check,
    Rule,
    strict_word_fault,
)
from routing.grammar import Policy as Policy
from routing.limits import DEFAULT_LIMITS, Limits
from routing.topic import check_subscriber, key_words, match_cost, pattern_words, split_words

#: The holding rules this validator applies (the refresh job applies ``subscription_table_full`` itself).
_SUBSCRIPTION_COUNT_RULE = next(rule for rule in HOLDING_RULES if rule.reason == TOO_MANY_SUBSCRIPTIONS)
_MATCH_COST_RULE = next(rule for rule in HOLDING_RULES if rule.reason == MATCH_COST_EXCEEDED)


class _Value:
    """A key, pattern or subscriber id under judgement, measured only as far as its rules get.

    Off the wire it is bytes (``raw``) until the UTF-8 rule decodes it; given as ``str`` it is ``text`` from the
    start (present, and UTF-8 as the grammar checked). A message shows the bytes until they are decoded.
    """

    __slots__ = ("_words", "exempt", "raw", "shown_as", "text")

    def __init__(
        self,
        *,
        raw: bytes | None = None,
        text: str | None = None,
        exempt: tuple[str, ...] = (),
        shown_as: str | None = None,
    ) -> None:
        self.raw = raw
        self.text = text
        #: Words the strict policy does not judge (a pattern's wildcards).
        self.exempt = exempt
        self.shown_as = shown_as
        self._words: list[str] | None = None

    @property
    def shown(self) -> object:
        if self.shown_as is not None:
            return self.shown_as
        return self.raw if self.text is None else self.text

    def words(self) -> list[str]:
        if self._words is None:
            assert self.text is not None, "words are counted after the UTF-8 rule"
            self._words = split_words(self.text)
        return self._words

    def measure(self, check: Check) -> int:
        """What a rule with a limit measures."""
        if check is Check.BYTES:
            return len(self.raw) if self.raw is not None else len((self.text or "").encode("utf-8"))
        if check is Check.WORDS:
            return len(self.words())
        if check is Check.HASH_WORDS:
            return self.words().count(HASH)
        raise AssertionError(f"the validator has no measure for {check}")

    def fault(self, rule: Rule) -> str | None:
        """How a rule without a limit is broken (its message), or ``None`` when it holds."""
        check = rule.check
        if check is Check.PRESENT:
            return rule.rule if self.raw is None and self.text is None else None
        if check is Check.UTF8:
            if self.text is None and self.raw is not None:
                try:
                    self.text = self.raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    return f"{rule.rule} ({error.reason} at byte {error.start})"
            return None
        if check is Check.NON_EMPTY:
            return rule.rule if self.text == "" else None
        if check is Check.STRICT_WORDS:
            for word in self.words():
                if word not in self.exempt:
                    fault = strict_word_fault(word)
                    if fault is not None:
                        return fault
            return None
        raise AssertionError(f"the validator has no check for {check}")


@dataclasses.dataclass(frozen=True)
class ValidationSettings:
    policy: str = "amqp"

    def __post_init__(self) -> None:
        Policy.parse(self.policy)


@dataclasses.dataclass(frozen=True)
class Validator:
    """Applies one policy and one set of limits. Immutable, so safe to share."""

    limits: Limits = DEFAULT_LIMITS
    policy: Policy = Policy.AMQP
    #: Which subscribers may hold which patterns (``[acl]``); the default allows everything.
    acl: AclRules = ALLOW_ALL

    # The configured validator is ``routing.settings.load_settings(...).validator()``: one loader for every section.

    # Every check applies the rules of routing.grammar in their declared order: the first broken raises.

    def _apply(self, rules: tuple[Rule, ...], value: _Value) -> None:
        for rule in rules:
            if not rule.applies(self.policy):
                continue
            if rule.limit is None:
                fault = value.fault(rule)
                if fault is not None:
                    raise error_for(rule.reason)(value.shown, fault)
            else:
                self._at_most(rule, value.shown, value.measure(rule.check))

    def _at_most(self, rule: Rule, shown: object, actual: int) -> None:
        assert rule.limit is not None
        limit: int = getattr(self.limits, rule.limit)
        if actual > limit:
            raise error_for(rule.reason)(shown, rule.rule, limit_name=rule.limit, limit_value=limit, actual=actual)

    # -- routing keys ------------------------------------------------------

    def decode_key(self, raw: bytes | None) -> str:
        """Routing key bytes off the wire, decoded and validated (``None`` is ``null_key``)."""
        value = _Value(raw=raw)
        self._apply(KEY_RULES, value)
        assert value.text is not None
        return value.text

    def validate_key(self, key: str) -> list[str]:
        """The key's words, or a :class:`TopicError` naming the rule it breaks."""
        value = _Value(text=key)
        value._words = key_words(key)  # the grammar's check: a str, UTF-8
        self._apply(KEY_RULES, value)
        return value._words

    # -- patterns ----------------------------------------------------------

    def validate_pattern(self, pattern: str) -> list[str]:
        """The pattern's words, or a :class:`TopicError` naming the rule it breaks."""
        value = _Value(text=pattern, exempt=WILDCARDS)
        value._words = pattern_words(pattern)  # the grammar's check: a str, UTF-8
        self._apply(PATTERN_RULES, value)
        return value._words

    def validate_subscriber(self, subscriber: str) -> str:
        check_subscriber(subscriber)  # the grammar's check: a str, UTF-8, not empty
        self._apply(SUBSCRIBER_RULES, _Value(text=subscriber))
        return subscriber

    def check_subscription_count(self, subscriber: str, count: int) -> None:
        """Raise when ``subscriber`` would hold ``count`` patterns, past the limit."""
        self._at_most(_SUBSCRIPTION_COUNT_RULE, subscriber, count)

    def match_cost(self, pattern: str) -> int:
        """The lookup states ``pattern`` can add to matching one key (:func:`routing.topic.match_cost`)."""
        return match_cost(pattern_words(pattern), self.limits.max_key_words)

    def check_match_cost(self, subscriber: str, cost: int) -> None:
        """Raise when ``subscriber``'s patterns would cost ``cost`` lookup states in all, past the limit."""
        self._at_most(_MATCH_COST_RULE, subscriber, cost)

    def check_allowed(self, subscriber: str, pattern: str) -> None:
        """Raise :class:`~routing.errors.ForbiddenPatternError` unless ``[acl]`` lets ``subscriber`` hold it."""
        self.acl.check(subscriber, pattern)

    # -- messages ----------------------------------------------------------

    def check_payload(self, payload: bytes | None) -> None:
        raw = b"" if payload is None else payload
        self._apply(PAYLOAD_RULES, _Value(raw=raw, shown_as=f"<{len(raw)} bytes>"))

    def check_fanout(self, key: str, subscribers: int) -> None:
        self._at_most(FANOUT_RULE, key, subscribers)


DEFAULT_VALIDATOR = Validator()

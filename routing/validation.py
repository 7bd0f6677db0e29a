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
from collections.abc import Sequence

from routing.acl import ALLOW_ALL, AclRules
from routing.errors import error_for
from routing.grammar import (
    FANOUT_RULE,
    HASH,
    HEADER_RULES,
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


# Enum members as module names: looking one up on its class costs more than the check it names.
_PRESENT, _UTF8, _NON_EMPTY, _STRICT_WORDS = Check.PRESENT, Check.UTF8, Check.NON_EMPTY, Check.STRICT_WORDS
_BYTES, _WORDS, _HASH_WORDS = Check.BYTES, Check.WORDS, Check.HASH_WORDS


def _first_broken(
    rules: tuple[Rule, ...],
    policy: Policy,
    limits: Limits,
    *,
    raw: bytes | None = None,
    text: str | None = None,
    words: list[str] | None = None,
    exempt: tuple[str, ...] = (),
    shown: str | None = None,
) -> tuple[str | None, list[str] | None]:
    """Apply ``rules`` in order to one value; raise the error of the first broken, else return (text, words).

    A value off the wire is bytes (``raw``) until the UTF-8 rule decodes it, and an error shows the bytes until
    then; a value given as ``str`` is ``text`` from the start (present, and UTF-8 as the grammar checked it).
    ``exempt``: words the strict policy does not judge (a pattern's wildcards). ``shown``: what an error shows
    instead of the value. One function and no call per rule: the refresh job validates every event with it.
    """
    for rule in rules:
        if rule.policy is not None and rule.policy is not policy:
            continue
        check = rule.check
        fault: str | None = None
        if rule.limit is not None:
            if check is _BYTES:
                actual = len(raw) if raw is not None else len((text or "").encode("utf-8"))
            else:
                if words is None:
                    assert text is not None, "words are counted after the UTF-8 rule"
                    words = split_words(text)
                if check is _WORDS:
                    actual = len(words)
                elif check is _HASH_WORDS:
                    actual = words.count(HASH)
                else:
                    raise AssertionError(f"the validator has no measure for {check}")
            limit: int = getattr(limits, rule.limit)
            if actual > limit:
                subject = shown if shown is not None else raw if text is None else text
                raise error_for(rule.reason)(
                    subject, rule.rule, limit_name=rule.limit, limit_value=limit, actual=actual
                )
            continue
        if check is _PRESENT:
            if raw is None and text is None:
                fault = rule.rule
        elif check is _UTF8:
            if text is None and raw is not None:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    fault = f"{rule.rule} ({error.reason} at byte {error.start})"
        elif check is _NON_EMPTY:
            if text == "":
                fault = rule.rule
        elif check is _STRICT_WORDS:
            if words is None:
                assert text is not None, "words are judged after the UTF-8 rule"
                words = split_words(text)
            for word in words:
                if word not in exempt:
                    fault = strict_word_fault(word)
                    if fault is not None:
                        break
        else:
            raise AssertionError(f"the validator has no check for {check}")
        if fault is not None:
            raise error_for(rule.reason)(shown if shown is not None else raw if text is None else text, fault)
    return text, words


@dataclasses.dataclass(frozen=True)
class ValidationSettings:
    policy: str = "amqp"
    """Which words keys and patterns may have: ``amqp`` accepts everything RabbitMQ accepts (within the limits),
    ``strict`` only words of ``[A-Za-z0-9_-]+`` (for consumers that put words into file or topic names)."""

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

    def _at_most(self, rule: Rule, shown: object, actual: int) -> None:
        assert rule.limit is not None
        limit: int = getattr(self.limits, rule.limit)
        if actual > limit:
            raise error_for(rule.reason)(shown, rule.rule, limit_name=rule.limit, limit_value=limit, actual=actual)

    # -- routing keys ------------------------------------------------------

    def decode_key(self, raw: bytes | None) -> str:
        """Routing key bytes off the wire, decoded and validated (``None`` is ``null_key``)."""
        key, _ = _first_broken(KEY_RULES, self.policy, self.limits, raw=raw)
        assert key is not None
        return key

    def validate_key(self, key: str) -> list[str]:
        """The key's words, or a :class:`TopicError` naming the rule it breaks."""
        words = key_words(key)  # the grammar's check: a str, UTF-8
        _first_broken(KEY_RULES, self.policy, self.limits, text=key, words=words)
        return words

    # -- patterns ----------------------------------------------------------

    def validate_pattern(self, pattern: str) -> list[str]:
        """The pattern's words, or a :class:`TopicError` naming the rule it breaks."""
        words = pattern_words(pattern)  # the grammar's check: a str, UTF-8
        _first_broken(PATTERN_RULES, self.policy, self.limits, text=pattern, words=words, exempt=WILDCARDS)
        return words

    def validate_subscriber(self, subscriber: str) -> str:
        check_subscriber(subscriber)  # the grammar's check: a str, UTF-8, not empty
        _first_broken(SUBSCRIBER_RULES, self.policy, self.limits, text=subscriber)
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

    def for_batch(self) -> Validator:
        """This validator with a fresh ACL budget (:meth:`routing.acl.AclRules.for_batch`): one per batch."""
        return dataclasses.replace(self, acl=self.acl.for_batch())

    def check_allowed(self, subscriber: str, pattern: str) -> None:
        """Raise :class:`~routing.errors.ForbiddenPatternError` unless ``[acl]`` lets ``subscriber`` hold it."""
        self.acl.check(subscriber, pattern)

    # -- messages ----------------------------------------------------------

    def check_payload(self, payload: bytes | None) -> None:
        raw = b"" if payload is None else payload
        _first_broken(PAYLOAD_RULES, self.policy, self.limits, raw=raw, shown=f"<{len(raw)} bytes>")

    def check_headers(self, headers: Sequence[tuple[str, bytes | None]] | None) -> None:
        """Raise :class:`~routing.errors.HeadersTooLargeError` past ``limits.max_headers_bytes`` (none: 0 bytes)."""
        size = sum(len(key.encode("utf-8")) + len(value or b"") for key, value in headers or ())
        for rule in HEADER_RULES:
            self._at_most(rule, f"<{len(headers or ())} headers>", size)

    def check_fanout(self, key: str, subscribers: int) -> None:
        self._at_most(FANOUT_RULE, key, subscribers)


DEFAULT_VALIDATOR = Validator()

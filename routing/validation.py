"""The validation layer: policies and limits, applied where data enters the system.

Matchers check only the grammar (:mod:`routing.topic`). Everything a deployment
may want to bound or forbid lives here, so the subscription table and the
stream reject the same inputs for the same reasons:

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
import enum
import re

from routing.acl import ALLOW_ALL, AclRules
from routing.config import ConfigError
from routing.errors import (
    FanoutLimitError,
    InvalidKeyError,
    InvalidPatternError,
    InvalidSubscriberError,
    KeyTooLongError,
    MatchCostError,
    NullKeyError,
    PatternTooLongError,
    PatternTooManyWordsError,
    PayloadTooLargeError,
    TooManyHashWordsError,
    TooManySubscriptionsError,
    TooManyWordsError,
)
from routing.limits import DEFAULT_LIMITS, Limits
from routing.topic import HASH, STAR, check_subscriber, key_words, match_cost, pattern_words

STRICT_WORD = re.compile(r"[A-Za-z0-9_-]+")
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class Policy(enum.Enum):
    AMQP = "amqp"
    STRICT = "strict"

    @classmethod
    def parse(cls, value: str | Policy) -> Policy:
        if isinstance(value, Policy):
            return value
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(policy.value for policy in cls)
            raise ConfigError(f"unknown validation policy {value!r} (known: {known})") from None


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

    # -- routing keys ------------------------------------------------------

    def decode_key(self, raw: bytes | None) -> str:
        """Routing key bytes off the wire, decoded and validated (``None`` is ``null_key``)."""
        if raw is None:
            raise NullKeyError(None, "message has no routing key")
        if len(raw) > self.limits.max_key_bytes:
            raise KeyTooLongError(
                raw,
                "routing key is too long",
                limit_name="max_key_bytes",
                limit_value=self.limits.max_key_bytes,
                actual=len(raw),
            )
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            rule = f"routing key is not valid UTF-8 ({error.reason} at byte {error.start})"
            raise InvalidKeyError(raw, rule) from None
        self.validate_key(key)
        return key

    def validate_key(self, key: str) -> list[str]:
        """The key's words, or a :class:`TopicError` naming the rule it breaks."""
        words = key_words(key)
        size = len(key.encode("utf-8"))
        if size > self.limits.max_key_bytes:
            raise KeyTooLongError(
                key,
                "routing key is too long",
                limit_name="max_key_bytes",
                limit_value=self.limits.max_key_bytes,
                actual=size,
            )
        if len(words) > self.limits.max_key_words:
            raise TooManyWordsError(
                key,
                "routing key has too many words",
                limit_name="max_key_words",
                limit_value=self.limits.max_key_words,
                actual=len(words),
            )
        if self.policy is Policy.STRICT:
            for word in words:
                self._check_strict_word(key, word, InvalidKeyError)
        return words

    # -- patterns ----------------------------------------------------------

    def validate_pattern(self, pattern: str) -> list[str]:
        """The pattern's words, or a :class:`TopicError` naming the rule it breaks."""
        words = pattern_words(pattern)
        size = len(pattern.encode("utf-8"))
        if size > self.limits.max_pattern_bytes:
            raise PatternTooLongError(
                pattern,
                "pattern is too long",
                limit_name="max_pattern_bytes",
                limit_value=self.limits.max_pattern_bytes,
                actual=size,
            )
        if len(words) > self.limits.max_pattern_words:
            raise PatternTooManyWordsError(
                pattern,
                "pattern has too many words",
                limit_name="max_pattern_words",
                limit_value=self.limits.max_pattern_words,
                actual=len(words),
            )
        hashes = words.count(HASH)
        if hashes > self.limits.max_hash_words:
            raise TooManyHashWordsError(
                pattern,
                "pattern has too many '#' words",
                limit_name="max_hash_words",
                limit_value=self.limits.max_hash_words,
                actual=hashes,
            )
        if self.policy is Policy.STRICT:
            for word in words:
                if word not in (STAR, HASH):
                    self._check_strict_word(pattern, word, InvalidPatternError)
        return words

    def validate_subscriber(self, subscriber: str) -> str:
        check_subscriber(subscriber)
        size = len(subscriber.encode("utf-8"))
        if size > self.limits.max_subscriber_bytes:
            raise InvalidSubscriberError(
                subscriber,
                "subscriber id is too long",
                limit_name="max_subscriber_bytes",
                limit_value=self.limits.max_subscriber_bytes,
                actual=size,
            )
        return subscriber

    def check_subscription_count(self, subscriber: str, count: int) -> None:
        """Raise when ``subscriber`` would hold ``count`` patterns, past the limit."""
        if count > self.limits.max_subscriptions_per_subscriber:
            raise TooManySubscriptionsError(
                subscriber,
                "subscriber holds too many subscriptions",
                limit_name="max_subscriptions_per_subscriber",
                limit_value=self.limits.max_subscriptions_per_subscriber,
                actual=count,
            )

    def match_cost(self, pattern: str) -> int:
        """The lookup states ``pattern`` can add to matching one key (:func:`routing.topic.match_cost`)."""
        return match_cost(pattern_words(pattern), self.limits.max_key_words)

    def check_match_cost(self, subscriber: str, cost: int) -> None:
        """Raise when ``subscriber``'s patterns would cost ``cost`` lookup states in all, past the limit."""
        if cost > self.limits.max_match_cost_per_subscriber:
            raise MatchCostError(
                subscriber,
                "subscriber's patterns would cost too much matching work per routing key",
                limit_name="max_match_cost_per_subscriber",
                limit_value=self.limits.max_match_cost_per_subscriber,
                actual=cost,
            )

    def check_allowed(self, subscriber: str, pattern: str) -> None:
        """Raise :class:`~routing.errors.ForbiddenPatternError` unless ``[acl]`` lets ``subscriber`` hold it."""
        self.acl.check(subscriber, pattern)

    # -- messages ----------------------------------------------------------

    def check_payload(self, payload: bytes | None) -> None:
        size = 0 if payload is None else len(payload)
        if size > self.limits.max_payload_bytes:
            raise PayloadTooLargeError(
                f"<{size} bytes>",
                "payload is too large",
                limit_name="max_payload_bytes",
                limit_value=self.limits.max_payload_bytes,
                actual=size,
            )

    def check_fanout(self, key: str, subscribers: int) -> None:
        if subscribers > self.limits.max_fanout:
            raise FanoutLimitError(
                key,
                "message matches too many subscribers",
                limit_name="max_fanout",
                limit_value=self.limits.max_fanout,
                actual=subscribers,
            )

    # -- helpers -----------------------------------------------------------

    @staticmethod
    def _check_strict_word(text: str, word: str, error: type[InvalidKeyError | InvalidPatternError]) -> None:
        if word == "":
            raise error(text, "empty words are not allowed under the strict policy")
        if CONTROL_CHARACTER.search(word):
            raise error(text, "control characters are not allowed under the strict policy")
        if not STRICT_WORD.fullmatch(word):
            raise error(text, f"word {word!r} is not [A-Za-z0-9_-]+ as the strict policy requires")


DEFAULT_VALIDATOR = Validator()

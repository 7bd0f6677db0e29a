"""The one exception hierarchy for topics, patterns and limits.

Every error names the offending text, the rule it broke (a stable ``reason``
code, the same one the stream writes into its dead-letter table) and, where a
limit was involved, the limit's name and value.

Each class carries its reason code (``reason``), and this module is the one
home of the codes: :data:`DEAD_LETTER_ERRORS` lists the errors a routed message
can be dead-lettered for, and :data:`DEAD_LETTER_REASONS` (the dead-letter
table's ``reason`` values and the metrics' ``dead_<reason>`` columns) is
derived from it. The codes are stored in tables on disk: never rename one.
"""

from __future__ import annotations


def _shorten(text: object, keep: int = 80) -> str:
    """Quote ``text`` for a message without echoing megabytes of it."""
    shown = repr(text)
    if len(shown) > keep:
        shown = f"{shown[:keep]}... ({len(str(text))} chars)"
    return shown


class TopicError(ValueError):
    """A routing key or pattern that breaks the grammar, a policy or a limit.

    Attributes:
        subject: the offending key or pattern (or subscriber id).
        reason: stable machine-readable code, e.g. ``key_too_long``.
        limit_name: the limit that was exceeded, if any.
        limit_value: that limit's configured value, if any.
    """

    reason = "invalid"

    def __init__(
        self,
        subject: object,
        rule: str,
        *,
        limit_name: str | None = None,
        limit_value: int | None = None,
        actual: int | None = None,
    ) -> None:
        self.subject = subject
        self.rule = rule
        self.limit_name = limit_name
        self.limit_value = limit_value
        self.actual = actual
        message = f"{self.kind} {_shorten(subject)}: {rule}"
        if limit_name is not None:
            message += f" (limit {limit_name}={limit_value}"
            message += f", got {actual})" if actual is not None else ")"
        message += f" [reason={self.reason}]"
        super().__init__(message)

    kind = "topic"


class InvalidKeyError(TopicError):
    """A routing key that the active policy does not accept."""

    reason = "invalid_key"
    kind = "routing key"


class NullKeyError(InvalidKeyError):
    """The message has no routing key at all (as opposed to the empty key)."""

    reason = "null_key"


class KeyTooLongError(InvalidKeyError):
    reason = "key_too_long"


class TooManyWordsError(InvalidKeyError):
    reason = "too_many_words"


class InvalidPatternError(TopicError):
    """A subscription pattern that the active policy does not accept."""

    reason = "invalid_pattern"
    kind = "pattern"


class PatternTooLongError(InvalidPatternError):
    reason = "pattern_too_long"


class PatternTooManyWordsError(InvalidPatternError):
    reason = "pattern_too_many_words"


class TooManyHashWordsError(InvalidPatternError):
    reason = "too_many_hash_words"


class ForbiddenPatternError(InvalidPatternError):
    """A pattern the ``[acl]`` rules do not let this subscriber hold (:mod:`routing.acl`)."""

    reason = "forbidden_pattern"


class InvalidSubscriberError(TopicError):
    reason = "invalid_subscriber"
    kind = "subscriber"


class TooManySubscriptionsError(InvalidSubscriberError):
    reason = "too_many_subscriptions"


class MatchCostError(InvalidSubscriberError):
    """A subscribe that would take a subscriber's patterns past ``limits.max_match_cost_per_subscriber``."""

    reason = "match_cost_exceeded"


class PayloadTooLargeError(TopicError):
    reason = "payload_too_large"
    kind = "payload"


class FanoutLimitError(TopicError):
    reason = "fanout_limit"
    kind = "routing key"


#: The errors a routed message is dead-lettered for, in the order the router checks them: the JVM's
#: classification (:mod:`routing.router.classify`, the order of ``Validator.decode_key`` then
#: ``check_payload``), then the fan-out limit after matching (:mod:`udfs.route`).
DEAD_LETTER_ERRORS: tuple[type[TopicError], ...] = (
    NullKeyError,
    KeyTooLongError,
    InvalidKeyError,
    TooManyWordsError,
    PayloadTooLargeError,
    FanoutLimitError,
)

#: Every dead-letter reason the router writes, in that order.
DEAD_LETTER_REASONS: tuple[str, ...] = tuple(error.reason for error in DEAD_LETTER_ERRORS)

#: The errors a subscription event's fields can be rejected for (the validator's subscriber and pattern checks), beside
#: the event-level codes of :mod:`routing.subscriptions.events` (``PARSE_REASONS`` there is both together). Per-batch,
#: the refresh job also rejects :class:`TooManySubscriptionsError`, :class:`MatchCostError` and
#: ``subscription_table_full``.
#: :class:`ForbiddenPatternError` is a subscribe the ``[acl]`` rules forbid (checked last), and also the recorded
#: reason of a held subscription that tightened rules deactivated.
SUBSCRIPTION_REJECT_ERRORS: tuple[type[TopicError], ...] = (
    InvalidSubscriberError,
    InvalidPatternError,
    PatternTooLongError,
    PatternTooManyWordsError,
    TooManyHashWordsError,
    ForbiddenPatternError,
)

"""The one exception hierarchy for topics, patterns and limits.

Every error names the offending text, the rule it broke (a stable ``reason``
code, the same one the stream writes into its dead-letter table) and, where a
limit was involved, the limit's name and value.

The codes and the rules that give them are declared in :mod:`routing.grammar`;
each class here carries one of those codes (``reason``), and :func:`error_for`
names the class of a code. :data:`DEAD_LETTER_ERRORS` and
:data:`SUBSCRIPTION_REJECT_ERRORS` are the classes of the grammar's derived
reason lists. The codes are stored in tables on disk: never rename one.
"""

from __future__ import annotations

from routing import grammar


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

    reason = grammar.INVALID_KEY
    kind = "routing key"


class NullKeyError(InvalidKeyError):
    """The message has no routing key at all (as opposed to the empty key)."""

    reason = grammar.NULL_KEY


class KeyTooLongError(InvalidKeyError):
    reason = grammar.KEY_TOO_LONG


class TooManyWordsError(InvalidKeyError):
    reason = grammar.TOO_MANY_WORDS


class InvalidPatternError(TopicError):
    """A subscription pattern that the active policy does not accept."""

    reason = grammar.INVALID_PATTERN
    kind = "pattern"


class PatternTooLongError(InvalidPatternError):
    reason = grammar.PATTERN_TOO_LONG


class PatternTooManyWordsError(InvalidPatternError):
    reason = grammar.PATTERN_TOO_MANY_WORDS


class TooManyHashWordsError(InvalidPatternError):
    reason = grammar.TOO_MANY_HASH_WORDS


class ForbiddenPatternError(InvalidPatternError):
    """A pattern the ``[acl]`` rules do not let this subscriber hold (:mod:`routing.acl`)."""

    reason = grammar.FORBIDDEN_PATTERN


class InvalidSubscriberError(TopicError):
    reason = grammar.INVALID_SUBSCRIBER
    kind = "subscriber"


class TooManySubscriptionsError(InvalidSubscriberError):
    reason = grammar.TOO_MANY_SUBSCRIPTIONS


class MatchCostError(InvalidSubscriberError):
    """A subscribe that would take a subscriber's patterns past ``limits.max_match_cost_per_subscriber``."""

    reason = grammar.MATCH_COST_EXCEEDED


class PayloadTooLargeError(TopicError):
    reason = grammar.PAYLOAD_TOO_LARGE
    kind = "payload"


class HeadersTooLargeError(TopicError):
    reason = grammar.HEADERS_TOO_LARGE
    kind = "headers"


class FanoutLimitError(TopicError):
    reason = grammar.FANOUT_LIMIT
    kind = "routing key"


def _classes(error: type[TopicError]) -> list[type[TopicError]]:
    return [error, *(below for sub in error.__subclasses__() for below in _classes(sub))]


#: The class of every reason code that has one (the grammar's ``null_pattern``, ``null_subscriber`` and
#: ``subscription_table_full`` are reported as codes alone: a bulk load's bad rows, a refresh batch's rejects).
_ERROR_FOR_REASON: dict[str, type[TopicError]] = {error.reason: error for error in _classes(TopicError)[1:]}


def error_for(reason: str) -> type[TopicError]:
    """The error class of grammar reason code ``reason`` (a ``KeyError`` for a code without one)."""
    return _ERROR_FOR_REASON[reason]


#: The errors a routed message is dead-lettered for, in the order the router checks them
#: (:data:`routing.grammar.DEAD_LETTER_REASONS`).
DEAD_LETTER_ERRORS: tuple[type[TopicError], ...] = tuple(map(error_for, grammar.DEAD_LETTER_REASONS))

#: Every dead-letter reason the router writes, in that order.
DEAD_LETTER_REASONS: tuple[str, ...] = grammar.DEAD_LETTER_REASONS

#: The errors a subscription event's fields can be rejected for (the validator's subscriber and pattern checks, then
#: the ``[acl]`` rules), beside the event-level codes of :mod:`routing.subscriptions.events` (``PARSE_REASONS`` there
#: is both together). Per batch, the refresh job also rejects by :data:`routing.grammar.HOLDING_RULES`.
#: :class:`ForbiddenPatternError` is also the recorded reason of a held subscription that tightened rules deactivated.
SUBSCRIPTION_REJECT_ERRORS: tuple[type[TopicError], ...] = tuple(map(error_for, grammar.SUBSCRIPTION_FIELD_REASONS))

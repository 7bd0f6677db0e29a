"""The key grammar, declared once: words, wildcards, policies, and the rules keys, patterns and subscribers meet.

Every other place that judges a routing key, a pattern or a subscriber id is a projection of this
file, and ``tests/rules.tsv`` (one row per case: subject, text, limits, the outcome under each
policy) is the table they are all tested against:

* :class:`routing.validation.Validator` applies the rules in Python (``tests/test_grammar.py``);
* :mod:`routing.router.classify` builds its Spark SQL from :data:`KEY_RULES`,
  :data:`PAYLOAD_RULES` and :data:`HEADER_RULES`, so the JVM judges each Kafka record with no Python per record
  (``tests/integration/test_router_classify.py``);
* the native bulk loads (``check_row`` in the native crate's ``bulk.rs``) apply the amqp-policy
  rules of :data:`PATTERN_RULES` then :data:`SUBSCRIBER_RULES`, all but the UTF-8 one, which Arrow
  applies to a whole column (``tests/test_grammar.py`` runs the table through them);
* :mod:`routing.errors` gives each reason code its exception class.

**Words.** A key or pattern is split on every :data:`SEPARATOR`: the empty text has zero words and
empty words are real words (``"a..b"`` has three). In a pattern, a word that is exactly
:data:`STAR` matches one word and a word that is exactly :data:`HASH` zero or more; glued to other
text they are literals. Matching itself is :mod:`routing.topic`.

**Rules.** Each subject's rules are listed in the order they are checked; the first one broken
names the reason code, which the dead-letter and reject tables store (never rename one). A
subscription event checks its subscriber before its pattern, a bulk row its pattern first. A rule
with a ``limit`` is broken when its measure exceeds that :class:`routing.limits.Limits` field (the
limit itself is allowed); a rule with a ``policy`` applies under that policy only.

A ``null`` rule applies where a value can be absent (a Kafka record without a key, a null in an
Arrow column); the Python API takes ``str`` and refuses ``None`` with a ``TypeError``. Text given
as ``str`` rather than bytes is checked to encode as UTF-8 first (:mod:`routing.topic`, which
every matcher applies too): a ``str`` with a lone surrogate has no UTF-8 length to measure.
"""

from __future__ import annotations

import dataclasses
import enum
import re

from routing.config import ConfigError

# -- words -----------------------------------------------------------------

#: Splits a key or pattern into words.
SEPARATOR = "."
#: A pattern word that matches exactly one key word.
STAR = "*"
#: A pattern word that matches zero or more key words.
HASH = "#"
WILDCARDS = (STAR, HASH)


# -- policies --------------------------------------------------------------


class Policy(enum.Enum):
    """``[validation] policy``: which texts are keys and patterns, beyond the limits."""

    #: Everything RabbitMQ accepts: any UTF-8 text, empty words and control characters included.
    AMQP = "amqp"
    #: Also every word of :data:`STRICT_WORD` (a pattern's wildcard words aside): no empty word, no
    #: control character. The empty key has zero words, so none to refuse.
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


#: The characters a word may hold under the strict policy.
STRICT_WORD_CLASS = "[A-Za-z0-9_-]"
#: A word under the strict policy: one or more of :data:`STRICT_WORD_CLASS`.
STRICT_WORD = f"{STRICT_WORD_CLASS}+"
#: C0 controls, DEL and C1 controls: named in the strict policy's message, since they print as nothing.
CONTROL_CHARACTERS = "[\x00-\x1f\x7f-\x9f]"

_STRICT_WORD = re.compile(STRICT_WORD)
_CONTROL_CHARACTER = re.compile(CONTROL_CHARACTERS)


def strict_word_fault(word: str) -> str | None:
    """Why the strict policy refuses ``word``, or ``None`` when it is a :data:`STRICT_WORD`."""
    if word == "":
        return "empty words are not allowed under the strict policy"
    if _CONTROL_CHARACTER.search(word):
        return "control characters are not allowed under the strict policy"
    if not _STRICT_WORD.fullmatch(word):
        return f"word {word!r} is not {STRICT_WORD} as the strict policy requires"
    return None


# -- reason codes (stored in tables: never rename one) ----------------------

NULL_KEY = "null_key"
KEY_TOO_LONG = "key_too_long"
INVALID_KEY = "invalid_key"
TOO_MANY_WORDS = "too_many_words"
NULL_PATTERN = "null_pattern"
INVALID_PATTERN = "invalid_pattern"
PATTERN_TOO_LONG = "pattern_too_long"
PATTERN_TOO_MANY_WORDS = "pattern_too_many_words"
TOO_MANY_HASH_WORDS = "too_many_hash_words"
FORBIDDEN_PATTERN = "forbidden_pattern"
NULL_SUBSCRIBER = "null_subscriber"
INVALID_SUBSCRIBER = "invalid_subscriber"
TOO_MANY_SUBSCRIPTIONS = "too_many_subscriptions"
MATCH_COST_EXCEEDED = "match_cost_exceeded"
SUBSCRIPTION_TABLE_FULL = "subscription_table_full"
PAYLOAD_TOO_LARGE = "payload_too_large"
HEADERS_TOO_LARGE = "headers_too_large"
FANOUT_LIMIT = "fanout_limit"


# -- rules -----------------------------------------------------------------


class Check(enum.Enum):
    """What a rule looks at; each projection implements the checks of the rules it applies."""

    #: The value exists.
    PRESENT = "present"
    #: Bytes off the wire decode as UTF-8 (text given as ``str``: it encodes as UTF-8).
    UTF8 = "utf8"
    #: The text is not empty.
    NON_EMPTY = "non_empty"
    #: UTF-8 bytes, at most the limit.
    BYTES = "bytes"
    #: A message's headers: the UTF-8 bytes of every key plus the bytes of every value, at most the limit.
    HEADER_BYTES = "header_bytes"
    #: Words (:data:`SEPARATOR`), at most the limit.
    WORDS = "words"
    #: Words that are exactly :data:`HASH`, at most the limit.
    HASH_WORDS = "hash_words"
    #: Every word is a :data:`STRICT_WORD` (in a pattern, every word but the wildcards).
    STRICT_WORDS = "strict_words"
    #: The ``[acl]`` rules let this subscriber hold the pattern (:mod:`routing.acl`).
    ALLOWED = "allowed"
    #: A count the caller measured (subscribers matched, patterns held, ...), at most the limit.
    COUNT = "count"


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule: its reason code, what it checks, how its error states it, its limit and its policy."""

    reason: str
    check: Check
    #: The rule as an error message states it (checks of words add which word).
    rule: str
    #: The :class:`routing.limits.Limits` field the measure may not exceed, if any.
    limit: str | None = None
    #: The one policy the rule applies under; ``None``: every policy.
    policy: Policy | None = None

    def applies(self, policy: Policy) -> bool:
        return self.policy is None or self.policy is policy


#: What a ``str`` that does not encode as UTF-8 (a lone surrogate) is told, whatever its subject.
NOT_UTF8_TEXT = "is not valid UTF-8 text (it contains a lone surrogate)"

#: A routing key, as bytes off the wire (Kafka key, header or JSON field). Given as ``str``
#: (:meth:`routing.validation.Validator.validate_key`) it is UTF-8-checked first, as every ``str``.
KEY_RULES: tuple[Rule, ...] = (
    Rule(NULL_KEY, Check.PRESENT, "message has no routing key"),
    Rule(KEY_TOO_LONG, Check.BYTES, "routing key is too long", limit="max_key_bytes"),
    Rule(INVALID_KEY, Check.UTF8, "routing key is not valid UTF-8"),
    Rule(TOO_MANY_WORDS, Check.WORDS, "routing key has too many words", limit="max_key_words"),
    Rule(INVALID_KEY, Check.STRICT_WORDS, f"words of {STRICT_WORD}", policy=Policy.STRICT),
)

#: A subscription pattern.
PATTERN_RULES: tuple[Rule, ...] = (
    Rule(NULL_PATTERN, Check.PRESENT, "pattern is null"),
    Rule(INVALID_PATTERN, Check.UTF8, NOT_UTF8_TEXT),
    Rule(PATTERN_TOO_LONG, Check.BYTES, "pattern is too long", limit="max_pattern_bytes"),
    Rule(PATTERN_TOO_MANY_WORDS, Check.WORDS, "pattern has too many words", limit="max_pattern_words"),
    Rule(TOO_MANY_HASH_WORDS, Check.HASH_WORDS, "pattern has too many '#' words", limit="max_hash_words"),
    Rule(INVALID_PATTERN, Check.STRICT_WORDS, f"words of {STRICT_WORD}", policy=Policy.STRICT),
)

#: A subscriber id: opaque, non-empty text.
SUBSCRIBER_RULES: tuple[Rule, ...] = (
    Rule(NULL_SUBSCRIBER, Check.PRESENT, "subscriber is null"),
    Rule(INVALID_SUBSCRIBER, Check.UTF8, NOT_UTF8_TEXT),
    Rule(INVALID_SUBSCRIBER, Check.NON_EMPTY, "subscriber id must not be empty"),
    Rule(INVALID_SUBSCRIBER, Check.BYTES, "subscriber id is too long", limit="max_subscriber_bytes"),
)

#: A message's payload (a missing one has 0 bytes), judged after its key.
PAYLOAD_RULES: tuple[Rule, ...] = (
    Rule(PAYLOAD_TOO_LARGE, Check.BYTES, "payload is too large", limit="max_payload_bytes"),
)

#: A message's headers (none: 0 bytes), judged after its payload. Every delivery row copies them, so they are
#: bounded like the payload.
HEADER_RULES: tuple[Rule, ...] = (
    Rule(HEADERS_TOO_LARGE, Check.HEADER_BYTES, "headers are too large", limit="max_headers_bytes"),
)

#: A message once matched: the subscribers it fans out to (:mod:`udfs.route`).
FANOUT_RULE = Rule(FANOUT_LIMIT, Check.COUNT, "message matches too many subscribers", limit="max_fanout")

#: A subscribe the ``[acl]`` rules refuse: checked after its subscriber and pattern rules
#: (:mod:`routing.acl` words the message: which subscriber, and why).
ACL_RULE = Rule(FORBIDDEN_PATTERN, Check.ALLOWED, "subscriber may not hold it")

#: A subscribe judged against what is already held, in this order, per refresh batch
#: (:mod:`routing.subscriptions.table`, whose SQL words each reject's detail).
HOLDING_RULES: tuple[Rule, ...] = (
    Rule(
        SUBSCRIPTION_TABLE_FULL,
        Check.COUNT,
        "the subscription table holds too many subscriptions",
        limit="max_subscriptions_per_table",
    ),
    Rule(
        TOO_MANY_SUBSCRIPTIONS,
        Check.COUNT,
        "subscriber holds too many subscriptions",
        limit="max_subscriptions_per_subscriber",
    ),
    Rule(
        MATCH_COST_EXCEEDED,
        Check.COUNT,
        "subscriber's patterns would cost too much matching work per routing key",
        limit="max_match_cost_per_subscriber",
    ),
)


def reasons(rules: tuple[Rule, ...]) -> tuple[str, ...]:
    """The reason codes of ``rules``, each once, in check order."""
    return tuple(dict.fromkeys(rule.reason for rule in rules))


#: Every reason a routed message can be dead-lettered for, in check order: the dead-letter table's
#: ``reason`` values and the metrics' ``dead_<reason>`` columns.
DEAD_LETTER_REASONS: tuple[str, ...] = reasons((*KEY_RULES, *PAYLOAD_RULES, *HEADER_RULES, FANOUT_RULE))

#: Every reason a subscription event's own fields can be rejected for (a bulk load's nulls aside: an
#: event without a field is ``missing_field``, :mod:`routing.subscriptions.events`).
SUBSCRIPTION_FIELD_REASONS: tuple[str, ...] = tuple(
    reason
    for reason in reasons((*SUBSCRIBER_RULES, *PATTERN_RULES, ACL_RULE))
    if reason not in (NULL_SUBSCRIBER, NULL_PATTERN)
)

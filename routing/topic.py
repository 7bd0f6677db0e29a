"""The topic grammar: AMQP 0-9-1 topic-exchange semantics, as RabbitMQ implements them.

* A routing key is split on every ``.``. The empty key ``""`` has zero words;
  every other key has ``key.count(".") + 1`` words, and empty words are real
  words (``".x"`` is ``["", "x"]``, ``"a..b"`` has three words).
* In a pattern, a word that is exactly ``*`` matches exactly one word and a
  word that is exactly ``#`` matches zero or more words, anywhere and any
  number of times. A wildcard glued to other characters (``a*``,
  ``simply#carrots``) is a literal, and wildcard characters inside a routing
  key are plain text.
* Matching is case-sensitive on the exact text; nothing is normalised.

The words and wildcards are declared in :mod:`routing.grammar`, with every rule a
key, a pattern or a subscriber meets. This module is matching: the one check
every matcher applies is that a key or pattern is a ``str`` that encodes as
UTF-8 (so the native matcher and the Python matchers accept exactly the same
inputs). Policies and limits are a separate layer, :mod:`routing.validation`.
"""

from __future__ import annotations

from collections.abc import Sequence

from routing.errors import InvalidKeyError, InvalidPatternError, InvalidSubscriberError
from routing.grammar import HASH as HASH
from routing.grammar import NOT_UTF8_TEXT, SUBSCRIBER_RULES, WILDCARDS, Check
from routing.grammar import SEPARATOR as SEPARATOR
from routing.grammar import STAR as STAR

#: What an empty subscriber id is told (its rule in :data:`routing.grammar.SUBSCRIBER_RULES`).
_EMPTY_SUBSCRIBER = next(rule.rule for rule in SUBSCRIBER_RULES if rule.check is Check.NON_EMPTY)


def split_words(text: str) -> list[str]:
    """Split a key or pattern into words: ``""`` has none, ``"a..b"`` has three."""
    return text.split(SEPARATOR) if text else []


def _check_text(text: object, error: type[InvalidKeyError | InvalidPatternError | InvalidSubscriberError]) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{error.kind} must be str, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise error(text, NOT_UTF8_TEXT) from None
    return text


def key_words(key: object) -> list[str]:
    """Words of a routing key, after the grammar check."""
    return split_words(_check_text(key, InvalidKeyError))


def pattern_words(pattern: object) -> list[str]:
    """Words of a subscription pattern, after the grammar check."""
    return split_words(_check_text(pattern, InvalidPatternError))


def check_subscriber(subscriber: object) -> str:
    """Subscriber ids are opaque non-empty strings."""
    text = _check_text(subscriber, InvalidSubscriberError)
    if not text:
        raise InvalidSubscriberError(text, _EMPTY_SUBSCRIBER)
    return text


def match_cost(words: Sequence[str], max_key_words: int) -> int:
    """The most lookup states this pattern's trie nodes can add to matching one key of up to ``max_key_words`` words.

    The native walk (``native/core/src/frozen.rs``) visits ``(node, key position)`` states. A node with no
    ``#`` at or above it is only ever met at one position (its depth); a ``#`` node, and every node
    below one, at up to every position ``0..=max_key_words``. So the words before the first ``#``
    cost one state each and the words from it on ``max_key_words + 1`` each. Shared trie nodes only
    make the sum smaller, so a subscriber's patterns together never add more than their costs' sum.
    """
    first_hash = next((index for index, word in enumerate(words) if word == HASH), len(words))
    return first_hash + (len(words) - first_hash) * (max_key_words + 1)


def has_wildcard(words: Sequence[str]) -> bool:
    return any(word in WILDCARDS for word in words)


def words_match(pattern: Sequence[str], key: Sequence[str]) -> bool:
    """Whether pattern words match key words, in O(len(pattern) * len(key)).

    Dynamic programming over (pattern position, key position), so a pattern of
    many ``#`` words never backtracks exponentially. ``reachable[j]`` is true
    when the first ``i`` pattern words can consume exactly the first ``j`` key
    words.
    """
    n = len(key)
    reachable = [True] + [False] * n
    for word in pattern:
        if word == HASH:
            # '#' consumes zero or more words: a running OR over the row.
            seen = False
            for j in range(n + 1):
                seen = seen or reachable[j]
                reachable[j] = seen
        elif word == STAR:
            reachable = [False, *reachable[:n]]
        else:
            reachable = [False] + [reachable[j] and key[j] == word for j in range(n)]
        if not any(reachable):
            return False
    return reachable[n]


def matches(pattern: str, key: str) -> bool:
    """Whether ``pattern`` matches routing ``key`` (grammar checked)."""
    return words_match(pattern_words(pattern), key_words(key))

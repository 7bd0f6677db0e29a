"""Shared Hypothesis strategies for topic keys, patterns and matcher operations.

Import from any test module as ``from strategies import ...`` (pytest puts
``tests/`` on ``sys.path``; there is no ``tests/__init__.py``).

The alphabets are deliberately tiny so that generated keys and patterns collide
often: a property test over random text would almost never produce a match.
They cover every corner of the grammar:

* the empty word ``""`` (``".x"`` is two words, ``"a..b"`` three);
* wildcard characters as plain text inside keys (``*``, ``#``);
* wildcards glued to other text, which are literals in patterns (``a*``, ``#b``);
* a non-ASCII word, so UTF-8 handling is exercised;
* ``*`` and ``#`` as whole pattern words, at every position, repeated.
"""

from __future__ import annotations

from hypothesis import strategies as st

from routing.topic import HASH, STAR

#: Literal words. ``*``/``#`` here are literal text: in a key they are plain
#: characters, and this list is only used for keys and literal pattern words.
LITERAL_WORDS: tuple[str, ...] = ("", "a", "b", "a*", "#b", "é")
#: Words that can appear in a routing key: literals plus bare wildcard characters,
#: which a key treats as ordinary text.
KEY_WORDS: tuple[str, ...] = (*LITERAL_WORDS, STAR, HASH)
#: Words that can appear in a pattern: literals plus the two wildcards.
PATTERN_WORDS: tuple[str, ...] = (*LITERAL_WORDS, STAR, HASH)
#: A small subscriber alphabet so that one subscriber often holds several patterns.
SUBSCRIBERS: tuple[str, ...] = ("s1", "s2", "s3", "s4")

MAX_WORDS = 6

key_word = st.sampled_from(KEY_WORDS)
literal_word = st.sampled_from(LITERAL_WORDS)
# Wildcards weighted up so patterns carry one or more of them most of the time.
pattern_word = st.one_of(st.sampled_from((STAR, HASH)), st.sampled_from(PATTERN_WORDS))
subscribers = st.sampled_from(SUBSCRIBERS)


def join(words: list[str]) -> str:
    return ".".join(words)


#: Routing keys, including ``""`` (zero words) and keys with empty words.
keys = st.lists(key_word, max_size=MAX_WORDS).map(join)
#: Subscription patterns with ``*`` and ``#`` anywhere, including ``""``, ``#.#`` and ``*.#.*``.
patterns = st.lists(pattern_word, max_size=MAX_WORDS).map(join)


@st.composite
def keys_matching(draw: st.DrawFn, pattern: str) -> str:
    """A routing key that ``pattern`` matches, built by instantiating its wildcards.

    ``*`` becomes one key word and ``#`` zero to three. The result is a hit by
    construction (tests still check it with the oracle rather than trusting this).
    """
    words = pattern.split(".") if pattern else []
    out: list[str] = []
    for word in words:
        if word == STAR:
            out.append(draw(key_word))
        elif word == HASH:
            out.extend(draw(st.lists(key_word, max_size=3)))
        else:
            out.append(word)
    if out == [""]:
        # No key has exactly one (empty) word: "" is the zero-word key. Only
        # wildcards can produce this; let a '#' absorb a second empty word, or
        # (for the pattern "*") use a non-empty word.
        return "." if HASH in words else "a"
    return join(out)


@st.composite
def pattern_and_key(draw: st.DrawFn) -> tuple[str, str]:
    """A pattern and a key that matches it about half the time."""
    pattern = draw(patterns)
    key = draw(st.one_of(keys_matching(pattern), keys))
    return pattern, key


#: One subscribe or unsubscribe call: (op, pattern, subscriber).
operations = st.tuples(st.sampled_from(("subscribe", "unsubscribe")), patterns, subscribers)
#: Interleaved subscribe/unsubscribe sequences. Unsubscribes often hit a pair
#: subscribed earlier because the pattern and subscriber alphabets are small.
operation_sequences = st.lists(operations, max_size=40)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[tuple[str, str, str]], list[str]]:
    """An operation sequence plus keys to look up afterwards, half of them built to hit."""
    ops = draw(operation_sequences)
    subscribed = [pattern for op, pattern, _ in ops if op == "subscribe"]
    hits = [draw(keys_matching(p)) for p in subscribed[:10]]
    misses = draw(st.lists(keys, max_size=10))
    return ops, hits + misses


#: One step of a script: ("subscribe" | "unsubscribe", pattern, subscriber) or ("lookup", key, "").
script_steps = st.one_of(
    operations,
    keys.map(lambda key: ("lookup", key, "")),
    patterns.flatmap(keys_matching).map(lambda key: ("lookup", key, "")),
)
#: Subscribes, unsubscribes and lookups interleaved, so a matcher's index is
#: exercised while it changes (not only after the last write).
scripts = st.lists(script_steps, max_size=50)

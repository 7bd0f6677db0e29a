"""The grammar: word splitting, the DP matcher and the regex oracle agree with the semantics table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from validity import VALIDITY

from routing.errors import InvalidKeyError, InvalidPatternError, InvalidSubscriberError, TopicError
from routing.reference import encode_key, reference_matches
from routing.topic import check_subscriber, key_words, matches, pattern_words, split_words, words_match

SPLITS = [
    ("", []),
    ("a", ["a"]),
    (".", ["", ""]),
    (".x", ["", "x"]),
    ("x.", ["x", ""]),
    ("a..b", ["a", "", "b"]),
    ("stock.nasdaq.msft", ["stock", "nasdaq", "msft"]),
    ("a*.#b", ["a*", "#b"]),
]


@pytest.mark.parametrize(("text", "words"), SPLITS)
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words
    assert key_words(text) == words
    assert pattern_words(text) == words


# (pattern, key, matches): RabbitMQ's topic-exchange semantics, from the one table (tests/validity.tsv).
@pytest.mark.parametrize(("pattern", "key", "expected"), VALIDITY)
def test_validity_table(pattern: str, key: str, expected: bool) -> None:
    assert matches(pattern, key) is expected
    assert reference_matches(pattern, key) is expected


@pytest.mark.timeout(10)
def test_many_hash_words_are_polynomial() -> None:
    # RabbitMQ's suite has this case: 15 '#' words against a 31-word key.
    pattern = ".".join(["#"] * 15 + ["x"])
    key = ".".join(["a"] * 31)
    assert matches(pattern, key) is False
    assert matches(pattern, key + ".x") is True
    assert matches(".".join(["#"] * 15), key) is True


def test_encode_key_distinguishes_empty_key_from_empty_word() -> None:
    assert encode_key("") == ""
    assert encode_key(".") == ".."
    assert encode_key("a.b") == ".a.b"


@pytest.mark.parametrize("bad", [None, 1, b"a.b", ["a"]])
def test_non_str_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        key_words(bad)
    with pytest.raises(TypeError):
        pattern_words(bad)


def test_lone_surrogates_are_not_utf8() -> None:
    with pytest.raises(InvalidKeyError, match="UTF-8"):
        key_words("a.\udcff")
    with pytest.raises(InvalidPatternError, match="UTF-8"):
        pattern_words("\ud800.*")
    with pytest.raises(TopicError):
        check_subscriber("\udcff")


def test_subscriber_must_be_non_empty() -> None:
    with pytest.raises(InvalidSubscriberError, match="empty"):
        check_subscriber("")
    assert check_subscriber("sub-1") == "sub-1"


WORD = st.sampled_from(["", "a", "b", "ab", "*", "#", "a*", "#b"])
KEY_WORD = st.sampled_from(["", "a", "b", "ab", "*", "#"])


def _join(words: list[str]) -> str:
    # [] is the empty key; [''] cannot be written (it would read back as zero words).
    return ".".join(words) if words != [""] else ""


@settings(max_examples=400, deadline=None)
@given(st.lists(WORD, max_size=6).map(_join), st.lists(KEY_WORD, max_size=7).map(_join))
def test_dp_matcher_agrees_with_regex_oracle(pattern: str, key: str) -> None:
    assert words_match(pattern_words(pattern), key_words(key)) == reference_matches(pattern, key)

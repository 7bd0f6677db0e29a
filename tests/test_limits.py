"""Every limit: loaded from conf/, overridable, and enforced at the limit and one past it."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from routing.config import DEFAULT_CONF, ConfigError
from routing.errors import (
    FanoutLimitError,
    InvalidSubscriberError,
    KeyTooLongError,
    PatternTooLongError,
    PatternTooManyWordsError,
    PayloadTooLargeError,
    TooManyHashWordsError,
    TooManySubscriptionsError,
    TooManyWordsError,
)
from routing.limits import DEFAULT_LIMITS, Limits
from routing.settings import load_settings
from routing.validation import Validator


def test_defaults_match_the_conf_file() -> None:
    with DEFAULT_CONF.open("rb") as handle:
        table = tomllib.load(handle)["limits"]
    assert table == dataclasses.asdict(DEFAULT_LIMITS)
    assert load_settings(env={}).limits == DEFAULT_LIMITS


def test_defaults_are_at_least_what_the_protocols_promise() -> None:
    assert DEFAULT_LIMITS.max_key_bytes >= 255
    assert DEFAULT_LIMITS.max_key_words >= 32
    assert DEFAULT_LIMITS.max_payload_bytes == 1024 * 1024


def test_overrides_from_file_env_and_arguments(tmp_path: Path) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text("[limits]\nmax_key_bytes = 100\nmax_key_words = 5\n")
    env = {"ROUTER__LIMITS__MAX_KEY_WORDS": "7"}
    limits = load_settings(conf, env=env, overrides={"limits": {"max_fanout": 3}}).limits
    assert (limits.max_key_bytes, limits.max_key_words, limits.max_fanout) == (100, 7, 3)
    assert limits.max_payload_bytes == DEFAULT_LIMITS.max_payload_bytes


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("max_key_bytez = 1", "unknown setting limits.max_key_bytez"),
        ('max_key_bytes = "many"', "limits.max_key_bytes must be an integer"),
        ("max_key_bytes = 0", "max_key_bytes must be a positive integer"),
        ("max_key_bytes = true", "limits.max_key_bytes must be an integer"),
        ("max_hash_words = 40", "max_hash_words=40 exceeds max_pattern_words=32"),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, table: str, message: str) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text(f"[limits]\n{table}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(conf, env={})


def test_bad_environment_variable_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="ROUTER__LIMITS__MAX_KEYS"):
        load_settings(env={"ROUTER__LIMITS__MAX_KEYS": "1"})
    with pytest.raises(ConfigError, match=r"limits\.max_key_words must be an integer"):
        load_settings(env={"ROUTER__LIMITS__MAX_KEY_WORDS": "lots"})


def test_limits_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_LIMITS.max_key_bytes = 1  # type: ignore[misc]


SMALL = Limits(
    max_key_bytes=8,
    max_key_words=3,
    max_pattern_bytes=9,
    max_pattern_words=4,
    max_hash_words=2,
    max_subscriber_bytes=5,
    max_subscriptions_per_subscriber=2,
    max_payload_bytes=10,
    max_fanout=2,
    max_batch_rows=4,
)
V = Validator(limits=SMALL)


def test_key_bytes_at_and_past_the_limit() -> None:
    assert V.validate_key("abcdefgh") == ["abcdefgh"]
    with pytest.raises(KeyTooLongError) as caught:
        V.validate_key("abcdefghi")
    assert caught.value.reason == "key_too_long"
    assert "max_key_bytes=8" in str(caught.value) and "got 9" in str(caught.value)
    # bytes, not characters: 'é' is two UTF-8 bytes
    assert V.validate_key("éééé") == ["éééé"]
    with pytest.raises(KeyTooLongError):
        V.validate_key("ééééa")


def test_key_bytes_on_the_wire() -> None:
    assert V.decode_key(b"abcdefgh") == "abcdefgh"
    with pytest.raises(KeyTooLongError):
        V.decode_key(b"abcdefghi")


def test_key_words_at_and_past_the_limit() -> None:
    assert V.validate_key("a.b.c") == ["a", "b", "c"]
    with pytest.raises(TooManyWordsError) as caught:
        V.validate_key("a.b.c.d")
    assert caught.value.reason == "too_many_words"
    assert "max_key_words=3" in str(caught.value)


def test_pattern_bytes_at_and_past_the_limit() -> None:
    assert V.validate_pattern("abc.*.#.d") == ["abc", "*", "#", "d"]
    with pytest.raises(PatternTooLongError) as caught:
        V.validate_pattern("abcd.*.#.d")
    assert caught.value.reason == "pattern_too_long"


def test_pattern_words_at_and_past_the_limit() -> None:
    assert V.validate_pattern("a.b.c.d") == ["a", "b", "c", "d"]
    with pytest.raises(PatternTooManyWordsError, match="max_pattern_words=4"):
        V.validate_pattern("a.b.c.d.e")


def test_hash_words_at_and_past_the_limit() -> None:
    assert V.validate_pattern("#.a.#") == ["#", "a", "#"]
    with pytest.raises(TooManyHashWordsError, match="max_hash_words=2") as caught:
        V.validate_pattern("#.#.#")
    assert caught.value.reason == "too_many_hash_words"


def test_subscriber_bytes_at_and_past_the_limit() -> None:
    assert V.validate_subscriber("abcde") == "abcde"
    with pytest.raises(InvalidSubscriberError, match="max_subscriber_bytes=5"):
        V.validate_subscriber("abcdef")


def test_subscriptions_per_subscriber_at_and_past_the_limit() -> None:
    V.check_subscription_count("s", 2)
    with pytest.raises(TooManySubscriptionsError, match="max_subscriptions_per_subscriber=2"):
        V.check_subscription_count("s", 3)


def test_payload_at_and_past_the_limit() -> None:
    V.check_payload(b"x" * 10)
    V.check_payload(None)
    with pytest.raises(PayloadTooLargeError, match="max_payload_bytes=10") as caught:
        V.check_payload(b"x" * 11)
    assert caught.value.reason == "payload_too_large"


def test_fanout_at_and_past_the_limit() -> None:
    V.check_fanout("a.b", 2)
    with pytest.raises(FanoutLimitError, match="max_fanout=2") as caught:
        V.check_fanout("a.b", 3)
    assert caught.value.reason == "fanout_limit"


def test_default_limits_accept_every_issue_example() -> None:
    validator = Validator()
    for key in ["forex.gbp", "stock.nyse.ibm", "forex.eur", "forex.usd", "stock.nasdaq.msft", "", ".x", "a..b"]:
        validator.validate_key(key)
    for pattern in ["forex.usd", "forex.*", "stock.nasdaq.msft", "#.#", "*.#.*", "a*", "simply#carrots"]:
        validator.validate_pattern(pattern)
    validator.validate_pattern(".".join(["#"] * 15 + ["x"]))
    validator.validate_key(".".join(["a"] * 31))

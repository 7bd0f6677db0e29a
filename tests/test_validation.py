"""Validation policies: amqp accepts what RabbitMQ accepts; strict only [A-Za-z0-9_-]+ words."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing.config import ConfigError
from routing.errors import InvalidKeyError, InvalidPatternError, NullKeyError, TopicError
from routing.settings import load_settings
from routing.validation import Policy, Validator

AMQP = Validator()
STRICT = Validator(policy=Policy.STRICT)

# (key, accepted by amqp, accepted by strict)
KEYS = [
    ("stock.nasdaq.msft", True, True),
    ("a_b-c.D9", True, True),
    ("", True, True),
    (".x", True, False),
    ("a..b", True, False),
    ("x.", True, False),
    ("a b", True, False),
    ("tab\there", True, False),
    ("nul\x00", True, False),
    ("del\x7f", True, False),
    ("café", True, False),
    ("a*", True, False),
    ("*", True, False),
    ("#", True, False),
    ("日本", True, False),
]


@pytest.mark.parametrize(("key", "amqp_ok", "strict_ok"), KEYS)
def test_key_policies(key: str, amqp_ok: bool, strict_ok: bool) -> None:
    for validator, ok in ((AMQP, amqp_ok), (STRICT, strict_ok)):
        if ok:
            validator.validate_key(key)
        else:
            with pytest.raises(InvalidKeyError) as caught:
                validator.validate_key(key)
            assert caught.value.reason == "invalid_key"
            assert repr(key)[:20] in str(caught.value)


# (pattern, accepted by amqp, accepted by strict)
PATTERNS = [
    ("stock.*.msft", True, True),
    ("forex.#", True, True),
    ("#", True, True),
    ("*.#.*", True, True),
    ("", True, True),
    ("a*", True, False),
    ("simply#carrots", True, False),
    ("a..b", True, False),
    ("ctl\x01.*", True, False),
    ("sp ace.#", True, False),
]


@pytest.mark.parametrize(("pattern", "amqp_ok", "strict_ok"), PATTERNS)
def test_pattern_policies(pattern: str, amqp_ok: bool, strict_ok: bool) -> None:
    for validator, ok in ((AMQP, amqp_ok), (STRICT, strict_ok)):
        if ok:
            validator.validate_pattern(pattern)
        else:
            with pytest.raises(InvalidPatternError) as caught:
                validator.validate_pattern(pattern)
            assert caught.value.reason == "invalid_pattern"


def test_strict_errors_say_which_rule() -> None:
    with pytest.raises(InvalidKeyError, match="empty words"):
        STRICT.validate_key("a..b")
    with pytest.raises(InvalidKeyError, match="control characters"):
        STRICT.validate_key("a\x00")
    with pytest.raises(InvalidKeyError, match=r"\[A-Za-z0-9_-\]\+"):
        STRICT.validate_key("café")


def test_decode_key_from_the_wire() -> None:
    assert AMQP.decode_key(b"stock.nasdaq") == "stock.nasdaq"
    assert AMQP.decode_key(b"") == ""
    with pytest.raises(NullKeyError) as caught:
        AMQP.decode_key(None)
    assert caught.value.reason == "null_key"
    with pytest.raises(InvalidKeyError, match="not valid UTF-8") as bad:
        AMQP.decode_key(b"\xff\xfe.a")
    assert bad.value.reason == "invalid_key"
    with pytest.raises(InvalidKeyError):
        STRICT.decode_key(b"a..b")


def test_errors_are_value_errors_with_reasons() -> None:
    with pytest.raises(ValueError):
        AMQP.validate_key("a" * 1000)
    error = TopicError("x", "some rule")
    assert error.reason == "invalid" and "some rule" in str(error)


def test_huge_subjects_are_shortened_in_messages() -> None:
    with pytest.raises(TopicError) as caught:
        AMQP.validate_key("k" * 100_000)
    assert len(str(caught.value)) < 300


def test_policy_loads_from_conf(tmp_path: Path) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text('[validation]\npolicy = "strict"\n[limits]\nmax_key_words = 4\n')
    validator = load_settings(conf, env={}).validator()
    assert validator.policy is Policy.STRICT and validator.limits.max_key_words == 4
    assert load_settings(conf, env={"ROUTER__VALIDATION__POLICY": "amqp"}).validator().policy is Policy.AMQP


def test_unknown_policy_is_a_clear_error(tmp_path: Path) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text('[validation]\npolicy = "lenient"\n')
    with pytest.raises(ConfigError, match="unknown validation policy 'lenient'"):
        load_settings(conf, env={})

"""Judging Kafka records in the JVM before any Python sees them.

The routing key is located (message key, a header, or a field of a JSON value)
and checked against the same rules, in the same order, as
:meth:`routing.validation.Validator.decode_key` followed by
:meth:`~routing.validation.Validator.check_payload`; the first rule broken
names the dead-letter reason (the error class's ``reason``, :mod:`routing.errors`):

==================  ==========================================================
``null_key``        no key (a null Kafka key, a missing header, a JSON value
                    without the field or that is not JSON)
``key_too_long``    more than ``max_key_bytes`` UTF-8 bytes
``invalid_key``     not UTF-8, or (strict policy) a word outside [A-Za-z0-9_-]+
``too_many_words``  more than ``max_key_words`` words
``payload_too_large``  a value over ``max_payload_bytes``
==================  ==========================================================

These are Spark SQL expressions: vectorized in the JVM, with no Python per
row. ``tests/integration/test_router_classify.py`` checks them against the
Python validator on hostile bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from routing.errors import (
    InvalidKeyError,
    KeyTooLongError,
    NullKeyError,
    PayloadTooLargeError,
    TooManyWordsError,
    TopicError,
)
from routing.validation import Policy, Validator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from routing.settings import RouterSettings

#: Java regex of a key the strict policy accepts (zero words, or [A-Za-z0-9_-]+ words).
STRICT_KEY_REGEX = r"^(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)?\z"


def raw_key_column(router: RouterSettings) -> Column:
    """The routing key's bytes wherever ``router.key_source`` says it is (null when absent)."""
    from pyspark.sql import functions as F

    if router.key_source == "key":
        return F.col("key")
    if router.key_source == "header":
        matching = F.filter(F.col("headers"), lambda header: header["key"] == F.lit(router.key_header))
        return F.try_element_at(matching, F.lit(1))["value"]
    field = F.get_json_object(F.col("value").cast("string"), f"$.{router.key_json_field}")
    return field.cast("binary")


def key_source_description(router: RouterSettings) -> str:
    if router.key_source == "key":
        return "the Kafka message key"
    if router.key_source == "header":
        return f"header {router.key_header!r}"
    return f"JSON field {router.key_json_field!r} of the value"


def classify(frame: DataFrame, router: RouterSettings, validator: Validator) -> DataFrame:
    """``frame`` (Kafka source columns) plus ``routing_key``, ``reason`` and ``rule``.

    ``routing_key`` is the decoded key of a valid record and null otherwise;
    ``reason`` and ``rule`` are null for a valid record.
    """
    # mapInArrow binds columns by position, so the order is fixed here: the input's, then these three.
    return frame.select(*frame.columns, *classify_columns(router, validator))


def classify_columns(router: RouterSettings, validator: Validator) -> tuple[Column, Column, Column]:
    """The three columns :func:`classify` adds (``routing_key``, ``reason``, ``rule``), over the source columns.

    They depend on the settings only, so the router builds them once and reuses them for every batch
    (each expression node is a round trip to the JVM: about 400 of them).
    """
    from pyspark.sql import functions as F

    limits = validator.limits
    raw = raw_key_column(router)
    text = raw.cast("string")
    words = F.when(text == F.lit(""), F.lit(0)).otherwise(
        F.length(text) - F.length(F.replace(text, F.lit("."), F.lit(""))) + F.lit(1)
    )
    payload_bytes = F.coalesce(F.octet_length(F.col("value")), F.lit(0))

    checks: list[tuple[Column, type[TopicError], str]] = [
        (raw.isNull(), NullKeyError, f"routing key missing from {key_source_description(router)}"),
        (F.octet_length(raw) > F.lit(limits.max_key_bytes), KeyTooLongError, f"max_key_bytes={limits.max_key_bytes}"),
        (~F.is_valid_utf8(text), InvalidKeyError, "routing key is not valid UTF-8"),
        (words > F.lit(limits.max_key_words), TooManyWordsError, f"max_key_words={limits.max_key_words}"),
    ]
    if validator.policy is Policy.STRICT:
        checks.append((~text.rlike(STRICT_KEY_REGEX), InvalidKeyError, "policy=strict: words of [A-Za-z0-9_-]+"))
    payload_rule = f"max_payload_bytes={limits.max_payload_bytes}"
    checks.append((payload_bytes > F.lit(limits.max_payload_bytes), PayloadTooLargeError, payload_rule))

    reason: Column | None = None
    rule: Column | None = None
    for broken, error, description in checks:
        code = error.reason
        reason = F.when(broken, F.lit(code)) if reason is None else reason.when(broken, F.lit(code))
        rule = F.when(broken, F.lit(description)) if rule is None else rule.when(broken, F.lit(description))
    assert reason is not None and rule is not None
    return F.when(reason.isNull(), text).alias("routing_key"), reason.alias("reason"), rule.alias("rule")

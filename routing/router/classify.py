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

from collections.abc import Sequence
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

    if router.key_kind == "key":
        return F.col("key")
    if router.key_kind == "header":
        matching = F.filter(F.col("headers"), lambda header: header["key"] == F.lit(router.key_name))
        return F.try_element_at(matching, F.lit(1))["value"]
    field = F.get_json_object(F.col("value").cast("string"), f"$.{router.key_name}")
    return field.cast("binary")


def key_source_description(router: RouterSettings) -> str:
    if router.key_kind == "key":
        return "the Kafka message key"
    if router.key_kind == "header":
        return f"header {router.key_name!r}"
    return f"JSON field {router.key_name!r} of the value"


def classify(frame: DataFrame, router: RouterSettings, validator: Validator) -> DataFrame:
    """``frame`` (Kafka source columns) plus ``routing_key``, ``reason`` and ``rule``.

    ``routing_key`` is the decoded key of a valid record and null otherwise;
    ``reason`` and ``rule`` are null for a valid record.
    """
    return project(frame, classify_projections(router, validator, frame.columns))


def project(frame: DataFrame, projections: Sequence[Sequence[Column]]) -> DataFrame:
    """``frame`` through each projection of ``projections`` in turn (what :func:`classify_projections` builds)."""
    for projection in projections:
        frame = frame.select(*projection)
    return frame


#: Columns that exist only between the projections of :func:`classify_projections`.
_RAW, _TEXT, _CODE = "_classify_raw_key", "_classify_key_text", "_classify_code"


def classify_projections(
    router: RouterSettings, validator: Validator, columns: Sequence[str]
) -> tuple[list[Column], ...]:
    """The projections that add :func:`classify`'s three columns to ``columns``, applied in order.

    They depend on the settings only, so the router builds them once and reuses them for every batch
    (each expression node is a round trip to the JVM). Three steps, not one select (a fourth first
    locates a key in a header or the JSON value), because a CASE evaluates its later conditions only
    conditionally, which Spark's common-subexpression elimination does not share: with the checks
    written into each of ``routing_key``, ``reason`` and ``rule`` they ran up to three times per
    record, and classification cost 3.5x the source scan it sits on (1.6 µs per record on 2 cores;
    ``bench/stream.py``'s profile). Here the key is located and decoded once, the checks run once
    into an integer code, and the three columns are read off the code. Spark keeps the steps apart
    (CollapseProject does not duplicate an expression that is not cheap).
    """
    from pyspark.sql import functions as F

    limits = validator.limits
    keep = [F.col(name) for name in columns]
    raw, text = F.col(_RAW), F.col(_TEXT)
    if router.key_kind == "key":
        # The key is a source column already: a step to locate it would be a rename, and JVM round trips per batch.
        locate: list[list[Column]] = []
        located = F.col("key")
    else:
        locate = [[*keep, raw_key_column(router).alias(_RAW)]]
        located = raw
    decode = [*keep, located.alias(_RAW), located.cast("string").alias(_TEXT)]

    words = F.when(text == F.lit(""), F.lit(0)).otherwise(
        F.length(text) - F.length(F.replace(text, F.lit("."), F.lit(""))) + F.lit(1)
    )
    # More than max_key_words words means at least max_key_words dots: shorter keys (most) skip the count.
    too_many_words = (F.octet_length(raw) >= F.lit(limits.max_key_words)) & (words > F.lit(limits.max_key_words))
    payload_bytes = F.coalesce(F.octet_length(F.col("value")), F.lit(0))
    checks: list[tuple[Column, type[TopicError], str]] = [
        (raw.isNull(), NullKeyError, f"routing key missing from {key_source_description(router)}"),
        (F.octet_length(raw) > F.lit(limits.max_key_bytes), KeyTooLongError, f"max_key_bytes={limits.max_key_bytes}"),
        (~F.is_valid_utf8(text), InvalidKeyError, "routing key is not valid UTF-8"),
        (too_many_words, TooManyWordsError, f"max_key_words={limits.max_key_words}"),
    ]
    if validator.policy is Policy.STRICT:
        checks.append((~text.rlike(STRICT_KEY_REGEX), InvalidKeyError, "policy=strict: words of [A-Za-z0-9_-]+"))
    payload_rule = f"max_payload_bytes={limits.max_payload_bytes}"
    checks.append((payload_bytes > F.lit(limits.max_payload_bytes), PayloadTooLargeError, payload_rule))

    # The first check broken gives the code (its position from 1); 0 is a valid record.
    code: Column | None = None
    for position, (broken, _, _) in enumerate(checks, start=1):
        code = F.when(broken, F.lit(position)) if code is None else code.when(broken, F.lit(position))
    assert code is not None
    judge = [*keep, text, code.otherwise(F.lit(0)).alias(_CODE)]

    reason: Column | None = None
    rule: Column | None = None
    for position, (_, error, description) in enumerate(checks, start=1):
        at = F.col(_CODE) == F.lit(position)
        reason = F.when(at, F.lit(error.reason)) if reason is None else reason.when(at, F.lit(error.reason))
        rule = F.when(at, F.lit(description)) if rule is None else rule.when(at, F.lit(description))
    assert reason is not None and rule is not None
    valid = F.col(_CODE) == F.lit(0)
    name = [*keep, F.when(valid, text).alias("routing_key"), reason.alias("reason"), rule.alias("rule")]
    return (*locate, decode, judge, name)

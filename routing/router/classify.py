"""Judging Kafka records in the JVM before any Python sees them.

The routing key is located (message key, a header, or a field of a JSON value)
and judged by the rules of :data:`routing.grammar.KEY_RULES`,
:data:`~routing.grammar.PAYLOAD_RULES` then :data:`~routing.grammar.HEADER_RULES`, in their order, as
:meth:`routing.validation.Validator.decode_key` followed by
:meth:`~routing.validation.Validator.check_payload` and :meth:`~routing.validation.Validator.check_headers`
applies them; the first rule
broken names the dead-letter reason. Each rule's check becomes one SQL
condition (:func:`_condition`) and its ``rule`` column the limit and its value,
or what was wrong (:func:`_description`). ``null_key`` is a null Kafka key, a
missing header, or a JSON value without the field or that is not JSON.

These are Spark SQL expressions: vectorized in the JVM, with no Python per
row. ``tests/integration/test_router_classify.py`` runs them on the cases of
``tests/rules.tsv`` and checks them against the Python validator on hostile bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from routing.grammar import HEADER_RULES, KEY_RULES, PAYLOAD_RULES, SEPARATOR, STRICT_WORD, Check, Rule
from routing.limits import Limits
from routing.validation import Validator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from routing.settings import RouterSettings

#: Java regex of a key the strict policy accepts: zero words, or words of ``STRICT_WORD`` joined by the separator.
STRICT_KEY_REGEX = rf"^(?:{STRICT_WORD}(?:{re.escape(SEPARATOR)}{STRICT_WORD})*)?\z"


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

    # (broken, reason code, rule text) per rule in check order: the key's, on its bytes and text, then the payload's,
    # then the headers'.
    rules = [(rule, raw, text) for rule in KEY_RULES] + [(rule, F.col("value"), None) for rule in PAYLOAD_RULES]
    rules += [(rule, F.col("headers"), None) for rule in HEADER_RULES]
    checks = [
        (_condition(rule, limits, value, value_text), rule.reason, _description(rule, limits, router))
        for rule, value, value_text in rules
        if rule.applies(validator.policy)
    ]

    # The first check broken gives the code (its position from 1); 0 is a valid record.
    code: Column | None = None
    for position, (broken, _, _) in enumerate(checks, start=1):
        code = F.when(broken, F.lit(position)) if code is None else code.when(broken, F.lit(position))
    assert code is not None
    judge = [*keep, text, code.otherwise(F.lit(0)).alias(_CODE)]

    reason: Column | None = None
    rule: Column | None = None
    for position, (_, reason_code, description) in enumerate(checks, start=1):
        at = F.col(_CODE) == F.lit(position)
        reason = F.when(at, F.lit(reason_code)) if reason is None else reason.when(at, F.lit(reason_code))
        rule = F.when(at, F.lit(description)) if rule is None else rule.when(at, F.lit(description))
    assert reason is not None and rule is not None
    valid = F.col(_CODE) == F.lit(0)
    name = [*keep, F.when(valid, text).alias("routing_key"), reason.alias("reason"), rule.alias("rule")]
    return (*locate, decode, judge, name)


def _condition(rule: Rule, limits: Limits, raw: Column, text: Column | None) -> Column:
    """The SQL that is true when ``rule`` is broken, over the value's bytes ``raw`` and its ``text``.

    A payload has no text (``None``), and a missing payload has 0 bytes.
    """
    from pyspark.sql import functions as F

    limit = F.lit(getattr(limits, rule.limit)) if rule.limit is not None else None
    if rule.check is Check.PRESENT:
        return raw.isNull()
    if rule.check is Check.HEADER_BYTES and limit is not None:
        # The keys' bytes and the values' bytes, each joined with no separator (array_join skips a null: 0 bytes),
        # as generated code: aggregate() with a lambda is interpreted row by row and header by header, in the
        # real-time lane's profile its cost. A binary cast to a string keeps its bytes (no decoding).
        values = raw["value"].cast("array<string>")
        size = F.octet_length(F.array_join(raw["key"], "")) + F.octet_length(F.array_join(values, ""))
        return (F.coalesce(F.size(raw), F.lit(0)) > F.lit(0)) & (size > limit)
    if rule.check is Check.BYTES and limit is not None:
        size = F.coalesce(F.octet_length(raw), F.lit(0)) if text is None else F.octet_length(raw)
        return size > limit
    if text is not None:
        if rule.check is Check.UTF8:
            return ~F.is_valid_utf8(text)
        if rule.check is Check.WORDS and limit is not None:
            words = F.when(text == F.lit(""), F.lit(0)).otherwise(
                F.length(text) - F.length(F.replace(text, F.lit(SEPARATOR), F.lit(""))) + F.lit(1)
            )
            # More than max_key_words words means at least max_key_words dots: shorter keys (most) skip the count.
            return (F.octet_length(raw) >= limit) & (words > limit)
        if rule.check is Check.STRICT_WORDS:
            return ~text.rlike(STRICT_KEY_REGEX)
    raise ValueError(f"the router's classification has no SQL for the {rule.check.value} check of {rule.reason}")


def _description(rule: Rule, limits: Limits, router: RouterSettings) -> str:
    """The ``rule`` column of a record that broke ``rule``: the limit and its value, or what was wrong."""
    if rule.limit is not None:
        return f"{rule.limit}={getattr(limits, rule.limit)}"
    if rule.check is Check.PRESENT:
        return f"routing key missing from {key_source_description(router)}"
    if rule.policy is not None:
        return f"policy={rule.policy.value}: {rule.rule}"
    return rule.rule

"""The JVM-side classification (:func:`routing.router.classify.classify`) agrees with the Python validator.

The router judges keys and payloads with Spark SQL expressions so no Python
runs per record; the SQL is built from the rules of :mod:`routing.grammar`.
First it is run on the key and payload cases of ``tests/rules.tsv``, the table
the Python validator and the native bulk loads are tested against too. Then it
and the validator judge the same hostile records: a table of hand-picked edge cases (encoded surrogates,
overlong and truncated UTF-8, limits at and one past their boundary in bytes
and in words, control characters, strict-policy characters) plus Hypothesis
byte strings biased toward dots and multi-byte sequences. The reason codes must
be equal record by record (``None`` = valid), and a valid record's
``routing_key`` must be the decoded key. One Spark action per policy per example.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import router_support  # noqa: F401  (sets PYSPARK_PYTHON before the session starts)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rules import RULES, Case

from routing.errors import TopicError
from routing.limits import Limits
from routing.router.classify import classify
from routing.router.columns import SOURCE_DDL
from routing.settings import RouterSettings
from routing.validation import Policy, Validator

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: Small limits, so random data crosses them often.
LIMITS = Limits(max_key_bytes=24, max_key_words=5, max_payload_bytes=16, max_headers_bytes=10)

EDGE_KEYS: list[bytes | None] = [
    None,
    b"",
    b".",
    b"....",
    b".....",
    b"a.b.c.d.e",
    b"a.b.c.d.e.f",
    b"a" * 24,
    b"a" * 25,
    "é".encode() * 12,
    "é".encode() * 12 + b"a",
    "日本語".encode() * 2 + b"abcdef",
    "€".encode() * 8 + b"a",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"a.\xed\xb0\x80.b",
    b"\xc0\xaf",
    b"\xc1\xbf",
    b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\xfe\xff",
    b"\xe2\x82",
    b"a.\xe2",
    b"\x80",
    b"\xef\xbb\xbfa",
    b"\xf0\x9f\x98\x80",
    b"\x00",
    b"a.\x00.b",
    b"a\x1fb",
    b"a\x7fb",
    "a\u0085b".encode(),
    b"A-z_0.9",
    b"a b",
    b"a\tb",
    b"a..b",
    b"a.",
    b".a",
    b"*",
    b"#",
    b"a.*.b",
    b"a/b",
    b"a\nb",
    "ü".encode(),
    b"\xed\xa0\x80" * 9,  # too long and not UTF-8: the length rule comes first
    b"a." * 12,  # 24 bytes, 13 words
    # At the word limit (5): the JVM counts words only in keys of at least max_key_words bytes.
    b"a.b.c.d.e",  # 5 words
    b"a.b.c.d.e.f",  # 6 words
    b"....",  # 5 empty words, 4 bytes
    b".....",  # 6 empty words in exactly max_key_words bytes
    "é.é.é.é.é.é".encode(),  # 6 words, 11 characters in 17 bytes
]

hostile_bytes = st.one_of(
    st.binary(max_size=30),
    st.lists(
        st.sampled_from(
            [
                b".",
                b"a",
                b"Z9",
                b"_-",
                b"\xc3\xa9",
                b"\xed\xa0\x80",
                b"\xf0\x9f\x98\x80",
                b"\xe2\x82",
                b"\xc0\xaf",
                b"\x00",
                b" ",
                b"*",
                b"#",
                b"\xff",
            ]
        ),
        max_size=14,
    ).map(b"".join),
    st.text(max_size=12).map(lambda text: text.encode("utf-8", "surrogatepass")),
)
records = st.lists(
    st.tuples(st.one_of(st.none(), hostile_bytes), st.one_of(st.none(), st.binary(min_size=14, max_size=18))),
    min_size=1,
    max_size=150,
)


#: A record to judge: (key, payload) or (key, payload, headers).
Row = tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def python_reason(
    validator: Validator, key: bytes | None, payload: bytes | None, *headers: Any
) -> tuple[str | None, str | None]:
    """(reason, decoded key) as the Python validator judges the record (``headers``: its headers list, if any)."""
    try:
        decoded = validator.decode_key(key)
        validator.check_payload(payload)
        validator.check_headers(headers[0] if headers else None)
    except TopicError as error:
        return error.reason, None
    return None, decoded


def judge_in_spark(
    spark: SparkSession, validator: Validator, rows: Sequence[Row]
) -> list[tuple[str | None, str | None]]:
    timestamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    frame = spark.createDataFrame(
        [(row[0], row[1], "t", 0, index, timestamp, row[2] if len(row) > 2 else []) for index, row in enumerate(rows)],
        SOURCE_DDL,
    )
    judged = classify(frame, RouterSettings(key_source="key"), validator)
    collected = judged.select("offset", "reason", "routing_key").collect()
    by_offset = {row["offset"]: (row["reason"], row["routing_key"]) for row in collected}
    assert sorted(by_offset) == list(range(len(rows)))
    return [by_offset[index] for index in range(len(rows))]


def check_agreement(spark: SparkSession, rows: Sequence[Row]) -> None:
    for policy in Policy:
        validator = Validator(limits=LIMITS, policy=policy)
        expected = [python_reason(validator, *row) for row in rows]
        actual = judge_in_spark(spark, validator, rows)
        mismatches = [
            (policy.value, row, want, got) for row, want, got in zip(rows, expected, actual, strict=True) if want != got
        ]
        assert mismatches == []


def test_the_rules_table_classifies_as_declared(spark: SparkSession) -> None:
    """Every key, payload and headers case of ``tests/rules.tsv``, under both policies, in one Spark action."""
    cases = [case for case in RULES if case.subject in ("key", "payload", "headers")]
    # One frame per (limits, policy): a key case has an empty payload, a payload or headers case the key "k".
    groups: dict[tuple[Limits, Policy], list[Case]] = {}
    for case in cases:
        for policy in Policy:
            groups.setdefault((case.limits, policy), []).append(case)
    timestamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    frames: list[DataFrame] = []
    for group, ((limits, policy), members) in enumerate(groups.items()):
        records: list[tuple[object, ...]] = [
            (case.value, b"", str(group), 0, case.line, timestamp, [])
            if case.subject == "key"
            else (b"k", case.value, str(group), 0, case.line, timestamp, [])
            if case.subject == "payload"
            else (b"k", b"", str(group), 0, case.line, timestamp, case.value)
            for case in members
        ]
        frame = spark.createDataFrame(records, SOURCE_DDL)
        judged = classify(frame, RouterSettings(key_source="key"), Validator(limits=limits, policy=policy))
        frames.append(judged.select("topic", "offset", "reason", "routing_key"))
    collected = functools.reduce(lambda left, right: left.unionByName(right), frames).collect()
    got = {(int(row["topic"]), row["offset"]): (row["reason"], row["routing_key"]) for row in collected}
    assert len(got) == len(collected) == 2 * len(cases)
    mismatches = []
    for group, ((_, policy), members) in enumerate(groups.items()):
        for case in members:
            want = case.expected[policy]
            key = case.value if case.subject == "key" else b"k"
            assert isinstance(key, bytes) or key is None
            decoded = None if want is not None or key is None else key.decode("utf-8")
            if got[(group, case.line)] != (want, decoded):
                mismatches.append((policy.value, str(case), want, got[(group, case.line)]))
    assert mismatches == []


def test_edge_cases_classify_like_the_validator(spark: SparkSession) -> None:
    rows: list[Row] = [(key, b"ok") for key in EDGE_KEYS]
    rows += [
        (b"a.b", b"p" * 16),
        (b"a.b", b"p" * 17),
        (b"a.b", None),
        (b"a.b", b""),
        (None, b"p" * 17),
        (b"\xff", b"p" * 17),
        (b"a" * 25, b"p" * 17),
        (b"a.b", b"ok", [("h", b"v" * 9)]),  # 10 bytes: at the limit
        (b"a.b", b"ok", [("h", b"v" * 10)]),
        (b"a.b", b"ok", [("h\u00e9", b"v" * 7)]),  # the key's UTF-8 bytes count: 1 + 2 + 7
        (b"a.b", b"ok", [("h\u00e9", b"v" * 8)]),
        (b"a.b", b"ok", [("abcde", None), ("fghij", None), ("k", None)]),  # keys alone add up
        (b"a.b", b"ok", [("a", b"1234"), ("b", b"1234")]),
        (b"a.b", b"p" * 17, [("h", b"v" * 20)]),  # the payload is judged first
        (None, b"ok", [("h", b"v" * 20)]),  # the key first
    ]
    reasons = {python_reason(Validator(limits=LIMITS, policy=policy), *row)[0] for policy in Policy for row in rows}
    # The table exercises every rule the classifier has.
    assert reasons == {
        None,
        "null_key",
        "key_too_long",
        "invalid_key",
        "too_many_words",
        "payload_too_large",
        "headers_too_large",
    }
    check_agreement(spark, rows)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=records)
def test_hostile_bytes_classify_like_the_validator(
    spark: SparkSession, rows: list[tuple[bytes | None, bytes | None]]
) -> None:
    check_agreement(spark, rows)

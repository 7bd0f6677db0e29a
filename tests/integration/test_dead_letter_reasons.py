"""The dead-letter reasons the router can write are exactly ``routing.errors.DEAD_LETTER_REASONS``.

One record breaks each rule of :func:`routing.router.classify.classify` (both policies), and every
message is pushed over ``max_fanout`` by a stand-in for the UDF's result (a JVM struct, no Python
worker), through the pipeline's own :func:`~routing.router.columns.judged_frame`. The reasons
that come out, in the order the rules are checked, are the derived tuple: a new rule without an
error class in ``DEAD_LETTER_ERRORS`` (or a class the router never emits) fails here.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import pytest
import router_support  # noqa: F401  (sets PYSPARK_PYTHON before the session starts)

from routing.errors import DEAD_LETTER_REASONS
from routing.limits import Limits
from routing.router.classify import classify
from routing.router.columns import CLASSIFIED_COLUMNS, SOURCE_DDL, judged_frame
from routing.settings import RouterSettings
from routing.validation import Policy, Validator

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession


LIMITS = Limits(max_key_bytes=24, max_key_words=5, max_payload_bytes=16, max_headers_bytes=8, max_fanout=2)
#: (key, payload, headers): valid, then one record per classification rule in the order they are checked.
RECORDS: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = [
    (b"a.b", b"ok", [("h", b"1234567")]),
    (None, b"ok", []),
    (b"a" * 25, b"ok", []),
    (b"\xff", b"ok", []),
    (b"a.b.c.d.e.f", b"ok", []),
    (b"a.b", b"p" * 17, []),
    (b"a.b", b"ok", [("h", b"12345678")]),
]


def over_the_fanout_limit(key: Column) -> Column:
    """What the UDF returns for a key with ``max_fanout + 1`` subscribers (a null list); null for a null key."""
    from pyspark.sql import functions as F

    fanout = F.when(key.isNotNull(), F.lit(LIMITS.max_fanout + 1))
    return F.struct(F.lit(None).cast("array<string>").alias("subscribers"), fanout.alias("fanout"))


@pytest.mark.parametrize("policy", list(Policy))
def test_the_router_emits_exactly_the_derived_reasons(spark: SparkSession, policy: Policy) -> None:
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    frame = spark.createDataFrame(
        [(key, payload, "t", 0, index, moment, headers) for index, (key, payload, headers) in enumerate(RECORDS)],
        SOURCE_DDL,
    )
    validator = Validator(limits=LIMITS, policy=policy)
    classified = classify(frame, RouterSettings(key_source="key"), validator).select(*CLASSIFIED_COLUMNS)
    judged = judged_frame(classified, over_the_fanout_limit, LIMITS.max_fanout)
    reasons = [row["reason"] for row in judged.orderBy("offset").select("reason").collect()]
    # The valid record is dead-lettered by the fan-out limit, the last rule; every other one by its own.
    assert tuple([*reasons[1:], reasons[0]]) == DEAD_LETTER_REASONS

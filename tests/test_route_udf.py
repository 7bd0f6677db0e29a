"""The routing UDF's body (``udfs.route.route_keys``) over the native matcher, without Spark.

Output batches are cut by bytes as well as rows: every batch stays within ``max_output_bytes``
(Arrow buffer bytes, as pyarrow counts them) however large the fan-out, the batches together are
row-aligned with the keys, and a message over ``max_fanout`` gets a null list and its count.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from routing import _native
from routing.matchers.native import BatchLimitError
from udfs.route import ROUTE_DDL, ROUTE_TYPE, UdfStats, UdfStatsParam, route_keys

SUBSCRIBER_BYTES = 255


def wide_matcher(subscribers: int) -> _native.FrozenMatcher:
    """``subscribers`` subscribers of ``#`` (every key), each id ``SUBSCRIBER_BYTES`` long."""
    return _native.FrozenMatcher.build([("#", f"{index:0>{SUBSCRIBER_BYTES}}") for index in range(subscribers)])


def test_a_huge_fanout_is_cut_into_batches_within_the_byte_limit() -> None:
    # The case: 9,000 rows x 1,000 subscribers x 255-byte ids, 2.3 GB of ids in one Arrow batch.
    matcher = wide_matcher(1_000)
    keys = pa.array([f"k.{index % 10}" if index % 100 else None for index in range(9_000)])
    max_output_bytes = 16 * 1024 * 1024
    rows = lists = 0
    parts = route_keys(matcher, keys, max_fanout=10_000, max_batch_rows=1_000_000, max_output_bytes=max_output_bytes)
    for part in parts:
        assert part.type == ROUTE_TYPE
        assert part.get_total_buffer_size() <= max_output_bytes
        subscribers = part.field("subscribers")
        fanout = part.field("fanout").to_pylist()
        expected_nulls = [keys[rows + index].as_py() is None for index in range(len(part))]
        assert [value is None for value in fanout] == expected_nulls
        assert all(count in (None, 1_000) for count in fanout)
        lists += len(subscribers.flatten())
        rows += len(part)
    assert rows == len(keys)
    assert lists == 1_000 * len(keys.drop_null())


def test_over_the_fanout_limit_the_list_is_null_and_the_count_kept() -> None:
    matcher = _native.FrozenMatcher.build([("a.#", "x"), ("a.b", "y"), ("#", "z")])
    keys = pa.array(["a.b", None, "c", "a"])
    (part,) = route_keys(matcher, keys, max_fanout=2, max_batch_rows=10, max_output_bytes=1 << 20)
    assert part.to_pylist() == [
        {"subscribers": None, "fanout": 3},
        {"subscribers": None, "fanout": None},
        {"subscribers": ["z"], "fanout": 1},
        {"subscribers": ["x", "z"], "fanout": 2},
    ]


def test_a_row_over_the_byte_limit_goes_out_alone_and_no_key_is_lost() -> None:
    matcher = wide_matcher(10)
    keys = pa.array(["a", "b", None, "c"])
    parts = list(route_keys(matcher, keys, max_fanout=100, max_batch_rows=10, max_output_bytes=100))
    assert [len(part) for part in parts] == [1, 1, 1, 1]
    assert [row["fanout"] for part in parts for row in part.to_pylist()] == [10, 10, None, 10]


def test_the_counters_match_one_lookup_per_key_however_the_output_is_cut() -> None:
    """The batch's counters the router takes from the UDF (null keys, unmatched, over the limit, deliveries),
    against an independent count: one ``lookup`` per key and the fan-out rule, whatever the parts."""
    from pyspark.accumulators import Accumulator

    pairs = [("a.#", "x"), ("a.b", "y"), ("#", "z"), ("c.*", "w"), ("d", "v")]
    matcher = _native.FrozenMatcher.build(pairs)
    keys = ["a.b", None, "c", "a", "c.d", "d", None, "e.f", "a.b.c", "c.d.e"] * 7
    max_fanout = 2
    expected = {"null_keys": 0, "unmatched": 0, "over_limit": 0, "deliveries": 0}
    for key in keys:
        if key is None:
            expected["null_keys"] += 1
            continue
        receivers = len(matcher.lookup(key))
        expected["unmatched"] += receivers == 0
        expected["over_limit"] += receivers > max_fanout
        expected["deliveries"] += receivers if receivers <= max_fanout else 0
    assert expected["over_limit"] > 0 and expected["deliveries"] > 0  # every kind occurs
    for max_output_bytes in (1 << 20, 40):  # one part, then many
        stats = Accumulator(0, UdfStats(), UdfStatsParam())
        parts = list(
            route_keys(
                matcher,
                pa.array(keys, pa.string()),
                max_fanout=max_fanout,
                max_batch_rows=1_000,
                max_output_bytes=max_output_bytes,
                stats=stats,
            )
        )
        assert (len(parts) == 1) is (max_output_bytes == 1 << 20)
        figures = stats.value
        assert figures.rows == len(keys)
        assert {name: getattr(figures, name) for name in expected} == expected


def test_udf_stats_add_element_wise() -> None:
    param = UdfStatsParam()
    total = param.addInPlace(UdfStats(*range(8)), UdfStats(*range(10, 18)))
    assert total == UdfStats(*(left + right for left, right in zip(range(8), range(10, 18), strict=True)))
    assert param.zero(total) == UdfStats() == (0,) * 8
    assert total.since(UdfStats(*range(8))) == UdfStats(*range(10, 18))


def test_limits_are_errors_never_crashes() -> None:
    matcher = wide_matcher(1)
    with pytest.raises(BatchLimitError):
        list(route_keys(matcher, pa.array(["a", "b", "c"]), max_fanout=1, max_batch_rows=2, max_output_bytes=1024))
    with pytest.raises(TypeError):
        list(route_keys(matcher, pa.array([1, 2]), max_fanout=1, max_batch_rows=2, max_output_bytes=1024))
    empty = pa.array([], pa.string())
    assert list(route_keys(matcher, empty, max_fanout=1, max_batch_rows=2, max_output_bytes=1)) == []


def test_the_spark_ddl_is_the_arrow_type_as_spark_declares_it() -> None:
    """One declaration: the DDL the UDF is registered with converts back to exactly the Arrow type it yields."""
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

    assert ROUTE_DDL == "struct<subscribers:array<string>,fanout:int>"
    assert from_arrow_type(ROUTE_TYPE).simpleString() == ROUTE_DDL
    assert to_arrow_type(from_arrow_type(ROUTE_TYPE)) == ROUTE_TYPE

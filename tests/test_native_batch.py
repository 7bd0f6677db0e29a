"""``FrozenMatcher.match_batch`` over pyarrow arrays, row by row against ``lookup`` and the regex oracle."""

from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import keys, patterns, subscribers

from routing.limits import Limits
from routing.matchers import FrozenMatcher
from routing.matchers.native import BatchLimitError
from routing.reference import ReferenceMatcher

STRING_TYPES = (pa.string(), pa.large_string(), pa.string_view())
RESULT_TYPE = pa.list_(pa.string())


def rows(result: pa.Array) -> list[frozenset[str] | None]:
    return [None if row is None else frozenset(row) for row in result.to_pylist()]


def expected(frozen: FrozenMatcher, batch: list[str | None]) -> list[frozenset[str] | None]:
    return [None if key is None else frozen.lookup(key) for key in batch]


@settings(max_examples=150, deadline=None)
@given(
    pairs=st.lists(st.tuples(patterns, subscribers), max_size=20),
    batch=st.lists(st.one_of(st.none(), keys), max_size=40),
    string_type=st.sampled_from(STRING_TYPES),
    cut=st.tuples(st.integers(0, 5), st.integers(0, 5)),
)
def test_rows_agree_with_lookup_and_oracle(
    pairs: list[tuple[str, str]], batch: list[str | None], string_type: pa.DataType, cut: tuple[int, int]
) -> None:
    frozen = FrozenMatcher(pairs)
    oracle = ReferenceMatcher(pairs)
    # Repeat keys so the per-batch de-duplication is exercised.
    batch = batch + batch[::2]
    array = pa.array(batch, type=string_type)
    result = frozen.match_batch(array)
    assert result.type == RESULT_TYPE
    assert len(result) == len(batch)
    assert rows(result) == expected(frozen, batch)
    assert rows(result) == [None if key is None else oracle.lookup(key) for key in batch]
    # A slice starts at a non-zero offset into the same buffers.
    start, stop = cut[0], max(cut[0], len(batch) - cut[1])
    assert rows(frozen.match_batch(array.slice(start, stop - start))) == expected(frozen, batch[start:stop])


def test_many_repeated_keys() -> None:
    rng = random.Random(3)
    pairs = [("stock.*.msft", "a"), ("stock.#", "b"), ("#.msft", "c"), ("forex.*", "d"), ("#", "all")]
    frozen = FrozenMatcher(pairs)
    distinct = ["stock.nyse.msft", "stock", "forex.usd", "forex", "x.msft", "", "a..b"]
    batch = [rng.choice(distinct) if rng.random() < 0.9 else None for _ in range(20_000)]
    assert rows(frozen.match_batch(pa.array(batch))) == expected(frozen, batch)


def test_empty_and_all_null_batches() -> None:
    frozen = FrozenMatcher([("#", "s")])
    for string_type in STRING_TYPES:
        empty = frozen.match_batch(pa.array([], type=string_type))
        assert len(empty) == 0
        assert empty.type == RESULT_TYPE
        nulls = frozen.match_batch(pa.array([None, None], type=string_type))
        assert nulls.to_pylist() == [None, None]
        assert nulls.null_count == 2


def test_no_match_is_an_empty_list_not_null() -> None:
    frozen = FrozenMatcher([("a", "s")])
    assert frozen.match_batch(pa.array(["b", None, "a"])).to_pylist() == [[], None, ["s"]]


def test_max_rows_is_enforced() -> None:
    frozen = FrozenMatcher([("#", "s")])
    batch = pa.array(["a", "b", "c"])
    with pytest.raises(BatchLimitError, match="max_batch_rows=2"):
        frozen.match_batch(batch, max_rows=2)
    assert len(frozen.match_batch(batch, max_rows=3)) == 3
    limit = Limits().max_batch_rows
    assert len(frozen.match_batch(batch, max_rows=limit)) == 3
    with pytest.raises(ValueError, match="max_rows"):
        frozen.match_batch(batch, max_rows=-1)
    with pytest.raises(ValueError, match="max_rows"):
        frozen.match_batch(batch, max_rows=True)


def test_malformed_string_arrays_are_value_errors() -> None:
    # Buffers pyarrow accepts without a full validation: the second string is not UTF-8.
    offsets = pa.py_buffer(struct.pack("<3i", 0, 1, 3))
    broken = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"a\xff\xfe")])
    with pytest.raises(ValueError, match="malformed Arrow array"):
        FrozenMatcher([("#", "s")]).match_batch(broken)


@pytest.mark.parametrize(
    "bad",
    [pa.array([1, 2]), pa.array([b"a"], type=pa.binary()), pa.chunked_array([["a"]]), ["a", "b"], None],
    ids=["int64", "binary", "chunked", "list", "none"],
)
def test_non_string_arrays_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError):
        FrozenMatcher([("#", "s")]).match_batch(bad)

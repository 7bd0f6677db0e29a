"""``bench/stream.py``'s parts that need no broker or Spark: its workload, its Python trie variant, its checks
and its report of a synthetic result.

The benchmark itself needs a broker and Spark and runs for minutes; its figures and its correctness checks
(the SQL baseline's and the Python trie's deliveries against the native router's) live in its own output.
No timing is asserted.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from pathlib import Path
from typing import Any, cast

import pytest

BENCH = Path(__file__).resolve().parents[1] / "stream.py"


def test_idle_tenants_never_match_the_traffic_and_keep_the_active_fanout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1M table's idle tenants weigh on the matcher but add no deliveries (regex oracle on vocab keys)."""
    import random
    import re

    from jobs.produce import vocab_keys
    from routing.reference import reference_matches

    monkeypatch.syspath_prepend(str(BENCH.parent))
    import stream

    active = 300
    pairs = stream.subscription_pairs(random.Random(7), 1_500, 300, active)
    assert len(pairs) == 1_500 and len({subscriber for _, subscriber in pairs}) == 1_500
    keys = [key.decode() for key in itertools.islice(vocab_keys(random.Random(8), 300), 1_000) if key]
    idle = [pattern for pattern, _ in pairs[active:]]
    # Every idle pattern carries its tenant word and keeps the shape mix ('*' and '#' among them).
    assert all(re.search(r"(^|\.)t\d+(\.|$)", pattern) for pattern in idle)
    assert any("#" in pattern for pattern in idle) and any("*" in pattern.split(".") for pattern in idle)
    assert not [(pattern, key) for pattern in idle for key in keys if reference_matches(pattern, key)]
    # The active share matches real traffic, so a run still delivers.
    assert any(reference_matches(pattern, key) for pattern, _ in pairs[:active] for key in keys)


def test_the_python_trie_factory_routes_like_the_native_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """(c) plugs into ``Router(make_route=...)`` with ``make_router``'s arguments and the same results."""
    import gc
    import types

    import pyarrow as pa

    from routing import _native
    from udfs.route import ROUTE_TYPE, make_router

    monkeypatch.syspath_prepend(str(BENCH.parent))
    import stream

    pairs = [("a.*", "s1"), ("a.#", "s2"), ("#", "s3")] + [(f"a.{n}", f"wide{n}") for n in range(3)]
    keys = pa.array(["a.b", None, "x", "a.1", ""])
    limits: dict[str, Any] = {"max_fanout": 3, "max_batch_rows": 100, "max_output_bytes": 1 << 20}
    snapshot = _native.FrozenMatcher.build(pairs).to_bytes()
    try:
        trie = stream.python_trie_router(cast("Any", types.SimpleNamespace(value=pairs)))(7, bytes, table="t", **limits)
        native = make_router(7, lambda: snapshot, table="bench-factory-test", **limits)
        routed = [pa.concat_arrays(list(body(iter([keys])))) for body in (trie, native)]
    finally:
        gc.unfreeze()  # cached_trie freezes the worker's heap; this is the test process
    assert routed[0].type == routed[1].type == ROUTE_TYPE
    fanouts = [part.field("fanout").to_pylist() for part in routed]
    assert fanouts[0] == fanouts[1] == [3, None, 1, 4, 1]
    lists = [[subs and sorted(subs) for subs in part.field("subscribers").to_pylist()] for part in routed]
    assert lists[0] == lists[1] == [["s1", "s2", "s3"], None, ["s3"], None, ["s3"]]


def _plan(stream: Any, sizes: tuple[int, ...]) -> Any:
    return stream.Plan(
        seed=7,
        quick=False,
        messages=400_000,
        rlike_messages=4_000,
        repeats=2,
        sizes=sizes,
        max_offsets_per_trigger=100_000,
        vocabulary=300,
    )


def test_a_size_over_the_rlike_limit_gets_a_line_instead_of_a_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run of issue 55 (``--sizes 1000000``) measured everything, then read the skipped (d)'s settings."""
    monkeypatch.syspath_prepend(str(BENCH.parent))
    import stream

    plan = _plan(stream, (1_000_000,))
    paths = {stream.NATIVE: "/b", stream.PYTHON_TRIE: "/c"}
    checks = stream.delivery_checks(plan, 1_000_000, paths, rlike_path=None)
    assert [check.actual_path for check in checks] == ["/c", None]
    assert "(d) skipped" in checks[1].label
    ran = stream.delivery_checks(plan, 10_000, paths, rlike_path="/d")
    assert [(check.actual_path, check.below_index) for check in ran] == [("/c", None), ("/d", 4_000)]
    without_d = dataclasses.replace(plan, variants="abce")
    assert [check.actual_path for check in stream.delivery_checks(without_d, 1_000_000, paths, None)] == ["/c"]


def test_the_report_and_charts_of_a_size_where_rlike_was_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A synthetic result of that run: every variant but (d) at 1,000,000 subscriptions."""
    monkeypatch.syspath_prepend(str(BENCH.parent))
    import stream
    from harness import RunRecord

    plan = _plan(stream, (1_000_000,))
    record = RunRecord(
        "python bench/stream.py --sizes 1000000", datetime.datetime.now(datetime.UTC), (0.5, 0.25, 0.125)
    )
    results = stream.Results(record=record)
    size = 1_000_000
    for variant, wall in [(stream.PASSTHROUGH, 4.0), (stream.NATIVE, 5.0), (stream.PYTHON_TRIE, 50.0)]:
        deliveries = 0 if variant == stream.PASSTHROUGH else 120_000
        results.runs.append(stream.Run(variant, size, 400_000, wall, [wall / 4] * 4, deliveries=deliveries))
    results.runs.append(stream.Run(stream.KAFKA_SINK, size, 400_000, 6.0, [1.5] * 4, deliveries=120_000))
    results.checks.append(stream.delivery_checks(plan, size, {}, None)[0].label)
    text = stream.report(plan, results)
    ratios = text.split("## Ratios of (b) to each baseline (msg/s)", 1)[1].split("\n\n")[1]
    # (b)/(a) = 80,000 / 100,000; (b)/(c) = 80,000 / 8,000; (d) did not run: n/a.
    assert "| 1,000,000 | 0.80x | 10.00x | n/a |" in ratios.splitlines()
    assert (
        "(d) skipped" in text
        and "`python bench/stream.py --sizes 1000000` on " in text
        and "0.50/0.25/0.12 before" in text
    )
    stream.charts(plan, results, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["stream_latency.png", "stream_throughput.png"]

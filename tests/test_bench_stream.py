"""Smoke test: ``bench/stream.py --help`` starts and documents its flags.

The benchmark itself needs a broker and Spark and runs for minutes, so the test
suite only guards it against import-time rot; its figures and its correctness
checks (the SQL baseline's and the Python trie's deliveries against the native
router's) live in the benchmark's own output. No timing is asserted.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "stream.py"


@pytest.mark.timeout(60)
def test_help_lists_the_flags() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--help"], capture_output=True, text=True, check=False, timeout=50
    )
    assert done.returncode == 0, done.stderr[-2000:]
    flags = ("--quick", "--seed", "--messages", "--rlike-messages", "--sizes", "--max-offsets", "--variants", "--set")
    for flag in flags:
        assert flag in done.stdout, f"{flag} missing from --help"


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

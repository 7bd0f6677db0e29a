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

"""Every benchmark answers ``--help`` (exit 0, its flags listed) without starting Spark, a broker or a build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
#: bench/ files that are not benchmarks.
NOT_HERE = {"__init__", "harness", "subscription_tables", "workloads"}
#: Each benchmark and flags its --help must list.
FLAGS = {
    "acl_cost": ("--patterns", "--events", "--seed", "--results-dir", "--no-write"),
    "chaos": ("--seed", "--router-kills", "--broker-kills", "--refresh-kills", "--output", "--work"),
    "driver_refresh": ("--rows", "--changes", "--keys", "--baseline-batches", "--results-dir", "--no-write"),
    "fuzz": ("--minutes", "--targets", "--max-len", "--timeout", "--no-minimize", "--output", "Exit status"),
    "large_tables": ("--rows", "--changes", "--driver-memory", "--results-dir", "--no-write"),
    "latency": ("--rates", "--step-seconds", "--warmup-seconds", "--trigger-seconds", "--drain-seconds", "--set"),
    "match_cost": ("--patterns", "--keys", "--repeats", "--results-dir", "--no-write"),
    "matchers": ("--quick", "--seed", "--sizes", "--budget", "--results-dir", "--no-write"),
    "native": ("--quick", "--seed", "--scales", "--skip", "--out-dir"),
    "parquet_encodings": ("--deliveries", "--files", "--rounds", "--warmup", "--output"),
    "realtime": (
        "--rates",
        "--step-seconds",
        "--interval-seconds",
        "--trigger-seconds",
        "--grace-seconds",
        "--variants",
    ),
    "refresh_batch": ("--rows", "--events", "--batches", "--warmup", "--seed", "--output"),
    "soak": ("--minutes", "--interval", "--kill-every", "--capacity-share", "--rate", "--output", "--work"),
    "snapshot_transport": ("--sizes", "--repeats", "--keys", "--output"),
    "stream": (
        "--quick",
        "--seed",
        "--messages",
        "--rlike-messages",
        "--sizes",
        "--max-offsets",
        "--variants",
        "--set",
    ),
    "subscriptions": ("--sizes", "--shapes", "--budget", "--repeats", "--load-repeats", "--warmup-rounds", "--skip"),
}


def test_every_benchmark_is_listed() -> None:
    assert sorted(path.stem for path in BENCH.glob("*.py") if path.stem not in NOT_HERE) == sorted(FLAGS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(FLAGS))
def test_help_lists_the_flags(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--help"], capture_output=True, text=True, check=False, timeout=100
    )
    assert done.returncode == 0, done.stderr[-2000:]
    missing = [flag for flag in FLAGS[name] if flag not in done.stdout]
    assert not missing, f"{name}.py --help does not list {missing}"

"""Crash recovery and replay determinism: the router as a real process, killed with SIGKILL.

* :func:`test_sigkilled_router_loses_and_duplicates_nothing` kills
  ``python -m jobs.route`` (its whole process group: driver, JVM and Python
  workers) at seeded random points while records are still being produced
  (the first time only after a batch has committed),
  restarts it from its checkpoint each time, then drains what is left. Every
  record must be routed exactly as the regex oracle says, with no delivery id
  twice and no batch id twice in the ledger.
* :func:`test_replayed_batch_uses_its_recorded_version` kills the job with the
  test-only after-writes hook (``routing.streaming.CRASH_AFTER_WRITES_ENV``) between a batch's Delta
  writes and its checkpoint commit, changes the subscription table, and
  restarts: Spark re-executes that batch, the router routes it with the
  version recorded in the ledger (not the new one), and the idempotent writes
  add nothing.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest
from router_support import (
    DELIVERED,
    WAIT_TIMEOUT_S,
    Record,
    active_subscriptions,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    ledger_versions,
    produce,
    read_routed,
    route_flags,
    router_settings,
    run_available_now,
    with_router,
)

from routing.settings import REPO_ROOT
from routing.streaming import CRASH_AFTER_WRITES_ENV

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

SUBSCRIPTIONS = [
    ("stock.*.msft", "msft-desk"),
    ("stock.#", "equities"),
    ("#.ibm", "ibm-watch"),
    ("forex.#", "fx"),
    ("#", "audit"),
    ("*.*.*", "three-words"),
]
KEY_WORDS = ["stock", "forex", "nasdaq", "nyse", "msft", "ibm", "eur", ""]


def start_router(settings: Settings, log: IO[bytes], *args: str, env: dict[str, str] | None = None) -> Any:
    """``python -m jobs.route`` in its own process group (so a kill reaches its JVM and Python workers)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.route", *route_flags(settings), *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_group(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def batches_logged(log_path: Path) -> int:
    """Batches the job has finished (one metrics line each)."""
    return log_path.read_bytes().count(b'"event": "router_batch"')


def started(log_path: Path) -> bool:
    return b"router query started" in log_path.read_bytes()


def wait_for(condition: Any, what: str, process: Any = None) -> None:
    """Poll until ``condition()``; a hang guard, not a timing assertion."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the router exited ({process.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.2)


def message_keys(seed: int, count: int) -> list[bytes | None]:
    rng = random.Random(seed)
    keys: list[bytes | None] = []
    for index in range(count):
        if index % 97 == 0:
            keys.append(None)  # a dead letter now and then
        else:
            keys.append(".".join(rng.choice(KEY_WORDS) for _ in range(rng.randrange(1, 5))).encode())
    return keys


def test_sigkilled_router_loses_and_duplicates_nothing(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    rng = random.Random(20261122)
    topic = topic_factory(partitions=2)
    job = router_settings(
        settings,
        tmp_path,
        [topic],
        trigger="processing_time",
        trigger_interval="1 second",
        max_offsets_per_trigger=200,
    )
    version = apply_subscriptions(spark, job, tmp_path / "subscriptions.jsonl", SUBSCRIPTIONS)
    keys = message_keys(rng.randrange(2**32), 3_000)

    # Records keep arriving in the background, in rounds, while the router is killed and restarted.
    produced: list[Record] = []
    producer_failed: list[BaseException] = []

    def produce_in_rounds() -> None:
        try:
            for start in range(0, len(keys), 150):
                chunk: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
                    (key, f"payload {start + index}".encode(), [])
                    for index, key in enumerate(keys[start : start + 150])
                ]
                produced.extend(produce(job, topic, chunk, partitions=2))
                time.sleep(1.0)
        except BaseException as error:  # reported by the test thread
            producer_failed.append(error)

    producer = threading.Thread(target=produce_in_rounds, name="test-producer", daemon=True)
    producer.start()
    kills = 0
    try:
        for run in range(3):
            log_path = tmp_path / f"route-{run}.log"
            with log_path.open("wb") as log:
                process = start_router(job, log)
                try:
                    # The first run commits at least one batch, so later runs restart from real progress;
                    # every kill then lands at a random point (a batch's ledger entry, writes, or commit).
                    wait_for(lambda path=log_path: started(path), f"the query of run {run}", process)
                    if run == 0:
                        wait_for(lambda path=log_path: batches_logged(path) >= 1, "a committed batch", process)
                    time.sleep(rng.uniform(0.0, 6.0))
                    assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
                finally:
                    kill_group(process)
            assert process.returncode == -signal.SIGKILL
            kills += 1
    finally:
        producer.join(timeout=WAIT_TIMEOUT_S)
    assert kills == 3
    assert not producer.is_alive() and producer_failed == []
    assert len(produced) == len(keys)

    # Drain what is left (any batch a kill interrupted is re-executed first).
    drained = run_available_now(spark, with_router(job, max_offsets_per_trigger=5_000))

    expected = expected_outcomes(produced, job.router, job.validator(), active_subscriptions(spark, job, version))
    routed = read_routed(spark, job)
    assert_ids_exact(routed)  # zero duplicate delivery ids
    assert routed.outcomes() == expected  # zero lost, exactly the oracle's subscribers and reasons
    assert sum(len(subs) for kind, subs in expected.values() if kind == DELIVERED) == len(routed.deliveries)
    ledger = ledger_versions(spark, job)
    batch_ids = [batch for batch, _ in ledger]
    assert len(batch_ids) == len(set(batch_ids)) and {version for _, version in ledger} == {version}
    assert set(drained.reports) <= set(batch_ids)


def test_replayed_batch_uses_its_recorded_version(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    # One partition, 20 records per batch: batch b holds offsets [20b, 20b + 20).
    job = router_settings(settings, tmp_path, [topic], max_offsets_per_trigger=20)
    old_version = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", SUBSCRIPTIONS[:4])
    cycle: list[bytes | None] = [b"stock.nasdaq.msft", b"stock.nyse.ibm", b"forex.eur", b"bond.x", None]
    records = produce(job, topic, [(cycle[index % 5], b"v", []) for index in range(60)])

    log_path = tmp_path / "route-crash.log"
    with log_path.open("wb") as log:
        process = start_router(job, log, env={CRASH_AFTER_WRITES_ENV: "1"})
        try:
            process.wait(timeout=WAIT_TIMEOUT_S)
        finally:
            kill_group(process)
    assert process.returncode == -signal.SIGKILL, log_path.read_text(errors="replace")[-3000:]
    # Batch 1 wrote its rows (and its ledger entry) before the kill; its checkpoint commit never happened.
    assert ledger_versions(spark, job) == [(0, old_version), (1, old_version)]
    assert {row["batch_id"] for row in read_routed(spark, job).deliveries} == {0, 1}

    # The table changes while the router is down: the restart must still replay batch 1 with the old version.
    new_version = apply_subscriptions(
        spark,
        job,
        tmp_path / "v2.jsonl",
        subscribe=[("bond.#", "bonds"), ("#.ibm", "ibm-2")],
        unsubscribe=[("stock.*.msft", "msft-desk")],
    )
    assert new_version > old_version
    restarted = run_available_now(spark, job)

    assert sorted(restarted.reports) == [1, 2]  # batch 1 re-executed, then the new batch 2
    replay, fresh = restarted.reports[1], restarted.reports[2]
    assert replay.replayed and replay.snapshot_version == old_version
    assert not fresh.replayed and fresh.snapshot_version == new_version
    assert ledger_versions(spark, job) == [(0, old_version), (1, old_version), (2, new_version)]

    old = expected_outcomes(records, job.router, job.validator(), active_subscriptions(spark, job, old_version))
    new = expected_outcomes(records, job.router, job.validator(), active_subscriptions(spark, job, new_version))
    batch_of = {record.coordinates: record.offset // 20 for record in records}
    expected = {coordinates: (old if batch_of[coordinates] < 2 else new)[coordinates] for coordinates in old}
    routed = read_routed(spark, job)
    assert_ids_exact(routed)  # the replayed writes were skipped, not repeated
    assert routed.outcomes() == expected
    assert {coordinates: pinned[0] for coordinates, pinned in routed.versions().items()} == batch_of

    # The replay itself routed with the old table: its counted fan-out is the old oracle's, not the new one's.
    def deliveries_in_batch_1(outcomes: dict[tuple[int, int], Any]) -> int:
        return sum(len(subs) for coordinates, (_, subs) in outcomes.items() if batch_of[coordinates] == 1)

    assert deliveries_in_batch_1(old) != deliveries_in_batch_1(new)
    assert replay.metrics["deliveries"] == deliveries_in_batch_1(old)

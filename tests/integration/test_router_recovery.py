"""Replay determinism: a batch that dies between its writes and its checkpoint commit replays with its recorded version.

:func:`test_replayed_batch_uses_its_recorded_version` fails batch 1 in the router's after-writes hook
(:data:`routing.streaming.AfterWrites`, the point the test-only crash hook
``routing.streaming.CRASH_AFTER_WRITES_ENV`` SIGKILLs a router process at): its deliveries and ledger
entry are committed, its checkpoint commit never happens. The subscription table then changes and the
router restarts on the same checkpoint: Spark re-executes that batch, the router routes it with the
version recorded in the ledger (not the new one), and the idempotent writes add nothing. It runs on the
shared session: what Spark keeps of a batch that failed there is what it keeps of one whose process was
killed (the offset log entry, no commit entry), and the SIGKILLed processes, with the same replay checks
on every batch, are ``tests/integration/test_chaos.py``'s (the harness of ``bench/chaos.py``), so this
test spares the suite a JVM start.

:func:`test_a_python_worker_killed_mid_task_is_retried_to_the_same_deliveries` runs the router as a process of
its own, in ``local[2,3]`` (so a failed task is retried, as on a cluster), with a UDF body that SIGKILLs its
Python worker once, after its first Arrow batch of output: Spark retries the task and the deliveries are exactly
the oracle's, each once.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    BatchDied,
    active_subscriptions,
    apply_subscriptions,
    assert_ids_exact,
    assert_planned_not_committed,
    assert_routed_with_recorded_versions,
    expected_outcomes,
    fail_after_writes,
    ledger_versions,
    produce,
    read_routed,
    route_flags,
    router_settings,
    run_available_now,
    run_until_batch_dies,
)

from routing.settings import ARROW_BATCH_ROWS, REPO_ROOT
from routing.streaming import AFTER_DELIVERIES, AFTER_LEDGER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow


SUBSCRIPTIONS = [
    ("stock.*.msft", "msft-desk"),
    ("stock.#", "equities"),
    ("#.ibm", "ibm-watch"),
    ("forex.#", "fx"),
]


def test_replayed_batch_uses_its_recorded_version(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    # One partition, 20 records per batch: batch b holds offsets [20b, 20b + 20).
    job = router_settings(settings, tmp_path, [topic], max_offsets_per_trigger=20)
    old_version = apply_subscriptions(spark, job, tmp_path / "v1.jsonl", SUBSCRIPTIONS[:4])
    cycle: list[bytes | None] = [b"stock.nasdaq.msft", b"stock.nyse.ibm", b"forex.eur", b"bond.x", None]
    records = produce(job, topic, [(cycle[index % 5], b"v", []) for index in range(60)])

    run_until_batch_dies(spark, job, "batch 1 dies after its writes", after_writes=fail_after_writes(1))
    # Batch 1 wrote its rows (and its ledger entry) before it died; its checkpoint commit never happened.
    assert_planned_not_committed(job.router.checkpoint_path, 1)
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


@pytest.mark.parametrize("point", [AFTER_LEDGER, AFTER_DELIVERIES])
def test_a_batch_that_dies_inside_its_writes_replays_to_exactly_the_oracles_rows(
    point: str, spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    """Batch 1 dies at ``point`` (its ledger entry recorded and nothing written, or its deliveries written and
    its dead letters not), as the crash hook SIGKILLs a router there; the restart writes each row once."""
    topic = topic_factory(partitions=1)
    job = router_settings(settings, tmp_path, [topic], max_offsets_per_trigger=20)
    apply_subscriptions(spark, job, tmp_path / "v1.jsonl", SUBSCRIPTIONS)
    cycle: list[bytes | None] = [b"stock.nasdaq.msft", b"stock.nyse.ibm", b"forex.eur", b"bond.x", None]
    records = produce(job, topic, [(cycle[index % 5], b"v", []) for index in range(60)])

    def die(batch_id: int, at: str) -> None:
        if (batch_id, at) == (1, point):
            raise BatchDied(f"batch {batch_id} dies at {at}")

    run_until_batch_dies(spark, job, f"batch 1 dies at {point}", crash_points=die)
    assert_planned_not_committed(job.router.checkpoint_path, 1)
    written = {row["batch_id"] for row in read_routed(spark, job).deliveries}
    assert written == ({0} if point == AFTER_LEDGER else {0, 1})
    restarted = run_available_now(spark, job)
    assert restarted.reports[1].replayed
    assert_routed_with_recorded_versions(spark, job, records)


#: A router whose UDF body SIGKILLs its Python worker once: in the first attempt of a task, after it has handed
#: the JVM its first Arrow batch of output (mid-task), marking the kill in a file so it happens once per run.
KILLING_ROUTER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path

    from jobs import route
    from udfs.route import make_router

    MARKER = Path(sys.argv[1])

    def killing(version, load_bytes, **options):
        body = make_router(version, load_bytes, **options)

        def run(batches):
            from pyspark import TaskContext

            task = TaskContext.get()
            for part in body(batches):
                yield part
                if task.attemptNumber() == 0 and not MARKER.exists():
                    MARKER.write_text(f"{os.getpid()} {task.partitionId()}")
                    os.kill(os.getpid(), signal.SIGKILL)

        return run

    sys.exit(route.main(sys.argv[2:], make_route=killing))
    """
)


def test_a_python_worker_killed_mid_task_is_retried_to_the_same_deliveries(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=2)
    job = router_settings(settings, tmp_path, [topic])
    # Several Arrow batches a task.
    job = job.replace(spark=dataclasses.replace(job.spark, conf={**job.spark.conf, ARROW_BATCH_ROWS: "8"}))
    apply_subscriptions(spark, job, tmp_path / "v1.jsonl", SUBSCRIPTIONS)
    cycle: list[bytes | None] = [b"stock.nasdaq.msft", b"stock.nyse.ibm", b"forex.eur", b"bond.x", None]
    records = produce(job, topic, [(cycle[index % 5], f"v{index}".encode(), []) for index in range(120)])
    script, marker = tmp_path / "killing_router.py", tmp_path / "killed"
    script.write_text(KILLING_ROUTER, encoding="utf-8")
    flags = [*route_flags(job), "--available-now", "--set", "spark.master=local[2,3]", "--verbose"]
    done = subprocess.run(
        [sys.executable, str(script), str(marker), *flags],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=WAIT_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.exists(), "no Python worker was killed"
    output = done.stdout + done.stderr
    assert "Lost task" in output or "Python worker exited unexpectedly" in output, output[-3000:]
    assert_routed_with_recorded_versions(spark, job, records)  # every record once, as the oracle says

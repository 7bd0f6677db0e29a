"""The checkpoint lease (:mod:`routing.checkpoints`) on a local checkpoint, through the shared session.

A classic session writes a local checkpoint's files in-process (pyarrow), as the jobs do; the Hadoop
backend's contract is in ``tests/test_checkpoint_files.py``.

A holder on another machine, or one that died, is written as the lease file such a job would have left
(the same JSON, through the same ``CheckpointFiles``); a dead holder on this machine is a real child
process that has exited. The jobs' own use of the lease (two real routers, two refresh runs) is in
``test_router_checkpoint.py`` and ``test_refresh_concurrency.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from routing.checkpoints import (
    LEASE_DIRECTORY,
    CheckpointBusy,
    CheckpointFiles,
    CheckpointLease,
    Holder,
    LeaseLost,
    read_holders,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Seconds a wait for the heartbeat thread may take before the test gives up (a hang guard, not a timing check).
WAIT_S = 60.0


def holder_file(spark: SparkSession, checkpoint: Path, holder: Holder, *, replace: bool = False) -> None:
    """Leave ``holder``'s lease file, as that job would have."""
    files = CheckpointFiles(spark, str(checkpoint))
    if replace:
        files.replace(holder.to_json(), LEASE_DIRECTORY, str(holder.generation))
    else:
        assert files.create_once(holder.to_json(), LEASE_DIRECTORY, str(holder.generation))


def foreign_holder(generation: int, *, heartbeat_age_s: float, space: str = "another-machine/pid:[1]") -> Holder:
    stamp = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=heartbeat_age_s)).isoformat()
    return Holder(
        generation=generation,
        owner="f" * 32,
        job="router",
        name="router-elsewhere",
        host="elsewhere",
        pid_space=space,
        pid=4242,
        pid_started=1,
        acquired_at=stamp,
        heartbeat_at=stamp,
        timeout_s=60.0,
        query_id="q-elsewhere",
    )


def generations(spark: SparkSession, checkpoint: Path) -> list[int]:
    return [holder.generation for holder in read_holders(CheckpointFiles(spark, str(checkpoint)))]


def test_a_live_holder_keeps_the_checkpoint_until_it_releases_it(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    first = CheckpointLease.acquire(spark, str(checkpoint), job="router", name="app-1")
    try:
        first.bind("q-123")
        with pytest.raises(CheckpointBusy) as busy:
            CheckpointLease.acquire(spark, str(checkpoint), job="router", name="app-2")
    finally:
        first.release()
    message = str(busy.value)
    assert "\n" not in message
    for part in (f"checkpoint {checkpoint} ", "router 'app-1'", f"pid {os.getpid()}", "query q-123"):
        assert part in message

    # Released: the next one takes over at once; older generations than the previous one are cleaned up.
    for expected in (2, 3):
        lease = CheckpointLease.acquire(spark, str(checkpoint), job="router", name=f"app-{expected}")
        assert lease.holder.generation == expected
        lease.release()
    assert generations(spark, checkpoint) == [2, 3]
    assert all(holder.released for holder in read_holders(CheckpointFiles(spark, str(checkpoint))))


def test_a_dead_holder_on_this_machine_is_taken_over_at_once(spark: SparkSession, tmp_path: Path) -> None:
    from routing.processes import process_started

    checkpoint = tmp_path / "checkpoint"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead_pid = int(child.stdout)
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    this_machine = f"{boot_id}/{os.readlink('/proc/self/ns/pid')}"
    # The child's lease, its heartbeat a second old: it held the checkpoint on this machine, then died (SIGKILL).
    dead = dataclasses.replace(
        foreign_holder(1, heartbeat_age_s=1.0, space=this_machine), pid=dead_pid, pid_started=12345
    )
    holder_file(spark, checkpoint, dead)
    assert process_started(dead_pid) is None or process_started(dead_pid) != 12345

    lease = CheckpointLease.acquire(spark, str(checkpoint), job="router", name="restarted")
    try:
        assert lease.holder.generation == 2
    finally:
        lease.release()


def test_a_holder_on_another_machine_is_taken_over_once_its_heartbeat_is_too_old(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    holder_file(spark, checkpoint, foreign_holder(1, heartbeat_age_s=5.0))
    with pytest.raises(
        CheckpointBusy, match=r"router 'router-elsewhere' \(host elsewhere, pid 4242, query q-elsewhere"
    ):
        CheckpointLease.acquire(spark, str(checkpoint), job="router", name="here")

    # Its heartbeat is now older than its 60 s timeout: it is dead.
    holder_file(spark, checkpoint, foreign_holder(1, heartbeat_age_s=61.0), replace=True)
    lease = CheckpointLease.acquire(spark, str(checkpoint), job="router", name="here")
    try:
        assert lease.holder.generation == 2
    finally:
        lease.release()


def test_a_holder_that_was_taken_over_loses_its_lease(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    # A short timeout makes the heartbeat beat every 0.1 s.
    lease = CheckpointLease.acquire(spark, str(checkpoint), job="router", name="stalled", timeout_s=0.6)
    try:
        lease.check()  # held
        # Another machine judged it dead (as if it had stalled) and took over with the next generation.
        holder_file(spark, checkpoint, foreign_holder(2, heartbeat_age_s=0.0))
        deadline = time.monotonic() + WAIT_S
        while lease.lost is None:
            assert time.monotonic() < deadline, "the heartbeat never noticed the takeover"
            time.sleep(0.05)
        with pytest.raises(LeaseLost, match=f"lost the lease on checkpoint {checkpoint}: taken over by router"):
            lease.check()
    finally:
        lease.release()
    # A lost lease is not marked released: the file says who held it, the newer one is untouched.
    holders = read_holders(CheckpointFiles(spark, str(checkpoint)))
    assert [(holder.generation, holder.released) for holder in holders] == [(1, False), (2, False)]


def test_batch_records_keep_each_batchs_last_record_in_batch_order(spark: SparkSession, tmp_path: Path) -> None:
    """What a job on Spark Connect leaves for its client (:class:`routing.checkpoints.BatchRecords`), here through
    Hadoop's FileSystem: one record per batch, a re-executed batch's replacing the first."""
    from routing.checkpoints import BatchRecords

    records = BatchRecords(spark, str(tmp_path / "checkpoint"), "reports")
    assert records.read("query") == {}
    for batch_id, record in [(0, {"rows": 1}), (10, {"rows": 10}), (2, {"rows": 2}), (2, {"rows": 3})]:
        records.write("query", batch_id, record)
    records.write("another query", 0, {"rows": 0})
    assert list(records.read("query").items()) == [(0, {"rows": 1}), (2, {"rows": 3}), (10, {"rows": 10})]
    assert records.read("query", from_batch=2) == {2: {"rows": 3}, 10: {"rows": 10}}
    assert records.read("another query") == {0: {"rows": 0}}
    # Pruning deletes one query's records up to a batch, and nothing else.
    assert records.prune("query", 2) == 2
    assert records.read("query") == {10: {"rows": 10}}
    assert records.prune("query", 2) == 0
    assert records.read("another query") == {0: {"rows": 0}}

"""Refresh runs that die inside a MERGE, overlap, or find their checkpoint held: real processes, the model as oracle.

* :func:`test_a_run_killed_inside_its_merge_ends_like_an_uninterrupted_one` stops the job at two points no
  other test reaches. First it SIGKILLs a job process with the test-only crash hook
  (``routing.streaming.CRASH_AFTER_WRITES_ENV``) at ``0:in_merge``, from the executor that reads batch 0's
  MERGE source, so the process group dies inside Delta's MERGE command before its commit. Then a run on the
  shared session takes the checkpoint over and fails at ``1:after_merge``, after batch 1's MERGE committed
  and before its rejects append (a :class:`~routing.streaming.CrashHook` that raises: what Spark and Delta
  keep of that batch is what a SIGKILL there leaves, the offset log entry and the MERGE's commit, and it
  spares a JVM start). A last run completes. The table and the rejects must equal the sequential model's,
  row for row and change id for change id (the model :mod:`integration.test_refresh_job` holds uninterrupted
  runs to: a second, uninterrupted run here could only agree with it, and cost two more batches).
* :func:`test_two_concurrent_runs_leave_the_sequential_models_table`: a Kafka run (its own thread) and an
  import run (this thread) MERGE the same rows at the same time, on two checkpoints so that no lease
  serializes them (two deployments sharing one table: the case the lease cannot cover). Delta's
  conflicts, and batches whose table moved after they were decided, are decided again; the table must
  equal the model's in either order (the events are chosen so that the order cannot matter, which the
  test checks on the model too).
* :func:`test_a_run_on_a_held_checkpoint_stops_with_exit_3`: a second run on a checkpoint another run
  holds does nothing, exits 3 and names the holder; once released, the same command runs.
"""

from __future__ import annotations

import concurrent.futures
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import WAIT_TIMEOUT_S, BatchDied, assert_planned_not_committed, job_flags, kill_group, start_job

from integration.test_refresh_job import (  # the refresh job's own test helpers and fixture
    MAX_EVENT_BYTES,
    assert_matches_model,
    ev,
    job_settings,
    produce,
    rejects_in_table,
    sub,
    unsub,
    with_topic,
)
from jobs.refresh_subscriptions import main, prepare_tables, refresh_from_kafka
from routing.checkpoints import EXIT_CHECKPOINT_BUSY, CheckpointLease
from routing.streaming import AFTER_MERGE, AFTER_WRITES, CRASH_AFTER_WRITES_ENV, CrashHook
from routing.subscriptions.events import read_import_file
from routing.subscriptions.model import apply_events_model
from routing.subscriptions.table import latest_version, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

__all__ = ["job_settings"]  # the fixture, used by name


def run_refresh(settings: Settings, log_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``python -m jobs.refresh_subscriptions`` with ``settings`` to the end; (exit status, output)."""
    with log_path.open("wb") as log:
        job = start_job("jobs.refresh_subscriptions", [*job_flags(settings), *args], log, env=env)
        try:
            job.wait(timeout=WAIT_TIMEOUT_S)
        finally:
            kill_group(job)
    return job.returncode, log_path.read_text(errors="replace")


class FailAt(CrashHook):
    """A :class:`CrashHook` that raises :class:`router_support.BatchDied` at its point instead of killing."""

    def __call__(self, batch_id: int, point: str = AFTER_WRITES) -> None:
        if (batch_id, point) == (self.batch_id, self.point):
            raise BatchDied(f"batch {batch_id} dies after its MERGE, before its rejects append")


def elsewhere(settings: Settings, root: Path, **paths: str) -> Settings:
    """``settings`` with the subscription tables and checkpoint named in ``paths`` moved under ``root``."""
    return with_topic(
        settings, settings.subscriptions.events_topic, **{name: str(root / value) for name, value in paths.items()}
    )


@pytest.mark.slow
def test_a_run_killed_inside_its_merge_ends_like_an_uninterrupted_one(
    spark: SparkSession, job_settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    # One partition and 5 events per batch: batch 0 is offsets 0-4, batch 1 offsets 5-9; both change rows and
    # reject something, so both MERGE and append rejects.
    settings = with_topic(job_settings, topic_factory(partitions=1), max_offsets_per_trigger=5)
    received = produce(
        settings,
        [
            sub("s1", "p1", 10),
            sub("s1", "p2", 11),
            b"garbage",
            sub("s2", "q1", 12),
            unsub("s2", "q0", 13),
            unsub("s1", "p1", 30),
            sub("s2", "q2", 31),
            ev("resubscribe", "s2", "q3", 32),
            sub("s1", "p2", 5),  # older than the row: stale
            sub("s3", "r.#", 40),
        ],
    )
    model = apply_events_model([received[0:5], received[5:10]], settings.validator(), max_event_bytes=MAX_EVENT_BYTES)
    prepare_tables(spark, settings)
    created = latest_version(spark, settings.subscriptions.table_path)

    status, output = run_refresh(settings, tmp_path / "in-merge.log", env={CRASH_AFTER_WRITES_ENV: "0:in_merge"})
    assert status == -9, output[-3000:]
    assert "the MERGE of batch 0 kills the job when it reads its source" in output  # and nothing else would
    assert latest_version(spark, settings.subscriptions.table_path) == created  # the MERGE never committed
    assert rejects_in_table(spark, settings) == []

    # The next run replays batch 0 and dies after batch 1's MERGE.
    with pytest.raises(Exception, match="batch 1 dies after its MERGE") as died:
        refresh_from_kafka(spark, settings, after_writes=FailAt(1, AFTER_MERGE))
    assert died.type.__name__ == "StreamingQueryException", died.value
    assert_planned_not_committed(settings.subscriptions.checkpoint_path, 1)
    expected_rows = {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}
    assert read_rows(spark, settings.subscriptions.table_path) == expected_rows
    batch_1_rejects = {received[7].change_id}
    assert {change for change, _ in rejects_in_table(spark, settings)} == set(model.rejects) - batch_1_rejects

    summary = refresh_from_kafka(spark, settings)
    assert [batch.batch_id for batch in summary.batches] == [1]  # replayed: its MERGE a no-op, its rejects written
    assert not summary.batches[0].merged
    assert_matches_model(spark, settings, model)


def random_events(rng: random.Random, count: int) -> list[bytes]:
    """Events over a few subscribers and at most 3 patterns each (the fixture's limit, never reached), with
    distinct timestamps, a few invalid: last writer wins, so the final table cannot depend on the order."""
    events = []
    for _ in range(count):
        if rng.random() < 0.1:
            events.append(b"{broken")
            continue
        subscriber = f"s{rng.randrange(4)}"
        pattern = rng.choice(["a.*", "b.#", "c"])
        make = sub if rng.random() < 0.65 else unsub
        events.append(make(subscriber, pattern, rng.randrange(10**9)))
    return events


@pytest.mark.slow
def test_two_concurrent_runs_leave_the_sequential_models_table(
    spark: SparkSession, job_settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    rng = random.Random(20261124)
    kafka_run = with_topic(job_settings, topic_factory(partitions=1), max_offsets_per_trigger=6)
    import_run = elsewhere(kafka_run, tmp_path, checkpoint_path="import-checkpoint")
    received = produce(kafka_run, random_events(rng, 18))  # 3 batches, 3 MERGEs
    files = []
    for index in range(3):
        path = tmp_path / f"changes-{index}.jsonl"
        path.write_bytes(b"\n".join(random_events(rng, 6)) + b"\n")
        files.append(path)
    validator = kafka_run.validator()
    imported = [read_import_file(path, validator, max_event_bytes=MAX_EVENT_BYTES)[1] for path in files]
    kafka_batches = [received[start : start + 6] for start in range(0, len(received), 6)]
    model = apply_events_model([*kafka_batches, *imported], validator, max_event_bytes=MAX_EVENT_BYTES)
    reversed_model = apply_events_model([*imported, *kafka_batches], validator, max_event_bytes=MAX_EVENT_BYTES)
    assert (model.rows, model.rejects) == (reversed_model.rows, reversed_model.rejects)  # the order cannot matter
    prepare_tables(spark, kafka_run)

    # The Kafka run on a thread of its own, the import on this one, both on the shared session: each commits
    # through Delta's optimistic concurrency on the table's log, as two processes would (one process spares
    # the suite a JVM start; the refresh job as a process of its own is the other tests' here).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        kafka_done = pool.submit(refresh_from_kafka, spark, kafka_run)
        flags = [*job_flags(import_run), *(flag for path in files for flag in ("--import", str(path)))]
        assert main(flags, spark_factory=lambda *args, **kwargs: spark) == 0
        kafka_summary = kafka_done.result(timeout=WAIT_TIMEOUT_S)
    assert [batch.batch_id for batch in kafka_summary.batches] == [0, 1, 2]

    assert_matches_model(spark, kafka_run, model)
    assert sorted(reversed_model.rejects.items()) == rejects_in_table(spark, kafka_run)


def test_a_run_on_a_held_checkpoint_stops_with_exit_3(
    spark: SparkSession, job_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changes = tmp_path / "changes.jsonl"
    changes.write_bytes(sub("s1", "a.*", 1) + b"\n")
    argv = [*job_flags(job_settings), "--import", str(changes)]
    checkpoint = job_settings.subscriptions.checkpoint_path
    holder = CheckpointLease.acquire(spark, checkpoint, job="refresh_subscriptions", name="the cron run")
    try:
        assert main(argv, spark_factory=lambda *args, **kwargs: spark) == EXIT_CHECKPOINT_BUSY
    finally:
        holder.release()
    error = capsys.readouterr().err.strip()
    assert error.startswith(
        f"refresh_subscriptions: checkpoint {checkpoint} is in use by refresh_subscriptions 'the cron run' (host "
    )
    assert "\n" not in error
    from delta.tables import DeltaTable

    assert not DeltaTable.isDeltaTable(spark, job_settings.subscriptions.table_path)  # it did nothing at all

    assert main(argv, spark_factory=lambda *args, **kwargs: spark) == 0  # released: the same command runs
    assert read_rows(spark, job_settings.subscriptions.table_path).keys() == {("s1", "a.*")}

"""The shared streaming layer's pure parts (no JVM): query identity, the txnAppId format, the crash hook, the
retry of steps Delta refuses and of query starts a slow Python worker refused, the background warm's ordering.

The Spark parts (Kafka source, table creation, idempotent appends) run in every router and refresh-job
integration test, and the replays in tests/integration/test_router_txn.py and test_refresh_job.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import pytest

from routing.appends import AppendStateWarmer
from routing.settings import Settings
from routing.streaming import (
    AFTER_MERGE,
    CRASH_AFTER_WRITES_ENV,
    IN_MERGE,
    ConcurrentTableChange,
    QueryIdentity,
    crash_after_writes_from_env,
    kafka_source,
    retry,
    retry_delta_conflicts,
    retry_worker_start,
    txn_app_id,
)


def test_txn_app_id_is_app_id_colon_query_id() -> None:
    assert txn_app_id("spark-topic-router", "0f1e") == "spark-topic-router:0f1e"


def test_batches_wait_until_the_query_is_bound() -> None:
    identity = QueryIdentity("router")
    assert identity.txn_app_id == ""
    seen: list[str] = []
    batch = threading.Thread(target=lambda: seen.append(identity.wait()))
    batch.start()
    batch.join(timeout=0.2)
    assert batch.is_alive() and seen == []  # still waiting: the query id is not known yet
    identity.bind("q-1")
    batch.join(timeout=10)
    assert seen == ["router:q-1"] and identity.query_id == "q-1"


def test_the_crash_hook_exists_only_when_the_test_variable_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_AFTER_WRITES_ENV, raising=False)
    assert crash_after_writes_from_env() is None
    monkeypatch.setenv(CRASH_AFTER_WRITES_ENV, "3")
    hook = crash_after_writes_from_env()
    assert hook is not None
    hook(2)  # another batch: nothing happens (batch 3 would SIGKILL this process)


def test_the_crash_hook_can_name_a_point_inside_the_refresh_jobs_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_AFTER_WRITES_ENV, f"2:{IN_MERGE}")
    hook = crash_after_writes_from_env()
    assert hook is not None and (hook.batch_id, hook.point) == (2, IN_MERGE)
    hook(2)  # the after-writes point of batch 2: not the one named, nothing happens
    hook.at_batch(2)(AFTER_MERGE)
    source = cast("Any", object())
    assert hook.in_merge(source, 1) is source  # another batch's MERGE source is left alone
    monkeypatch.setenv(CRASH_AFTER_WRITES_ENV, "1:sideways")
    with pytest.raises(ValueError, match="unknown crash point 'sideways'"):
        crash_after_writes_from_env()


def test_retry_runs_a_step_again_while_its_error_is_retryable(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    pauses: list[int] = []

    def step() -> str:
        calls.append("step")
        if len(calls) < 3:
            raise LookupError(f"refusal {len(calls)}")
        return "done"

    def retryable(error: Exception) -> str | None:
        return f"refused ({error})" if isinstance(error, LookupError) else None

    def pause_s(attempt: int) -> float:
        pauses.append(attempt)
        return 0.0

    with caplog.at_level("WARNING", logger="routing.streaming"):
        assert retry(step, "a test step", retryable=retryable, attempts=5, pause_s=pause_s) == "done"
    assert calls == ["step"] * 3 and pauses == [1, 2]
    assert "a test step: refused (refusal 1); trying again in 0.0 s (attempt 2 of 5)" in caplog.messages

    calls.clear()
    with pytest.raises(LookupError, match="refusal 2"):  # refused every time: the last refusal, after 2 attempts
        retry(step, "a test step", retryable=retryable, attempts=2, pause_s=pause_s)
    assert calls == ["step"] * 2

    def failing() -> None:
        calls.append("error")
        raise OSError("disk full")

    calls.clear()
    with pytest.raises(OSError, match="disk full"):  # not retryable: raised at once
        retry(failing, "a test step", retryable=retryable, attempts=5, pause_s=pause_s)
    assert calls == ["error"]


# Spark's words when a Connect server's foreachBatch worker misses its fixed 10 s (PythonWorkerFactory).
SLOW_WORKER = "java.net.SocketTimeoutException: Timed out while waiting for the Python worker to connect back"


@pytest.mark.parametrize(
    ("retrying", "refusal", "other"),
    [
        (retry_delta_conflicts, ConcurrentTableChange("another writer committed first"), OSError("disk full")),
        (
            retry_worker_start,
            RuntimeError(f"(org.apache.spark.SparkException) {SLOW_WORKER}"),
            RuntimeError("[STREAMING_QUERY_ALREADY_ACTIVE] another query runs on this checkpoint"),
        ),
    ],
    ids=["delta conflicts", "slow python worker"],
)
def test_each_retry_tries_again_at_its_own_refusal_only(
    retrying: Callable[..., str], refusal: Exception, other: Exception
) -> None:
    calls: list[str] = []

    def refused_twice() -> str:
        calls.append("refused")
        if len(calls) < 3:
            raise refusal
        return "done"

    assert retrying(refused_twice, "a test step", first_pause_s=0.0) == "done"
    assert calls == ["refused"] * 3

    def failing() -> str:
        calls.append("other")
        raise other

    with pytest.raises(type(other)) as raised:
        retrying(failing, "a test step", first_pause_s=0.0)
    assert raised.value is other
    assert calls == ["refused"] * 3 + ["other"]


@pytest.mark.parametrize(("topics", "pattern"), [((), ""), (("a",), "a.*")])
def test_the_kafka_source_takes_topics_or_a_pattern(topics: tuple[str, ...], pattern: str) -> None:
    no_spark = cast("Any", None)
    with pytest.raises(ValueError, match="either topics or a pattern"):
        kafka_source(
            no_spark, Settings(), topics=topics, pattern=pattern, starting_offsets="earliest", max_offsets_per_trigger=1
        )


def test_the_background_warm_runs_off_the_callers_thread_and_wait_returns_once_it_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from routing import appends

    release = threading.Event()
    warmed: list[tuple[str, str]] = []  # (table, thread name)

    def slow_warm(spark: Any, table: str) -> bool:
        release.wait(timeout=10)
        warmed.append((table, threading.current_thread().name))
        return True

    monkeypatch.setattr(appends, "warm_append_state", slow_warm)
    warmer = AppendStateWarmer(cast(Any, None))
    try:
        warmer.start(["deliveries", "metrics", "deliveries"])
        assert warmed == []  # start returned while the warm was still held up
        waiter = threading.Thread(target=warmer.wait)
        waiter.start()
        waiter.join(timeout=0.2)
        assert waiter.is_alive()  # wait blocks until the warm has finished
        release.set()
        waiter.join(timeout=10)
        assert not waiter.is_alive()
        # Each table once, in the order written, on the warmer's one thread.
        assert [table for table, _ in warmed] == ["deliveries", "metrics"]
        assert {thread for _, thread in warmed} == {warmed[0][1]} and warmed[0][1].startswith("delta-warm")
        warmer.start(["dead_letters"])
        warmer.start([])  # the next start first waits for the warm in flight
        assert [table for table, _ in warmed] == ["deliveries", "metrics", "dead_letters"]
        assert warmer.wait() == 0.0  # nothing in flight
    finally:
        release.set()
        warmer.close()

"""One router per checkpoint: a second ``python -m jobs.route`` on a running router's checkpoint fails fast.

The first router runs in this process (the shared session, a processing-time query); the second is a
real process with the same settings, sharing nothing with the first but the filesystem. It must exit 3
with one line naming the checkpoint and the router holding it (its app id, this process's pid, its
query id), having routed nothing, while the first keeps routing: the outputs equal the regex oracle's,
every batch the first router's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    active_subscriptions,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    kill_group,
    produce,
    read_routed,
    router_settings,
    start_router,
)

from routing.checkpoints import EXIT_CHECKPOINT_BUSY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

SUBSCRIPTIONS = [("stock.*.msft", "msft-desk"), ("stock.#", "equities"), ("#.ibm", "ibm-watch")]
KEYS = [b"stock.nasdaq.msft", b"stock.nyse.ibm", b"forex.eur", None]


def test_a_second_router_on_the_same_checkpoint_fails_fast(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    from routing.router.pipeline import Router

    topic = topic_factory(partitions=1)
    job = router_settings(settings, tmp_path, [topic], trigger="processing_time", trigger_interval="1 second")
    version = apply_subscriptions(spark, job, tmp_path / "subscriptions.jsonl", SUBSCRIPTIONS)
    records = produce(job, topic, [(KEYS[index % 4], b"first", []) for index in range(20)])

    first = Router(spark, job)
    query = first.start()
    try:
        query.processAllAvailable()
        log_path = tmp_path / "second-router.log"
        with log_path.open("wb") as log:
            second = start_router(job, log)
            try:
                second.wait(timeout=WAIT_TIMEOUT_S)
            finally:
                kill_group(second)
        output = log_path.read_text(errors="replace")
        assert second.returncode == EXIT_CHECKPOINT_BUSY, output[-3000:]
        errors = [line for line in output.splitlines() if line.startswith("route: ")]
        assert len(errors) == 1, output[-3000:]
        for part in (
            f"checkpoint {job.router.checkpoint_path} is in use by router '{job.router.app_id}'",
            f"pid {os.getpid()}",
            f"query {query.id}",
        ):
            assert part in errors[0]
        assert "router query started" not in output  # it never started a query

        # The first router was not disturbed: it routes what arrives next as well.
        records += produce(job, topic, [(KEYS[index % 4], b"second", []) for index in range(20)])
        query.processAllAvailable()
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
        first.close()

    routed = read_routed(spark, job)
    assert_ids_exact(routed)
    expected = expected_outcomes(records, job.router, job.validator(), active_subscriptions(spark, job, version))
    assert routed.outcomes() == expected
    assert {batch for batch, _ in routed.versions().values()} <= set(first.reports)

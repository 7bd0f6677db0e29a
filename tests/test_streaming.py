"""The shared streaming layer's pure parts (no JVM): query identity, the txnAppId format, the crash hook.

The Spark parts (Kafka source, table creation, idempotent appends) run in every router and refresh-job
integration test, and the replays in tests/integration/test_router_txn.py and test_refresh_job.py.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from routing.settings import Settings
from routing.streaming import (
    CRASH_AFTER_WRITES_ENV,
    QueryIdentity,
    crash_after_writes_from_env,
    kafka_source,
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


@pytest.mark.parametrize(("topics", "pattern"), [((), ""), (("a",), "a.*")])
def test_the_kafka_source_takes_topics_or_a_pattern(topics: tuple[str, ...], pattern: str) -> None:
    no_spark = cast("Any", None)
    with pytest.raises(ValueError, match="either topics or a pattern"):
        kafka_source(
            no_spark, Settings(), topics=topics, pattern=pattern, starting_offsets="earliest", max_offsets_per_trigger=1
        )

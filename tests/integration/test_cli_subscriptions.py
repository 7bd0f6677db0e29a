"""``python -m routing subscribe``/``unsubscribe``/``list`` through a real broker, the refresh job and Delta.

Oracle: the plain-Python model (:class:`~routing.subscriptions.model.SubscriptionModel`) fed the events
read back from the topic with their coordinates, one batch per refresh run, as in
``test_refresh_job.py``; after every ``--apply`` the table and the rejects table must equal the model's.
The expected counts of each run (a retry is a no-op, one subscribe over the limit) are the spec,
written out independently of the model.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from test_cli import run

from integration.test_refresh_job import MAX_EVENT_BYTES, assert_matches_model, job_settings, set_flags, with_topic
from routing.checkpoints import EXIT_CHECKPOINT_BUSY, CheckpointLease
from routing.settings import Settings
from routing.subscriptions.events import IDEMPOTENCY_KEY, Received, kafka_received
from routing.subscriptions.model import SubscriptionModel

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["job_settings"]  # the fixture, used by name

PARTITIONS = 2
#: Seconds one read from the broker may take.
POLL_TIMEOUT_S = 30.0


def topic_events(settings: Settings) -> dict[tuple[int, int], Received]:
    """Every event in the subscriptions topic by (partition, offset), read back by a consumer of its own."""
    topic = settings.subscriptions.events_topic
    consumer = Consumer(
        {**settings.kafka_client_config(), "group.id": f"cli-test-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        partitions = [TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)]
        total = sum(consumer.get_watermark_offsets(part, timeout=POLL_TIMEOUT_S)[1] for part in partitions)
        consumer.assign(partitions)
        events: dict[tuple[int, int], Received] = {}
        while len(events) < total:
            message = consumer.poll(POLL_TIMEOUT_S)
            assert message is not None and message.error() is None
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            events[(partition, offset)] = kafka_received(topic, partition, offset, message.value())
    finally:
        consumer.close()
    return events


def counts(report: dict[str, Any]) -> dict[str, int]:
    """The refresh run's non-zero outcome counts, from the CLI's --json report."""
    refresh = report["refresh"]
    every = {**refresh["applied"], **refresh["noop"], **refresh["rejected"]}
    return {kind: n for kind, n in every.items() if n}


@pytest.mark.slow
def test_subscribe_unsubscribe_list_round_trip(spark: SparkSession, job_settings: Settings, topic_factory: Any) -> None:
    settings = with_topic(job_settings, topic_factory(partitions=PARTITIONS), starting_offsets="earliest")
    flags = set_flags(settings)  # limits.max_subscriptions_per_subscriber = 3
    model = SubscriptionModel(settings.validator(), MAX_EVENT_BYTES)

    def cli(*argv: str) -> tuple[int, dict[str, Any]]:
        code, out, _ = run(*argv, "--json", *flags)
        (line,) = out
        return code, json.loads(line)

    def applied_run(*reports: dict[str, Any]) -> dict[str, int]:
        """The model's counts for one batch of the events these CLI runs published (read back from Kafka)."""
        events = topic_events(settings)
        batch = [events[(change["partition"], change["offset"])] for report in reports for change in report["changes"]]
        return {kind: n for kind, n in model.apply_batch(batch).items() if n}

    # Two patterns, applied at once. The events are the refresh job's format, with ts now and a key.
    before = int(time.time() * 1000)
    code, first = cli("subscribe", "fx-desk", "forex.#", "stock.*.msft", "--apply")
    after = int(time.time() * 1000)
    assert code == 0, first
    assert applied_run(first) == counts(first) == {"subscribed": 2}
    assert_matches_model(spark, settings, model)
    assert [(change["pattern"], change["result"], change["active"]) for change in first["changes"]] == [
        ("forex.#", "applied", True),
        ("stock.*.msft", "applied", True),
    ]
    events = topic_events(settings)
    for change in first["changes"]:
        sent = json.loads(events[(change["partition"], change["offset"])].raw or b"")
        assert sent["op"] == "subscribe" and sent["subscriber"] == "fx-desk" and sent["pattern"] == change["pattern"]
        assert before <= sent["ts"] <= after and sent[IDEMPOTENCY_KEY] == change["idempotency_key"]
    first_version = first["refresh"]["table_version"]

    # The same command again (a retry after a timeout): new events, yet no change and no new table version.
    code, retried = cli("subscribe", "fx-desk", "forex.#", "stock.*.msft", "--apply")
    assert code == 0, retried
    assert applied_run(retried) == counts(retried) == {"stale": 2}
    assert retried["refresh"]["table_version"] == first_version
    assert [change["result"] for change in retried["changes"]] == ["applied", "applied"]  # the first copy's
    assert_matches_model(spark, settings, model)

    # Published without --apply: a command whose first run did reach the broker, run twice (one change), an
    # unsubscribe and another subscriber's pattern. Then over the limit of 3: fx-desk holds one once forex.# is
    # gone and crypto.# is in, so of two more one fits and the refresh job rejects the other (exit 2).
    code, once = cli("subscribe", "fx-desk", "crypto.#")
    assert code == 0 and once["refresh"] is None
    code, twice = cli("subscribe", "fx-desk", "crypto.#")
    assert code == 0 and twice["changes"][0]["change_id"] == once["changes"][0]["change_id"]
    code, dropped = cli("unsubscribe", "fx-desk", "forex.#")
    assert code == 0, dropped
    code, other = cli("subscribe", "ops", "#")
    assert code == 0, other
    code, over = cli("subscribe", "fx-desk", "a.b", "c.d", "--apply")
    assert code == 2, over
    assert applied_run(once, twice, dropped, other, over) == counts(over)
    assert counts(over) == {"subscribed": 3, "superseded": 1, "unsubscribed": 1, "too_many_subscriptions": 1}
    assert_matches_model(spark, settings, model)
    fates = sorted((change["result"], change["reason"]) for change in over["changes"])
    assert fates == [("applied", None), ("rejected", "too_many_subscriptions")]
    rejected = next(change["change_id"] for change in over["changes"] if change["result"] == "rejected")
    assert model.rejects == {rejected: "too_many_subscriptions"}

    # list: one subscriber's active rows now, and everyone's at the first run's version.
    code, out, err = run("list", "--subscriber", "fx-desk", "--json", *flags)
    assert code == 0, err
    listed = json.loads(out[0])
    assert listed["version"] == over["refresh"]["table_version"]
    mine = sorted(pattern for pattern, subscriber in model.active_pairs() if subscriber == "fx-desk")
    assert [(entry["subscriber"], entry["pattern"]) for entry in listed["subscriptions"]] == [
        ("fx-desk", pattern) for pattern in mine
    ]
    code, out, err = run("list", "--version", str(first_version), *flags)
    assert code == 0 and err[-1].endswith(f"version {first_version}, 2 active subscription(s)")
    assert [line.split()[:2] for line in out] == [["fx-desk", "forex.#"], ["fx-desk", "stock.*.msft"]]

    # --apply while another refresh run holds the checkpoint: published, not applied, the job's exit status 3.
    lease = CheckpointLease.acquire(
        spark, settings.subscriptions.checkpoint_path, job="refresh_subscriptions", name="test"
    )
    try:
        code, busy = cli("unsubscribe", "fx-desk", "a.b", "--apply")
    finally:
        lease.release()
    assert code == EXIT_CHECKPOINT_BUSY and "is in use by" in busy["error"] and busy["refresh"] is None
    assert busy["changes"][0]["offset"] is not None

"""The real-time lane end to end: ``python -m jobs.route --real-time`` on the real broker, in Real-Time Mode.

One router process routes a topic to a delivery topic and a dead-letter topic; a second router on its checkpoint
is refused by the lease; a subscription applied while it runs reaches it without a restart; a SIGKILL of its
whole process group and a restart on the same checkpoint lose nothing. Then the two lanes side by side
(docs/realtime.md, "Beside the Delta lane"): while a real-time router runs, the micro-batch lane routes the same
topic into Delta, with the same subscription table and snapshot files, and both give every message the same
outputs under the same ids.

The oracle is the regex matcher (:class:`routing.reference.ReferenceMatcher`) with the key rules of the Python
validator (:func:`router_support.expected_outcome`): every delivery it expects arrives at least once, with the
id ``topic|partition|offset|subscriber``, and no record arrives that it does not expect.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    DELIVERED,
    WAIT_TIMEOUT_S,
    Record,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    kill_group,
    produce,
    read_routed,
    router_settings,
    run_available_now,
    start_router,
    with_router,
)

from routing import grammar
from routing.checkpoints import EXIT_CHECKPOINT_BUSY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

FIRST = [("orders.#", "orders-desk"), ("#.eu", "eu-desk")]
LATER = [("other.*", "other-desk")]
KEYS = [b"orders.eu", b"orders.us", b"other.eu", b"other.us", b"x..y", b"\xff"]

#: (topic, key) -> the record's headers, for every record read from the output topics.
Received = dict[tuple[str, str], list[dict[str, bytes]]]


class Outputs:
    """A consumer of the lane's output topics, from their start, keeping every record it read."""

    def __init__(self, settings: Settings, topics: list[str]) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                **settings.kafka_client_config(),
                "group.id": f"realtime-test-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.consumer.subscribe(topics)
        self.records: Received = {}

    def read_until(self, done: Callable[[Received], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while not done(self.records):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for message in self.consumer.consume(500, timeout=0.5):
                if message.error() is not None:
                    continue  # an unknown topic before the router created it
                raw: Any = message.headers() or []  # confluent-kafka's stubs type it loosely
                headers = {str(name): bytes(value or b"") for name, value in raw}
                key = bytes(message.key() or b"").decode()
                self.records.setdefault((str(message.topic()), key), []).append(headers)

    def poll(self, seconds: float) -> None:
        """Read whatever arrives within ``seconds``."""
        deadline = time.monotonic() + seconds
        self.read_until(lambda _got: time.monotonic() >= deadline, "nothing")

    def close(self) -> None:
        self.consumer.close()


def expected_records(
    records: list[Record], settings: Settings, subscriptions: list[tuple[str, str]]
) -> dict[tuple[str, str], str | None]:
    """(topic, key) -> the dead-letter reason (None for a delivery) of every record the oracle expects."""
    router = settings.router
    expected: dict[tuple[str, str], str | None] = {}
    outcomes = expected_outcomes(records, router, settings.validator(), subscriptions)
    for record in records:
        message_id = f"{record.topic}|{record.partition}|{record.offset}"
        outcome, subscribers = outcomes[record.coordinates]
        if outcome == DELIVERED:
            for subscriber in subscribers:
                expected[(router.kafka_sink_topic, f"{message_id}|{subscriber}")] = None
        elif outcome in grammar.DEAD_LETTER_REASONS:
            expected[(router.dead_letter_topic, message_id)] = outcome
    return expected


def messages(tag: str, count: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """``count`` messages over :data:`KEYS`; each carries a forged ``delivery_id`` header, which must be renamed."""
    return [
        (KEYS[index % len(KEYS)], f"{tag}-{index}".encode(), [("Delivery_Id", b"forged")]) for index in range(count)
    ]


def test_real_time_lane_routes_picks_up_a_subscribe_and_survives_a_sigkill(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    source = topic_factory(partitions=1)
    suffix = uuid.uuid4().hex[:8]
    job = with_router(
        router_settings(settings, tmp_path, [source]),
        trigger="real_time",
        real_time_interval="5 seconds",
        refresh_interval_s=1.0,
        kafka_sink_topic=f"deliveries-{suffix}",
        dead_letter_topic=f"dead-letters-{suffix}",
        snapshot_files_path=str(tmp_path / "snapshots"),
    )
    router = job.router
    apply_subscriptions(spark, job, tmp_path / "first.jsonl", FIRST)
    outputs = Outputs(job, [router.kafka_sink_topic, router.dead_letter_topic])
    log_path = tmp_path / "router.log"
    with log_path.open("ab") as log:
        process = start_router(job, log)
    try:
        first = produce(job, source, messages("first", 24))
        want = expected_records(first, job, FIRST)
        outputs.read_until(lambda got: want.keys() <= got.keys(), "the first messages' records")
        _assert_second_router_refused(job, tmp_path / "second-router.log")

        # A subscribe while it runs: probes until the new subscriber gets one, then messages it must get.
        apply_subscriptions(spark, job, tmp_path / "later.jsonl", LATER)
        probes: list[Record] = []
        started = time.monotonic()
        while not any(key[1].endswith("|other-desk") for key in outputs.records):
            assert time.monotonic() - started < WAIT_TIMEOUT_S, "the subscribe never reached the running query"
            probes += produce(job, source, [(b"other.probe", b"probe", [])])  # unrouted until it arrives
            outputs.poll(0.5)
        both = FIRST + LATER
        second = produce(job, source, messages("second", 24))
        want_second = expected_records(second, job, both)
        outputs.read_until(lambda got: want_second.keys() <= got.keys(), "the second messages' records")

        kill_group(process)
        third = produce(job, source, messages("third", 24))
        with log_path.open("ab") as log:
            process = start_router(job, log)
        want_third = expected_records(third, job, both)
        outputs.read_until(lambda got: want_third.keys() <= got.keys(), "the third messages' records after a restart")
    finally:
        kill_group(process)
        outputs.close()

    allowed = {**want, **want_second, **want_third}
    allowed.update(expected_records(probes, job, FIRST))
    allowed.update(expected_records(probes, job, both))
    unexpected = set(outputs.records) - allowed.keys()
    assert unexpected == set(), (
        f"records the oracle does not expect: {sorted(unexpected)[:5]}\n{log_path.read_text()[-3000:]}"
    )
    probe_ids = {f"{probe.topic}|{probe.partition}|{probe.offset}" for probe in probes}  # sent without headers
    for (topic, key), headers_seen in outputs.records.items():
        for headers in headers_seen:
            reason = allowed[(topic, key)]
            if reason is None:
                assert headers["delivery_id"] == key.encode()
                if key.rsplit("|", 1)[0] not in probe_ids:
                    assert headers["source.Delivery_Id"] == b"forged"  # renamed, never a second delivery_id
                assert int(headers["snapshot_version"]) >= 1
            else:
                assert headers["dead_letter_id"] == key.encode() and headers["reason"] == reason.encode()
                # Judged by the key rules before any match: no snapshot was used (a null header value).
                assert headers["snapshot_version"] == b""
    # The versions: the first messages were matched before the subscribe, the second ones after it.
    first_versions = {_version(outputs.records, key) for key, reason in want.items() if reason is None}
    second_versions = {_version(outputs.records, key) for key, reason in want_second.items() if reason is None}
    assert len(first_versions) == 1 and min(second_versions) > max(first_versions)


def _assert_second_router_refused(job: Settings, log_path: Path) -> None:
    """A second real-time router on the running one's checkpoint exits at once with the lease's one line."""
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
    assert f"checkpoint {job.router.checkpoint_path} is in use by router '{job.router.app_id}'" in errors[0]


def _version(records: Received, key: tuple[str, str]) -> int:
    return int(records[key][0]["snapshot_version"])


def test_both_lanes_side_by_side_route_the_same_input_to_the_same_ids(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    source = topic_factory(partitions=1)
    suffix = uuid.uuid4().hex[:8]
    # One subscription table and one snapshot directory; each lane its own checkpoint and app id.
    shared = router_settings(
        settings, tmp_path, [source], refresh_interval_s=1.0, snapshot_files_path=str(tmp_path / "snapshots")
    )
    fast = with_router(
        shared,
        trigger="real_time",
        real_time_interval="5 seconds",
        kafka_sink_topic=f"deliveries-{suffix}",
        dead_letter_topic=f"dead-letters-{suffix}",
        checkpoint_path=str(tmp_path / "real_time_checkpoint"),
        app_id=f"real-time-{suffix}",
    )
    durable = with_router(shared, checkpoint_path=str(tmp_path / "micro_batch_checkpoint"), app_id=f"delta-{suffix}")
    apply_subscriptions(spark, shared, tmp_path / "subscriptions.jsonl", FIRST)
    outputs = Outputs(fast, [fast.router.kafka_sink_topic, fast.router.dead_letter_topic])
    log_path = tmp_path / "router.log"
    with log_path.open("ab") as log:
        process = start_router(fast, log)
    try:
        records = produce(fast, source, messages("both", 24))
        want = expected_records(records, fast, FIRST)
        run_available_now(spark, durable)  # the Delta lane, in this process, while the real-time one runs
        outputs.read_until(lambda got: want.keys() <= got.keys(), "the real-time lane's records")
        outputs.poll(2.0)  # anything beyond them shows up too
    finally:
        kill_group(process)
        outputs.close()

    routed = read_routed(spark, durable)
    assert_ids_exact(routed)
    delivery_topic, dead_letter_topic = fast.router.kafka_sink_topic, fast.router.dead_letter_topic
    expected_deliveries = {key for (topic, key), reason in want.items() if reason is None}
    expected_dead = {key: reason for (topic, key), reason in want.items() if reason is not None}
    assert expected_deliveries and expected_dead  # the oracle's expectation covers both kinds
    kafka_deliveries = {key for topic, key in outputs.records if topic == delivery_topic}
    assert kafka_deliveries == {row["delivery_id"] for row in routed.deliveries} == expected_deliveries
    kafka_dead = {
        key: seen[0]["reason"].decode() for (topic, key), seen in outputs.records.items() if topic == dead_letter_topic
    }
    assert kafka_dead == {row["dead_letter_id"]: row["reason"] for row in routed.dead_letters} == expected_dead
    # One table version, so both lanes matched every message with it.
    kafka_versions = {
        int(seen[0]["snapshot_version"]) for (topic, _), seen in outputs.records.items() if topic == delivery_topic
    }
    assert kafka_versions == {row["snapshot_version"] for row in routed.deliveries}

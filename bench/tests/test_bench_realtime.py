"""``bench/realtime.py``'s verdicts on synthetic steps: when a step kept up, its boundary pause, its flags.
The lane it measures runs end to end in ``tests/integration/test_realtime.py``."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1]


@pytest.fixture
def realtime(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import realtime as module

    return module


def step_result(
    realtime: ModuleType, *, sent: int, count: int, seconds: float, worst: dict[int, int] | None = None
) -> Any:
    from latency import Step

    step = Step("r2", 1, 1_000, 10.0)  # a 10 s step
    step.sent = sent
    received = realtime.Received(count=count, receive_seconds=seconds, worst_by_tick=worst or {})
    return realtime.StepResult("r2", 10_000, step, received, grace_seconds=2.0)


@pytest.mark.parametrize(
    ("sent", "count", "seconds", "kept_up"),
    [
        (1_000, 1_000, 10.0, True),
        (1_000, 1_000, 12.1, True),  # 10 s / 0.99 + the 2 s grace
        (1_000, 1_000, 12.2, False),  # received more slowly than 99% of the offered rate: fell behind
        (1_000, 999, 10.0, False),  # a message never arrived
        (0, 0, 0.0, False),  # nothing sent proves nothing
    ],
)
def test_a_step_kept_up_when_its_messages_arrived_at_the_offered_rate(
    realtime: ModuleType, sent: int, count: int, seconds: float, kept_up: bool
) -> None:
    assert step_result(realtime, sent=sent, count=count, seconds=seconds).kept_up is kept_up


def test_the_boundary_pause_is_the_median_worst_latency_around_each_boundary(realtime: ModuleType) -> None:
    # Ticks of 100 ms of intended time: 10 ms everywhere, 300 ms and 500 ms next to two boundaries, 2 s far away.
    worst = {tick: 10_000 for tick in range(0, 600)}
    worst.update({98: 300_000, 301: 500_000, 450: 2_000_000})
    result = step_result(realtime, sent=1, count=1, seconds=0.0, worst=worst)
    result.boundaries_ms = [10_000, 30_000, 50_000]
    # Around 10 s: 300 ms; around 30 s: 500 ms; around 50 s: 10 ms. The 2 s spike at 45 s is no boundary's.
    assert result.boundary_pause_ms() == 300.0
    result.boundaries_ms = []
    assert result.boundary_pause_ms() is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--variants", "r4"],
        ["--rates", "0"],
        ["--interval-seconds", "0"],
        ["--refresh-seconds", "0"],
        ["--subscriptions", "x"],
    ],
)
def test_bad_flags_are_refused(realtime: ModuleType, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        realtime.parse_args(argv)
    assert exited.value.code == 2


def test_the_boundary_table_takes_medians_of_the_driver_phases(realtime: ModuleType) -> None:
    batches = [
        {
            "latestOffset": 5,
            "queryPlanning": 100,
            "walCommit": 40,
            "commitOffsets": 30,
            "addBatch": 60_000,
            "triggerExecution": 60_200,
        },
        {
            "latestOffset": 7,
            "queryPlanning": 90,
            "walCommit": 50,
            "commitOffsets": 40,
            "addBatch": 60_000,
            "triggerExecution": 60_180,
        },
        {
            "latestOffset": 9,
            "queryPlanning": 300,
            "walCommit": 60,
            "commitOffsets": 50,
            "addBatch": 60_000,
            "triggerExecution": 60_500,
        },
    ]
    router = realtime.RunExtras("r2", 10_000, durations=batches)
    micro_batch = realtime.RunExtras("r3", 10_000, durations=batches)  # no boundaries to report
    result = step_result(realtime, sent=1, count=1, seconds=0.0, worst={100: 250_000})
    result.boundaries_ms = [10_000]
    rows = realtime.boundary_rows([result], [router, micro_batch])
    assert rows == [["(r2) real-time router, 10,000", "3", "7", "100", "50", "40", "200", "250.0"]]


def test_the_change_table_measures_from_the_commit(realtime: ModuleType) -> None:
    came = realtime.ChangeResult(
        "r2", 10_000, committed_ms=1_000, published_ms=2_500, received_ms=3_000, publish_work_s=0.25
    )
    never = realtime.ChangeResult(
        "r3", 10_000, committed_ms=1_000, published_ms=None, received_ms=None, publish_work_s=None
    )
    rows = realtime.change_rows(
        [realtime.RunExtras("r2", 10_000, change=came), realtime.RunExtras("r3", 10_000, change=never)]
    )
    assert rows == [
        ["(r2) real-time router, 10,000", "1.5", "0.25", "0.5", "2.0"],
        ["(r3) micro-batch router, Kafka sink, 10,000", "-", "-", "-", "-"],
    ]


def test_where_the_time_goes_subtracts_the_layers_at_each_rate(realtime: ModuleType) -> None:
    from hdrh.histogram import HdrHistogram
    from latency import Step

    def result(variant: str, subscriptions: int, rate: int, latency_us: int) -> Any:
        histogram = HdrHistogram(1, realtime.HISTOGRAM_MAX_US, 3)
        histogram.record_value(latency_us)
        step = Step(variant, 1, rate, 10.0)
        return realtime.StepResult(variant, subscriptions, step, realtime.Received(count=1, histogram=histogram))

    results = [
        result("r0", 0, 10_000, 1_000),
        result("r1", 0, 10_000, 4_000),
        result("r2", 10_000, 10_000, 5_000),
        result("r2", 10_000, 20_000, 6_000),  # no (r0) or (r1) at this rate: no row
    ]
    assert realtime.where_rows(results) == [["10,000", "10,000", "1.0", "4.0", "5.0", "2.0", "1.0"]]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_consumer_times_the_suffixed_records_of_each_step(
    realtime: ModuleType, settings: Any, kafka_broker: object
) -> None:
    """The Java consumer against a real broker: every record whose key ends with the timed suffix is in its
    step's histogram at its latency, no other record is, and the late subscriber's first record is seen."""
    from confluent_kafka import Producer
    from hdrh.histogram import HdrHistogram

    from jobs.demo import create_topics, delete_topics

    topic = f"bench.tests.realtime-consumer.{time.time_ns()}"
    create_topics(settings, [topic], partitions=2)
    producer = Producer(settings.kafka_client_config())
    now_us = time.time_ns() // 1000
    # (key, step, microseconds before now it was intended): two steps, and records the consumer must not time
    timed = [(f"t|0|{i}|{realtime.CATCH_ALL[1]}", 1 + i % 2, 1_000_000 * (1 + i % 3)) for i in range(30)]
    others = [(f"t|0|{i}|someone-else", 1, 0) for i in range(20)]
    late = [(f"t|0|99|{realtime.LATE_SUBSCRIBER}", 1, 0)]
    for key, step, before_us in [*timed, *others, *late]:
        stamp = f"{step}:0:{now_us - before_us}".encode()
        producer.produce(topic, key=key.encode(), value=b"x", headers=[(realtime.SCHEDULE_HEADER, stamp)])
    producer.produce(topic, key=f"t|0|7|{realtime.CATCH_ALL[1]}".encode(), value=b"no schedule header")
    assert producer.flush(30) == 0
    consumer = realtime.ConsumerProcess(settings, topic, f"|{realtime.CATCH_ALL[1]}")
    try:
        deadline = time.monotonic() + 120
        while sum(consumer.counts().values()) < len(timed) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert consumer.late_received_us() is not None
        received = consumer.stop()
    finally:
        consumer.kill()
        delete_topics(settings, [topic])
    assert {step: r.count for step, r in received.items()} == {1: 15, 2: 15}
    for step, result in received.items():
        assert isinstance(result.histogram, HdrHistogram)
        assert result.histogram.get_total_count() == 15
        # intended 1, 2 or 3 s before it was sent, received within the test's two minutes
        assert 1_000_000 <= result.histogram.get_min_value() <= result.histogram.get_max_value() < 125_000_000
        assert result.worst_by_tick and max(result.worst_by_tick.values()) >= 3_000_000 * (step == 1)


def test_the_consumer_is_given_the_clusters_java_configs(realtime: ModuleType, settings: Any) -> None:
    config = realtime.consumer_config(settings, "some.topic", None)
    assert config["bootstrap.servers"] == settings.kafka.bootstrap_servers
    assert config["bench.topic"] == "some.topic" and "bench.timed.suffix" not in config
    assert not any(name.startswith("kafka.") for name in config)

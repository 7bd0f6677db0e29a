"""The real-time lane's pure parts (:mod:`routing.realtime`): its settings, its UDF names, its per-interval
conservation check and its records' headers. The lane itself runs in ``tests/integration/test_realtime.py``."""

from __future__ import annotations

import dataclasses

import pytest

from routing import kafka_sink
from routing.config import ConfigError
from routing.realtime import conservation, udf_name
from routing.settings import load_settings


def router_with(**changes: object) -> object:
    return load_settings(env={}, overrides={"router": changes}).router


def test_the_real_time_trigger_needs_both_kafka_topics() -> None:
    for missing in ({"dead_letter_topic": "dead"}, {"kafka_sink_topic": "out"}, {}):
        with pytest.raises(ConfigError, match="real_time writes to Kafka only"):
            router_with(trigger="real_time", **missing)
    router = router_with(trigger="real_time", kafka_sink_topic="out.{subscriber}", dead_letter_topic="dead")
    assert router.trigger == "real_time"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["dead_letter_topic", "unrouted_topic"])
@pytest.mark.parametrize(
    ("value", "problem"), [("dl.{subscriber}", "one topic"), ("a b", "characters"), ("..", "valid")]
)
def test_the_lane_s_own_topics_are_one_valid_topic_each(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"router\.{name} .*{problem}"):
        router_with(**{name: value})


def test_each_router_registers_its_own_udf_name() -> None:
    base = load_settings(env={}).router
    names = {udf_name(dataclasses.replace(base, app_id=app_id)) for app_id in ("a-b", "a_b", "a.b", "ünï", "a" * 300)}
    assert len(names) == 5
    assert all(name.isidentifier() and name.isascii() and len(name) < 80 for name in names)


COUNTS = {"input_rows": 10, "deliveries": 12, "dead_letters": 2, "unmatched": 3}


@pytest.mark.parametrize(
    ("read", "written", "unrouted_topic", "conserved"),
    [
        (10, 14, "", True),  # deliveries and dead letters; the unmatched only counted
        (10, 17, "unrouted", True),  # ... and the unmatched written too
        (10, 17, "", False),  # more records than outputs
        (11, 14, "", False),  # the source read a message the observation did not see
        (10, -1, "", None),  # the sink did not report its rows
        (None, 14, "", None),
    ],
)
def test_an_interval_is_conserved_when_source_observation_and_sink_agree(
    read: int | None, written: int, unrouted_topic: str, conserved: bool | None
) -> None:
    router = router_with(unrouted_topic=unrouted_topic)
    progress = {"numInputRows": read, "sink": {"numOutputRows": written}}
    assert conservation(progress, COUNTS, router)["conserved"] is conserved  # type: ignore[arg-type]


def test_a_dead_letter_s_headers_rename_a_forged_reason() -> None:
    own = {"dead_letter_id": "t|0|5", "reason": "invalid_key", "rule": "utf8", "snapshot_version": "3"}
    source = [("REASON", b"fine"), ("delivery_id", b"x"), ("app", b"1")]
    assert kafka_sink.own_then_source_headers(own, source) == [
        ("dead_letter_id", b"t|0|5"),
        ("reason", b"invalid_key"),
        ("rule", b"utf8"),
        ("snapshot_version", b"3"),
        ("source.REASON", b"fine"),
        ("delivery_id", b"x"),  # not one of a dead letter's own names: kept as it is
        ("app", b"1"),
    ]
    assert tuple(own) == kafka_sink.DEAD_LETTER_HEADERS

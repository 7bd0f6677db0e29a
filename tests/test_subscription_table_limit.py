"""``limits.max_subscriptions_per_table``: configuration and the model's rule (no Spark).

The Spark side (``decide`` and the refresh job writing ``subscription_table_full`` rejects) is checked
against this model in ``tests/integration/test_subscription_table_limit.py``.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.refresh_subscriptions import build_parser
from routing.config import ConfigError
from routing.limits import DEFAULT_LIMITS, Limits
from routing.settings import load_settings, settings_from_args
from routing.subscriptions.events import (
    SUBSCRIPTION_TABLE_FULL,
    TOO_MANY_SUBSCRIPTIONS,
    Received,
    kafka_change_id,
)
from routing.subscriptions.model import SubscriptionModel, apply_events_model
from routing.validation import Validator

MAX_EVENT_BYTES = 512


def ev(op: str, subscriber: str, pattern: str, ts: int) -> bytes:
    return json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts}).encode()


def batch(*values: bytes, start: int = 0) -> list[Received]:
    return [
        Received(
            kafka_change_id("t", 0, start + i),
            "kafka",
            value,
            kafka_topic="t",
            kafka_partition=0,
            kafka_offset=start + i,
        )
        for i, value in enumerate(values)
    ]


def model(table: int, subscriber: int = 10) -> SubscriptionModel:
    limits = Limits(max_subscriptions_per_table=table, max_subscriptions_per_subscriber=subscriber)
    return apply_events_model([], Validator(limits=limits), max_event_bytes=MAX_EVENT_BYTES)


def active(state: SubscriptionModel) -> set[tuple[str, str]]:
    return set(state.active_pairs())


def test_the_limit_is_configurable(tmp_path: Path) -> None:
    assert DEFAULT_LIMITS.max_subscriptions_per_table == 5_000_000
    conf = tmp_path / "router.toml"
    conf.write_text("[limits]\nmax_subscriptions_per_table = 123\n")
    assert load_settings(conf, env={}).limits.max_subscriptions_per_table == 123
    env = {"ROUTER__LIMITS__MAX_SUBSCRIPTIONS_PER_TABLE": "45"}
    assert load_settings(conf, env=env).limits.max_subscriptions_per_table == 45
    args = build_parser().parse_args(["--conf", str(conf), "--set", "limits.max_subscriptions_per_table=6"])
    loaded = settings_from_args(args, env={})
    assert loaded.limits.max_subscriptions_per_table == 6
    assert loaded.validator().limits.max_subscriptions_per_table == 6
    for bad in ("0", "-1", "many"):
        with pytest.raises(ConfigError, match="max_subscriptions_per_table"):
            load_settings(conf, env={"ROUTER__LIMITS__MAX_SUBSCRIPTIONS_PER_TABLE": bad})


def test_activations_past_the_table_limit_are_rejected_in_order() -> None:
    state = model(table=3)
    counts = state.apply_batch(
        batch(
            ev("subscribe", "s1", "a", 10),
            ev("subscribe", "s2", "b", 30),
            ev("subscribe", "s1", "c", 20),
            ev("subscribe", "s3", "d", 40),  # the 4th activation by (ts, change id): over
            ev("subscribe", "s3", "e", 50),
        )
    )
    assert counts == collections.Counter(subscribed=3, subscription_table_full=2)
    assert active(state) == {("a", "s1"), ("c", "s1"), ("b", "s2")}
    assert sorted(state.rejects.values()) == [SUBSCRIPTION_TABLE_FULL] * 2

    # Refreshing an active row costs nothing; an unsubscribe in the same batch frees a slot.
    counts = state.apply_batch(
        batch(
            ev("subscribe", "s1", "a", 100),
            ev("unsubscribe", "s2", "b", 100),
            ev("subscribe", "s3", "d", 101),
            ev("subscribe", "s3", "e", 102),
            start=10,
        )
    )
    assert counts == collections.Counter(refreshed=1, unsubscribed=1, subscribed=1, subscription_table_full=1)
    assert active(state) == {("a", "s1"), ("c", "s1"), ("d", "s3")}


def test_the_table_limit_is_checked_before_the_subscriber_limit() -> None:
    state = model(table=2, subscriber=1)
    counts = state.apply_batch(
        batch(
            ev("subscribe", "s1", "a", 1),
            ev("subscribe", "s1", "b", 2),  # subscriber limit
            ev("subscribe", "s2", "c", 3),
            ev("subscribe", "s1", "d", 4),  # both limits: the table's reason
            ev("subscribe", "s3", "e", 5),
        )
    )
    assert counts == collections.Counter(subscribed=2, too_many_subscriptions=1, subscription_table_full=2)
    assert sorted(state.rejects.values()) == sorted([TOO_MANY_SUBSCRIPTIONS] + [SUBSCRIPTION_TABLE_FULL] * 2)


def test_a_lowered_limit_keeps_the_rows_but_takes_no_new_ones() -> None:
    state = model(table=5)
    state.apply_batch(batch(*(ev("subscribe", f"s{i}", "p", i) for i in range(4))))
    lowered = SubscriptionModel(Validator(limits=Limits(max_subscriptions_per_table=2)), MAX_EVENT_BYTES, state.rows)
    counts = lowered.apply_batch(batch(ev("subscribe", "s9", "p", 9), ev("unsubscribe", "s0", "p", 9), start=10))
    assert counts == collections.Counter(unsubscribed=1, subscription_table_full=1)
    assert len(active(lowered)) == 3


OPS = st.tuples(
    st.sampled_from(["subscribe", "subscribe", "unsubscribe"]),
    st.sampled_from(["s1", "s2", "s3"]),
    st.sampled_from(["a", "b", "c.*", "#"]),
    st.integers(0, 8),
)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OPS, max_size=40), table_limit=st.integers(1, 6), per_batch=st.integers(1, 8))
def test_the_table_never_exceeds_the_limit(
    ops: list[tuple[str, str, str, int]], table_limit: int, per_batch: int
) -> None:
    state = model(table=table_limit, subscriber=3)
    received = batch(*(ev(*op) for op in ops))
    for i in range(0, len(received), per_batch):
        state.apply_batch(received[i : i + per_batch])
        assert len(active(state)) <= table_limit
    assert set(state.rejects.values()) <= {TOO_MANY_SUBSCRIPTIONS, SUBSCRIPTION_TABLE_FULL}

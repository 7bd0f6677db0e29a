"""Idempotency keys and the CLI's change events, without Spark or Kafka.

Oracles: hand-worked event sequences run through the plain-Python model (which the Spark MERGE is
held equal to in the integration tests), and the refresh job's own parser reading back what
:mod:`routing.subscriptions.publish` would send.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing.limits import Limits
from routing.subscriptions.events import (
    IDEMPOTENCY_KEY,
    INVALID_FIELD_TYPE,
    REFRESHED,
    STALE,
    SUBSCRIBED,
    SUPERSEDED,
    TOMBSTONED,
    UNSUBSCRIBED,
    Op,
    judge,
    kafka_change_id,
    kafka_received,
    keyed_change_id,
    parse_event,
    read_import_file,
)
from routing.subscriptions.model import ModelRow, SubscriptionModel
from routing.subscriptions.publish import (
    APPLIED,
    NOT_APPLIED,
    OVERRIDDEN,
    REJECTED,
    Change,
    ChangesRefused,
    change_results,
    command_key,
    prepare,
)
from routing.validation import Validator

MAX_EVENT_BYTES = 4096
VALIDATOR = Validator(limits=Limits(max_subscriptions_per_subscriber=3))


def keyed(op: str, pattern: str, ts: int, key: str | None, subscriber: str = "s1") -> bytes:
    fields: dict[str, object] = {"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts}
    if key is not None:
        fields[IDEMPOTENCY_KEY] = key
    return json.dumps(fields).encode()


def apply(model: SubscriptionModel, *batches: list[tuple[int, bytes]]) -> list[dict[str, int]]:
    """Each batch is [(offset, raw)] on partition 0 of topic t; the counts per batch."""
    return [
        dict(model.apply_batch([kafka_received("t", 0, offset, raw) for offset, raw in batch])) for batch in batches
    ]


def test_an_idempotency_key_replaces_the_coordinates_as_change_id() -> None:
    event = parse_event(keyed("subscribe", "a.*", 5, "k1"), kafka_change_id("t", 0, 9), VALIDATOR, max_event_bytes=99)
    assert event.change_id == keyed_change_id("k1") != keyed_change_id("k2")
    assert keyed_change_id("k1").startswith("key:") and len(keyed_change_id("k" * 10_000)) == len("key:") + 40
    plain = parse_event(keyed("subscribe", "a.*", 5, None), kafka_change_id("t", 0, 9), VALIDATOR, max_event_bytes=99)
    assert plain.change_id == kafka_change_id("t", 0, 9)  # old events read as before


@pytest.mark.parametrize("value", ["", 5, True, ["k"], {"k": 1}])
def test_a_bad_idempotency_key_is_rejected(value: object) -> None:
    raw = json.dumps({"op": "subscribe", "subscriber": "s1", "pattern": "a", "ts": 1, IDEMPOTENCY_KEY: value}).encode()
    outcome = judge(kafka_received("t", 0, 0, raw), VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    assert outcome.rejection is not None and outcome.rejection.reason == INVALID_FIELD_TYPE
    assert IDEMPOTENCY_KEY in outcome.rejection.detail


def test_csv_imports_take_the_key_column_and_an_empty_cell_is_no_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.csv"
    path.write_text("op,subscriber,pattern,ts,idempotency_key\nsubscribe,s1,a,1,k1\nsubscribe,s1,b,1,\n")
    digest, outcomes = read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    events = [outcome.event for outcome in outcomes]
    assert events[0] is not None and events[0].change_id == keyed_change_id("k1")
    assert events[1] is not None and events[1].change_id.startswith("import:" + digest[:20])


def test_a_retried_copy_is_a_no_op_whenever_it_arrives() -> None:
    model = SubscriptionModel(VALIDATOR, MAX_EVENT_BYTES)
    counts = apply(
        model,
        [(0, keyed("subscribe", "a", 10, "k")), (1, keyed("subscribe", "a", 11, "k"))],  # both copies in one batch
        [(2, keyed("subscribe", "a", 12, "k"))],  # a later copy: newer ts, same change
    )
    assert counts == [{SUBSCRIBED: 1, SUPERSEDED: 1}, {STALE: 1}]
    # One change: the batch's newest copy won it, and the later copy left the row as it was.
    assert model.rows == {("s1", "a"): ModelRow(True, 11, keyed_change_id("k"))}


def test_a_key_is_judged_against_the_rows_current_change_only() -> None:
    model = SubscriptionModel(VALIDATOR, MAX_EVENT_BYTES)
    counts = apply(
        model,
        [(0, keyed("subscribe", "a", 10, "sub"))],
        [(1, keyed("unsubscribe", "a", 20, "unsub"))],
        [(2, keyed("unsubscribe", "a", 25, "unsub"))],  # a retried unsubscribe: no-op
        [(3, keyed("subscribe", "a", 30, "sub"))],  # the same subscribe again, after the unsubscribe: applies
        [(4, keyed("subscribe", "a", 40, None))],  # an unkeyed newer subscribe refreshes as always
        [(5, keyed("unsubscribe", "b", 50, "ub")), (6, keyed("unsubscribe", "b", 51, None))],
    )
    assert counts == [
        {SUBSCRIBED: 1},
        {UNSUBSCRIBED: 1},
        {STALE: 1},
        {SUBSCRIBED: 1},
        {REFRESHED: 1},
        {TOMBSTONED: 1, SUPERSEDED: 1},
    ]
    assert model.rows[("s1", "a")] == ModelRow(True, 40, kafka_change_id("t", 0, 4))


def test_a_retried_copy_of_a_rejected_subscribe_is_judged_again() -> None:
    # The limit (3) rejects the fourth pattern; its copy after an unsubscribe made room is a new verdict.
    model = SubscriptionModel(VALIDATOR, MAX_EVENT_BYTES)
    held = [(offset, keyed("subscribe", pattern, 1, None)) for offset, pattern in enumerate("abc")]
    counts = apply(
        model,
        [*held, (3, keyed("subscribe", "d", 2, "kd"))],
        [(4, keyed("unsubscribe", "a", 3, None)), (5, keyed("subscribe", "d", 4, "kd"))],
    )
    assert counts == [{SUBSCRIBED: 3, "too_many_subscriptions": 1}, {UNSUBSCRIBED: 1, SUBSCRIBED: 1}]
    assert model.rejects == {keyed_change_id("kd"): "too_many_subscriptions"}
    assert model.rows[("s1", "d")] == ModelRow(True, 4, keyed_change_id("kd"))


# -- what the CLI publishes -------------------------------------------------------------------------


def test_command_keys_name_the_command_and_nothing_else() -> None:
    assert command_key(Op.SUBSCRIBE, "s1", "a.#") == command_key(Op.SUBSCRIBE, "s1", "a.#")
    distinct = {
        command_key(op, subscriber, pattern)
        for op in Op
        for subscriber in ("s1", "s2", "s1.a")
        for pattern in ("a.#", "#", "", "\ud800")
    }
    assert len(distinct) == 2 * 3 * 4
    assert command_key(Op.UNSUBSCRIBE, "s1", "a").startswith("cli:unsubscribe:")


def test_prepared_changes_read_back_through_the_refresh_jobs_parser() -> None:
    changes = prepare(
        Op.SUBSCRIBE, "fx-désk", ["forex.#", "a", "forex.#", ""], VALIDATOR, max_event_bytes=200, now_millis=7
    )
    assert [change.pattern for change in changes] == ["forex.#", "a", ""]  # distinct, in the order given
    for change in changes:
        event = parse_event(change.value(), "unused", VALIDATOR, max_event_bytes=200)
        assert (event.op, event.subscriber, event.pattern, event.ts_millis) == (
            Op.SUBSCRIBE,
            "fx-désk",
            change.pattern,
            7,
        )
        assert event.change_id == change.change_id == keyed_change_id(change.idempotency_key)
    # A second run of the same command: another ts, the same change ids.
    again = prepare(Op.SUBSCRIBE, "fx-désk", ["forex.#"], VALIDATOR, max_event_bytes=200, now_millis=8)
    assert again[0].change_id == changes[0].change_id and again[0].value() != changes[0].value()


@pytest.mark.parametrize(
    ("op", "subscriber", "patterns", "reasons"),
    [
        (Op.SUBSCRIBE, "s1", ["a", "b.\ud800", "c." * 40], ["invalid_pattern", "pattern_too_many_words"]),
        (Op.UNSUBSCRIBE, "", ["a"], ["invalid_subscriber"]),
        (Op.SUBSCRIBE, "s1", ["a", "b", "c", "d"], ["too_many_subscriptions"]),  # four cannot fit in three
        (Op.SUBSCRIBE, "s1", ["x" * 300], ["event_too_large"]),
    ],
)
def test_prepare_refuses_what_the_refresh_job_would_reject(
    op: Op, subscriber: str, patterns: list[str], reasons: list[str]
) -> None:
    with pytest.raises(ChangesRefused) as refused:
        prepare(op, subscriber, patterns, VALIDATOR, max_event_bytes=300)
    assert [refusal.reason for refusal in refused.value.refusals] == reasons


def test_a_subscribe_whose_patterns_cost_too_much_together_is_refused() -> None:
    # Match cost (max_key_words 32): 1 per word before the first '#', 33 per word from it on.
    validator = Validator(limits=Limits(max_match_cost_per_subscriber=40))
    assert len(prepare(Op.SUBSCRIBE, "s1", ["a.#", "b", "c.d"], validator, max_event_bytes=300)) == 3  # 34 + 1 + 2
    with pytest.raises(ChangesRefused) as refused:
        prepare(Op.SUBSCRIBE, "s1", ["#", "x.#"], validator, max_event_bytes=300)  # 33 + 34
    assert [(refusal.pattern, refusal.reason) for refusal in refused.value.refusals] == [(None, "match_cost_exceeded")]
    assert len(prepare(Op.UNSUBSCRIBE, "s1", ["#", "x.#"], validator, max_event_bytes=300)) == 2


def test_an_unsubscribe_of_any_number_of_patterns_is_not_limited() -> None:
    assert len(prepare(Op.UNSUBSCRIBE, "s1", list("abcdef"), VALIDATOR, max_event_bytes=300)) == 6


def test_change_results() -> None:
    changes = [Change(Op.SUBSCRIBE, "s1", pattern, 1) for pattern in ("mine", "retried", "other", "limit", "unseen")]
    ids = {change.pattern: change.change_id for change in changes}
    rows = {
        ("s1", "mine"): (True, 1, ids["mine"]),
        ("s1", "retried"): (True, 0, ids["retried"]),  # an earlier copy's ts: still this change
        ("s1", "other"): (False, 5, "kafka:t:000000:00000000000000000009"),  # a newer unsubscribe won
    }
    results = change_results(changes, rows, {ids["limit"]: "too_many_subscriptions"})
    assert [(result.result, result.active, result.reason) for result in results] == [
        (APPLIED, True, None),
        (APPLIED, True, None),
        (OVERRIDDEN, False, None),
        (REJECTED, None, "too_many_subscriptions"),
        (NOT_APPLIED, None, None),
    ]

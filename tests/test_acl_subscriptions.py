"""The ``[acl]`` rules on the subscription path, without Spark: a forbidden subscribe is rejected
``forbidden_pattern`` by the event layer (Kafka events and import files alike), unsubscribes always
pass, and the plain-Python model deactivates held rows that tightened rules forbid, with a recorded
reason, in a way later events still order against (last writer wins)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from routing.acl import ALLOW_ALL, AclRule, AclRules
from routing.subscriptions.acl_sweep import DEACTIVATION_SUFFIX, deactivation_change_id, forbidden_rows
from routing.subscriptions.events import (
    PARSE_REASONS,
    REJECT_REASONS,
    STALE,
    SUBSCRIBED,
    UNSUBSCRIBED,
    Received,
    judge,
    kafka_received,
    read_import_file,
)
from routing.subscriptions.model import SubscriptionModel
from routing.validation import Validator

MAX_EVENT_BYTES = 65_536
RULES = AclRules(
    rules=(
        AclRule("tenant-42-*", ("tenant.42.#",)),
        AclRule("audit", ("#",)),
    )
)
ACL = Validator(acl=RULES)


def received(op: str, subscriber: str, pattern: str, ts: int, offset: int) -> Received:
    raw = json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts}).encode()
    return kafka_received("subscriptions", 0, offset, raw)


def test_forbidden_pattern_is_a_documented_reject_reason() -> None:
    assert "forbidden_pattern" in PARSE_REASONS
    assert "forbidden_pattern" in REJECT_REASONS


def test_a_forbidden_subscribe_is_rejected_with_forbidden_pattern() -> None:
    outcome = judge(received("subscribe", "tenant-42-web", "#", 1, 0), ACL, max_event_bytes=MAX_EVENT_BYTES)
    assert outcome.rejection is not None
    assert outcome.rejection.reason == "forbidden_pattern"
    assert "tenant-42-web" in outcome.rejection.detail and "tenant.42.#" in outcome.rejection.detail
    for subscriber, pattern in [("tenant-42-web", "tenant.43.x"), ("tenant-42-web", "tenant.*"), ("nobody", "a")]:
        outcome = judge(received("subscribe", subscriber, pattern, 1, 0), ACL, max_event_bytes=MAX_EVENT_BYTES)
        assert outcome.rejection is not None and outcome.rejection.reason == "forbidden_pattern", (subscriber, pattern)


def test_allowed_subscribes_and_every_unsubscribe_pass() -> None:
    for op, subscriber, pattern in [
        ("subscribe", "tenant-42-web", "tenant.42.orders.*"),
        ("subscribe", "tenant-42-web", "tenant.42"),
        ("subscribe", "audit", "#"),
        ("unsubscribe", "tenant-42-web", "#"),  # dropping is always allowed
        ("unsubscribe", "nobody", "a"),
    ]:
        outcome = judge(received(op, subscriber, pattern, 1, 0), ACL, max_event_bytes=MAX_EVENT_BYTES)
        assert outcome.event is not None, (op, subscriber, pattern, outcome.rejection)


def test_other_reasons_come_first() -> None:
    """The ACL is checked last: a bad pattern or ts keeps its own reason."""
    bad_ts = json.dumps({"op": "subscribe", "subscriber": "nobody", "pattern": "#", "ts": "yesterday"}).encode()
    outcome = judge(kafka_received("t", 0, 0, bad_ts), ACL, max_event_bytes=MAX_EVENT_BYTES)
    assert outcome.rejection is not None and outcome.rejection.reason == "invalid_ts"


def test_no_rules_allow_everything() -> None:
    assert Validator().acl == ALLOW_ALL
    outcome = judge(received("subscribe", "anyone", "#", 1, 0), Validator(), max_event_bytes=MAX_EVENT_BYTES)
    assert outcome.event is not None


def test_import_files_are_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "subs.csv"
    path.write_text(
        "op,subscriber,pattern,ts\nsubscribe,tenant-42-a,tenant.42.#,1\nsubscribe,tenant-42-a,#,1\n", encoding="utf-8"
    )
    _, outcomes = read_import_file(path, ACL, max_event_bytes=MAX_EVENT_BYTES)
    assert [None if o.rejection is None else o.rejection.reason for o in outcomes] == [None, "forbidden_pattern"]


def test_model_rejects_forbidden_subscribes() -> None:
    model = SubscriptionModel(ACL, MAX_EVENT_BYTES)
    counts = model.apply_batch(
        [received("subscribe", "tenant-42-a", "tenant.42.#", 1, 0), received("subscribe", "tenant-42-a", "#", 1, 1)]
    )
    assert counts == {SUBSCRIBED: 1, "forbidden_pattern": 1}
    assert model.active_pairs() == {("tenant.42.#", "tenant-42-a")}


def test_tightened_rules_deactivate_held_rows_with_a_recorded_reason() -> None:
    model = SubscriptionModel(Validator(), MAX_EVENT_BYTES)  # no rules yet: anything goes
    model.apply_batch(
        [
            received("subscribe", "tenant-42-a", "tenant.42.orders", 10, 0),
            received("subscribe", "tenant-42-a", "#", 10, 1),
            received("subscribe", "audit", "#", 10, 2),
            received("subscribe", "someone", "x.y", 10, 3),
        ]
    )
    assert model.deactivate_forbidden() == []  # no rules: nothing to do
    model.validator = ACL  # the rules tighten
    done = model.deactivate_forbidden()
    assert done == [("someone", "x.y"), ("tenant-42-a", "#")]
    assert model.active_pairs() == {("tenant.42.orders", "tenant-42-a"), ("#", "audit")}
    row = model.rows[("tenant-42-a", "#")]
    assert not row.active and row.ts_millis == 10 and row.change_id.endswith(DEACTIVATION_SUFFIX)
    assert model.rejects[row.change_id] == "forbidden_pattern"
    assert "may no longer hold pattern '#'" in model.deactivations[row.change_id]
    assert model.deactivate_forbidden() == []  # idempotent

    # The original subscribe delivered again is stale: the deactivation sorts after it.
    counts = model.apply_batch([received("subscribe", "tenant-42-a", "#", 10, 1)])
    assert counts == {"forbidden_pattern": 1}
    model.validator = Validator()  # rules loosened: a re-delivery is stale, a newer subscribe re-activates
    assert model.apply_batch([received("subscribe", "tenant-42-a", "#", 10, 1)]) == {STALE: 1}
    assert model.apply_batch([received("subscribe", "tenant-42-a", "#", 11, 9)]) == {SUBSCRIBED: 1}
    # And a later unsubscribe of a deactivated pair is an ordinary tombstone/unsubscribe.
    assert model.apply_batch([received("unsubscribe", "someone", "x.y", 12, 10)])[UNSUBSCRIBED] == 0


def test_deactivation_change_id_sorts_right_after_the_row_change() -> None:
    old = "kafka:subscriptions:000000:00000000000000000005"
    new = deactivation_change_id(old)
    assert old < new < "kafka:subscriptions:000000:00000000000000000006"


def test_forbidden_rows_is_empty_without_rules() -> None:
    assert list(forbidden_rows([("a", "#")], ALLOW_ALL)) == []
    assert [row[:2] for row in forbidden_rows([("a", "#"), ("audit", "#")], RULES)] == [("a", "#")]


def test_a_batchs_uncached_checks_share_one_budget_and_the_rest_are_rejected_naming_it() -> None:
    """Distinct patterns (each a cache miss) past ``acl.max_check_states_per_batch``: the first ones are judged,
    the later ones rejected ``forbidden_pattern`` with the setting named. Decided answers cost nothing, and
    the next batch has a fresh budget."""
    import routing.acl

    rules = AclRules(rules=RULES.rules, max_check_states_per_batch=200)
    own = routing.acl.automaton_of(("tenant.42.#",), rules.max_rule_states)
    patterns = [f"tenant.*.{index}.*.#.x{index}" for index in range(40)]  # not covered: each searched whole
    costs = [routing.acl.search(own, pattern)[1] for pattern in patterns]
    judged = next(n for n in range(1, len(costs) + 1) if sum(costs[:n]) >= 200)  # spent after these
    batch = Validator(acl=rules).for_batch()

    def detail(pattern: str, validator: Validator = batch) -> str:
        outcome = judge(
            received("subscribe", "tenant-42-web", pattern, 1, 0), validator, max_event_bytes=MAX_EVENT_BYTES
        )
        return "" if outcome.rejection is None else f"{outcome.rejection.reason}: {outcome.rejection.detail}"

    details = [detail(pattern) for pattern in patterns]
    assert all(text.startswith("forbidden_pattern: ") for text in details)
    refused = ["acl.max_check_states_per_batch=200" in text for text in details]
    assert refused == [False] * judged + [True] * (len(patterns) - judged)
    assert detail("tenant.42.#") == ""  # the pattern a rule names: no search
    fresh = "tenant.42.z.*"
    assert "max_check_states_per_batch" in detail(fresh)  # allowed, but never decided: refused in a spent batch
    assert detail(fresh, batch.for_batch()) == ""  # the next batch decides it
    assert detail(fresh) == ""  # and once decided, it costs nothing, even in the spent batch

    model = SubscriptionModel(
        Validator(acl=dataclasses.replace(rules, max_check_states_per_batch=1)), max_event_bytes=MAX_EVENT_BYTES
    )
    counts = model.apply_batch(
        received("subscribe", "tenant-42-web", f"tenant.42.m{index}.*", 1, index) for index in range(5)
    )
    assert (counts[SUBSCRIBED], counts["forbidden_pattern"]) == (1, 4)  # the model spends one budget per batch
    counts = model.apply_batch(
        received("subscribe", "tenant-42-web", f"tenant.42.m{index}.*", 2, 10 + index) for index in range(5)
    )
    # m0 was decided in the batch before (free), m1 spends this batch's budget, m2-m4 wait for another batch.
    assert counts["forbidden_pattern"] == 3

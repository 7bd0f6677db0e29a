"""``limits.max_subscriptions_per_table`` in the refresh job, on real Spark and Delta.

Oracle: the sequential plain-Python model (:mod:`routing.subscriptions.model`), whose rule is pinned
without Spark in ``tests/test_subscription_table_limit.py``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jobs.refresh_subscriptions import import_files
from routing.limits import Limits
from routing.subscriptions.events import (
    APPLIED_KINDS,
    MATCH_COST_EXCEEDED,
    REJECT_REASONS,
    SUBSCRIPTION_TABLE_FULL,
    TOO_MANY_SUBSCRIPTIONS,
    Outcome,
    judge,
    kafka_received,
    read_import_file,
)
from routing.subscriptions.model import apply_events_model
from routing.subscriptions.table import (
    SubscriberLimits,
    collect_events,
    decide,
    match_cost_column,
    read_active,
    read_rows,
    validated_frame,
)
from routing.topic import match_cost, split_words
from routing.validation import Validator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

MAX_EVENT_BYTES = 512


def ev(op: str, subscriber: str, pattern: str, ts: int) -> bytes:
    return json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts}).encode()


def test_match_cost_column_equals_the_python_rule(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    patterns = ["", "a", "a..b", "#", "#.#", "a.#", "#.a", "a.#.b.#", "*.*", "a#.#b", ".", "..#", "#."]
    frame = spark.createDataFrame([(p,) for p in patterns], "pattern STRING")
    for max_key_words in (4, 32):
        got = {
            row["pattern"]: row["cost"]
            for row in frame.select(
                "pattern", match_cost_column(F.col("pattern"), max_key_words).alias("cost")
            ).collect()
        }
        assert got == {p: match_cost(split_words(p), max_key_words) for p in patterns}


def test_decided_limits_match_the_model(spark: SparkSession) -> None:
    """decide() with every limit against the model over random batches (several subscribers contend for
    the table, and each for its own count and match cost)."""
    from pyspark.sql import functions as F

    rng = random.Random(20261123)
    offsets = iter(range(10**6))
    contended: set[str] = set()
    for scenario in range(4):
        # Costs with max_key_words = 4: a, b, c = 1; d.* = 2; # = 5; e.#.f = 11; #.# = 10. Budget 13.
        # Even scenarios: the table and the count limits bind first; odd ones: match cost does.
        tight = scenario % 2 == 0
        validator = Validator(
            limits=Limits(
                max_subscriptions_per_subscriber=2 if tight else 4,
                max_subscriptions_per_table=5 if tight else 12,
                max_key_words=4,
                max_pattern_words=4,
                max_hash_words=2,
                max_match_cost_per_subscriber=13,
            )
        )
        model = apply_events_model([], validator, max_event_bytes=MAX_EVENT_BYTES)
        table: dict[tuple[str, str], tuple[bool, int, str]] = {}
        for round_number in range(3):
            received = [
                kafka_received(
                    "t",
                    rng.randrange(2),
                    next(offsets),
                    ev(
                        rng.choice(["subscribe", "subscribe", "subscribe", "unsubscribe"]),
                        f"s{rng.randrange(3)}",
                        rng.choice(["a", "b", "c", "d.*", "#", "e.#.f", "#.#"]),
                        3 * round_number + rng.randrange(6),
                    ),
                )
                for _ in range(rng.randrange(4, 12))
            ]
            model.apply_batch(received)
            outcomes: list[Outcome] = [judge(item, validator, max_event_bytes=MAX_EVENT_BYTES) for item in received]
            current = spark.createDataFrame(
                [(key[0], key[1], active, ts, change_id) for key, (active, ts, change_id) in table.items()],
                "subscriber_id STRING, pattern STRING, active BOOLEAN, ts BIGINT, change_id STRING",
            ).withColumn("updated_at", F.timestamp_millis("ts"))
            limits = validator.limits
            decided = decide(
                current,
                collect_events(validated_frame(spark, outcomes)),
                SubscriberLimits.of(limits),
                limits.max_subscriptions_per_table,
            ).to_pylist()
            rejected: dict[str, str] = {}
            for row in decided:
                if row["_kind"] in APPLIED_KINDS:
                    table[(row["subscriber_id"], row["pattern"])] = (
                        row["op"] == "subscribe",
                        row["ts_millis"],
                        row["change_id"],
                    )
                elif row["_kind"] in REJECT_REASONS:
                    rejected[row["change_id"]] = row["_kind"]
            expected = {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}
            assert table == expected, (scenario, round_number)
            assert rejected == {
                change_id: reason
                for change_id, reason in model.rejects.items()
                if change_id in {item.change_id for item in received}
            }
            assert sum(active for active, _, _ in table.values()) <= validator.limits.max_subscriptions_per_table
            contended |= set(rejected.values())
    assert contended == {
        TOO_MANY_SUBSCRIPTIONS,
        MATCH_COST_EXCEEDED,
        SUBSCRIPTION_TABLE_FULL,
    }  # every rule was exercised


def test_the_refresh_job_rejects_subscribes_past_the_table_limit(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    subscriptions = dataclasses.replace(
        settings.subscriptions,
        table_path=str(tmp_path / "subscriptions"),
        rejects_path=str(tmp_path / "subscription_rejects"),
        checkpoint_path=str(tmp_path / "checkpoint"),
    )
    job = settings.replace(subscriptions=subscriptions, limits=settings.limits.replace(max_subscriptions_per_table=3))
    validator = job.validator()
    model = apply_events_model([], validator, max_event_bytes=job.subscriptions.max_event_bytes)

    first = tmp_path / "first.jsonl"
    first.write_bytes(
        b"\n".join(
            [
                ev("subscribe", "s1", "a.#", 10),
                ev("subscribe", "s2", "b", 20),
                ev("subscribe", "s3", "c.*", 30),
                ev("subscribe", "s4", "d", 40),  # the 4th active row: rejected
                ev("subscribe", "s1", "e", 50),  # and so is this one
            ]
        )
        + b"\n"
    )
    second = tmp_path / "second.jsonl"
    second.write_bytes(
        b"\n".join(
            [
                ev("unsubscribe", "s2", "b", 60),
                ev("subscribe", "s4", "d", 70),  # fits now: b was released in the same batch
                ev("subscribe", "s5", "f", 80),  # does not
            ]
        )
        + b"\n"
    )
    summaries = []
    for path in (first, second):
        model.apply_batch(read_import_file(path, validator, max_event_bytes=job.subscriptions.max_event_bytes)[1])
        summaries.append(import_files(spark, job, [str(path)]))
    assert [summary.rejected for summary in summaries] == [{SUBSCRIPTION_TABLE_FULL: 2}, {SUBSCRIPTION_TABLE_FULL: 1}]

    table = read_rows(spark, job.subscriptions.table_path)
    assert table == {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}
    assert set(read_active(spark, job.subscriptions.table_path)) == {("a.#", "s1"), ("c.*", "s3"), ("d", "s4")}
    rejects = spark.read.format("delta").load(job.subscriptions.rejects_path).collect()
    assert sorted((row["change_id"], row["reason"]) for row in rejects) == sorted(model.rejects.items())
    by_line = {(Path(row["import_file"]).name, row["import_line"]): row for row in rejects}
    assert set(by_line) == {("first.jsonl", 4), ("first.jsonl", 5), ("second.jsonl", 3)}
    reject = by_line[("second.jsonl", 3)]
    assert (reject["op"], reject["subscriber_id"], reject["pattern"]) == ("subscribe", "s5", "f")
    assert reject["detail"] == (
        "the subscription table would hold 4 active subscriptions (limit max_subscriptions_per_table=3)"
        " [reason=subscription_table_full]"
    )


def test_a_match_cost_rejection_charges_nothing_to_the_activations_after_it(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    """Through the job (apply_validated). Costs with max_key_words = 32: ``x.#`` and ``y.#`` 34 each, ``z`` 1;
    budget 40. Running totals would reject ``z`` too (34 + 34 + 1); the rule charges nothing for the rejected
    ``y.#``, and the reject's detail reports what s1 would have held with it (34 + 34)."""
    subscriptions = dataclasses.replace(
        settings.subscriptions,
        table_path=str(tmp_path / "subscriptions"),
        rejects_path=str(tmp_path / "subscription_rejects"),
        checkpoint_path=str(tmp_path / "checkpoint"),
    )
    limits = settings.limits.replace(max_key_words=32, max_match_cost_per_subscriber=40)
    job = settings.replace(subscriptions=subscriptions, limits=limits)
    validator = job.validator()
    changes = tmp_path / "changes.jsonl"
    events = [ev("subscribe", "s1", "x.#", 10), ev("subscribe", "s1", "y.#", 20), ev("subscribe", "s1", "z", 30)]
    changes.write_bytes(b"\n".join([*events, ev("subscribe", "s2", "x.#", 40)]) + b"\n")
    model = apply_events_model([], validator, max_event_bytes=job.subscriptions.max_event_bytes)
    model.apply_batch(read_import_file(changes, validator, max_event_bytes=job.subscriptions.max_event_bytes)[1])

    summary = import_files(spark, job, [str(changes)])
    assert summary.rejected == {MATCH_COST_EXCEEDED: 1}
    assert set(read_active(spark, job.subscriptions.table_path)) == {("x.#", "s1"), ("z", "s1"), ("x.#", "s2")}
    table = read_rows(spark, job.subscriptions.table_path)
    assert table == {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}
    rejects = spark.read.format("delta").load(job.subscriptions.rejects_path).collect()
    assert [(row["pattern"], row["reason"]) for row in rejects] == [("y.#", MATCH_COST_EXCEEDED)]
    assert rejects[0]["detail"] == (
        "subscriber 's1' would hold patterns of match cost 68 (limit max_match_cost_per_subscriber=40)"
        " [reason=match_cost_exceeded]"
    )
    assert rejects[0]["raw"] == events[1], "the reject carries the event exactly as received"
    assert sorted((row["change_id"], row["reason"]) for row in rejects) == sorted(model.rejects.items())

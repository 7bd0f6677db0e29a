"""The refresh job against a real broker, real Spark and real Delta tables.

Oracle: :func:`routing.subscriptions.apply_events_model`, the sequential plain-Python model,
fed the very events the test produced (with the partition/offset the broker acknowledged, so
change ids are known independently of the job). After every run the Delta table must equal
the model's rows and the rejects table the model's rejects, reason codes included.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer
from router_support import assert_planned_not_committed, fail_after_writes

from jobs.refresh_subscriptions import main, refresh_from_kafka
from routing.limits import Limits
from routing.settings import REPO_ROOT, Settings
from routing.subscriptions.events import APPLIED_KINDS, Outcome, Received, judge, kafka_received, read_import_file
from routing.subscriptions.model import SubscriptionModel, apply_events_model
from routing.subscriptions.table import (
    collect_events,
    decide,
    latest_version,
    read_rows,
    validated_frame,
)
from routing.validation import Validator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


MAX_EVENT_BYTES = 300
LIMIT = 3


def ev(op: str, subscriber: str, pattern: str, ts: object) -> bytes:
    return json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts}).encode()


def sub(subscriber: str, pattern: str, ts: object) -> bytes:
    return ev("subscribe", subscriber, pattern, ts)


def unsub(subscriber: str, pattern: str, ts: object) -> bytes:
    return ev("unsubscribe", subscriber, pattern, ts)


#: One event on every rejection path (reason codes as the job must record them).
REJECTED_EVENTS: list[tuple[bytes | None, str]] = [
    (None, "empty_event"),
    (b"", "empty_event"),
    (b"{not json", "malformed_json"),
    (b"\xc3\x28", "malformed_json"),
    (b"[1]", "not_an_object"),
    (b'{"op": "subscribe", "pattern": "a", "ts": 1}', "missing_field"),
    (ev("subscribe", "s9", 5, 1), "invalid_field_type"),  # type: ignore[arg-type]
    (ev("resubscribe", "s9", "a", 1), "unknown_op"),
    (ev("subscribe", "s9", "a", "2026-01-05T09:00:00"), "invalid_ts"),
    (ev("subscribe", "s9", "a", 1.5), "invalid_ts"),
    (b'{"op": "subscribe", "subscriber": "s9", "pattern": "a.\\ud800", "ts": 1}', "invalid_pattern"),
    (sub("s9", "a" * 256, 1), "event_too_large"),
    (sub("s9", "a." * 40, 1), "pattern_too_many_words"),
    (sub("s9", "#." * 17 + "x", 1), "too_many_hash_words"),
    (sub("", "a", 1), "invalid_subscriber"),
]


@pytest.fixture
def job_settings(settings: Settings, tmp_path: Path, kafka_broker: Any) -> Settings:
    """The session settings with this test's own tables, checkpoint, tight limits."""
    subscriptions = dataclasses.replace(
        settings.subscriptions,
        table_path=str(tmp_path / "subscriptions"),
        rejects_path=str(tmp_path / "subscription_rejects"),
        checkpoint_path=str(tmp_path / "checkpoint"),
        max_event_bytes=MAX_EVENT_BYTES,
    )
    limits = settings.limits.replace(max_subscriptions_per_subscriber=LIMIT, max_pattern_words=32, max_hash_words=16)
    return settings.replace(subscriptions=subscriptions, limits=limits)


def with_topic(settings: Settings, topic: str, **changes: Any) -> Settings:
    return settings.replace(subscriptions=dataclasses.replace(settings.subscriptions, events_topic=topic, **changes))


def produce(settings: Settings, values: Sequence[bytes | None]) -> list[Received]:
    """Produce in order; the received events with the coordinates the broker acknowledged."""
    producer = Producer({**settings.kafka_client_config(), "enable.idempotence": True, "linger.ms": 5})
    acked: dict[int, Received] = {}
    errors: list[object] = []

    def on_delivery(index: int, value: bytes | None) -> Any:
        def report(error: object, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                acked[index] = kafka_received(message.topic(), message.partition(), message.offset(), value)

        return report

    for index, value in enumerate(values):
        producer.produce(settings.subscriptions.events_topic, value=value, on_delivery=on_delivery(index, value))
    assert producer.flush(30) == 0
    assert errors == []
    return [acked[index] for index in range(len(values))]


def rejects_in_table(spark: SparkSession, settings: Settings) -> list[tuple[str, str]]:
    rows = spark.read.format("delta").load(settings.subscriptions.rejects_path).select("change_id", "reason").collect()
    return sorted((row["change_id"], row["reason"]) for row in rows)


def assert_matches_model(spark: SparkSession, settings: Settings, model: SubscriptionModel) -> None:
    table = read_rows(spark, settings.subscriptions.table_path)
    expected = {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}
    assert table == expected
    # Every rejected change exactly once (no duplicates from re-runs), with the model's reason.
    assert rejects_in_table(spark, settings) == sorted(model.rejects.items())


def nonzero(counts: Any) -> dict[str, int]:
    return {key: value for key, value in counts.items() if value}


@pytest.mark.slow
def test_runs_match_the_model(spark: SparkSession, job_settings: Settings, topic_factory: Any) -> None:
    settings = with_topic(job_settings, topic_factory(partitions=2))
    validator = settings.validator()
    model = apply_events_model([], validator, max_event_bytes=MAX_EVENT_BYTES)

    first = produce(
        settings,
        [
            sub("s1", "stock.*.msft", 1000),
            sub("s1", "forex.#", "1970-01-01T00:00:01Z"),
            sub("s1", "stock.*.msft", 1000),  # same ts, later change id: supersedes the first
            sub("s2", "#", 1000),
            unsub("s2", "#", 2000),  # same run: the row is recorded inactive
            sub("s3", "a.b", 5000),
            unsub("s3", "a.b", 4000),  # arrives later but is older: the subscribe wins
            sub("s5", "x", 100),
            unsub("s5", "x", 200),
            *(sub("s4", f"p{i}", 10 + i) for i in range(1, 6)),  # limit 3: p4 and p5 rejected
            *(value for value, _ in REJECTED_EVENTS),
        ],
    )
    counts = model.apply_batch(first)
    summary = refresh_from_kafka(spark, settings)
    assert len(summary.batches) == 1
    assert nonzero(summary.counts) == nonzero(counts)
    expected_rejects = collections.Counter(reason for _, reason in REJECTED_EVENTS)
    expected_rejects["too_many_subscriptions"] = 2
    assert summary.rejected == dict(sorted(expected_rejects.items()))
    assert_matches_model(spark, settings, model)
    # The expected reasons are the spec, independently of the model.
    by_change = dict(rejects_in_table(spark, settings))
    offset = len(first) - len(REJECTED_EVENTS)
    assert [by_change[item.change_id] for item in first[offset:]] == [reason for _, reason in REJECTED_EVENTS]
    reject = (
        spark.read.format("delta")
        .load(settings.subscriptions.rejects_path)
        .where(f"change_id = '{first[offset + 2].change_id}'")
        .collect()[0]
    )
    assert (reject["kafka_topic"], reject["kafka_partition"], reject["kafka_offset"], bytes(reject["raw"])) == (
        first[offset + 2].kafka_topic,
        first[offset + 2].kafka_partition,
        first[offset + 2].kafka_offset,
        b"{not json",
    )
    version = latest_version(spark, settings.subscriptions.table_path)
    assert summary.table_version == version

    # No new events: nothing runs, nothing changes.
    idle = refresh_from_kafka(spark, settings)
    assert idle.batches == [] and idle.table_version == version
    assert_matches_model(spark, settings, model)

    second = produce(
        settings,
        [
            unsub("s1", "forex.#", 3000),
            sub("s5", "x", 150),  # older than the unsubscribe at 200: must not resurrect
            sub("s2", "#", 2500),  # re-subscribe after the unsubscribe at 2000
            unsub("s4", "p1", 9000),
            sub("s4", "p4", 9000),  # p1 released in the same batch: p4 fits now
            sub("s4", "p5", 9001),  # but p5 still does not
            sub("s3", "a.b", 5001),  # newer subscribe of an active row: a refresh
            b"garbage",
        ],
    )
    counts = model.apply_batch(second)
    summary = refresh_from_kafka(spark, settings)
    assert nonzero(summary.counts) == nonzero(counts)
    assert nonzero(counts) == {
        "unsubscribed": 2,
        "stale": 1,
        "subscribed": 2,
        "refreshed": 1,
        "too_many_subscriptions": 1,
        "malformed_json": 1,
    }
    assert_matches_model(spark, settings, model)
    assert summary.table_version == version + 1


def set_flags(settings: Settings) -> list[str]:
    """--set flags reproducing ``settings`` for a job in another process."""
    values = {
        "kafka.bootstrap_servers": settings.kafka.bootstrap_servers,
        "spark.jars_dir": settings.spark.jars_dir,
        "limits.max_subscriptions_per_subscriber": settings.limits.max_subscriptions_per_subscriber,
        # The session's scratch space, where a quiet command writes its JVM's log (routing.spark.scratch_dir).
        **{f"spark.conf.{key}": settings.spark.conf[key] for key in ("spark.local.dir",) if key in settings.spark.conf},
        **{
            f"subscriptions.{field.name}": getattr(settings.subscriptions, field.name)
            for field in dataclasses.fields(settings.subscriptions)
        },
    }
    return [flag for name, value in values.items() for flag in ("--set", f"{name}={value}")]


@pytest.mark.slow
def test_killed_run_is_safe_to_rerun(spark: SparkSession, job_settings: Settings, topic_factory: Any) -> None:
    # One partition and 5 events per batch, so the batches are known: offsets [0-4] and [5-8].
    settings = with_topic(job_settings, topic_factory(partitions=1), max_offsets_per_trigger=5)
    received = produce(
        settings,
        [
            sub("s1", "p1", 10),
            sub("s1", "p2", 11),
            sub("s1", "p3", 12),
            sub("s1", "p4", 13),
            b"garbage",
            unsub("s1", "p1", 30),
            sub("s1", "p4", 31),
            sub("s1", "p2", 5),
            ev("x", "s1", "p", 1),
        ],
    )
    batches = [received[0:5], received[5:9]]
    model = apply_events_model(batches[:1], settings.validator(), max_event_bytes=MAX_EVENT_BYTES)
    # Batch 0 holds a limit reject: its replay re-decides the limit against the already merged table.
    assert sorted(model.rejects.values()) == ["malformed_json", "too_many_subscriptions"]

    # Batch 0 dies after its Delta writes, before its checkpoint commit (the point the test-only hook
    # CRASH_AFTER_WRITES_ENV SIGKILLs a job process at; the SIGKILLed refresh job processes are
    # test_refresh_concurrency.py's and test_chaos.py's, so this one runs on the shared session).
    with pytest.raises(Exception, match="batch 0 dies after its writes"):
        refresh_from_kafka(spark, settings, after_writes=fail_after_writes(0))
    assert_planned_not_committed(settings.subscriptions.checkpoint_path, 0)
    assert_matches_model(spark, settings, model)  # batch 0 did reach Delta before it died

    summary = refresh_from_kafka(spark, settings)
    assert [batch.batch_id for batch in summary.batches] == [0, 1]  # batch 0 replayed, then batch 1
    replay = summary.batches[0]
    assert not replay.merged
    assert dict(replay.counts) == {"stale": 3, "malformed_json": 1, "too_many_subscriptions": 1}
    model.apply_batch(batches[1])
    assert_matches_model(spark, settings, model)  # rejects exactly once: the replayed append was skipped


@pytest.mark.slow
def test_import_files_through_main(
    spark: SparkSession, job_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = REPO_ROOT / "conf" / "samples"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(sub("imp", "a.*", 1) + b"\n{oops\n" + unsub("imp", "a.*", 2) + b"\n" + sub("imp", "#." * 17, 3))
    files = [samples / "subscriptions.csv", bad]
    validator = job_settings.validator()
    model = apply_events_model(
        [read_import_file(path, validator, max_event_bytes=MAX_EVENT_BYTES)[1] for path in files],
        validator,
        max_event_bytes=MAX_EVENT_BYTES,
    )
    argv = [*set_flags(job_settings), "--json", *(flag for path in files for flag in ("--import", str(path)))]

    assert main(argv, spark_factory=lambda *args, **kwargs: spark) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["batches"] == 2 and first["rejected"] == {"malformed_json": 1, "too_many_hash_words": 1}
    assert_matches_model(spark, job_settings, model)

    # Same files again: same change ids, so nothing changes (not even the table version).
    assert main(argv, spark_factory=lambda *args, **kwargs: spark) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["table_version"] == first["table_version"]
    assert sum(again["applied"].values()) == 0
    assert_matches_model(spark, job_settings, model)


def test_decisions_match_the_model(spark: SparkSession) -> None:
    """decide() against the sequential model, on many random scenarios at once.

    Scenarios use disjoint subscribers, so one DataFrame carries all of them and three Spark
    jobs check three rounds of batches; a tight limit makes the limit logic do real work.
    """
    from pyspark.sql import functions as F

    validator = Validator(limits=Limits(max_subscriptions_per_subscriber=2))
    rng = random.Random(20261121)
    scenarios = 40
    models = [apply_events_model([], validator, max_event_bytes=MAX_EVENT_BYTES) for _ in range(scenarios)]
    table: dict[tuple[str, str], tuple[bool, int, str]] = {}
    offsets = iter(range(10**6))
    for round_number in range(3):
        outcomes: list[Outcome] = []
        for scenario, model in enumerate(models):
            batch = [
                kafka_received(
                    "t",
                    rng.randrange(2),
                    next(offsets),
                    ev(
                        rng.choice(["subscribe", "subscribe", "unsubscribe"]),
                        f"s{scenario}.{rng.randrange(2)}",
                        # Overlapping ts windows per round: late (stale) events and real unsubscribes both occur.
                        rng.choice(["a", "b", "c", "d.*"]),
                        3 * round_number + rng.randrange(6),
                    ),
                )
                for _ in range(rng.randrange(9))
            ]
            model.apply_batch(batch)
            outcomes.extend(judge(item, validator, max_event_bytes=MAX_EVENT_BYTES) for item in batch)
        current = spark.createDataFrame(
            [(key[0], key[1], active, ts, change_id) for key, (active, ts, change_id) in table.items()],
            "subscriber_id STRING, pattern STRING, active BOOLEAN, ts BIGINT, change_id STRING",
        ).withColumn("updated_at", F.timestamp_millis("ts"))
        events = collect_events(validated_frame(spark, outcomes))
        for row in decide(current, events, validator.limits.max_subscriptions_per_subscriber).to_pylist():
            if row["_kind"] in APPLIED_KINDS:
                table[(row["subscriber_id"], row["pattern"])] = (
                    row["op"] == "subscribe",
                    row["ts_millis"],
                    row["change_id"],
                )
        expected = {
            key: (row.active, row.ts_millis, row.change_id) for model in models for key, row in model.rows.items()
        }
        assert table == expected


def test_the_merge_condition_in_sql_is_the_one_decide_uses(spark: SparkSession) -> None:
    """``APPLIES_OVER_SQL`` (the MERGE's, evaluated by Spark) and ``applies_over`` (decide's) agree on every
    ordering case."""
    import datetime as dt
    import itertools

    from pyspark.sql import functions as F

    from routing.subscriptions.table import APPLIES_OVER_SQL, applies_over

    moments = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 2, tzinfo=dt.UTC)]
    ids = ["a", "b"]
    rows = [(*event, *row) for event, row in itertools.product(itertools.product(moments, ids), repeat=2)]
    frame = spark.createDataFrame(rows, "s_ts TIMESTAMP, s_id STRING, t_ts TIMESTAMP, t_id STRING").select(
        F.struct(F.col("s_ts").alias("updated_at"), F.col("s_id").alias("change_id")).alias("s"),
        F.struct(F.col("t_ts").alias("updated_at"), F.col("t_id").alias("change_id")).alias("t"),
        F.expr(APPLIES_OVER_SQL).alias("sql"),
    )
    judged = [
        (
            applies_over(
                int(row["s"]["updated_at"].timestamp() * 1000),
                row["s"]["change_id"],
                int(row["t"]["updated_at"].timestamp() * 1000),
                row["t"]["change_id"],
            ),
            row["sql"],
        )
        for row in frame.collect()
    ]
    assert len(judged) == 16
    assert [python for python, _ in judged] == [sql for _, sql in judged]
    assert sum(sql for _, sql in judged) == 4  # strictly newer (6 pairs), minus the row's own change id (2)

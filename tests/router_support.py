"""Helpers for the streaming router's integration tests (``tests/integration/test_router_*.py``).

The oracle here is independent of the router: the routing key is located in
plain Python (message key, header or JSON field), judged with
:class:`routing.validation.Validator` (``decode_key`` then ``check_payload``),
and matched with the regex oracle :class:`routing.reference.ReferenceMatcher`
against the active subscriptions read back from the Delta table at the version
in question. :func:`expected_outcomes` says, per Kafka record, whether it must
be delivered (to which subscribers), dead-lettered (with which reason) or
unrouted; :func:`routed_outcomes` reads the same thing back from the router's
three output tables, so a test compares two dicts keyed by (partition, offset).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from routing import delta_tables
from routing.errors import TopicError
from routing.reference import ReferenceMatcher
from routing.settings import ARROW_BATCH_ROWS, ARROW_OUTPUT_BATCH_BYTES, REPO_ROOT, RouterSettings, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.router.pipeline import Router
    from routing.streaming import AfterWrites
    from routing.validation import Validator

# PySpark's local mode starts Python workers with PYSPARK_PYTHON (the driver's spark.pyspark.python
# is ignored); the mapInArrow matcher needs this interpreter. Set before the session fixture starts.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

DELIVERED = "delivered"
UNROUTED = "unrouted"

#: Seconds a subprocess router or a wait for progress may take before the test gives up.
WAIT_TIMEOUT_S = 300.0

_ts_counter = itertools.count(1_000)


@dataclasses.dataclass(frozen=True)
class Record:
    """One produced Kafka record, with the coordinates the broker acknowledged."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def coordinates(self) -> tuple[int, int]:
        return (self.partition, self.offset)


#: What must become of one record: (DELIVERED, frozenset of subscribers), (UNROUTED, empty) or
#: (a dead-letter reason, empty).
Outcome = tuple[str, frozenset[str]]


def router_settings(base: Settings, root: Path, topics: Sequence[str], **router_changes: Any) -> Settings:
    """``base`` with this test's own subscription table, router tables, checkpoint and app id under ``root``."""
    subscriptions = dataclasses.replace(
        base.subscriptions,
        table_path=str(root / "subscriptions"),
        rejects_path=str(root / "subscription_rejects"),
        checkpoint_path=str(root / "refresh_checkpoint"),
    )
    changes: dict[str, Any] = {
        "topics": tuple(topics),
        "subscribe_pattern": "",
        "starting_offsets": "earliest",
        "trigger": "available_now",
        "checkpoint_path": str(root / "router_checkpoint"),
        "deliveries_path": str(root / "deliveries"),
        "dead_letters_path": str(root / "dead_letters"),
        "unrouted_path": str(root / "unrouted"),
        "app_id": f"router-test-{uuid.uuid4().hex[:12]}",
        "kafka_sink_topic": "",
        **router_changes,
    }
    return base.replace(subscriptions=subscriptions, router=dataclasses.replace(base.router, **changes))


def with_router(settings: Settings, **changes: Any) -> Settings:
    return settings.replace(router=dataclasses.replace(settings.router, **changes))


def subscription_event(op: str, pattern: str, subscriber: str) -> bytes:
    return json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": next(_ts_counter)}).encode()


def apply_subscriptions(
    spark: SparkSession,
    settings: Settings,
    path: Path,
    subscribe: Iterable[tuple[str, str]] = (),
    unsubscribe: Iterable[tuple[str, str]] = (),
) -> int:
    """Apply (pattern, subscriber) changes through the refresh job's import path; the new table version."""
    from jobs.refresh_subscriptions import import_files

    lines = [subscription_event("subscribe", pattern, subscriber) for pattern, subscriber in subscribe]
    lines += [subscription_event("unsubscribe", pattern, subscriber) for pattern, subscriber in unsubscribe]
    path.write_bytes(b"\n".join(lines) + b"\n")
    summary = import_files(spark, settings, [str(path)])
    assert summary.rejected == {}, summary.rejected
    return summary.table_version


def active_subscriptions(spark: SparkSession, settings: Settings, version: int) -> list[tuple[str, str]]:
    from routing.subscriptions import read_active

    return read_active(spark, settings.subscriptions.table_path, version)


def produce(
    settings: Settings,
    topic: str,
    messages: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    partitions: int = 1,
) -> list[Record]:
    """Produce (key, value, headers) in order, round-robin over ``partitions``; the acknowledged records."""
    from confluent_kafka import Producer

    producer = Producer({**settings.kafka_client_config(), "enable.idempotence": True, "linger.ms": 5})
    acked: dict[int, Record] = {}
    errors: list[object] = []

    def on_delivery(index: int, key: bytes | None, value: bytes | None, headers: Any) -> Any:
        def report(error: object, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                acked[index] = Record(message.topic(), message.partition(), message.offset(), key, value, headers)

        return report

    for index, (key, value, headers) in enumerate(messages):
        frozen_headers = tuple(headers)
        while True:
            try:
                producer.produce(
                    topic,
                    key=key,
                    value=value,
                    headers=list(frozen_headers) or None,
                    partition=index % partitions,
                    on_delivery=on_delivery(index, key, value, frozen_headers),
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    return [acked[index] for index in range(len(messages))]


def routing_key_bytes(record: Record, router: RouterSettings) -> bytes | None:
    """Where ``router.key_source`` says the key is, located in plain Python."""
    if router.key_kind == "key":
        return record.key
    if router.key_kind == "header":
        values = [value for name, value in record.headers if name == router.key_name]
        return values[0] if values else None
    try:
        document = json.loads((record.value or b"").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(document, dict):
        return None
    field = document.get(router.key_name)
    assert field is None or isinstance(field, str), "tests only put strings in the key field"
    return None if field is None else field.encode("utf-8")


def expected_outcome(record: Record, router: RouterSettings, validator: Validator, oracle: ReferenceMatcher) -> Outcome:
    try:
        key = validator.decode_key(routing_key_bytes(record, router))
        validator.check_payload(record.value)
        validator.check_headers(list(record.headers))
    except TopicError as error:
        return (error.reason, frozenset())
    subscribers = oracle.lookup(key)
    if not subscribers:
        return (UNROUTED, frozenset())
    if len(subscribers) > validator.limits.max_fanout:
        return ("fanout_limit", frozenset())
    return (DELIVERED, subscribers)


def expected_outcomes(
    records: Iterable[Record], router: RouterSettings, validator: Validator, subscriptions: Iterable[tuple[str, str]]
) -> dict[tuple[int, int], Outcome]:
    oracle = ReferenceMatcher(subscriptions)
    return {record.coordinates: expected_outcome(record, router, validator, oracle) for record in records}


@dataclasses.dataclass
class Routed:
    """The router's three output tables, read back."""

    deliveries: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    unrouted: list[dict[str, Any]]

    def outcomes(self) -> dict[tuple[int, int], Outcome]:
        """(partition, offset) -> outcome; asserts no record landed in two tables."""
        delivered: dict[tuple[int, int], set[str]] = {}
        for row in self.deliveries:
            delivered.setdefault((row["source_partition"], row["source_offset"]), set()).add(row["subscriber_id"])
        result: dict[tuple[int, int], Outcome] = {key: (DELIVERED, frozenset(subs)) for key, subs in delivered.items()}
        for row in self.dead_letters:
            coordinates = (row["source_partition"], row["source_offset"])
            assert coordinates not in result, f"{coordinates} both dead-lettered and {result[coordinates]}"
            result[coordinates] = (row["reason"], frozenset())
        for row in self.unrouted:
            coordinates = (row["source_partition"], row["source_offset"])
            assert coordinates not in result, f"{coordinates} both unrouted and {result[coordinates]}"
            result[coordinates] = (UNROUTED, frozenset())
        return result

    def versions(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(partition, offset) -> (batch id, snapshot version) of whichever table holds the record."""
        found: dict[tuple[int, int], tuple[int, int]] = {}
        for row in [*self.deliveries, *self.dead_letters, *self.unrouted]:
            coordinates = (row["source_partition"], row["source_offset"])
            pinned = (row["batch_id"], row["snapshot_version"])
            assert found.setdefault(coordinates, pinned) == pinned, f"{coordinates} routed by two batches"
        return found


def read_routed(spark: SparkSession, settings: Settings) -> Routed:
    router = settings.router

    def rows(path: str, columns: Sequence[str]) -> list[dict[str, Any]]:
        return [row.asDict() for row in delta_tables.read(spark, path).select(*columns).collect()]

    common = ["source_topic", "source_partition", "source_offset", "batch_id", "snapshot_version"]
    return Routed(
        deliveries=rows(router.deliveries_path, ["delivery_id", "subscriber_id", "routing_key", *common]),
        dead_letters=rows(router.dead_letters_path, ["dead_letter_id", "reason", "raw_key", "fanout", *common]),
        unrouted=rows(router.unrouted_path, ["routing_key", *common]) if router.unrouted_path else [],
    )


def delivery_id(topic: str, partition: int, offset: int, subscriber: str) -> str:
    """The delivery's id (routing.router.tables, Delivery ids), from Python."""
    return f"{topic}|{partition}|{offset}|{subscriber}"


def dead_letter_id(topic: str, partition: int, offset: int) -> str:
    return f"{topic}|{partition}|{offset}"


def assert_ids_exact(routed: Routed) -> None:
    """Every delivery and dead-letter id is unique and the text of its coordinates."""
    ids_seen = [row["delivery_id"] for row in routed.deliveries]
    assert len(ids_seen) == len(set(ids_seen)), "duplicate delivery ids"
    for row in routed.deliveries:
        assert row["delivery_id"] == delivery_id(
            row["source_topic"], row["source_partition"], row["source_offset"], row["subscriber_id"]
        )
    dead_ids = [row["dead_letter_id"] for row in routed.dead_letters]
    assert len(dead_ids) == len(set(dead_ids)), "duplicate dead-letter ids"
    for row in routed.dead_letters:
        assert row["dead_letter_id"] == dead_letter_id(
            row["source_topic"], row["source_partition"], row["source_offset"]
        )


def ledger_versions(spark: SparkSession, settings: Settings) -> list[tuple[int, int]]:
    """Every (batch id, snapshot version) entry of the router's ledger, over all its queries, duplicates kept."""
    from routing.router.ledger import ledger_directory, ledger_entries

    router = settings.router
    entries = ledger_entries(spark, ledger_directory(router.checkpoint_path))
    return sorted((batch_id, version) for _, batch_id, version in entries)


def assert_routed_with_recorded_versions(
    spark: SparkSession, settings: Settings, records: Sequence[Record]
) -> tuple[dict[int, int], dict[tuple[int, int], tuple[int, int]], dict[tuple[int, int], Outcome]]:
    """Every record routed once, by a batch that used the version its ledger entry recorded, exactly as the oracle
    of that version says; (ledger: batch -> version, each record's (batch, version), each record's outcome)."""
    ledger = dict(ledger_versions(spark, settings))
    routed = read_routed(spark, settings)
    assert_ids_exact(routed)
    pinned = routed.versions()
    assert set(pinned) == {record.coordinates for record in records}
    for batch_id, version in pinned.values():
        assert ledger[batch_id] == version  # each batch routed with the version it recorded
    oracles = {
        version: ReferenceMatcher(active_subscriptions(spark, settings, version)) for version in set(ledger.values())
    }
    validator = settings.validator()
    expected = {
        record.coordinates: expected_outcome(record, settings.router, validator, oracles[pinned[record.coordinates][1]])
        for record in records
    }
    assert routed.outcomes() == expected
    return ledger, pinned, expected


def run_available_now(spark: SparkSession, settings: Settings) -> Router:
    """One in-process available-now run of the router on the shared session; the closed Router."""
    from routing.router.pipeline import Router

    router = Router(spark, with_router(settings, trigger="available_now"))
    query = router.start()
    try:
        query.awaitTermination(int(WAIT_TIMEOUT_S))
        assert not query.isActive, "the available-now run did not finish"
        assert query.exception() is None, query.exception()
    finally:
        if query.isActive:
            query.stop()
        router.close()
    return router


def run_until_batch_dies(spark: SparkSession, settings: Settings, match: str, **hooks: Any) -> None:
    """An in-process available-now run of the router with ``hooks`` (``after_writes`` or ``crash_points`` raising
    :class:`BatchDied` in one batch): its query must fail with an error matching ``match``; the router is closed."""
    import pytest

    from routing.router.pipeline import Router

    crashing = Router(spark, with_router(settings, trigger="available_now"), **hooks)
    query = crashing.start()
    try:
        with pytest.raises(Exception, match=match):
            query.awaitTermination(int(WAIT_TIMEOUT_S))
    finally:
        if query.isActive:
            query.stop()
        crashing.close(progress_wait_s=0)


def route_flags(settings: Settings) -> list[str]:
    """``--set``/``--topics`` flags reproducing ``settings`` for ``python -m jobs.route`` in another process."""
    return [*job_flags(settings), "--topics", ",".join(settings.router.topics)]


def job_flags(settings: Settings) -> list[str]:
    """``--set`` flags reproducing ``settings`` for either job in another process (the router's topics aside)."""
    router = settings.router
    values: dict[str, object] = {
        "kafka.bootstrap_servers": settings.kafka.bootstrap_servers,
        **{f"kafka.spark_options.{name}": value for name, value in settings.kafka.spark_options.items()},
        "spark.jars_dir": settings.spark.jars_dir,
        # The session's scratch space, where a quiet command writes its JVM's log (routing.spark.scratch_dir),
        # and the Arrow batch sizes the routing UDF works in.
        **{
            f"spark.conf.{key}": settings.spark.conf[key]
            for key in ("spark.local.dir", ARROW_BATCH_ROWS, ARROW_OUTPUT_BATCH_BYTES)
            if key in settings.spark.conf
        },
        **{
            f"limits.{field.name}": getattr(settings.limits, field.name)
            for field in dataclasses.fields(settings.limits)
        },
        "validation.policy": settings.validation.policy,
        **{
            f"subscriptions.{field.name}": getattr(settings.subscriptions, field.name)
            for field in dataclasses.fields(settings.subscriptions)
        },
        **{
            f"router.{field.name}": getattr(router, field.name)
            for field in dataclasses.fields(router)
            if field.name not in ("topics", "subscribe_pattern")
        },
    }
    return [flag for name, value in values.items() for flag in ("--set", f"{name}={value}")]


def start_job(
    module: str, args: Sequence[str], log: IO[bytes], *, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m <module> <args>`` in its own process group (so a kill reaches its JVM and Python workers),
    stdout and stderr to ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_router(
    settings: Settings, log: IO[bytes], *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m jobs.route`` with ``settings`` (:func:`start_job`)."""
    return start_job("jobs.route", [*route_flags(settings), *args], log, env=env)


class BatchDied(RuntimeError):
    """What :func:`fail_after_writes` raises: a batch failing after its writes, before its checkpoint commit."""


def fail_after_writes(target_batch: int) -> AfterWrites:
    """An after-writes hook that fails batch ``target_batch`` in-process (:class:`BatchDied`).

    The point the test-only crash hook (``routing.streaming.CRASH_AFTER_WRITES_ENV``) SIGKILLs a job
    process at: Spark keeps what it keeps of a killed process's batch (the offset log entry, no commit
    entry; :func:`assert_planned_not_committed`), without a JVM start of its own.
    """

    def fail(batch_id: int) -> None:
        if batch_id == target_batch:
            raise BatchDied(f"batch {batch_id} dies after its writes, before its checkpoint commit")

    return fail


def assert_planned_not_committed(checkpoint: str, batch_id: int) -> None:
    """The streaming checkpoint holds ``batch_id``'s offsets but not its commit (a batch that died mid-way)."""
    root = Path(checkpoint)
    assert (root / "offsets" / str(batch_id)).is_file(), f"no offset log entry for batch {batch_id}"
    assert not (root / "commits" / str(batch_id)).exists(), f"batch {batch_id} was committed"


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process``'s whole group (a job started by :func:`start_job`) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)

"""Publishing subscription changes: what ``python -m routing subscribe`` and ``unsubscribe`` send.

A change goes out as the very JSON event the refresh job consumes from ``subscriptions.events_topic``
(:mod:`routing.subscriptions.events`), with ``ts`` the current time and an ``idempotency_key``::

    {"op": "subscribe", "subscriber": "fx-desk", "pattern": "forex.#", "ts": 1767603720000,
     "idempotency_key": "cli:subscribe:<40 hex>"}

Local validation is the refresh job's own: :func:`prepare` parses those exact bytes with
:func:`~routing.subscriptions.events.parse_event` and the settings' validator (event size, subscriber,
pattern limits and policy, and for a subscribe the ``[acl]`` rules), so whatever the job would reject
on its own is refused here, before anything is sent, with the same reason code. A command is all or
nothing: one refused pattern and none is published. A subscribe of more distinct patterns than
``limits.max_subscriptions_per_subscriber``, or of patterns whose match cost adds up past
``limits.max_match_cost_per_subscriber``, is refused too (it cannot fit, whatever the table holds);
what the subscriber already holds only the refresh job knows (``--apply`` reports it).

Idempotency. "Retried" means the same command run again because the first run failed or timed out, when
its events may or may not have reached the broker. Kafka alone cannot tell the copies apart: a re-sent
event lands at a new offset (a new coordinate change id) with a later ``ts``, so last writer wins would
apply it once more (at least a refresh of the row: a new table version). So the key is derived from the
command itself, :func:`command_key` (op, subscriber, pattern): every run of the same command sends the
same key, the refresh job gives every copy the same change id (``key:...``), and an event whose change
id is the row's is a no-op whatever its ``ts`` (:mod:`routing.subscriptions.model`, step 3). The key is
judged against the row's current change only, not remembered forever: after an unsubscribe the same
subscribe applies again, as it must. Re-running a command that is in effect therefore keeps the row's
``ts`` (the first copy's), and copies that reach one batch count as one change (the others superseded).

Publishing waits for the broker's acknowledgement of every event (idempotent producer, ``acks=all``,
the ``[kafka]`` client settings with SASL exactly as the jobs use them) for at most
``kafka.start_timeout_s``; past it :class:`PublishFailed` says which changes are unconfirmed. (The CLI
first waits, as long at most, for a bootstrap server to accept a connection:
:func:`routing.streaming.wait_for_kafka`, the jobs' own probe, so "nothing listens there" reads the same.)
:func:`change_results` then tells, after a refresh run (``--apply``), what became of each change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from routing.errors import TopicError
from routing.subscriptions.events import IDEMPOTENCY_KEY, EventRejected, Op, keyed_change_id, parse_event

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings
    from routing.validation import Validator

#: librdkafka's own log lines (connection refused, authentication failed) go here, not straight to stderr.
LOG = logging.getLogger("routing.subscriptions.publish")

#: Seconds ``flush`` waits beyond the producer's own delivery timeout, so every delivery report arrives.
FLUSH_GRACE_S = 5.0

# -- what became of a change after a refresh run (change_results) --
APPLIED = "applied"  # the row holds this change (from this run, or an earlier copy: a retry)
OVERRIDDEN = "overridden"  # the row holds another change that wins by last writer wins
REJECTED = "rejected"  # the refresh job rejected it in this run (a limit the table decides), with a reason
NOT_APPLIED = "not_applied"  # the run did not see it (say, starting_offsets=latest on a fresh checkpoint)


def command_key(op: Op, subscriber: str, pattern: str) -> str:
    """The idempotency key of one change of a command: the same for every run of the same command."""
    identity = json.dumps([op.value, subscriber, pattern])  # ASCII-escaped: any text, lone surrogates too
    return f"cli:{op.value}:{hashlib.sha256(identity.encode('ascii')).hexdigest()[:40]}"


@dataclasses.dataclass(frozen=True)
class Change:
    """One subscription change of a command, as published."""

    op: Op
    subscriber: str
    pattern: str
    ts_millis: int

    @property
    def idempotency_key(self) -> str:
        return command_key(self.op, self.subscriber, self.pattern)

    @property
    def change_id(self) -> str:
        """The change id the refresh job gives it (and every copy of it)."""
        return keyed_change_id(self.idempotency_key)

    def value(self) -> bytes:
        """The Kafka message value: the refresh job's event JSON."""
        fields = {
            "op": self.op.value,
            "subscriber": self.subscriber,
            "pattern": self.pattern,
            "ts": self.ts_millis,
            IDEMPOTENCY_KEY: self.idempotency_key,
        }
        try:
            return json.dumps(fields, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: escaped, so the validator names the field it is in
            return json.dumps(fields).encode("ascii")

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op.value,
            "subscriber": self.subscriber,
            "pattern": self.pattern,
            "ts": self.ts_millis,
            "idempotency_key": self.idempotency_key,
            "change_id": self.change_id,
        }


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a command was refused locally; ``pattern`` None when the command as a whole is."""

    pattern: str | None
    reason: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "reason": self.reason, "detail": self.detail}


class ChangesRefused(ValueError):
    """A command the refresh job would (partly) reject: nothing of it is published."""

    def __init__(self, refusals: Sequence[Refusal]) -> None:
        self.refusals = list(refusals)
        super().__init__("; ".join(refusal.detail for refusal in self.refusals))


def prepare(
    op: Op,
    subscriber: str,
    patterns: Sequence[str],
    validator: Validator,
    *,
    max_event_bytes: int,
    now_millis: int | None = None,
) -> list[Change]:
    """One change per distinct pattern (in the order given), each judged as the refresh job will judge it.

    Raises :class:`ChangesRefused` naming every refused pattern. ``now_millis`` (default: the clock) is ``ts``.
    """
    ts = int(time.time() * 1000) if now_millis is None else now_millis
    changes = [Change(op, subscriber, pattern, ts) for pattern in dict.fromkeys(patterns)]
    refusals = []
    for change in changes:
        try:
            parse_event(change.value(), change.change_id, validator, max_event_bytes=max_event_bytes)
        except EventRejected as rejected:
            refusals.append(Refusal(change.pattern, rejected.reason, rejected.detail))
    if not refusals and op is Op.SUBSCRIBE:
        try:  # limits the command alone passes, whatever the subscriber holds already: it cannot fit
            validator.check_subscription_count(subscriber, len(changes))
            validator.check_match_cost(subscriber, sum(validator.match_cost(change.pattern) for change in changes))
        except TopicError as error:
            refusals.append(Refusal(None, error.reason, str(error)))
    if refusals:
        raise ChangesRefused(refusals)
    return changes


@dataclasses.dataclass(frozen=True)
class Delivery:
    """Where the broker put a change, or why it did not confirm it (``error``)."""

    change: Change
    partition: int | None = None
    offset: int | None = None
    error: str | None = None


class PublishFailed(RuntimeError):
    """Not every change was acknowledged in time; ``deliveries`` says which were."""

    def __init__(self, message: str, deliveries: Sequence[Delivery]) -> None:
        self.deliveries = list(deliveries)
        super().__init__(message)


def publish(settings: Settings, changes: Sequence[Change], *, timeout_s: float | None = None) -> list[Delivery]:
    """Send ``changes`` to ``subscriptions.events_topic`` and wait for every acknowledgement.

    Keyed by subscriber, so one subscriber's changes keep their order in one partition. Waits at most
    ``timeout_s`` (default ``kafka.start_timeout_s``) for the broker, then raises :class:`PublishFailed`.
    """
    from confluent_kafka import KafkaException, Producer

    timeout = settings.kafka.start_timeout_s if timeout_s is None else timeout_s
    topic = settings.subscriptions.events_topic
    producer = Producer(
        {
            **settings.kafka_client_config(),
            # The producer's own retries never duplicate an event; the idempotency key covers a re-run command.
            "enable.idempotence": True,
            "linger.ms": 5,
            # A broker that does not answer within the timeout fails each event instead of queueing it forever.
            "message.timeout.ms": max(1, int(timeout * 1000)),
            "logger": LOG,
        }
    )
    reports: dict[int, Delivery] = {}

    def on_delivery(index: int, change: Change) -> Any:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                reports[index] = Delivery(change, error=str(error))
            else:
                reports[index] = Delivery(change, message.partition(), message.offset())

        return report

    for index, change in enumerate(changes):
        try:
            producer.produce(
                topic, key=change.subscriber.encode(), value=change.value(), on_delivery=on_delivery(index, change)
            )
        except (KafkaException, BufferError) as error:
            reports[index] = Delivery(change, error=str(error))
        producer.poll(0)
    producer.flush(timeout + FLUSH_GRACE_S)
    deliveries = [
        reports.get(index, Delivery(change, error="no delivery report")) for index, change in enumerate(changes)
    ]
    failed = [delivery for delivery in deliveries if delivery.error is not None]
    if failed:
        raise PublishFailed(
            f"{len(failed)} of {len(changes)} change(s) not acknowledged by {settings.kafka.bootstrap_servers} "
            f"(topic {topic!r}) within {timeout:g} s (kafka.start_timeout_s): {failed[0].error}",
            deliveries,
        )
    return deliveries


# -- after a refresh run --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    """What became of one change once the refresh job ran."""

    change: Change
    result: str
    #: The row afterwards (None: no row), and the reason when ``result`` is :data:`REJECTED`.
    active: bool | None
    row_change_id: str | None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.change.pattern,
            "result": self.result,
            "active": self.active,
            "row_change_id": self.row_change_id,
            "reason": self.reason,
        }


def change_results(
    changes: Sequence[Change],
    rows: Mapping[tuple[str, str], tuple[bool, int, str]],
    rejected: Mapping[str, str],
) -> list[Result]:
    """Each change's fate, from the table's rows afterwards (as :func:`~routing.subscriptions.table.read_rows`
    returns them) and ``rejected`` ({change id: reason}: the rejects the run recorded)."""
    results = []
    for change in changes:
        row = rows.get((change.subscriber, change.pattern))
        active, row_change_id = (None, None) if row is None else (row[0], row[2])
        if row_change_id == change.change_id:
            results.append(Result(change, APPLIED, active, row_change_id))
        elif change.change_id in rejected:
            results.append(Result(change, REJECTED, active, row_change_id, rejected[change.change_id]))
        elif row is not None:
            results.append(Result(change, OVERRIDDEN, active, row_change_id))
        else:
            results.append(Result(change, NOT_APPLIED, active, row_change_id))
    return results


def rejections(
    spark: SparkSession, rejects_path: str, change_ids: Iterable[str], batch_ids: Iterable[int]
) -> dict[str, str]:
    """{change id: reason} of the rejects recorded for ``change_ids`` by the batches ``batch_ids`` (one run's)."""
    from pyspark.sql import functions as F

    from routing import delta_tables

    ids, batches = sorted(set(change_ids)), sorted(set(batch_ids))
    if not ids or not batches:
        return {}
    rows = (
        delta_tables.read(spark, rejects_path)
        .where(F.col("change_id").isin(ids) & F.col("batch_id").isin(batches))
        .select("change_id", "reason")
        .collect()
    )
    return {row["change_id"]: row["reason"] for row in rows}

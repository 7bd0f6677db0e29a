"""The Kafka sink on the real broker: one topic per subscriber that no other subscriber can read, and a
``delivery_id`` header no producer can forge.

The Spark columns of :mod:`routing.kafka_sink` are held to its Python functions (the oracle) on hostile ids
and headers; then a router publishes to per-subscriber topics for the issue's colliding ids, every message
carrying a forged ``delivery_id`` header, and a consumer of each topic reads back exactly its subscriber's
deliveries, each with the router's id as the only ``delivery_id`` header.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from router_support import (
    WAIT_TIMEOUT_S,
    apply_subscriptions,
    delivery_id,
    produce,
    router_settings,
    run_available_now,
)

from routing.kafka_sink import (
    DEAD_LETTER_HEADERS,
    forwarded_headers,
    headers_column,
    own_then_source_headers,
    topic_column,
    topic_for,
)
from routing.router.tables import HEADERS_DDL
from routing.settings import Settings

#: The issue's ids that all became ``acme_corp``, the ids that became ``..``-ish names, and a long one.
COLLIDING = ["acme_corp", "acme corp", "acme/corp", "acme\u00e9corp", "acme-corp", ".", "..", "z" * 250]


def test_the_spark_columns_equal_the_python_functions(spark: Any) -> None:
    from pyspark.sql import functions as F
    from test_kafka_sink import HOSTILE_IDS, random_ids

    ids = [subscriber for subscriber in dict.fromkeys(HOSTILE_IDS + random_ids(2_000)) if subscriber]
    for template in ("deliveries.{subscriber}", "{subscriber}", "x" * 200 + ".{subscriber}.out", "one-topic"):
        frame = spark.createDataFrame([(subscriber,) for subscriber in ids], "subscriber_id STRING")
        rows = frame.select("subscriber_id", topic_column(template).alias("topic")).collect()
        assert {row.subscriber_id: row.topic for row in rows} == {s: topic_for(template, s) for s in ids}

    cases: list[list[tuple[str, bytes]] | None] = [
        None,
        [],
        [("delivery_id", b"forged")],
        [("DELIVERY_ID", b"f"), ("trace", b"t"), ("snapshot_version", b"9"), ("delivery_id", b"g")],
        [("source.delivery_id", b"s"), ("\u0130d", b"i")],
        # The column's shortcut joins the keys with NULs: keys holding NULs, and a clash after many headers.
        [("a\u0000delivery_id", b"n"), ("delivery_id\u0000", b"m"), ("\u0000", b"z")],
        [(f"h{index}", b"v") for index in range(50)] + [("Snapshot_Version", b"late")],
        [("Reason", b"r"), ("RULE", b"x"), ("dead_letter_id", b"d")],
    ]
    frame = spark.createDataFrame(
        [(f"t|0|{index}|s", index, headers) for index, headers in enumerate(cases)],
        f"delivery_id STRING, snapshot_version BIGINT, headers {HEADERS_DDL}",
    )
    rows = frame.select("delivery_id", "snapshot_version", headers_column().alias("out")).collect()
    for row, headers in zip(rows, cases, strict=True):
        got = [(header.key, bytes(header.value)) for header in row.out]
        assert got == forwarded_headers(headers or [], row.delivery_id, row.snapshot_version)
    # A dead letter's own names are others: each clash renamed, whatever the letter case.
    dead = frame.select(
        F.col("delivery_id").alias("dead_letter_id"),
        F.lit("key_words").alias("reason"),
        F.lit("rule text").alias("rule"),
        "snapshot_version",
        "headers",
    )
    rows = dead.select(headers_column(DEAD_LETTER_HEADERS).alias("out"), "dead_letter_id", "snapshot_version").collect()
    for row, headers in zip(rows, cases, strict=True):
        got = [(header.key, bytes(header.value)) for header in row.out]
        own = {
            "dead_letter_id": row.dead_letter_id,
            "reason": "key_words",
            "rule": "rule text",
            "snapshot_version": str(row.snapshot_version),
        }
        assert got == own_then_source_headers(own, headers or [])


def consume_all(settings: Settings, topic: str, expected: int) -> list[Any]:
    """Every record of ``topic`` (waits until ``expected`` arrived or the timeout; then reads a little more)."""
    import time

    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": f"sink-test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    records: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        quiet_until = None
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                records.append(message)
            if len(records) >= expected:
                quiet_until = quiet_until or time.monotonic() + 3  # anything beyond expected shows up too
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return records


def test_per_subscriber_topics_hold_only_their_subscribers_deliveries_with_the_routers_id(
    spark: Any, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    source = topic_factory(partitions=1)
    template = f"sink-{uuid.uuid4().hex[:8]}.{{subscriber}}"
    job = router_settings(settings, tmp_path, [source], kafka_sink_topic=template)
    apply_subscriptions(
        spark, job, tmp_path / "subs.jsonl", [(f"k.{index}", subscriber) for index, subscriber in enumerate(COLLIDING)]
    )
    per_subscriber = 3
    messages = [
        (f"k.{index}".encode(), f"m{index}.{copy}".encode(), [("delivery_id", b"forged"), ("trace", b"t")])
        for copy in range(per_subscriber)
        for index in range(len(COLLIDING))
    ]
    records = produce(job, source, messages)
    router = run_available_now(spark, job)
    # The sink publishes the rows the deliveries' write computed, kept for it: each message met the matcher once,
    # and nothing stays cached after the batch.
    assert router.udf_figures().rows == len(messages)
    # The publish runs beside the deliveries' write and may compute a partition first: the batch's counters
    # still hold every delivery (read once both jobs are done).
    assert sum(report.metrics["deliveries"] for report in router.reports.values()) == len(messages)
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()

    topics = {subscriber: topic_for(template, subscriber) for subscriber in COLLIDING}
    assert len(set(topics.values())) == len(COLLIDING)
    for index, subscriber in enumerate(COLLIDING):
        received = consume_all(job, topics[subscriber], per_subscriber)
        expected = {
            delivery_id(record.topic, record.partition, record.offset, subscriber)
            for record in records
            if record.key == f"k.{index}".encode()
        }
        assert len(received) == per_subscriber, (subscriber, len(received))
        for message in received:
            headers = message.headers()
            ids = [value for key, value in headers if key == "delivery_id"]
            assert ids == [message.key()], headers  # the router's, once: first and last are the same
            assert headers[2:] == [("source.delivery_id", b"forged"), ("trace", b"t")]
            assert message.value().startswith(f"m{index}.".encode())
        assert {message.key().decode() for message in received} == expected

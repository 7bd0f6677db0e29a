"""``python -m routing tail``: one subscriber's deliveries, incrementally, from a checkpoint of its own.

The deliveries table is made and written by the router's own code (:func:`create_delta_table_if_absent`
with its DDL and partitioning, :func:`deliveries_frame`, :func:`idempotent_append`), one append per
"router batch", each holding rows for all 100 subscribers as a real batch does; no broker is needed.
Oracle: a plain filter over the table read in full (for the second run, over the rows the test added
since). The rows the stream read are what docs/router.md says of "one subscriber's read" among 100.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import job_flags, router_settings
from test_cli import run

from routing.appends import idempotent_append
from routing.router.columns import deliveries_frame
from routing.router.tables import DELIVERIES_DDL, HEADERS_DDL, PARTITION_COLUMN
from routing.settings import Settings
from routing.streaming import create_delta_table_if_absent

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SUBSCRIBERS = [f"s{number:03d}" for number in range(100)]
#: Each message goes to this many subscribers; 100 messages a batch then give every subscriber 10 rows.
FANOUT = 10
MESSAGES_PER_BATCH = 100
TOPIC = "orders"
SUBSCRIBER = "s042"


def append_batch(spark: SparkSession, settings: Settings, batch_id: int) -> None:
    """One router-like batch: messages at offsets [batch_id * 100, +100), each to FANOUT subscribers."""
    fanned = []
    day = dt.datetime(2026, 1, 5, tzinfo=dt.UTC) + dt.timedelta(days=batch_id % 2)  # two kafka_date partitions
    for offset in range(batch_id * MESSAGES_PER_BATCH, (batch_id + 1) * MESSAGES_PER_BATCH):
        for step in range(FANOUT):
            subscriber = SUBSCRIBERS[(offset + step * len(SUBSCRIBERS) // FANOUT) % len(SUBSCRIBERS)]
            payload = f"order {offset}".encode()
            headers = [("trace", offset.to_bytes(4, "big"))]
            fanned.append((TOPIC, 0, offset, day, payload, headers, f"orders.eu.{offset}", subscriber))
    schema = (
        "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY, "
        f"headers {HEADERS_DDL}, routing_key STRING, subscriber_id STRING"
    )
    frame = deliveries_frame(spark.createDataFrame(fanned, schema), version=1, batch_id=batch_id)
    path = settings.router.deliveries_path
    idempotent_append(frame, path, "tail-test", batch_id, partition_by=(PARTITION_COLUMN,))


def table_rows(spark: SparkSession, settings: Settings) -> list[dict[str, Any]]:
    rows = spark.read.format("delta").load(settings.router.deliveries_path).collect()
    return [row.asDict(recursive=True) for row in rows]


def tail_json(settings: Settings, *flags: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run ``tail --json`` in this process; its rows (stdout) and its summary (the last stderr line)."""
    code, out, err = run("tail", "--subscriber", SUBSCRIBER, "--available-now", "--json", *flags, *job_flags(settings))
    assert code == 0, err
    return [json.loads(line) for line in out], json.loads(err[-1])["tail"]


def coordinates(rows: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(row["source_topic"], row["source_partition"], row["source_offset"]) for row in rows]


@pytest.mark.slow
def test_tail_prints_one_subscribers_rows_once(spark: SparkSession, settings: Settings, tmp_path: Path) -> None:
    settings = router_settings(settings, tmp_path, [TOPIC])
    create_delta_table_if_absent(
        spark, settings.router.deliveries_path, DELIVERIES_DDL, partition_by=(PARTITION_COLUMN,)
    )
    for batch_id in (0, 1):
        append_batch(spark, settings, batch_id)

    first, summary = tail_json(settings)
    everything = table_rows(spark, settings)
    assert {row["subscriber_id"] for row in everything} == set(SUBSCRIBERS)
    expected = sorted(
        (row for row in everything if row["subscriber_id"] == SUBSCRIBER), key=lambda row: coordinates([row])
    )
    assert len(expected) == 2 * MESSAGES_PER_BATCH * FANOUT // len(SUBSCRIBERS)
    assert [row["delivery_id"] for row in first] == [row["delivery_id"] for row in expected]
    assert {row["subscriber_id"] for row in first} == {SUBSCRIBER}
    # The JSON is the row itself: binary columns base64, times ISO-8601 UTC.
    for printed, row in zip(first, expected, strict=True):
        assert base64.b64decode(printed["payload"]) == row["payload"]
        assert [base64.b64decode(header["value"]) for header in printed["headers"]] == [
            header["value"] for header in row["headers"]
        ]
        assert printed["kafka_timestamp"] == f"{printed['kafka_date']}T00:00:00Z"  # each batch's day, at midnight UTC
        assert printed["kafka_date"] == row["kafka_date"].isoformat()
    assert summary["rows"] == len(expected)
    # docs/router.md's claim: the router's files mix every subscriber, so the stream reads the whole table.
    assert summary["rows_read"] == len(everything)

    append_batch(spark, settings, 2)
    second, summary = tail_json(settings)
    added = [row for row in table_rows(spark, settings) if row["batch_id"] == 2 and row["subscriber_id"] == SUBSCRIBER]
    assert coordinates(second) == sorted(coordinates(added))
    assert not set(coordinates(second)) & set(coordinates(first))
    assert summary["rows_read"] == MESSAGES_PER_BATCH * FANOUT  # only the new commit is read
    print(f"tail figure: first run read {len(everything)} rows for {len(first)}, second {summary['rows_read']}")

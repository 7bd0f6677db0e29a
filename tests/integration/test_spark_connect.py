"""The router on a real Spark Connect server: exactly the deliveries classic Spark writes, row for row.

The server is ``jobs.connect_server`` (pyspark's SparkConnectServer with the project's jars) on a free
loopback port (the ``connect_server`` fixture, started once per test session). The router runs
unchanged as ``python -m jobs.route --set spark.remote=sc://...``: its batches run in the server's
``foreachBatch`` worker, the snapshot reaches the UDF as a snapshot file (Connect has no broadcast),
the ledger and the lease go through pyarrow's filesystem (no JVM in the client). The oracle is the
same router in classic mode over the same topic and the same subscription table, and the regex
matcher's outcome for every record. The refresh job and ``tail`` are compared with classic runs too.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    job_flags,
    produce,
    read_routed,
    router_settings,
    run_available_now,
    subscription_event,
)

from integration.test_router_metrics import KEYS as METRICS_KEYS
from jobs.connect_server import ConnectServer
from routing import delta_tables
from routing.checkpoints import REFRESH_SUMMARIES_DIRECTORY, ROUTER_REPORTS_DIRECTORY
from routing.router.ledger import ledger_directory, ledger_entries
from routing.router.snapshot_files import DEFAULT_DIRECTORY
from routing.router.tables import DEAD_LETTERS_DDL, DELIVERIES_DDL
from routing.settings import REPO_ROOT, Settings

pytestmark = pytest.mark.slow

SUBSCRIPTIONS = [
    ("stock.*.msft", "msft"),
    ("stock.#", "all-stock"),
    ("forex.usd", "fx"),
    ("#.eur", "eur"),
    ("#", "audit"),
]
#: Deliveries and dead letters of several reasons (no unmatched keys: ``#`` matches every valid key).
KEYS: list[bytes | None] = [*METRICS_KEYS, b"a..b"]


def stable_columns(ddl: str) -> list[str]:
    """Every column of an output table but ``routed_at`` (the wall clock of the write)."""
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    return [name for name in schema.fieldNames() if name != "routed_at"]


def run_job(server: ConnectServer, *argv: str) -> list[str]:
    """``python -m <argv>`` to completion, which must exit 0 (else the job's and the server's last lines); its
    stdout lines."""
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=WAIT_TIMEOUT_S
    )
    assert done.returncode == 0, f"{done.stderr[-3000:]}\n--- server log ---\n{server.log_tail(60)}"
    return done.stdout.strip().splitlines()


def messages(count: int) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]]:
    return [
        (KEYS[index % len(KEYS)], f"payload-{index}".encode() * (1 + index % 3), [("n", str(index).encode())])
        for index in range(count)
    ]


def test_connect_router_writes_exactly_the_classic_deliveries(
    spark: Any, settings: Settings, kafka_broker: Any, topic_factory: Any, tmp_path: Path, connect_server: ConnectServer
) -> None:
    from pyspark.testing import assertDataFrameEqual

    topic = topic_factory(partitions=2)
    records = produce(settings, topic, messages(400), partitions=2)
    # Several batches per run, the same ones in both modes (max offsets per trigger).
    classic = router_settings(settings, tmp_path / "classic", [topic], max_offsets_per_trigger=150)
    version = apply_subscriptions(spark, classic, tmp_path / "subscriptions.jsonl", subscribe=SUBSCRIPTIONS)
    # The worker keeps the last 2 batches' ledger entries and report files: the summary still covers all.
    connect = router_settings(settings, tmp_path / "connect", [topic], max_offsets_per_trigger=150, retain_batches=2)
    connect = connect.replace(subscriptions=classic.subscriptions)

    classic_reports = run_available_now(spark, classic).batch_reports()
    flags = [*job_flags(connect), "--set", f"spark.remote={connect_server.url}"]
    route = ["jobs.route", "--available-now", "--json", "--topics", topic, *flags]
    summary = json.loads(run_job(connect_server, *route)[-1])

    for setting, columns in (
        ("deliveries_path", stable_columns(DELIVERIES_DDL)),
        ("dead_letters_path", stable_columns(DEAD_LETTERS_DDL)),
    ):
        expected = delta_tables.read(spark, getattr(classic.router, setting)).select(*columns)
        actual = delta_tables.read(spark, getattr(connect.router, setting)).select(*columns)
        assert actual.count() > 0
        assertDataFrameEqual(actual, expected)
    # And both are what the regex oracle says of every record.
    routed = read_routed(spark, connect)
    assert_ids_exact(routed)
    assert routed.outcomes() == expected_outcomes(records, connect.router, connect.validator(), SUBSCRIPTIONS)
    assert {row["snapshot_version"] for row in routed.deliveries} == {version}

    # The client's summary comes from the worker's reports: the same counts as the classic run's.
    totals = {name: sum(report[name] for report in classic_reports.values()) for name in ("input_rows", "deliveries")}
    assert summary["batches"] == len(classic_reports) >= 3
    assert {name: summary[name] for name in totals} == totals == {"input_rows": 400, "deliveries": totals["deliveries"]}
    assert summary["dead_letters"] == sum(report["dead_letters"] for report in classic_reports.values()) > 0
    # The snapshot travelled as a file beside the table (under its table id); every batch is in the ledger with
    # that version.
    snapshot_files = list((Path(classic.subscriptions.table_path) / DEFAULT_DIRECTORY).glob(f"*/{version}-*.frozen"))
    assert len(snapshot_files) == 1
    assert {entry[2] for entry in ledger_entries(spark, ledger_directory(connect.router.checkpoint_path))} == {version}
    kept = [entry[1] for entry in ledger_entries(spark, ledger_directory(connect.router.checkpoint_path))]
    assert summary["batches"] == 3 and kept == [1, 2]  # batch 2 pruned batch 0's entry
    reports = Path(connect.router.checkpoint_path) / ROUTER_REPORTS_DIRECTORY
    assert sorted(int(path.name) for path in reports.glob("*/*") if path.name.isdigit()) == kept  # its report too

    # Spark re-executes a batch whose commit is missing: the worker's router finds its version in the ledger
    # (through pyarrow), takes the careful path (Delta skips the write: no observed metrics over Connect) and
    # writes nothing twice; the run's summary is that one batch, as the query's report of it now says.
    last = max(classic_reports)
    commits = Path(connect.router.checkpoint_path) / "commits"
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    replayed = json.loads(run_job(connect_server, *route)[-1])
    assert replayed["batches"] == 1
    assert {name: replayed[name] for name in ("input_rows", "deliveries", "dead_letters")} == {
        name: classic_reports[last][name] for name in ("input_rows", "deliveries", "dead_letters")
    }
    assert replayed["snapshot_versions"] == [version]
    expected = delta_tables.read(spark, classic.router.deliveries_path).select(*stable_columns(DELIVERIES_DDL))
    assertDataFrameEqual(
        delta_tables.read(spark, connect.router.deliveries_path).select(*stable_columns(DELIVERIES_DDL)), expected
    )
    assert [entry[1] for entry in ledger_entries(spark, ledger_directory(connect.router.checkpoint_path))] == kept

    # tail on Connect: the server's worker hands each batch over through the tail's checkpoint, the job
    # prints it; the same rows in the same order as tail in classic mode prints from the classic table.
    from routing.tail import row_json, tail

    classic_rows: list[dict[str, Any]] = []
    tail(spark, classic.router.deliveries_path, "msft", str(tmp_path / "tail"), classic_rows.append, available_now=True)
    tail_command = ["routing", "tail", "--subscriber", "msft", "--available-now", "--json", *flags]
    printed = [json.loads(line) for line in run_job(connect_server, *tail_command) if line]
    assert len(printed) == len(classic_rows) > 0
    assert [{**row, "routed_at": None} for row in printed] == [
        {**row_json(row), "routed_at": None} for row in classic_rows
    ]
    assert not list((Path(connect.router.checkpoint_path).parent / "tail").rglob("*.rows"))  # all handed over


def test_connect_session_reads_the_settings_of_the_server(spark: Any, connect_server: ConnectServer) -> None:
    """A job's Connect session: runtime settings set on it, the static ones (warehouse) the server's."""
    code = (
        "import dataclasses, json, sys\n"
        "from routing.settings import load_settings\n"
        "from routing.spark import get_spark, is_connect\n"
        "base = load_settings()\n"
        "conf = {**base.spark.conf, 'spark.sql.shuffle.partitions': '3'}\n"
        f"spark_settings = dataclasses.replace(base.spark, remote={connect_server.url!r}, conf=conf)\n"
        "s = base.replace(spark=spark_settings)\n"
        "spark = get_spark(s)\n"
        "print(json.dumps([is_connect(spark), spark.conf.get('spark.sql.shuffle.partitions'),"
        " spark.conf.get('spark.sql.warehouse.dir')]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    connected, partitions, warehouse = json.loads(done.stdout.strip().splitlines()[-1])
    assert connected is True and partitions == "3"
    # The server's, from the tests' Spark configuration directory, as the classic session's.
    ours = spark.conf.get("spark.sql.warehouse.dir")
    assert warehouse.removeprefix("file:").rstrip("/") == ours.removeprefix("file:").rstrip("/")


def test_connect_refresh_job_applies_exactly_what_classic_does(
    spark: Any, settings: Settings, kafka_broker: Any, topic_factory: Any, tmp_path: Path, connect_server: ConnectServer
) -> None:
    """Subscription events through the refresh job's stream: the same table and rejects on Connect as classic."""
    from pyspark.testing import assertDataFrameEqual

    from jobs.refresh_subscriptions import refresh_from_kafka

    topic = topic_factory()
    events = [subscription_event("subscribe", pattern, subscriber) for pattern, subscriber in SUBSCRIPTIONS]
    events += [subscription_event("unsubscribe", "forex.usd", "fx"), subscription_event("subscribe", "a.#.#", "x")]
    events += [b"not json", subscription_event("subscribe", "stock.*.msft", "msft")]  # a bad event, a repeat
    produce(settings, topic, [(None, event, []) for event in events])

    def refresh_settings(name: str) -> Settings:
        subscriptions = dataclasses.replace(
            settings.subscriptions,
            table_path=str(tmp_path / name / "subscriptions"),
            rejects_path=str(tmp_path / name / "rejects"),
            checkpoint_path=str(tmp_path / name / "checkpoint"),
            events_topic=topic,
            max_offsets_per_trigger=5,  # two batches: a summary sums more than one
        )
        return settings.replace(subscriptions=subscriptions)

    classic, connect = refresh_settings("classic"), refresh_settings("connect")
    expected = refresh_from_kafka(spark, classic)
    flags = [*job_flags(connect), "--set", f"spark.remote={connect_server.url}"]
    summary = json.loads(run_job(connect_server, "jobs.refresh_subscriptions", "--json", *flags)[-1])
    assert len(expected.batches) == 2
    assert summary == expected.as_dict()
    assert expected.rejected  # the bad event and the invalid pattern

    # A later run on the same checkpoints (the same query ids) sums only its own batch, in both modes.
    produce(settings, topic, [(None, subscription_event("subscribe", "news.#", "press"), [])])
    later = refresh_from_kafka(spark, classic)
    later_summary = json.loads(run_job(connect_server, "jobs.refresh_subscriptions", "--json", *flags)[-1])
    assert later_summary == later.as_dict()
    assert (later_summary["batches"], later_summary["events"]) == (1, 1)
    # The client deletes the summaries it has read: none pile up in the checkpoint run after run.
    summaries = Path(connect.subscriptions.checkpoint_path) / REFRESH_SUMMARIES_DIRECTORY
    assert [path for path in summaries.rglob("*") if path.is_file()] == []

    for table, columns in (
        ("table_path", ["subscriber_id", "pattern", "active", "updated_at", "change_id", "source"]),
        ("rejects_path", ["reason", "subscriber_id", "pattern", "kafka_offset", "raw"]),
    ):
        assertDataFrameEqual(
            delta_tables.read(spark, getattr(connect.subscriptions, table)).select(*columns),
            delta_tables.read(spark, getattr(classic.subscriptions, table)).select(*columns),
        )

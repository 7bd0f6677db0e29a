"""The end-to-end demo behind ``make demo``: a real broker, real Spark, real Delta.

1. start the local KRaft broker (or reuse one already up);
2. create this run's topics;
3. publish the sample subscriptions (``conf/samples/subscriptions.csv``) as change events and load
   them into the Delta subscription table with the refresh job;
4. produce sample traffic with ``jobs/produce.py`` (stock, forex, crypto keys plus a share of
   hostile ones: null, empty words, unicode, over-long, not UTF-8);
5. route it with the available-now trigger;
6. print messages in, deliveries out, the top subscribers and dead letters by reason, and check
   conservation (in = delivered + unmatched + dead-lettered);
7. delete the run's topics and stop the broker if the demo started it.

Everything the demo writes lives under ``var/demo/`` (wiped at the start of each run).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from routing import console, delta_tables
from routing.config import ConfigError
from routing.settings import REPO_ROOT, Settings, add_settings_arguments, load_settings, parse_overrides

LOG = logging.getLogger("jobs.demo")
SAMPLE_SUBSCRIPTIONS = REPO_ROOT / "conf" / "samples" / "subscriptions.csv"


def demo_settings(base_overrides: dict[str, dict[str, object]], conf: str | None, work: Path, run: str) -> Settings:
    overrides: dict[str, dict[str, object]] = {
        "subscriptions": {
            "table_path": str(work / "subscriptions"),
            "rejects_path": str(work / "subscription_rejects"),
            "checkpoint_path": str(work / "checkpoints" / "refresh"),
            "events_topic": f"demo.subscriptions.{run}",
        },
        "router": {
            "topics": f"demo.messages.{run}",
            "trigger": "available_now",
            "checkpoint_path": str(work / "checkpoints" / "route"),
            "deliveries_path": str(work / "deliveries"),
            "dead_letters_path": str(work / "dead_letters"),
            "unrouted_path": str(work / "unrouted"),
            "max_offsets_per_trigger": "5000",
        },
        # Kafka's own default caps records near 1 MB, so the demo lowers ours to show the dead letter.
        "limits": {"max_payload_bytes": "4096"},
    }
    for section, values in base_overrides.items():
        overrides.setdefault(section, {}).update(values)
    return load_settings(conf, overrides=overrides)


def publish_subscriptions(settings: Settings, path: Path) -> int:
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_client_config())
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        ts: int | str = int(row["ts"]) if row["ts"].isdigit() else row["ts"]  # epoch millis or ISO-8601
        event = {"op": row["op"], "subscriber": row["subscriber"], "pattern": row["pattern"], "ts": ts}
        producer.produce(settings.subscriptions.events_topic, value=json.dumps(event).encode())
    if producer.flush(30):
        raise RuntimeError("could not publish every subscription event")
    return len(rows)


def create_topics(settings: Settings, topics: Sequence[str], partitions: int | None = None) -> None:
    (
        """Create ``topics`` (``partitions`` each, default the local broker's ``NUM_PARTITIONS``); also the benchmarks'
    helper."""
        ""
    )
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(settings.kafka_client_config())
    from jobs.local_kafka import NUM_PARTITIONS

    count = NUM_PARTITIONS if partitions is None else partitions
    for future in admin.create_topics([NewTopic(topic, count, 1) for topic in topics]).values():
        future.result(30)


def topics_with_prefix(settings: Settings, prefix: str) -> list[str]:
    """The broker's topics whose names start with ``prefix`` (a benchmark's runs), sorted."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka_client_config())
    return sorted(name for name in admin.list_topics(timeout=30).topics if name.startswith(prefix))


def delete_topics(settings: Settings, topics: Sequence[str]) -> None:
    """Delete ``topics``; a failure is logged, never raised (cleanup only)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka_client_config())
    for future in admin.delete_topics(list(topics)).values():
        try:
            future.result(30)
        except Exception as error:  # cleanup only: say so, do not fail the run
            LOG.warning("could not delete a topic: %s", error)


def print_summary(spark: object, settings: Settings, totals: dict[str, object], produced: int) -> bool:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    router = settings.router
    deliveries = delta_tables.read(spark, router.deliveries_path)
    dead = delta_tables.read(spark, router.dead_letters_path)
    unrouted = delta_tables.read(spark, router.unrouted_path)
    delivered_messages = deliveries.select("source_partition", "source_offset").distinct().count()
    counts = {
        "messages in": produced,
        "deliveries out": deliveries.count(),
        "messages delivered": delivered_messages,
        "unmatched": unrouted.count(),
        "dead letters": dead.count(),
    }
    print("\n== spark-topic-router demo ==")
    for name, value in counts.items():
        print(f"{name:>20}: {value:,}")
    print("\ntop subscribers:")
    for row in deliveries.groupBy("subscriber_id").count().orderBy(F.desc("count"), "subscriber_id").limit(8).collect():
        print(f"  {row['subscriber_id']:<16} {row['count']:>8,}")
    print("\ndead letters by reason:")
    for row in dead.groupBy("reason", "rule").count().orderBy(F.desc("count")).collect():
        print(f"  {row['reason']:<18} {row['count']:>6,}  ({row['rule']})")
    conserved = produced == delivered_messages + counts["unmatched"] + counts["dead letters"]
    print(f"\nconservation (in = delivered + unmatched + dead-lettered): {'holds' if conserved else 'BROKEN'}")
    print(f"snapshot versions used: {totals['snapshot_versions']}; batches: {totals['batches']}")
    print(f"tables under {Path(router.deliveries_path).parent}")
    return conserved


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.demo", description="Run the router end to end on the local stack."
    )
    add_settings_arguments(parser)
    parser.add_argument("--messages", type=int, default=20_000, help="sample messages to route (default 20000)")
    parser.add_argument("--keep-broker", action="store_true", help="leave the broker running afterwards")
    console.add_verbose_argument(parser)
    args = parser.parse_args(argv)
    console.configure(verbose=args.verbose)
    logging.getLogger("jobs").setLevel(logging.INFO)
    work = REPO_ROOT / "var" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    run = time.strftime("%Y%m%d%H%M%S")
    try:
        settings = demo_settings(parse_overrides(args.settings_overrides), args.conf, work, run)
    except ConfigError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2

    from jobs import local_kafka
    from jobs.produce import produce
    from routing.router.pipeline import Router
    from routing.spark import get_spark
    from routing.subscriptions.refresh import refresh_from_kafka

    step = 0

    def say(text: str) -> None:
        nonlocal step
        step += 1
        print(f"[{step}/7] {text}", flush=True)

    say("starting the local Kafka broker")
    broker = local_kafka.ensure_running(settings)
    topics = [settings.subscriptions.events_topic, settings.router.topics[0]]
    try:
        say(f"creating topics {', '.join(topics)}")
        create_topics(settings, topics, partitions=2)
        say("loading sample subscriptions through the refresh job")
        published = publish_subscriptions(settings, SAMPLE_SUBSCRIPTIONS)
        spark = get_spark(settings, app_name="spark-topic-router-demo")
        refreshed = refresh_from_kafka(spark, settings)
        print(f"      {published} events -> {refreshed.describe()}", flush=True)
        say(f"producing {args.messages:,} sample messages")
        produced = produce(settings, topic=topics[1], count=args.messages, distribution="sample", hostile_share=0.05)
        print(f"      {json.dumps(produced, sort_keys=True)}", flush=True)
        oversized = produce(settings, topic=topics[1], count=3, hostile_share=0.0, payload_bytes=8192, seed=11)
        print(f"      plus {oversized['produced']} messages over the payload limit", flush=True)
        say("routing them (available-now trigger)")
        router = Router(spark, settings)
        query = router.start()
        query.awaitTermination()
        router.close()
        if query.exception() is not None:
            print(f"demo: the router failed: {query.exception()}", file=sys.stderr)
            return 1
        say("summary")
        total = int(produced["produced"]) + int(oversized["produced"])
        conserved = print_summary(spark, settings, router.run_summary(), total)
        spark.stop()
    finally:
        say("cleaning up")
        delete_topics(settings, topics)
        if broker.started and not args.keep_broker:
            local_kafka.stop(settings)
            print("      broker stopped", flush=True)
    return 0 if conserved else 1


if __name__ == "__main__":
    sys.exit(console.run("demo", main))

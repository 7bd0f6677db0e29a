"""Route Kafka messages to every matching subscriber: one idempotent Delta row per (message, subscriber).

    python -m jobs.route [--conf FILE] [--set router.KEY=VALUE ...] [--available-now]
    spark-submit --jars "$(ls var/jars/spark/*.jar | paste -sd,)" jobs/route.py --available-now

Reads ``router.topics`` (or ``router.subscribe_pattern``) in bounded
micro-batches, matches each batch with the broadcast native snapshot of the
subscription table, and writes deliveries, dead letters and (optionally)
unrouted messages; see :mod:`routing.router.pipeline`. The subscription table
is re-read at most every ``router.refresh_interval_s`` and a new version is
picked up between batches, without restarting.

SIGTERM or Ctrl-C stops the query after the batch in flight. With
``--available-now`` the job drains what is in Kafka, prints a summary and exits.
The terminal gets the job's own lines only: Spark's output goes to
``<spark.local.dir>/logs/spark-topic-router.log`` unless ``--verbose``
(:mod:`routing.console`).

Exit status: 0 stopped cleanly or drained; 1 the query failed (restart it: it
resumes from its checkpoint and re-executed batches write nothing twice), or no
Kafka broker accepted a connection within ``kafka.start_timeout_s`` (checked
before Spark starts); 2 bad flags or settings; 3 another router holds the
checkpoint (nothing was started: the one-line error names the checkpoint and
that router; see :mod:`routing.checkpoints`).

One router per checkpoint: the job holds a lease on ``router.checkpoint_path``
while it runs. A router whose lease was taken over (it stalled for longer than
the lease timeout and another took over) stops before its next batch, exit 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from routing import console
from routing.checkpoints import EXIT_CHECKPOINT_BUSY, CheckpointBusy
from routing.config import ConfigError
from routing.settings import add_settings_arguments, parse_overrides, settings_from_args
from routing.streaming import crash_after_writes_from_env, kafka_exit_status

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings
    from udfs.route import RouterFactory

LOG = logging.getLogger("jobs.route")
APP_NAME = "spark-topic-router"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.route",
        description="Route Kafka messages to the subscribers whose AMQP-style patterns match their routing keys, "
        "writing idempotent fan-out rows to Delta.",
    )
    add_settings_arguments(parser)
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="drain the messages already in Kafka, print a summary and exit (backfills; same as "
        "--set router.trigger=available_now)",
    )
    parser.add_argument(
        "--real-time",
        action="store_true",
        help="route Kafka to Kafka in Spark's Real-Time Mode, each message as it arrives (the real-time lane; same "
        "as --set router.trigger=real_time; needs router.kafka_sink_topic and router.dead_letter_topic)",
    )
    parser.add_argument("--topics", help="comma-separated topics to route (same as --set router.topics=...)")
    parser.add_argument("--json", action="store_true", help="print the final summary as one JSON line")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    console.add_verbose_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None, *, make_route: RouterFactory | None = None) -> int:
    """The job; ``make_route`` replaces the UDF body's factory (tests that kill a Python worker mid-task)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    console.configure(verbose=args.verbose, level=args.log_level)
    if args.available_now and args.real_time:
        print("route: --available-now and --real-time are two triggers: give one", file=sys.stderr)
        return 2
    if args.available_now:
        args.settings_overrides.append("router.trigger=available_now")
    if args.real_time:
        args.settings_overrides.append("router.trigger=real_time")
    if args.topics:
        args.settings_overrides.append(f"router.topics={args.topics}")
    try:
        parse_overrides(args.settings_overrides)
        settings = settings_from_args(args)
    except ConfigError as error:
        print(f"route: {error}", file=sys.stderr)
        return 2
    # A cluster that is down: one clear line within kafka.start_timeout_s, not minutes of Spark's retries.
    status = kafka_exit_status(settings, "route")
    if status is not None:
        return status

    from routing.router.pipeline import Router
    from routing.spark import get_spark

    spark = get_spark(settings, app_name=APP_NAME)
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        LOG.info("%s received: stopping after the batch in flight", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if settings.router.trigger == "real_time":
        return run_real_time(spark, settings, stop_requested, as_json=args.json)
    # Tests only: routing.streaming.CRASH_AFTER_WRITES_ENV kills the job between a batch's writes and its commit.
    factory = {} if make_route is None else {"make_route": make_route}
    crash = crash_after_writes_from_env()  # tests only: the points inside a batch too (after_ledger, ...)
    router = Router(spark, settings, after_writes=crash, crash_points=crash, **factory)
    try:
        query = router.start()
    except CheckpointBusy as error:
        router.close()
        print(f"route: {error}", file=sys.stderr)
        return EXIT_CHECKPOINT_BUSY
    LOG.info(
        "routing %s -> %s (checkpoint %s)",
        settings.router.subscribe_pattern or ",".join(settings.router.topics),
        settings.router.deliveries_path,
        settings.router.checkpoint_path,
    )
    try:
        while query.isActive:
            if stop_requested.is_set() and not query.status["isTriggerActive"]:
                query.stop()
                break
            if router.lease is not None and router.lease.lost:
                query.stop()  # an idle router would otherwise only notice at its next batch
                break
            query.awaitTermination(1)
        exception = query.exception()
        failure = None if exception is None else str(exception)  # read before the session stops
        lost = router.lease.lost if router.lease is not None else None
    finally:
        router.close()
    summary = router.run_summary()
    # Stopped here, while this process still answers the JVM's calls: the listener bus delivers what it holds.
    spark.stop()
    if lost is not None:
        print(
            f"route: lost the lease on checkpoint {settings.router.checkpoint_path} after {summary['batches']} "
            f"batch(es): {lost}; this router stopped",
            file=sys.stderr,
        )
        return 1
    if failure is not None:
        LOG.error("the router query failed: %s", failure)
        print(f"route: failed after {summary['batches']} batch(es): {failure}", file=sys.stderr)
        return 1
    print(
        json.dumps(summary, sort_keys=True) if args.json else f"route: {json.dumps(summary, sort_keys=True)}",
        flush=True,
    )
    return 0


def run_real_time(spark: SparkSession, settings: Settings, stop_requested: threading.Event, *, as_json: bool) -> int:
    """The real-time lane (:mod:`routing.realtime`) until a signal or a failure; its exit status."""
    from routing.realtime import RealTimeRouter

    router = RealTimeRouter(spark, settings)
    try:
        try:
            query = router.start()
        except CheckpointBusy as error:
            print(f"route: {error}", file=sys.stderr)
            return EXIT_CHECKPOINT_BUSY
        LOG.info(
            "routing %s -> Kafka %s in real time (checkpoint %s, every %s)",
            settings.router.subscribe_pattern or ",".join(settings.router.topics),
            settings.router.kafka_sink_topic,
            settings.router.checkpoint_path,
            settings.router.real_time_interval,
        )
        while query.isActive and not stop_requested.is_set():
            if router.lease is not None and router.lease.lost:
                break  # its tasks write without a per-batch check: stopped here, within a second
            query.awaitTermination(1)
        lost = router.lease.lost if router.lease is not None else None
        exception = query.exception()
        failure = None if exception is None else str(exception)
    finally:
        router.close()
    summary = router.run_summary()
    spark.stop()
    if lost is not None:
        print(
            f"route: lost the lease on checkpoint {settings.router.checkpoint_path} after {summary['intervals']} "
            f"interval(s): {lost}; this router stopped",
            file=sys.stderr,
        )
        return 1
    if failure is not None:
        LOG.error("the real-time query failed: %s", failure)
        print(f"route: failed after {summary['intervals']} interval(s): {failure}", file=sys.stderr)
        return 1
    print(
        json.dumps(summary, sort_keys=True) if as_json else f"route: {json.dumps(summary, sort_keys=True)}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run("route", main))

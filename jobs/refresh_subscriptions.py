"""Refresh the Delta subscription table from the subscription events topic (or import files).

Scheduled job (cron, or ``--every SECONDS`` for a local loop)::

    python -m jobs.refresh_subscriptions [--conf FILE] [--set subscriptions.KEY=VALUE ...]
    python -m jobs.refresh_subscriptions --import conf/samples/subscriptions.csv
    spark-submit --jars "$(ls var/jars/spark/*.jar | paste -sd,)" jobs/refresh_subscriptions.py

Each run reads exactly the events that arrived since the last successful run:
a Structured Streaming query over the Kafka topic with its own checkpoint
(``subscriptions.checkpoint_path``) and ``trigger(availableNow=True)``, one
``foreachBatch`` per micro-batch (at most ``subscriptions.max_offsets_per_trigger``
events), then it stops and exits 0. The Kafka source, the query's identity
(``txnAppId``), the Delta tables and the idempotent appends are the router's
too (:mod:`routing.streaming`). A run killed halfway is safe to re-run;
see :mod:`routing.subscriptions.table` for why. A topic whose retention deleted
unread events fails the run (Kafka ``failOnDataLoss``) rather than lose them.

``--import FILE`` (repeatable) loads CSV or JSON-lines files instead, with the
same validation and MERGE; change ids come from the file's content hash and
line number, so importing the same file twice changes nothing. All or nothing:
every file is read and judged before Spark starts, so a file that cannot be
read imports none (exit 2); each file is then one MERGE, in order.

One run at a time: every run, ``--import`` too, holds a lease on
``subscriptions.checkpoint_path`` (:mod:`routing.checkpoints`; an ``--every``
loop holds it for its whole life), so a second run started meanwhile, by cron
or by hand, stops at once with exit status 3 and one line naming the run that
holds it; nothing was done, the next run catches up. A writer the lease does
not cover (another deployment's refresh job on the same table, an operator's
SQL) can still commit concurrently: a MERGE that Delta refuses because another
writer committed first, or whose table moved since its batch was decided, is
decided again against the new version and retried
(:func:`routing.streaming.retry_delta_conflicts`).

Exit status: 0 done (rejected events are not failures: they are in the rejects
table), 1 the refresh failed (nothing after the last committed batch is lost) or
no Kafka broker accepted a connection within ``kafka.start_timeout_s`` (checked
before Spark starts; ``--import`` needs no broker), 2 bad flags, settings or
import file, 3 another refresh run holds the checkpoint (nothing was done).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from routing import console
from routing.checkpoints import EXIT_CHECKPOINT_BUSY, CheckpointBusy, CheckpointLease
from routing.config import ConfigError
from routing.settings import MAX_SECONDS, Settings, add_settings_arguments, ascii_number, settings_from_args
from routing.streaming import crash_after_writes_from_env, kafka_exit_status
from routing.subscriptions.events import ImportFileError
from routing.subscriptions.refresh import (
    ImportFile,
    RunSummary,
    apply_import_files,
    import_files,
    prepare_tables,
    read_import_files,
    refresh_from_kafka,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The job's runs, from the library (:mod:`routing.subscriptions.refresh`), with its command line.
__all__ = [
    "APP_NAME",
    "RunSummary",
    "apply_import_files",
    "build_parser",
    "import_files",
    "main",
    "prepare_tables",
    "read_import_files",
    "refresh_from_kafka",
]

LOG = logging.getLogger("jobs.refresh_subscriptions")
APP_NAME = "refresh-subscriptions"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.refresh_subscriptions",
        description="MERGE subscription events that arrived since the last run (Kafka topic "
        "subscriptions.events_topic) into the Delta subscription table; invalid events go to the rejects "
        "table with a reason code.",
    )
    add_settings_arguments(parser)
    parser.add_argument(
        "--import",
        dest="import_files",
        metavar="FILE",
        action="append",
        default=[],
        help="load a CSV (header op,subscriber,pattern,ts) or JSON-lines file instead of reading Kafka "
        "(repeatable; re-importing the same file is a no-op)",
    )
    parser.add_argument(
        "--every",
        metavar="SECONDS",
        type=ascii_number,
        help="keep refreshing, one run every SECONDS (local loop; use cron in production)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    console.add_verbose_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None, *, spark_factory: Callable[..., SparkSession] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console.configure(verbose=args.verbose, level=args.log_level)
    if args.every is not None and (not 0 < args.every <= MAX_SECONDS or args.import_files):  # nan, inf: no
        parser.error(
            f"--every needs a number of seconds above 0 and at most {MAX_SECONDS:g}, and cannot be combined with "
            f"--import"
        )
    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        print(f"refresh_subscriptions: {error}", file=sys.stderr)
        return 2
    try:
        # All or nothing: every import file is read and judged before Spark starts and before any commits.
        imports = read_import_files(settings, args.import_files)
    except ImportFileError as error:
        print(f"refresh_subscriptions: {error}; nothing was imported", file=sys.stderr)
        return 2
    if not imports:
        # A cluster that is down: one clear line within kafka.start_timeout_s, not minutes of Spark's retries.
        status = kafka_exit_status(settings, "refresh_subscriptions")
        if status is not None:
            return status
    from routing.spark import get_spark

    spark = (spark_factory or get_spark)(settings, app_name=APP_NAME)
    try:
        lease = CheckpointLease.acquire(
            spark,
            settings.subscriptions.checkpoint_path,
            job="refresh_subscriptions",
            name="--import" if imports else (f"--every {args.every:g}" if args.every else "kafka"),
        )
    except CheckpointBusy as error:
        print(f"refresh_subscriptions: {error}", file=sys.stderr)
        return EXIT_CHECKPOINT_BUSY
    try:
        return _run(spark, settings, args, imports, lease)
    finally:
        lease.release()


def _run(
    spark: SparkSession, settings: Settings, args: argparse.Namespace, imports: list[ImportFile], lease: CheckpointLease
) -> int:
    """main()'s runs while it holds the lease: one, or one every ``--every`` seconds."""
    crash = crash_after_writes_from_env()  # tests only
    while True:
        try:
            lease.check()  # an --every loop that stalled past the lease timeout may have been taken over
            summary = (
                apply_import_files(spark, settings, imports, lease=lease, crash=crash)
                if imports
                else refresh_from_kafka(spark, settings, after_writes=crash, lease=lease)
            )
        except Exception:
            if lease.lost is not None:
                print(
                    f"refresh_subscriptions: lost the lease on checkpoint {settings.subscriptions.checkpoint_path}: "
                    f"{lease.lost}; this run stopped (nothing after the last committed batch is lost)",
                    file=sys.stderr,
                )
                return 1
            LOG.exception("refresh failed; the next run resumes after the last committed batch")
            if args.every is None:
                return 1
        else:
            print(
                json.dumps(summary.as_dict(), sort_keys=True)
                if args.json
                else f"refresh_subscriptions: {summary.describe()}",
                flush=True,
            )
        if args.every is None:
            return 0
        try:
            time.sleep(args.every)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(console.run("refresh_subscriptions", main))

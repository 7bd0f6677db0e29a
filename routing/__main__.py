"""``python -m routing``: small command-line tools over the routing domain.

``demo`` routes the seed's opening example with every matcher and prints who
receives what, checking that all matchers agree with the regex oracle.

``match --subscriptions SOURCE KEY...`` prints who receives each key. SOURCE is
an import file of the refresh job (CSV with header ``op,subscriber,pattern,ts``
or JSON lines), a plain ``pattern,subscriber`` CSV (every row a subscribe at
``ts`` 0), or a Delta subscription table (a directory with ``_delta_log``;
``--version`` time-travels). Files go through the refresh job's own reader
(:func:`~routing.subscriptions.events.read_import_file`: a file it refuses is
refused here with the same message) and the same sequential model
(:func:`~routing.subscriptions.apply_events_model`), each file one batch in the
order given, so the active set is exactly what an import would produce;
rejected lines are reported on stderr with their reason codes.
Only a table starts Spark. Keys are validated like the router does: a key it
would dead-letter is shown as rejected with its reason. Exit status 0, or 2
for bad arguments or an unreadable source.

``explain PATTERN KEY`` shows why a key does or does not match a pattern
(:mod:`routing.explain`): exit status 0 if it matches, 1 if not, 2 on error. A
pattern or key over the configured limits is refused first (exit 2, the router's
reason code), so the words x words alignment is only built for bounded input;
what the configured policy would reject is noted under the alignment.

``subscribe SUBSCRIBER PATTERN...`` and ``unsubscribe SUBSCRIBER PATTERN...``
publish the change events the refresh job consumes
(:mod:`routing.subscriptions.publish`: judged first with the job's own parser and
validator, ``[acl]`` included, all or nothing; ``ts`` now; an idempotency key
derived from the command, so re-running it changes nothing more). ``--apply``
then runs the refresh job once in this process and reports each change's fate.
``list [--subscriber S] [--version V]`` prints the active subscriptions of the
Delta table. Exit status 0, 2 for user mistakes (bad arguments or settings, a
refused pattern, a change the refresh job rejected), 1 for infrastructure (no
broker accepted a connection, or it did not acknowledge every event, within
``kafka.start_timeout_s``; the refresh failed), 3 when ``--apply`` finds another
refresh run holding the checkpoint (published, not yet applied).
``--json`` prints one JSON object on stdout; diagnostics go to stderr.

``tail --subscriber S`` follows S's rows of the deliveries table (:mod:`routing.tail`): a Delta stream
filtered by subscriber, from a checkpoint of its own, each row printed (``--json``: one JSON object per
line) and flushed before the batch commits. ``--available-now`` drains and exits; ``--limit N`` prints at
most N rows (the rest of that batch is kept for the next run on the checkpoint). Exit status 0, 2 for user
mistakes (no deliveries table), 1 when the query failed, 3 when another tail holds the checkpoint.

``--verbose`` (every command) also prints Spark's, log4j's and py4j's own output (:mod:`routing.console`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from routing import console, matchers
from routing.config import ConfigError
from routing.errors import TopicError
from routing.explain import MAX_CELLS as EXPLAIN_MAX_CELLS
from routing.reference import ReferenceMatcher

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings
    from routing.subscriptions.publish import Change
    from routing.validation import Validator

T = TypeVar("T")

DEMO_SUBSCRIPTIONS = [("forex.usd", "1"), ("forex.*", "2"), ("stock.nasdaq.msft", "3")]
DEMO_MESSAGES = ["forex.gbp", "stock.nyse.ibm", "forex.eur", "forex.usd", "stock.nasdaq.msft"]


class Lookup(Protocol):
    def lookup(self, key: str) -> frozenset[str]: ...


def _demo_matchers() -> list[tuple[str, Callable[[], Lookup]]]:
    """Every matcher, built from the demo subscriptions."""

    def classic(name: str) -> Callable[[], Lookup]:
        def build() -> Lookup:
            matcher = getattr(matchers, name)()
            for pattern, subscriber in DEMO_SUBSCRIPTIONS:
                matcher.subscribe(pattern, subscriber)
            return matcher  # type: ignore[no-any-return]

        return build

    def cstrie() -> Lookup:
        return classic("CSTrieMatcher")()

    def frozen() -> Lookup:
        return classic("CSTrieMatcher")().freeze()  # type: ignore[attr-defined,no-any-return]

    return [(name, classic(name)) for name in matchers.CLASSIC_MATCHERS] + [
        ("CSTrieMatcher", cstrie),
        ("FrozenMatcher", frozen),
    ]


def run_demo(out: Callable[[str], None] = print) -> int:
    oracle = ReferenceMatcher(DEMO_SUBSCRIPTIONS)
    expected = {key: oracle.lookup(key) for key in DEMO_MESSAGES}
    out("Subscriptions:")
    for pattern, subscriber in DEMO_SUBSCRIPTIONS:
        out(f"  subscriber {subscriber}: {pattern}")
    out("")
    failures = 0
    for name, build in _demo_matchers():
        try:
            matcher = build()
        except ImportError as error:
            out(f"{name}: unavailable ({error})")
            failures += 1
            continue
        out(f"{name}:")
        for key in DEMO_MESSAGES:
            got = matcher.lookup(key)
            verdict = "" if got == expected[key] else f"   MISMATCH, the oracle says {sorted(expected[key])}"
            receivers = ", ".join(sorted(got)) if got else "nobody"
            out(f"  {key:<20} -> {receivers}{verdict}")
            failures += got != expected[key]
        out("")
    out("every matcher agrees with the oracle" if not failures else f"{failures} problem(s), see above")
    return 0 if not failures else 1


# -- match --------------------------------------------------------------------------------------

#: Rejected import lines shown one by one on stderr (the rest are only counted).
SHOWN_REJECTS = 10


class SourceError(ValueError):
    """A subscription source that cannot be read at all."""


def is_delta_table(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / "_delta_log").is_dir()


def missing_local_table(table: str) -> bool:
    """Whether table setting ``table`` is a local path with no Delta table: the one case checked before Spark
    starts (a URI or a catalog table name is checked by reading it)."""
    from routing.delta_tables import is_table_name
    from routing.settings import is_uri

    return not is_uri(table) and not is_table_name(table) and not is_delta_table(table)


def subscriptions_from_files(
    paths: Sequence[str],
    validator: Validator,
    *,
    max_event_bytes: int,
    max_import_bytes: int,
    report: Callable[[str], None],
) -> frozenset[tuple[str, str]]:
    """Active (pattern, subscriber) pairs after applying ``paths`` in order, one batch per file.

    Every file goes through the refresh job's reader (:func:`~routing.subscriptions.events.read_import_file`),
    which also takes a ``pattern,subscriber`` CSV here (each row a subscribe at ts 0). Every rejected line,
    by the reader or by the subscription limits when applied, is counted (and the first few shown) through
    ``report``.
    """
    from routing.subscriptions import apply_events_model
    from routing.subscriptions.events import ImportFileError, read_import_file

    batches = []
    for name in paths:
        if not Path(name).is_file():
            raise SourceError(f"subscriptions source {name!r} is neither a file nor a Delta table directory")
        try:
            _, outcomes = read_import_file(
                name, validator, max_event_bytes=max_event_bytes, max_import_bytes=max_import_bytes, allow_pairs=True
            )
        except ImportFileError as error:
            raise SourceError(str(error)) from None
        batches.append(outcomes)
    model = apply_events_model(batches, validator, max_event_bytes=max_event_bytes)
    for name, outcomes in zip(paths, batches, strict=True):
        rejects = []
        for outcome in outcomes:
            line = outcome.received.import_line or 0
            if outcome.rejection is not None:
                rejects.append((line, outcome.rejection.reason, outcome.rejection.detail))
            elif outcome.event is not None and outcome.event.change_id in model.rejects:  # a limit, per batch
                rejects.append((line, model.rejects[outcome.event.change_id], "rejected when applied"))
        _report_rejects(name, rejects, report)
    return model.active_pairs()


def _report_rejects(name: str, rejects: Sequence[tuple[int, str, str]], report: Callable[[str], None]) -> None:
    if not rejects:
        return
    by_reason = collections.Counter(reason for _, reason, _ in rejects)
    summary = ", ".join(f"{reason}={count}" for reason, count in sorted(by_reason.items()))
    report(f"{name}: {len(rejects)} line(s) rejected ({summary})")
    for line, reason, detail in rejects[:SHOWN_REJECTS]:
        report(f"  line {line}: {detail} [reason={reason}]" if "[reason=" not in detail else f"  line {line}: {detail}")
    if len(rejects) > SHOWN_REJECTS:
        report(f"  ... and {len(rejects) - SHOWN_REJECTS} more")


@contextlib.contextmanager
def spark_session(settings: Settings, app_name: str) -> Iterator[SparkSession]:
    """The process's SparkSession, started if needed and then stopped again (one already running stays)."""
    from pyspark.sql import SparkSession

    from routing.spark import get_spark

    running = SparkSession.getActiveSession() is not None
    spark = get_spark(settings, app_name=app_name)
    try:
        yield spark
    finally:
        if not running:
            spark.stop()


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def read_table(settings: Settings, path: str, version: int | None, read: Callable[[SparkSession, int], T]) -> T:
    """``read(spark, version)`` of a Delta table, ``version`` pinned first (default: the latest); starts Spark
    (see :func:`spark_session`); a table that cannot be read at that version raises :class:`SourceError`."""
    from pyspark.errors import PySparkException

    from routing.jvm import is_java_error
    from routing.subscriptions import latest_version

    with spark_session(settings, "routing-cli") as spark:
        try:
            return read(spark, latest_version(spark, path) if version is None else version)
        except Exception as error:
            if not (isinstance(error, PySparkException) or is_java_error(error)):
                raise
            at = "" if version is None else f" at version {version}"
            raise SourceError(f"Delta table {path!r} cannot be read{at}: {first_line(error)}") from None


def subscriptions_from_table(settings: Settings, path: str, version: int | None) -> tuple[int, list[tuple[str, str]]]:
    """(version, active pairs) of a Delta subscription table; starts Spark (stopped again if it was not running)."""
    from routing.subscriptions import read_active

    return read_table(settings, path, version, lambda spark, pinned: (pinned, read_active(spark, path, pinned)))


def match_keys(
    pairs: frozenset[tuple[str, str]] | Sequence[tuple[str, str]], keys: Sequence[str], validator: Validator
) -> list[dict[str, object]]:
    """Per key: its subscribers (sorted), or the reason the router would dead-letter it."""
    from routing.matchers import FrozenMatcher

    matcher = FrozenMatcher(pairs)
    results: list[dict[str, object]] = []
    for key in keys:
        try:
            validator.validate_key(key)
            subscribers = sorted(matcher.lookup(key))
            validator.check_fanout(key, len(subscribers))
        except TopicError as error:
            results.append({"key": key, "rejected": error.reason, "detail": str(error)})
            continue
        results.append({"key": key, "subscribers": subscribers})
    return results


def run_match(args: argparse.Namespace, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    from routing.settings import settings_from_args

    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        err(f"match: {error}")
        return 2
    validator = settings.validator()
    sources: list[str] = args.subscriptions
    tables = [source for source in sources if is_delta_table(source)]
    try:
        if tables:
            if len(sources) > 1:
                raise SourceError("a Delta table must be the only --subscriptions source")
            version, pairs = subscriptions_from_table(settings, tables[0], args.version)
            err(f"{tables[0]}: version {version}, {len(pairs)} active subscription(s)")
            active: frozenset[tuple[str, str]] = frozenset(pairs)
        else:
            if args.version is not None:
                raise SourceError("--version applies only to a Delta table")
            active = subscriptions_from_files(
                sources,
                validator,
                max_event_bytes=settings.subscriptions.max_event_bytes,
                max_import_bytes=settings.subscriptions.max_import_bytes,
                report=err,
            )
    except SourceError as error:
        err(f"match: {error}")
        return 2
    for result in match_keys(active, args.keys, validator):
        if args.json:
            out(json.dumps(result, ensure_ascii=False, sort_keys=True))
        elif "rejected" in result:
            out(f"{result['key']!r} -> rejected: {result['detail']}")
        else:
            subscribers = result["subscribers"]
            assert isinstance(subscribers, list)
            out(f"{result['key']!r} -> {', '.join(subscribers) if subscribers else 'nobody'}")
    return 0


# -- explain ------------------------------------------------------------------------------------


def run_explain(args: argparse.Namespace, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    from routing.explain import ExplainTooLarge, explain
    from routing.settings import settings_from_args
    from routing.validation import Policy, Validator

    try:
        validator = settings_from_args(args).validator()
    except ConfigError as error:
        err(f"explain: {error}")
        return 2
    if args.max_cells < 1:
        err(f"explain: --max-cells must be at least 1, not {args.max_cells}")
        return 2
    # The limits first (bytes, words, '#' words: the router's checks in its order, with its reason codes): the
    # alignment table is pattern words x key words, so over-limit input is refused before anything is built.
    within_limits = Validator(limits=validator.limits, policy=Policy.AMQP)
    try:
        within_limits.validate_pattern(args.pattern)
        within_limits.validate_key(args.key)
        explanation = explain(args.pattern, args.key, max_cells=args.max_cells)
    except (TopicError, ExplainTooLarge) as error:
        err(f"explain: {error}")
        return 2
    out(explanation.render())
    # The grammar decides the match; the configured policy (--conf, --set, ROUTER__...) decides whether the
    # router would even get that far, so say so when it would not.
    for what, check in (("pattern", validator.validate_pattern), ("key", validator.validate_key)):
        try:
            check(getattr(args, what))
        except TopicError as error:
            out(f"  note: the configured validation would reject this {what}: {error}")
    return 0 if explanation.matched else 1


# -- subscribe, unsubscribe, list ------------------------------------------------------------------


def shown_text(text: str) -> str:
    """A subscriber or pattern as typed when it is plain, else quoted (spaces, control characters, empty)."""
    return text if text and text.isprintable() and " " not in text else repr(text)


def run_change(args: argparse.Namespace, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """``subscribe``/``unsubscribe``: judge locally, publish, and with ``--apply`` refresh and report."""
    from routing.settings import settings_from_args
    from routing.streaming import KafkaUnavailable, wait_for_kafka
    from routing.subscriptions.events import Op
    from routing.subscriptions.publish import ChangesRefused, PublishFailed, prepare, publish

    command = args.command
    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        err(f"{command}: {error}")
        return 2
    report: dict[str, Any] = {
        "command": command,
        "subscriber": args.subscriber,
        "topic": settings.subscriptions.events_topic,
        "changes": [],
        "refused": [],
        "error": None,
        "refresh": None,
    }

    def finish(code: int) -> int:
        if args.json:
            out(json.dumps(report, sort_keys=True))
        return code

    try:
        changes = prepare(
            Op(command),
            args.subscriber,
            args.patterns,
            settings.validator(),
            max_event_bytes=settings.subscriptions.max_event_bytes,
        )
    except ChangesRefused as refused:
        report["refused"] = [refusal.as_dict() for refusal in refused.refusals]
        for refusal in refused.refusals:
            what = "the command" if refusal.pattern is None else f"pattern {shown_text(refusal.pattern)}"
            err(f"{command}: {what} refused: {refusal.detail}")
        err(f"{command}: nothing was published")
        return finish(2)
    report["changes"] = [change.as_dict() for change in changes]
    try:
        # Nothing listening at the bootstrap address: the jobs' own probe and one-line error, within the timeout.
        wait_for_kafka(settings)
        deliveries = publish(settings, changes)
    except ConfigError as error:  # a malformed bootstrap address; SASL without a password
        err(f"{command}: {error}")
        return finish(2)
    except KafkaUnavailable as error:
        report["error"] = str(error)
        err(f"{command}: {error}")
        err(f"{command}: nothing was published")
        return finish(1)
    except PublishFailed as failed:
        deliveries = failed.deliveries
        report["error"] = str(failed)
        err(f"{command}: {failed}")
        err(f"{command}: whether the unconfirmed change(s) reached the topic is unknown: re-run the same command")
    for delivery, entry in zip(deliveries, report["changes"], strict=True):
        entry.update(partition=delivery.partition, offset=delivery.offset, error=delivery.error)
        if delivery.error is None and not args.json:
            out(
                f"published {command} {shown_text(delivery.change.subscriber)} {shown_text(delivery.change.pattern)} "
                f"({report['topic']} partition {delivery.partition} offset {delivery.offset})"
            )
    if report["error"] is not None:
        return finish(1)
    if not args.apply:
        if not args.json:
            out(f"{len(changes)} change(s) published; the refresh job applies them on its next run (or pass --apply)")
        return finish(0)
    return finish(apply_now(settings, changes, report, out if not args.json else lambda _: None, err))


def apply_now(
    settings: Settings,
    changes: Sequence[Change],
    report: dict[str, Any],
    out: Callable[[str], None],
    err: Callable[[str], None],
) -> int:
    """One available-now run of the refresh job in this process, then what became of each change (into ``report``).

    In-process rather than ``python -m jobs.refresh_subscriptions`` as a child: the same settings object
    (flags, environment, the password in memory only), one JVM instead of two, and the job's own function
    (:func:`routing.subscriptions.refresh.refresh_from_kafka`), checkpoint, lease and tables. Exit status 0, 2 when
    the job rejected a change (a limit only the table can decide), 1 when the run failed or did not see a change,
    3 (the job's own) when another refresh run holds the checkpoint: that run or the next applies the changes.
    """
    from routing.checkpoints import EXIT_CHECKPOINT_BUSY, CheckpointBusy, CheckpointLease
    from routing.subscriptions import read_rows
    from routing.subscriptions.publish import NOT_APPLIED, REJECTED, change_results, rejections
    from routing.subscriptions.refresh import refresh_from_kafka

    command = report["command"]
    subscriptions = settings.subscriptions
    with spark_session(settings, "routing-cli") as spark:
        try:
            # One refresh run at a time, this one included: the job's lease on its checkpoint.
            lease = CheckpointLease.acquire(
                spark, subscriptions.checkpoint_path, job="refresh_subscriptions", name=f"python -m routing {command}"
            )
        except CheckpointBusy as error:
            report["error"] = str(error)
            err(f"{command}: {error}")
            err(f"{command}: the change(s) are in the topic; that run, or the next, applies them")
            return EXIT_CHECKPOINT_BUSY
        try:
            summary = refresh_from_kafka(spark, settings, lease=lease)
            rows = read_rows(spark, subscriptions.table_path, summary.table_version, subscriber=changes[0].subscriber)
            batch_ids = [batch.batch_id for batch in summary.batches if batch.batch_id is not None]
            rejected = rejections(
                spark, subscriptions.rejects_path, [change.change_id for change in changes], batch_ids
            )
        except Exception as error:  # the job's own failures: Kafka, Delta, Spark, a lost lease
            report["error"] = f"refresh failed: {first_line(error)}"
            err(f"{command}: {report['error']}")
            err(f"{command}: the change(s) are in the topic; the next refresh run applies them")
            return 1
        finally:
            lease.release()
    report["refresh"] = summary.as_dict()
    out(f"refresh_subscriptions: {summary.describe()}")
    results = change_results(changes, rows, rejected)
    for result, entry in zip(results, report["changes"], strict=True):
        entry.update(result.as_dict())
        state = {None: "no row", True: "active", False: "inactive"}[result.active]
        why = f": {result.reason}" if result.reason else ""
        out(f"{command} {shown_text(result.change.pattern)}: {result.result}{why} ({state})")
    if any(result.result == REJECTED for result in results):
        return 2
    return 1 if any(result.result == NOT_APPLIED for result in results) else 0


def run_list(args: argparse.Namespace, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """``list``: the active subscriptions of the table (latest or ``--version``), of one subscriber or all."""
    from routing.settings import settings_from_args
    from routing.subscriptions import read_rows

    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        err(f"list: {error}")
        return 2
    path = settings.subscriptions.table_path
    if missing_local_table(path):
        err(f"list: no subscription table at {path!r} (subscriptions.table_path; the refresh job creates it)")
        return 2
    try:
        version, rows = read_table(
            settings,
            path,
            args.version,
            lambda spark, pinned: (pinned, read_rows(spark, path, pinned, subscriber=args.subscriber)),
        )
    except SourceError as error:
        err(f"list: {error}")
        return 2
    active = sorted(
        (subscriber, pattern, ts_millis, change_id)
        for (subscriber, pattern), (is_active, ts_millis, change_id) in rows.items()
        if is_active
    )
    of = "" if args.subscriber is None else f" of {shown_text(args.subscriber)}"
    err(f"{path}: version {version}, {len(active)} active subscription(s){of}")
    listed = [
        {"subscriber": subscriber, "pattern": pattern, "since": iso_millis(ts_millis), "change_id": change_id}
        for subscriber, pattern, ts_millis, change_id in active
    ]
    if args.json:
        out(
            json.dumps(
                {"table": path, "version": version, "subscriber": args.subscriber, "subscriptions": listed},
                sort_keys=True,
            )
        )
        return 0
    width = max((len(shown_text(entry["subscriber"])) for entry in listed), default=0)
    for entry in listed:
        out(f"{shown_text(entry['subscriber']):<{width}}  {shown_text(entry['pattern'])}  (since {entry['since']})")
    return 0


def run_tail(args: argparse.Namespace, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """``tail``: follow one subscriber's deliveries from a checkpoint of its own (see :mod:`routing.tail`)."""
    import signal
    import threading

    from routing.checkpoints import EXIT_CHECKPOINT_BUSY, CheckpointBusy, CheckpointLease
    from routing.settings import settings_from_args
    from routing.tail import default_checkpoint, json_line, row_line, tail

    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        err(f"tail: {error}")
        return 2
    if args.limit is not None and args.limit < 1:
        err(f"tail: --limit must be at least 1, not {args.limit}")
        return 2
    table = settings.router.deliveries_path
    if missing_local_table(table):
        err(f"tail: no deliveries table at {table!r} (router.deliveries_path; the router creates it)")
        return 2
    checkpoint = args.checkpoint or default_checkpoint(settings.router.checkpoint_path, args.subscriber)

    def emit(row: dict[str, Any]) -> None:
        out(json_line(row) if args.json else row_line(row))

    stop = threading.Event()
    handlers: dict[signal.Signals, Any] = {}
    try:
        with spark_session(settings, "routing-tail") as spark:
            if threading.current_thread() is threading.main_thread():
                # SIGTERM or Ctrl-C: stop after the batch in flight, so what was printed is also committed.
                # Installed once the session is up: a new SparkContext installs its own SIGINT handler, which
                # cancels every job and raises KeyboardInterrupt wherever the main thread is.
                for stop_signal in (signal.SIGTERM, signal.SIGINT):
                    handlers[stop_signal] = signal.signal(stop_signal, lambda *_: stop.set())
            try:
                lease = CheckpointLease.acquire(
                    spark, checkpoint, job="tail", name=f"python -m routing tail --subscriber {args.subscriber}"
                )
            except CheckpointBusy as error:
                err(f"tail: {error}")
                return EXIT_CHECKPOINT_BUSY
            try:
                summary = tail(
                    spark,
                    table,
                    args.subscriber,
                    checkpoint,
                    emit,
                    available_now=args.available_now,
                    limit=args.limit,
                    stop=stop,
                    flush=sys.stdout.flush,
                )
            except Exception as error:  # Spark, Delta, a closed stdout: that batch is not committed
                err(f"tail: {first_line(error)}")
                return 1
            finally:
                lease.release()
    finally:
        for stop_signal, handler in handlers.items():
            signal.signal(stop_signal, handler)
    err(json.dumps({"tail": summary.as_dict()}, sort_keys=True) if args.json else f"tail: {summary.describe()}")
    return 0


def iso_millis(ts_millis: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (``2026-01-05T10:00:00.000Z``)."""
    moment = dt.datetime.fromtimestamp(ts_millis / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_millis % 1000:03d}Z"


def build_parser() -> argparse.ArgumentParser:
    from routing.settings import add_settings_arguments

    parser = argparse.ArgumentParser(prog="python -m routing", description="Tools over the routing domain.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="route the seed's opening example with every matcher")
    match = commands.add_parser(
        "match",
        help="print the subscribers of each routing key",
        description="Print who receives each routing key, given subscriptions from import files or a Delta table. "
        "Exit status 0, or 2 for bad arguments or an unreadable source.",
    )
    match.add_argument(
        "--subscriptions",
        metavar="FILE|TABLE",
        action="append",
        required=True,
        help="a refresh-job import file (CSV op,subscriber,pattern,ts or JSON lines), a pattern,subscriber CSV, "
        "or a Delta subscription table directory; files repeat and apply in order",
    )
    match.add_argument("--version", type=int, help="read the Delta table at this version (time travel)")
    match.add_argument("--json", action="store_true", help="one JSON object per key")
    match.add_argument("keys", metavar="KEY", nargs="+", help="routing keys to look up")
    add_settings_arguments(match)
    explain = commands.add_parser(
        "explain",
        help="say why a routing key does or does not match a pattern",
        description="Align PATTERN with KEY word by word: which pattern word consumed which key words, or where "
        "and why the match failed. A pattern or key over the configured limits is refused with the router's reason "
        "code. Exit status 0 if it matches, 1 if not, 2 on error.",
    )
    explain.add_argument("pattern", metavar="PATTERN")
    explain.add_argument("key", metavar="KEY")
    explain.add_argument(
        "--max-cells",
        type=int,
        default=EXPLAIN_MAX_CELLS,
        metavar="N",
        help=f"the most cells of the alignment table, (pattern words + 1) x (key words + 1), 4 bytes each "
        f"(default {EXPLAIN_MAX_CELLS:,}); past it: one line and exit 2",
    )
    add_settings_arguments(explain)
    for name, what in (("subscribe", "subscribe SUBSCRIBER to"), ("unsubscribe", "unsubscribe SUBSCRIBER from")):
        change = commands.add_parser(
            name,
            help=f"{what} patterns: publish the change events the refresh job applies",
            description=f"{what[0].upper()}{what[1:]} each PATTERN: publish one change event each to the topic "
            "subscriptions.events_topic, as the refresh job reads them, with ts now and an idempotency key derived "
            "from the command, so running the same command again (after a timeout, say) changes nothing more. "
            "Every pattern is first judged as the refresh job would (limits, policy, [acl] rules): one refused "
            "and nothing is published. Exit status 0; 2 for a refused pattern or bad arguments (and with --apply "
            "for a change the job rejected, such as a subscription limit); 1 when no broker accepted a connection, "
            "or it did not acknowledge every event, within kafka.start_timeout_s, or the refresh failed; 3 when "
            "--apply finds another refresh run holding the checkpoint (published, that run or the next applies them).",
            epilog="Quote patterns: the shell expands '*', and a word starting with '#' is a comment "
            "(subscribe fx-desk '#' 'stock.*.msft'). A pattern that starts with '-' goes after '--': "
            "subscribe s1 -- -odd.pattern",
        )
        change.add_argument("subscriber", metavar="SUBSCRIBER", help="the subscriber id")
        change.add_argument("patterns", metavar="PATTERN", nargs="+", help="AMQP topic patterns (repeats count once)")
        change.add_argument(
            "--apply",
            action="store_true",
            help="then run the refresh job once (available-now, in this process) and report what each change did",
        )
        change.add_argument("--json", action="store_true", help="print one JSON object: the changes and their fate")
        add_settings_arguments(change)
    listing = commands.add_parser(
        "list",
        help="print the active subscriptions of the subscription table",
        description="Print the active subscriptions of the Delta table subscriptions.table_path (Spark starts), "
        "at its latest version or --version. Exit status 0, or 2 for bad arguments or a table that cannot be read.",
    )
    listing.add_argument("--subscriber", metavar="S", help="only this subscriber's")
    listing.add_argument("--version", type=int, help="read the table at this version (time travel)")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    add_settings_arguments(listing)
    tailing = commands.add_parser(
        "tail",
        help="print one subscriber's deliveries as they are routed, from a checkpoint of its own",
        description="Follow the deliveries table router.deliveries_path as a Delta stream filtered by subscriber "
        "(Spark starts), printing each of the subscriber's rows; the checkpoint remembers what was printed, so the "
        "next run on it prints only rows routed since (the first run prints the table's whole history). A batch's "
        "rows are flushed to stdout before the batch commits: a killed tail prints that batch again, never skips "
        "it. A summary goes to stderr. SIGTERM or Ctrl-C stops after the batch in flight. Exit status 0; 2 for bad "
        "arguments or no deliveries table; 1 when the stream failed; 3 when another tail holds the checkpoint.",
    )
    tailing.add_argument("--subscriber", metavar="S", required=True, help="the subscriber id whose rows to print")
    tailing.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="this consumer's checkpoint (path or URI); default: tail/<subscriber> beside router.checkpoint_path",
    )
    tailing.add_argument(
        "--available-now", action="store_true", help="print what is in the table now, then exit (default: follow)"
    )
    tailing.add_argument(
        "--limit",
        metavar="N",
        type=int,
        help="print at most N rows, then stop (rows of that batch past N are kept beside the checkpoint and the "
        "next run prints them first)",
    )
    tailing.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per row (every column; payload and header values base64), a JSON summary on stderr",
    )
    add_settings_arguments(tailing)
    for subparser in commands.choices.values():
        console.add_verbose_argument(subparser)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> int:
    args = build_parser().parse_args(argv)
    console.configure(verbose=args.verbose)
    if args.command == "demo":
        return run_demo(out)
    if args.command == "match":
        return run_match(args, out, err)
    if args.command in ("subscribe", "unsubscribe"):
        return run_change(args, out, err)
    if args.command == "list":
        return run_list(args, out, err)
    if args.command == "tail":
        return run_tail(args, out, err)
    return run_explain(args, out, err)


if __name__ == "__main__":
    sys.exit(console.run("python -m routing", main))

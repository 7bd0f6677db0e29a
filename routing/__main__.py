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
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from routing import matchers
from routing.config import ConfigError
from routing.errors import TopicError
from routing.reference import ReferenceMatcher

if TYPE_CHECKING:
    from routing.settings import Settings
    from routing.validation import Validator

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


def subscriptions_from_files(
    paths: Sequence[str], validator: Validator, *, max_event_bytes: int, report: Callable[[str], None]
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
            _, outcomes = read_import_file(name, validator, max_event_bytes=max_event_bytes, allow_pairs=True)
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
            elif outcome.received.change_id in model.rejects:  # a subscription limit, decided per batch
                rejects.append((line, model.rejects[outcome.received.change_id], "rejected when applied"))
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


def subscriptions_from_table(settings: Settings, path: str, version: int | None) -> tuple[int, list[tuple[str, str]]]:
    """(version, active pairs) of a Delta subscription table; starts Spark (stopped again if it was not running)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from routing.spark import get_spark
    from routing.subscriptions import read_snapshot

    running = SparkSession.getActiveSession() is not None
    spark = get_spark(settings, app_name="routing-match")
    try:
        snapshot = read_snapshot(spark, path, version)
    except (PySparkException, Py4JJavaError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        at = "" if version is None else f" at version {version}"
        raise SourceError(f"Delta table {path!r} cannot be read{at}: {first_line}") from None
    finally:
        if not running:
            spark.stop()
    return snapshot.version, list(snapshot.pairs)


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
                sources, validator, max_event_bytes=settings.subscriptions.max_event_bytes, report=err
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
    from routing.explain import explain
    from routing.settings import settings_from_args
    from routing.validation import Policy, Validator

    try:
        validator = settings_from_args(args).validator()
    except ConfigError as error:
        err(f"explain: {error}")
        return 2
    # The limits first (bytes, words, '#' words: the router's checks in its order, with its reason codes): the
    # alignment table is pattern words x key words, so over-limit input is refused before anything is built.
    within_limits = Validator(limits=validator.limits, policy=Policy.AMQP)
    try:
        within_limits.validate_pattern(args.pattern)
        within_limits.validate_key(args.key)
        explanation = explain(args.pattern, args.key)
    except TopicError as error:
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
    add_settings_arguments(explain)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return run_demo(out)
    if args.command == "match":
        return run_match(args, out, err)
    return run_explain(args, out, err)


if __name__ == "__main__":
    sys.exit(main())

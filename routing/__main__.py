"""``python -m routing``: small command-line tools over the routing domain.

``demo`` routes the seed's opening example with every matcher and prints who
receives what, checking that all matchers agree with the regex oracle.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from routing import matchers
from routing.reference import ReferenceMatcher

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m routing", description="Tools over the routing domain.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="route the seed's opening example with every matcher")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return run_demo()
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

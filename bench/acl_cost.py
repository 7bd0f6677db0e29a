"""What can one subscriber make the ``[acl]`` check cost? The worst patterns found, against deployment-like rules.

A subscriber picks its pattern; the operator picks the rules. ``routing.acl`` checks a pattern in time linear in
its words times the states of its subscriber's rule automaton (at most ``3 x (words + 1) x states`` search
states), so the benchmark builds rule sets a deployment would have and, for each, the patterns that make the
search visit the most states:

* ``issue example``: the rule ``tenant.42.#`` and the pattern of the report, ``tenant.42.#.l0.l1.a`` plus 24 ``*``
  (0.2-0.43 s each before), with distinct variants so none is answered from the cache;
* ``1,000 tenants``: 1,000 rules ``tenant-<i>-*`` -> ``tenant.<i>.#``, ``shared.<i>.*.alerts``, an ``audit``
  rule ``#`` and an ``ops-*`` rule of suffixes (``ops.#``, ``#.health``, ``#.health.*``); the attacker is an
  ``ops-`` subscriber (suffix rules have no universal state, so a covered pattern is searched whole);
* ``heavy suffixes``: one glob allowed ``#.health``, ``#.health.*``, ``#.alerts.*.*`` and ``#.errors.*.*.*``: rules
  an operator may write, whose automaton is several times larger (a ``*`` after a ``#`` multiplies states).

Patterns are within the default limits (32 words, 255 bytes, 16 ``#``), random mixes of ``*``, ``#`` and the
rules' own words ending in a suffix the rules name, every one distinct (a cache miss). For each set it reports
the time per check (mean, p99, max), the most states one check visited against its bound, and ``--events``
subscribe events of those patterns through the refresh job's own judging (``SubscriptionModel.apply_batch``:
the same ``judge`` each task runs, with one ACL budget per batch) against ``router.refresh_interval_s``.

Prints the table and writes ``bench/results/acl_cost.md`` and ``acl_cost.png`` with the load average::

    python bench/acl_cost.py [--patterns 3000] [--events 100000] [--seed 1] [--no-write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import RESULTS_DIR, RunRecord, markdown_table, progress, pyplot

from routing.acl import AclRule, AclRules, automaton_of, search
from routing.errors import TopicError
from routing.limits import DEFAULT_LIMITS
from routing.settings import RouterSettings
from routing.subscriptions.events import SUBSCRIBED, kafka_received
from routing.subscriptions.model import SubscriptionModel
from routing.validation import Validator

#: The target: the worst check found costs at most this (ms per event).
TARGET_MS = 5.0


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    rules: AclRules
    subscriber: str
    #: Words the attacker mixes in beside ``*`` and ``#``, and the suffixes its patterns end with.
    words: tuple[str, ...]
    prefix: tuple[str, ...]
    suffixes: tuple[str, ...]


def cases() -> list[Case]:
    tenants = [AclRule(f"tenant-{i}-*", (f"tenant.{i}.#", f"shared.{i}.*.alerts")) for i in range(1_000)]
    tenants += [AclRule("audit", ("#",)), AclRule("ops-*", ("ops.#", "#.health", "#.health.*"))]
    heavy = AclRule("ops-*", ("#.health", "#.health.*", "#.alerts.*.*", "#.errors.*.*.*"))
    return [
        Case(
            "issue example",
            AclRules(rules=(AclRule("tenant-42-*", ("tenant.42.#",)),)),
            "tenant-42-web",
            ("l0", "l1", "a"),
            ("tenant", "42", "#"),
            ("a",),
        ),
        Case(
            "1,000 tenants",
            AclRules(rules=tuple(tenants)),
            "ops-1",
            ("health", "alerts", "ops", "shared", "7"),
            (),
            ("health",),
        ),
        Case(
            "heavy suffixes",
            AclRules(rules=(heavy,)),
            "ops-1",
            ("health", "alerts", "errors", "x"),
            (),
            ("health", "alerts.x.y", "errors.x.y.z"),
        ),
    ]


def attack_patterns(case: Case, count: int, seed: int, validator: Validator) -> list[str]:
    """``count`` distinct valid patterns of at most 32 words, wildcards and the rules' words, the case's suffix last."""
    rng = random.Random(seed)
    found: set[str] = set()
    limits = validator.limits
    while len(found) < count:
        suffix = rng.choice(case.suffixes).split(".")
        room = limits.max_pattern_words - len(case.prefix) - len(suffix)
        middle = [rng.choice(("*", "#", "*", *case.words)) for _ in range(rng.randint(room - 4, room))]
        pattern = ".".join((*case.prefix, *middle, *suffix))
        try:
            validator.validate_pattern(pattern)
        except TopicError:
            continue  # over a limit (bytes, '#' count): not a pattern the refresh job would get this far with
        found.add(pattern)
    return sorted(found)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclasses.dataclass(frozen=True)
class CaseCost:
    """What :func:`measure` found for one rule set."""

    case: str
    rule_states: int
    rules_build_s: float
    own_states: int
    checks: int
    mean_ms: float
    p99_ms: float
    max_ms: float
    max_visited: int
    max_bound: int
    events: int
    batch_s: float
    subscribed: int
    refused: int
    other: int
    times_ms: list[float]
    visits: list[int]


def measure(case: Case, patterns: int, events: int, seed: int) -> CaseCost:
    validator = Validator(limits=DEFAULT_LIMITS, acl=case.rules)
    started = time.perf_counter()
    whole = case.rules.automaton  # what the settings build at start-up
    whole_s = time.perf_counter() - started
    allowed = case.rules.allowed_patterns(case.subscriber)
    assert allowed is not None
    own = automaton_of(tuple(sorted(set(allowed))), case.rules.max_rule_states)
    attack = attack_patterns(case, patterns, seed, validator)
    times_ms, visits, bounds = [], [], []
    for pattern in attack:
        began = time.perf_counter()
        _, visited = search(own, pattern)  # uncached
        times_ms.append((time.perf_counter() - began) * 1000)
        visits.append(visited)
        bounds.append(3 * (len(pattern.split(".")) + 1) * own.states)
    progress(f"{case.name}: {len(attack):,} checks, max {max(times_ms):.2f} ms")

    batch = attack_patterns(case, events, seed + 1, validator)  # distinct: the cache answers none of them twice
    model = SubscriptionModel(validator, max_event_bytes=65_536)
    received = [
        kafka_received(
            "subscriptions",
            0,
            offset,
            json.dumps(
                {"op": "subscribe", "subscriber": f"{case.subscriber}-{offset % 2_000}", "pattern": pattern, "ts": 1}
            ).encode(),
        )
        for offset, pattern in enumerate(batch)
    ]
    began = time.perf_counter()
    counts = model.apply_batch(received)
    batch_s = time.perf_counter() - began
    refused = counts["forbidden_pattern"]  # not covered, or past the budget
    other = len(batch) - counts[SUBSCRIBED] - refused  # the subscribers' own limits (match cost, count)
    progress(f"{case.name}: a batch of {len(batch):,} events in {batch_s:.1f} s")
    return CaseCost(
        case=case.name,
        rule_states=whole.states,
        rules_build_s=whole_s,
        own_states=own.states,
        checks=len(attack),
        mean_ms=sum(times_ms) / len(times_ms),
        p99_ms=percentile(times_ms, 0.99),
        max_ms=max(times_ms),
        max_visited=max(visits),
        max_bound=max(bounds),
        events=len(batch),
        batch_s=batch_s,
        subscribed=counts[SUBSCRIBED],
        refused=refused,
        other=other,
        times_ms=times_ms,
        visits=visits,
    )


def report(results: list[CaseCost], record: RunRecord, interval_s: float) -> str:
    rows = []
    for r in results:
        within = r.max_ms <= TARGET_MS and r.batch_s <= interval_s
        rows.append(
            [
                r.case,
                f"{r.rule_states:,} ({r.rules_build_s * 1000:,.0f} ms)",
                f"{r.own_states:,}",
                f"{r.checks:,}",
                f"{r.mean_ms:.3f} / {r.p99_ms:.3f} / {r.max_ms:.3f}",
                f"{r.max_visited:,} of {r.max_bound:,}",
                f"{r.events:,} in {r.batch_s:.1f} s",
                f"{r.subscribed:,} / {r.refused:,} / {r.other:,}",
                "pass" if within else "FAIL",
            ]
        )
    header = [
        "rules",
        "whole automaton: states (build)",
        "subscriber's automaton: states",
        "distinct patterns checked",
        "ms per check: mean / p99 / max",
        "most search states in one check, of its bound",
        "one batch of subscribes (judged as the refresh job does)",
        "subscribed / forbidden / past a subscriber limit",
        f"≤ {TARGET_MS:g} ms per event and the batch ≤ {interval_s:g} s",
    ]
    return "\n".join(
        [
            "# The cost of an ACL check",
            "",
            record.line(),
            "",
            "Method: for each rule set, the patterns within the default limits that make the containment search "
            "visit the most states (random mixes of `*`, `#` and the rules' own words, ending in a suffix the rules "
            "name, all distinct so no answer comes from the cache), timed one by one; then one batch of distinct "
            "subscribe events of such patterns, from 2,000 subscribers the attacker's rule names, through "
            "`SubscriptionModel.apply_batch`, the judging each task of the refresh job runs, with the default "
            "`acl.max_check_states_per_batch`. The interval is "
            "`router.refresh_interval_s` (how often the router looks for a new table version). Rules are the "
            "operator's: a check's bound is 3 x (words + 1) x the states of its subscriber's automaton, so a larger "
            "rule set raises it in proportion. Forbidden events are patterns the rules do not cover, or past the "
            "batch's budget (their detail names the setting); the rest are over a subscriber's own limits "
            "(`max_match_cost_per_subscriber`, checked after the ACL).",
            "",
            markdown_table(header, rows),
            "",
        ]
    )


def chart(results: list[CaseCost], output: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for r in results:
        axis.scatter(r.visits, r.times_ms, s=4, label=r.case)
    axis.set_xlabel("search states one check visited")
    axis.set_ylabel("ms per check")
    axis.axhline(TARGET_MS, linestyle="--", linewidth=1, color="grey")
    axis.set_title("ACL containment: cost follows the states visited")
    axis.legend()
    figure.tight_layout()
    figure.savefig(output, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", type=int, default=3_000, help="distinct patterns timed per rule set")
    parser.add_argument("--events", type=int, default=100_000, help="subscribe events in the judged batch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    if args.patterns < 1 or args.events < 1:
        parser.error("--patterns and --events must be at least 1")
    record = RunRecord.start(__file__, sys.argv[1:] if argv is None else argv)
    interval_s = RouterSettings().refresh_interval_s
    results = [measure(case, args.patterns, args.events, args.seed) for case in cases()]
    text = report(results, record, interval_s)
    print(text)
    if not args.no_write:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / "acl_cost.md").write_text(text, encoding="utf-8")
        chart(results, args.results_dir / "acl_cost.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

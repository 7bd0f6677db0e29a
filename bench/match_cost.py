"""How slow can one subscriber make every key, with and without ``limits.max_match_cost_per_subscriber``?

A multi-tenant deployment lets any subscriber send any valid pattern; this is the worst one found.

The probe (issue 13): 10,000 valid patterns held by one subscriber, built from ``a``, ``*`` and
``#`` (:func:`bench.workloads.hostile_patterns`), make every 32-word key of ``a`` words walk a
state for nearly every trie node at every key position. ``limits.max_match_cost_per_subscriber``
makes the refresh job reject the patterns past the subscriber's budget; this benchmark builds the
frozen matcher from the patterns the sequential model accepts and compares, in the same run:

* states visited per key (``FrozenMatcher.lookup_states``: a count, the figure the limit bounds);
* time per distinct hostile key (median of ``--repeats`` loops of at least ``--min-seconds``);
* a realistic table (``bench/workloads.py``) for scale.

Prints the table and writes ``bench/results/match_cost.md`` and ``match_cost.png`` with the load average::

    python bench/match_cost.py [--patterns 10000] [--repeats 3] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import RESULTS_DIR, RunRecord, markdown_table, ns_per_op, progress, pyplot
from workloads import hostile_patterns, realistic_pattern, vocabulary

from routing.limits import DEFAULT_LIMITS
from routing.matchers.native import FrozenMatcher
from routing.subscriptions.events import kafka_received
from routing.subscriptions.model import SubscriptionModel
from routing.validation import Validator


def accepted_patterns(validator: Validator, subscriber: str, patterns: list[str]) -> list[str]:
    """What the refresh job's rule (the sequential model) lets ``subscriber`` hold, subscribing in this order."""
    model = SubscriptionModel(validator, max_event_bytes=4096)
    model.apply_batch(
        kafka_received(
            "subscriptions",
            0,
            offset,
            json.dumps({"op": "subscribe", "subscriber": subscriber, "pattern": pattern, "ts": offset}).encode(),
        )
        for offset, pattern in enumerate(patterns)
    )
    return sorted(pattern for pattern, holder in model.active_pairs() if holder == subscriber)


def hostile_keys(count: int, words: int, seed: int) -> list[str]:
    """Distinct keys of ``a`` words with two ``b`` words: every ``*`` and ``#`` still matches."""
    rng = random.Random(seed)
    keys: set[str] = set()
    while len(keys) < count:
        key = ["a"] * words
        for position in rng.sample(range(words), 2):
            key[position] = "b"
        keys.add(".".join(key))
    return sorted(keys)


def measure(
    name: str, matcher: FrozenMatcher, keys: list[str], *, min_seconds: float, repeats: int
) -> dict[str, float]:
    frozen = matcher._frozen  # the GIL-free loop: no Python call per key in the timing
    per_call = ns_per_op(lambda: frozen._lookup_many(keys, 1), min_seconds=min_seconds, repeats=repeats)
    states = [matcher.lookup_states(key) for key in keys]
    ns_per_key = per_call / len(keys)
    progress(f"{name}: {len(matcher):,} pairs, max {max(states):,} states, {ns_per_key / 1000:,.1f} µs per key")
    return {
        "pairs": len(matcher),
        "max_states": max(states),
        "mean_states": sum(states) / len(states),
        "us_per_key": ns_per_key / 1000,
        "ns_per_state": ns_per_key / (sum(states) / len(states)),
    }


def chart(rows: dict[str, dict[str, float]], path: Path) -> None:
    plt = pyplot()

    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    names = list(rows)
    for axis, metric, label in ((axes[0], "max_states", "states per key (max)"), (axes[1], "us_per_key", "µs per key")):
        axis.barh(names, [rows[name][metric] for name in names], color=["#c44", "#4a4", "#48c"][: len(names)])
        axis.set_xscale("log")
        axis.set_xlabel(label + " (log scale)")
        axis.invert_yaxis()
    axes[1].set_yticklabels([])
    figure.suptitle("Matching work per 32-word key: one subscriber's 10,000 hostile patterns")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--patterns", type=int, default=10_000, help="hostile patterns of the one subscriber")
    parser.add_argument("--keys", type=int, default=200, help="distinct hostile keys timed")
    parser.add_argument("--realistic", type=int, default=100_000, help="pairs of the realistic table")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="shortest timed loop")
    parser.add_argument("--repeats", type=int, default=5, help="loops per figure (the median is kept)")
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where match_cost.md and the PNG go")
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    args = parser.parse_args(argv)

    record = RunRecord.start(__file__, sys.argv[1:] if argv is None else argv)
    validator = Validator()
    limits = DEFAULT_LIMITS
    words = limits.max_key_words
    hostile = hostile_patterns(args.patterns, args.seed, max_hash_words=limits.max_hash_words)
    for pattern in hostile:
        validator.validate_pattern(pattern)  # each one is a valid pattern within every per-pattern limit
    kept = accepted_patterns(validator, "hog", hostile)
    rng = random.Random(args.seed)
    vocab = vocabulary(rng, 2_000)
    realistic = [(realistic_pattern(rng, vocab), f"sub-{index % 5_000}") for index in range(args.realistic)]
    keys = hostile_keys(args.keys, words, args.seed)
    tables = {
        f"probe, unbounded ({len(hostile):,} patterns)": FrozenMatcher((p, "hog") for p in hostile),
        f"probe within the budget ({len(kept):,} accepted)": FrozenMatcher((p, "hog") for p in kept),
        f"realistic ({args.realistic:,} pairs)": FrozenMatcher(realistic),
    }
    progress(f"load average {record.load_before[0]:.2f}; timing {len(keys)} distinct {words}-word keys per table")
    rows = {
        name: measure(name, matcher, keys, min_seconds=args.min_seconds, repeats=args.repeats)
        for name, matcher in tables.items()
    }
    unbounded, bounded, _ = rows.values()

    table = markdown_table(
        ["table", "pairs", "max states per key", "mean states", "µs per key", "ns per state"],
        [
            [
                name,
                f"{row['pairs']:,}",
                f"{row['max_states']:,}",
                f"{row['mean_states']:,.0f}",
                f"{row['us_per_key']:,.2f}",
                f"{row['ns_per_state']:.1f}",
            ]
            for name, row in rows.items()
        ],
    )
    budget = limits.max_match_cost_per_subscriber
    text = "\n".join(
        [
            "# Matching work per key (`limits.max_match_cost_per_subscriber`)",
            "",
            f"{record.line()} Default limits: budget {budget:,} states per subscriber, keys of up to {words} words.",
            "",
            table,
            "",
            f"- Unbounded over bounded: {unbounded['us_per_key'] / bounded['us_per_key']:,.0f}x the time per key, "
            f"{unbounded['max_states'] / bounded['max_states']:,.0f}x the states.",
            f"- The bounded table's worst key visits {bounded['max_states']:,} states, within 1 + the budget "
            f"({budget + 1:,}): the bound the refresh job's rule guarantees.",
            "- Time per state is roughly constant, so the states bound is a time bound: a subscriber at the budget "
            f"costs at most about {budget * bounded['ns_per_state'] / 1000:,.0f} µs per key.",
            "",
            "![match cost](match_cost.png)",
            "",
        ]
    )
    print(text)
    if not args.no_write:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / "match_cost.md").write_text(text, encoding="utf-8")
        chart(rows, args.results_dir / "match_cost.png")
        progress(f"wrote {args.results_dir / 'match_cost.md'} and match_cost.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast is the native matcher the router's UDF calls: one lookup, a batch of keys, and a snapshot at scale?

The router matches every key of a batch with ``match_batch`` on a ``FrozenMatcher`` that the driver froze
from its CS-trie, serialized and shipped to the workers; so this measures exactly those calls, against the
pure-Python ``TrieMatcher`` measured in the same run. Issue targets are judged in the last section.

Run ``python bench/native.py`` (``--quick`` for a smoke run, ``--help`` for
flags). Markdown goes to stdout and ``bench/results/native.md``, a chart to
``bench/results/native.png``; progress lines go to stderr. Seeded: the same
``--seed`` gives the same workloads.

Sections
--------
1. **Lookup latency**, the seed's hot workload: 1,000 subscriptions of 5 words,
   each word the decimal text of a random 63-bit integer, looked up by their own
   topics (hits), by random topics (misses) and ``foo.bar.baz.qux.quux`` with
   ``foo.*.baz.qux.quux`` subscribed. ``FrozenMatcher`` is timed inside Rust
   (the private ``_lookup_many`` hook: no Python call per lookup) and through
   its Python ``lookup``; ``CSTrieMatcher`` and ``TrieMatcher`` through Python.
2. **match_batch throughput** (keys/s) on a realistic workload (5-word keys
   over a 300-word vocabulary, 30% built to hit), all keys distinct and keys
   drawn from 1,000 distinct ones, against ``TrieMatcher.lookup`` of the same
   keys in a Python loop, measured in the same run.
3. **Scale**: 1,000 / 100,000 / 1,000,000 realistic subscriptions (85% literal,
   10% one ``*``, 5% ``#``): frozen lookup ns, ``snapshot()``, ``freeze()``,
   ``to_bytes()``/``from_bytes()`` times and serialized bytes per subscription.
4. **Targets** with the measured value and pass/miss.

How the CS-trie scales with threads is ``bench/subscriptions.py``'s question (the seed's multithreaded
workloads, in Rust threads); Python threads, serialised by the GIL, are not how the router uses it.

Times are wall clock *and* thread CPU time where both make sense: the machine
these results come from is shared (see the load average in the header), and
CPU time is the fairer single-thread figure there. Targets are judged on CPU
time for single-thread work.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
from harness import RESULTS_DIR, RunRecord, Timed, best_of, progress, pyplot, timed
from workloads import realistic_hit, realistic_pattern, vocabulary

from routing.matchers import CSTrieMatcher, FrozenMatcher, TrieMatcher

#: Targets from the issue: (name, unit, limit, higher_is_better).
LOOKUP_TARGET_NS = 150.0
BATCH_TARGET_KEYS_PER_S = 5_000_000.0
BYTES_TARGET_PER_SUBSCRIPTION = 100.0


# --- workloads ------------------------------------------------------------------------------------------------


def seed_topic(rng: random.Random) -> str:
    return ".".join(str(rng.getrandbits(63)) for _ in range(5))


def realistic_keys(rng: random.Random, vocab: Sequence[str], patterns: Sequence[str], count: int) -> list[str]:
    return [
        realistic_hit(rng, vocab, rng.choice(patterns))
        if rng.random() < 0.30
        else ".".join(rng.choice(vocab) for _ in range(5))
        for _ in range(count)
    ]


# --- timing ---------------------------------------------------------------------------------------------------


def native_lookup_ns(frozen: FrozenMatcher, keys: list[str], rounds: int) -> Timed:
    """ns per lookup inside Rust (the private benchmark hook), best of three."""
    native: Any = frozen._frozen
    run = best_of(3, lambda: native._lookup_many(keys, rounds))[0]
    scale = 1e9 / (len(keys) * rounds)
    return Timed(run.wall_s * scale, run.cpu_s * scale)


def python_lookup_ns(lookup: Callable[[str], object], keys: Sequence[str]) -> Timed:
    def loop() -> None:
        for key in keys:
            lookup(key)

    run = best_of(3, loop)[0]
    scale = 1e9 / len(keys)
    return Timed(run.wall_s * scale, run.cpu_s * scale)


# --- results --------------------------------------------------------------------------------------------------


@dataclass
class Results:
    sections: list[str] = field(default_factory=list)
    latency: dict[str, Timed] = field(default_factory=dict)
    batch: dict[str, float] = field(default_factory=dict)
    scale: list[dict[str, float]] = field(default_factory=list)
    targets: list[tuple[str, str, str, str]] = field(default_factory=list)

    def add(self, title: str, header: Sequence[str], rows: Sequence[Sequence[str]], notes: str = "") -> None:
        lines = [f"## {title}", ""]
        if notes:
            lines += [notes, ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        self.sections.append("\n".join(lines))


def ns(value: float) -> str:
    return f"{value:,.0f} ns" if value >= 100 else f"{value:,.1f} ns"


def seconds(value: float) -> str:
    return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"


# --- 1. lookup latency ----------------------------------------------------------------------------------------


def bench_latency(rng: random.Random, results: Results, quick: bool) -> None:
    progress("lookup latency on the seed's hot workload")
    hot = [seed_topic(rng) for _ in range(1000)]
    misses = [seed_topic(rng) for _ in range(1000)]
    trie, cs = TrieMatcher(), CSTrieMatcher()
    for matcher in (trie, cs):
        for topic in hot:
            matcher.subscribe(topic, topic)
        matcher.subscribe("foo.*.baz.qux.quux", "wild")
    frozen = cs.freeze()
    rounds = 50 if quick else 500
    workloads = {"hot hits": hot, "misses": misses, "seed key": ["foo.bar.baz.qux.quux"] * 1000}
    rows = []
    for name, keys in workloads.items():
        native = native_lookup_ns(frozen, keys, rounds)
        results.latency[name] = native
        via_python = python_lookup_ns(frozen.lookup, keys)
        cs_python = python_lookup_ns(cs.lookup, keys)
        trie_python = python_lookup_ns(trie.lookup, keys)
        rows.append(
            [
                name,
                f"{ns(native.cpu_s)} (wall {ns(native.wall_s)})",
                ns(via_python.wall_s),
                ns(cs_python.wall_s),
                ns(trie_python.wall_s),
            ]
        )
    results.add(
        "Lookup latency (seed hot workload, 1,000 subscriptions)",
        [
            "keys",
            "FrozenMatcher in Rust (CPU)",
            "FrozenMatcher.lookup (Python call)",
            "CSTrieMatcher.lookup",
            "TrieMatcher.lookup",
        ],
        rows,
        "Python-call columns are wall clock per call, including the interpreter's call overhead and building the "
        "result frozenset.",
    )


# --- 2. match_batch throughput --------------------------------------------------------------------------------


def batch_workloads(rng: random.Random, rows_count: int) -> list[tuple[str, list[tuple[str, str]], list[str]]]:
    """(name, subscriptions, keys): realistic (all distinct / 1,000 distinct) and the seed's hot set."""
    vocab = vocabulary(rng, 300)
    patterns = [realistic_pattern(rng, vocab) for _ in range(10_000)]
    realistic = [(pattern, f"sub-{i}") for i, pattern in enumerate(patterns)]
    pool = realistic_keys(rng, vocab, patterns, 1000)
    hot = [seed_topic(rng) for _ in range(1000)]
    return [
        ("realistic, mostly distinct keys", realistic, realistic_keys(rng, vocab, patterns, rows_count)),
        ("realistic, 1,000 distinct keys", realistic, [rng.choice(pool) for _ in range(rows_count)]),
        # Half hits (hot topics repeat), half fresh random topics: mostly distinct.
        (
            "seed hot set, half hits",
            [(topic, topic) for topic in hot],
            [rng.choice(hot) if rng.random() < 0.5 else seed_topic(rng) for _ in range(rows_count)],
        ),
    ]


def bench_batch(rng: random.Random, results: Results, quick: bool) -> None:
    progress("match_batch throughput")
    rows_count = 100_000 if quick else 1_000_000
    trie_sample = 20_000 if quick else 100_000
    rows = []
    for name, pairs, keys in batch_workloads(rng, rows_count):
        trie, cs = TrieMatcher(), CSTrieMatcher()
        for pattern, subscriber in pairs:
            trie.subscribe(pattern, subscriber)
            cs.subscribe(pattern, subscriber)
        frozen = cs.freeze()
        array = pa.array(keys, type=pa.string())
        run = best_of(3, lambda: frozen.match_batch(array))[0]  # noqa: B023 - called before the loop moves on
        trie_run = python_lookup_ns(trie.lookup, keys[:trie_sample])
        cpu_rate = rows_count / run.cpu_s
        wall_rate = rows_count / run.wall_s
        trie_rate = 1e9 / trie_run.cpu_s
        results.batch[name] = cpu_rate
        results.batch[f"{name} (TrieMatcher)"] = trie_rate
        rows.append(
            [
                name,
                f"{len(pairs):,}",
                f"{len(set(keys)):,}",
                f"{cpu_rate:,.0f}",
                f"{wall_rate:,.0f}",
                f"{trie_rate:,.0f}",
                f"{cpu_rate / trie_rate:,.0f}x",
            ]
        )
    results.add(
        f"match_batch throughput ({rows_count:,} rows, one thread)",
        [
            "workload",
            "subscriptions",
            "distinct keys",
            "match_batch keys/s (CPU)",
            "keys/s (wall)",
            "TrieMatcher.lookup keys/s (CPU)",
            "ratio",
        ],
        rows,
        f"TrieMatcher timed on the first {trie_sample:,} keys of the same batch, in a Python loop. Realistic: "
        "5-word keys over a 300-word vocabulary, 30% built to hit one of the 10,000 patterns.",
    )


# --- 3. scale -------------------------------------------------------------------------------------------------


def scale_run(rng: random.Random, vocab: Sequence[str], count: int) -> dict[str, float]:
    """Everything measured at one scale (a function, so the big objects die with it)."""
    patterns = [realistic_pattern(rng, vocab) for _ in range(count)]
    cs = CSTrieMatcher()

    def subscribe_all() -> None:
        for i, pattern in enumerate(patterns):
            cs.subscribe(pattern, f"sub-{i}")

    subscribe = timed(subscribe_all)[0]
    snapshot_time = best_of(5, cs.snapshot)[0]
    freeze_time, frozen_any = timed(cs.freeze)
    frozen: FrozenMatcher = frozen_any  # type: ignore[assignment]
    to_bytes_time, data_any = timed(frozen.to_bytes)
    data: bytes = data_any  # type: ignore[assignment]
    from_bytes_time = timed(lambda: FrozenMatcher.from_bytes(data))[0]
    keys = realistic_keys(rng, vocab, patterns, 2000)
    lookup = native_lookup_ns(frozen, keys, 50)
    pairs = len(frozen)
    return {
        "subscriptions": float(count),
        "pairs": float(pairs),
        "subscribe_s": subscribe.wall_s,
        "subscribe_cpu_s": subscribe.cpu_s,
        "snapshot_s": snapshot_time.wall_s,
        "freeze_s": freeze_time.wall_s,
        "freeze_cpu_s": freeze_time.cpu_s,
        "to_bytes_s": to_bytes_time.wall_s,
        "from_bytes_s": from_bytes_time.wall_s,
        "bytes": float(len(data)),
        "bytes_per_subscription": len(data) / max(pairs, 1),
        "lookup_cpu_ns": lookup.cpu_s,
        "lookup_wall_ns": lookup.wall_s,
        "nodes": float(frozen.node_count),
    }


def bench_scale(rng: random.Random, results: Results, scales: Sequence[int]) -> None:
    vocab = vocabulary(rng, 300)
    rows = []
    for count in scales:
        progress(f"scale: {count:,} subscriptions")
        row = scale_run(rng, vocab, count)
        gc.collect()
        results.scale.append(row)
        rows.append(
            [
                f"{count:,}",
                f"{ns(row['lookup_cpu_ns'])} (wall {ns(row['lookup_wall_ns'])})",
                seconds(row["snapshot_s"]),
                f"{seconds(row['freeze_s'])} (CPU {seconds(row['freeze_cpu_s'])})",
                seconds(row["to_bytes_s"]),
                seconds(row["from_bytes_s"]),
                f"{row['bytes']:,.0f}",
                f"{row['bytes_per_subscription']:.1f}",
                f"{row['nodes']:,.0f}",
                f"{seconds(row['subscribe_s'])} (CPU {seconds(row['subscribe_cpu_s'])})",
            ]
        )
    results.add(
        "Scale (realistic subscriptions)",
        [
            "subscriptions",
            "frozen lookup (CPU)",
            "snapshot()",
            "freeze()",
            "to_bytes()",
            "from_bytes()",
            "bytes",
            "bytes / subscription",
            "frozen nodes",
            "subscribe all (Python loop)",
        ],
        rows,
        "snapshot() is the best of 5 (O(1): it should not grow with the trie). freeze() lists the snapshot's "
        "pairs (the CS-trie's subscriptions(), most of the time) and builds the frozen trie. Lookups: 2,000 "
        "realistic keys (30% hits) in Rust.",
    )


# --- 4. targets -----------------------------------------------------------------------------------------------


def judge(value: float, target: float, higher_is_better: bool) -> str:
    ok = value >= target if higher_is_better else value <= target
    if ok:
        return "pass"
    off = (target / value - 1) if higher_is_better else (value / target - 1)
    return f"miss by {off:.1%}"


def targets(results: Results, largest: int) -> None:
    rows = []
    hot = results.latency.get("hot hits")
    if hot is not None:
        rows.append(
            [
                "frozen lookup, seed hot workload",
                f"≤ {LOOKUP_TARGET_NS:.0f} ns",
                ns(hot.cpu_s),
                judge(hot.cpu_s, LOOKUP_TARGET_NS, False),
            ]
        )
    for name in ("realistic, mostly distinct keys", "realistic, 1,000 distinct keys", "seed hot set, half hits"):
        rate = results.batch.get(name)
        if rate is not None:
            rows.append(
                [
                    f"match_batch, {name}, one core",
                    f"≥ {BATCH_TARGET_KEYS_PER_S / 1e6:.0f} M keys/s",
                    f"{rate / 1e6:.2f} M keys/s",
                    judge(rate, BATCH_TARGET_KEYS_PER_S, True),
                ]
            )
    if results.scale:
        last = results.scale[-1]
        rows.append(
            [
                f"serialized size at {largest:,} subscriptions",
                f"≤ {BYTES_TARGET_PER_SUBSCRIPTION:.0f} B/subscription",
                f"{last['bytes_per_subscription']:.1f} B",
                judge(last["bytes_per_subscription"], BYTES_TARGET_PER_SUBSCRIPTION, False),
            ]
        )
    results.targets = [(r[0], r[1], r[2], r[3]) for r in rows]
    results.add(
        "Targets",
        ["target", "goal", "measured", "verdict"],
        rows,
        "Single-thread figures are thread CPU time (see the header about the shared machine).",
    )


# --- output ---------------------------------------------------------------------------------------------------


def chart(results: Results, path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    if results.scale:
        subs = [row["subscriptions"] for row in results.scale]
        axis = axes[0]
        axis.plot(subs, [row["lookup_cpu_ns"] for row in results.scale], marker="o", label="frozen lookup ns (CPU)")
        per_subscription = [row["bytes_per_subscription"] for row in results.scale]
        axis.plot(subs, per_subscription, marker="s", label="bytes / subscription")
        axis.axhline(LOOKUP_TARGET_NS, linestyle="--", color="grey", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlabel("subscriptions")
        axis.set_title("Frozen matcher at scale")
        axis.legend()
    if results.batch:
        axis = axes[1]
        names = list(results.batch)
        axis.barh(names, [results.batch[n] / 1e6 for n in names])
        axis.axvline(BATCH_TARGET_KEYS_PER_S / 1e6, linestyle="--", color="grey", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlabel("M keys/s (CPU, one thread)")
        axis.set_title("match_batch vs TrieMatcher.lookup")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def header(record: RunRecord) -> str:
    return "\n".join(
        [
            "# Native matcher benchmarks",
            "",
            f"{record.line()} Where the machine is shared (load above about 0.5) wall-clock figures are "
            "pessimistic; single-thread figures are also given as thread CPU time.",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in well under a minute")
    parser.add_argument("--seed", type=int, default=20241121, help="random seed for every workload")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where native.md and native.png go")
    parser.add_argument(
        "--scales", type=str, default=None, help="comma-separated subscription counts (default 1000,100000,1000000)"
    )
    parser.add_argument("--skip", action="append", default=[], choices=["latency", "batch", "scale"])
    args = parser.parse_args(argv)
    scales = (
        [int(s) for s in args.scales.split(",")]
        if args.scales
        else ([1000, 20_000] if args.quick else [1000, 100_000, 1_000_000])
    )
    rng = random.Random(args.seed)
    record = RunRecord.start(__file__, sys.argv[1:] if argv is None else argv)
    results = Results()
    if "latency" not in args.skip:
        bench_latency(rng, results, args.quick)
    if "batch" not in args.skip:
        bench_batch(rng, results, args.quick)
    if "scale" not in args.skip:
        bench_scale(rng, results, scales)
    targets(results, max(scales))
    markdown = header(record) + "\n\n" + "\n\n".join(results.sections) + "\n"
    print(markdown)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "native.md").write_text(markdown, encoding="utf-8")
    chart(results, args.out_dir / "native.png")
    progress(f"wrote {args.out_dir / 'native.md'} and {args.out_dir / 'native.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Which matching algorithm wins: the seed article's five, on its own workloads, a realistic one, and memory?

The seed article's figures are the reference the project's design was chosen against; the realistic workload
(a few hundred words, mostly literal patterns, about 30% hits) is what a topic exchange's traffic looks like.

Run ``python bench/matchers.py`` (``--quick`` for a smoke run, ``--help`` for
flags). Markdown tables go to stdout and to ``bench/results/matchers.md``, a
chart to ``bench/results/matchers.png``; progress lines go to stderr.

Workloads
---------
1. **Seed latency** (ns/op). *Cold* is an empty matcher; *hot* holds 1,000
   subscriptions of 5 words, each word the decimal text of a random 63-bit
   integer, each subscriber the topic text itself, and every hot topic has
   been looked up once (so caches such as the inverted bitmap's topic index
   are warm, as in a running system). Timed operations, as in the seed:
   ``subscribe("foo.*.baz.qux.quux")`` (a fresh subscriber per call, so every
   call really inserts; batches of 100, unsubscribed untimed in between so the
   pattern's subscriber set stays small), repeated ``unsubscribe`` of one subscription (the
   first call removes it, the rest are no-ops), ``lookup("foo.bar.baz.qux.quux")``
   with ``foo.*.baz.qux.quux`` subscribed.
2. **Seed throughput** (msg/s, one thread): 1,000 subscriptions ``*.d.d``
   (``i % 10 == 0``), ``d.*.d`` (``i % 25 == 0``), ``d.d.*`` (``i % 45 == 0``)
   or ``d.d.d``, each ``d`` a fresh random digit, subscriber ``str(i)``; then
   100,000 lookups of ``subs[i % 1000]`` with each ``*`` replaced by a fresh
   random digit.
3. **Realistic**: 5-word keys over a vocabulary of a few hundred words; 85%
   literal patterns, 10% with one ``*``, 5% with ``#``; about 30% of lookups
   built to hit a subscription; at 1,000 and 100,000 subscriptions.
4. **Memory**: bytes retained per subscription, each matcher measured in a
   fresh child process: ``tracemalloc`` (Python heap only: it cannot see
   CRoaring's or Rust's allocations) and the resident-set growth (sees
   everything, but includes allocator slack). Measured right after populating,
   and again after lookups (the inverted bitmap grows its index then).

Every lookup measurement stops early once it has run for ``--budget``
seconds; the tables report how many lookups were actually timed, so the
slow matchers (naive, inverted bitmap on unseen keys) are measured on fewer
lookups and say so.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import (
    RESULTS_DIR,
    Contender,
    Reader,
    RunRecord,
    Writer,
    contenders,
    fmt_bytes,
    fmt_ns,
    fmt_rate,
    markdown_table,
    ns_per_op,
    progress,
    pyplot,
)
from workloads import realistic_hit, realistic_pattern, vocabulary

# The seed article's published figures (Go, 2.6 GHz Core i7), ns/op and msg/s.
SEED_LATENCY: dict[str, dict[str, tuple[float, float, float]]] = {
    # name: {"cold"|"hot": (subscribe, unsubscribe, lookup)}
    "naive": {"cold": (172, 51.2, 787), "hot": (221, 55, 815_787)},
    "inverted bitmap": {"cold": (3_795, 198, 380), "hot": (3_863, 198, 395)},
    "optimized inverted bitmap": {"cold": (1_053, 330, 2_724), "hot": (1_076, 371, 3_337)},
    "trie": {"cold": (406, 221, 2_145), "hot": (443, 257, 2_278)},
    "cs-trie": {"cold": (412, 245, 1_615), "hot": (471, 280, 1_637)},
}
SEED_THROUGHPUT: dict[str, float] = {
    "naive": 4_053.48,
    "inverted bitmap": 1_052_315.02,
    "optimized inverted bitmap": 130_705.98,
    "trie": 248_762.10,
    "cs-trie": 340_910.64,
}

R = TypeVar("R", bound=Reader)

#: Fresh subscribers per timed subscribe batch (see _time_subscribe).
SUBSCRIBE_BATCH = 100
#: Realistic lookups re-checked against the trie after each timed run.
CHECKED_LOOKUPS = 50

LATENCY_PATTERN = "foo.*.baz.qux.quux"
LATENCY_KEY = "foo.bar.baz.qux.quux"


@dataclass
class Settings:
    seed: int
    quick: bool
    budget: float
    min_seconds: float
    hot_subscriptions: int
    throughput_lookups: int
    realistic_sizes: tuple[int, ...]
    realistic_lookups: int
    memory_subscriptions: int
    memory_lookups: int
    vocabulary: int


@dataclass
class Results:
    latency: dict[str, dict[str, tuple[float | None, float | None, float]]] = field(default_factory=dict)
    throughput: dict[str, tuple[float, int]] = field(default_factory=dict)
    realistic: dict[str, dict[int, tuple[float, float, int]]] = field(default_factory=dict)
    realistic_hit_rate: dict[int, float] = field(default_factory=dict)
    realistic_expected: dict[int, list[frozenset[str]]] = field(default_factory=dict)
    memory: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The command, the date and the load average before the run started anything.
    record: RunRecord = field(default_factory=lambda: RunRecord.start(__file__, sys.argv[1:]))


# --- workloads ------------------------------------------------------------------------------------------------


def seed_hot_topics(rng: random.Random, count: int) -> list[str]:
    """The seed's hot set: 5 words, each the decimal text of a random 63-bit integer."""
    return [".".join(str(rng.getrandbits(63)) for _ in range(5)) for _ in range(count)]


def seed_throughput_workload(rng: random.Random, lookups: int) -> tuple[list[tuple[str, str]], list[str]]:
    def digit() -> str:
        return str(rng.randrange(10))

    patterns = []
    for i in range(1000):
        if i % 10 == 0:
            pattern = f"*.{digit()}.{digit()}"
        elif i % 25 == 0:
            pattern = f"{digit()}.*.{digit()}"
        elif i % 45 == 0:
            pattern = f"{digit()}.{digit()}.*"
        else:
            pattern = f"{digit()}.{digit()}.{digit()}"
        patterns.append(pattern)
    pairs = [(pattern, str(i)) for i, pattern in enumerate(patterns)]
    keys = [".".join(digit() if w == "*" else w for w in patterns[i % 1000].split(".")) for i in range(lookups)]
    return pairs, keys


def realistic_workload(
    rng: random.Random, vocab: Sequence[str], subscriptions: int, lookups: int
) -> tuple[list[tuple[str, str]], list[str]]:
    patterns = [realistic_pattern(rng, vocab) for _ in range(subscriptions)]
    pairs = [(pattern, f"sub-{i}") for i, pattern in enumerate(patterns)]
    keys = [
        realistic_hit(rng, vocab, rng.choice(patterns))
        if rng.random() < 0.30
        else ".".join(rng.choice(vocab) for _ in range(5))
        for _ in range(lookups)
    ]
    return pairs, keys


# --- measurements ---------------------------------------------------------------------------------------------


def budgeted_lookups(reader: Reader, keys: Sequence[str], budget: float) -> tuple[float, int]:
    """(seconds, lookups done): all keys in order, or fewer once ``budget`` seconds have passed."""
    lookup = reader.lookup
    done = 0
    chunk = 16
    gc.disable()
    try:
        start = time.perf_counter()
        while done < len(keys):
            for key in keys[done : done + chunk]:
                lookup(key)
            done = min(len(keys), done + chunk)
            if time.perf_counter() - start > budget:
                break
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed, done


def measure_latency(contender: Contender, settings: Settings, hot_topics: Sequence[str], results: Results) -> None:
    rows: dict[str, tuple[float | None, float | None, float]] = {}
    for phase in ("cold", "hot"):
        pairs = [(t, t) for t in hot_topics] if phase == "hot" else []
        subscribe_ns = unsubscribe_ns = None
        if contender.writes:
            subscribe_ns = _time_subscribe(_warm(contender.factory(), pairs), settings.min_seconds)
            writer = _warm(contender.factory(), pairs)
            writer.subscribe(LATENCY_PATTERN, "s0")
            unsubscribe_ns = _time_unsubscribe(writer, settings.min_seconds)
        reader = _warm(contender.populated([*pairs, (LATENCY_PATTERN, "s0")]), pairs, subscribe=False)
        assert reader.lookup(LATENCY_KEY) == frozenset({"s0"}), "the latency lookup must hit its subscription"
        rows[phase] = (subscribe_ns, unsubscribe_ns, _time_lookup(reader, settings.min_seconds))
    results.latency[contender.name] = rows


def _warm(matcher: R, pairs: Sequence[tuple[str, str]], *, subscribe: bool = True) -> R:
    """Subscribe ``pairs`` (unless already done) and look each pattern up once, as a running system would have."""
    if subscribe:
        for pattern, subscriber in pairs:
            matcher.subscribe(pattern, subscriber)  # type: ignore[attr-defined]
    for pattern, _ in pairs:
        matcher.lookup(pattern)
    return matcher


def _time_subscribe(writer: Writer, min_seconds: float) -> float:
    """Median ns per real insertion of LATENCY_PATTERN, in batches of fresh subscribers.

    Each batch is unsubscribed again (untimed) before the next, so the
    pattern never accumulates more than SUBSCRIBE_BATCH subscribers: a
    matcher whose insert cost grows with that set (copy-on-write nodes) is
    measured in the same state as one whose cost does not.
    """
    samples: list[float] = []
    spent = 0.0
    while len(samples) < 3 or spent < min_seconds * 1e9:
        batch = [f"s{len(samples)}-{i}" for i in range(SUBSCRIBE_BATCH)]
        gc.disable()
        try:
            start = time.perf_counter_ns()
            for subscriber in batch:
                writer.subscribe(LATENCY_PATTERN, subscriber)
            elapsed = time.perf_counter_ns() - start
        finally:
            gc.enable()
        for subscriber in batch:
            writer.unsubscribe(LATENCY_PATTERN, subscriber)
        samples.append(elapsed / len(batch))
        spent += elapsed
    return statistics.median(samples)


def _time_unsubscribe(writer: Writer, min_seconds: float) -> float:
    def unsubscribe() -> None:
        writer.unsubscribe(LATENCY_PATTERN, "s0")

    return ns_per_op(unsubscribe, min_seconds=min_seconds)


def _time_lookup(reader: Reader, min_seconds: float) -> float:
    def lookup() -> None:
        reader.lookup(LATENCY_KEY)

    return ns_per_op(lookup, min_seconds=min_seconds)


def measure_throughput(contender: Contender, settings: Settings, results: Results) -> None:
    rng = random.Random(settings.seed)
    pairs, keys = seed_throughput_workload(rng, settings.throughput_lookups)
    reader = contender.populated(pairs)
    elapsed, done = budgeted_lookups(reader, keys, settings.budget)
    results.throughput[contender.name] = (done / elapsed, done)


def measure_realistic(contender: Contender, settings: Settings, size: int, results: Results) -> None:
    rng = random.Random(settings.seed + size)
    vocab = vocabulary(rng, settings.vocabulary)
    pairs, keys = realistic_workload(rng, vocab, size, settings.realistic_lookups)
    started = time.perf_counter()
    reader = contender.populated(pairs)
    build = time.perf_counter() - started
    progress(f"  {contender.name}: {size:,} subscriptions built in {build:.1f}s")
    if size not in results.realistic_expected:
        # Expected answers from the trie, the cheapest exact matcher: for the hit rate (30% is
        # approximate by construction) and to check every contender before its figures count.
        from routing.matchers import TrieMatcher

        trie = TrieMatcher()
        for pattern, subscriber in pairs:
            trie.subscribe(pattern, subscriber)
        expected = [trie.lookup(k) for k in keys]
        results.realistic_expected[size] = expected
        results.realistic_hit_rate[size] = sum(1 for answer in expected if answer) / len(keys)
    elapsed, done = budgeted_lookups(reader, keys, settings.budget)
    # After timing (so the check cannot warm a cache the timing then benefits from).
    for key, answer in zip(keys[:CHECKED_LOOKUPS], results.realistic_expected[size], strict=False):
        if reader.lookup(key) != answer:
            raise RuntimeError(f"{contender.name} disagrees with the trie on {key!r}: benchmark aborted")
    results.realistic.setdefault(contender.name, {})[size] = (elapsed / done * 1e9, done / elapsed, done)


def memory_probe(name: str, kind: str, settings: Settings) -> dict[str, float]:
    """Runs in a child process: bytes per subscription for one contender (see module docstring).

    ``kind`` is "tracemalloc" or "rss", one per process: tracing every
    allocation costs memory of its own, which would inflate the RSS figure.
    """
    by_name = {c.name: c for c in contenders()[0]}
    contender = by_name[name]
    rng = random.Random(settings.seed)
    vocab = vocabulary(rng, settings.vocabulary)
    pairs, keys = realistic_workload(rng, vocab, settings.memory_subscriptions, settings.memory_lookups)
    count = len(pairs)
    if kind == "tracemalloc":
        tracemalloc.start()

    def measure() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0] if kind == "tracemalloc" else _rss_bytes()

    before = measure()
    reader = contender.populated(pairs)
    built = measure()
    for key in keys:
        reader.lookup(key)
    used = measure()
    return {f"{kind}_built": (built - before) / count, f"{kind}_after_lookups": (used - before) / count}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_memory(contender: Contender, settings: Settings, argv: Sequence[str], results: Results) -> None:
    for kind in ("tracemalloc", "rss"):
        command = [sys.executable, str(Path(__file__).resolve()), *argv, "--memory-probe", contender.name, kind]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            results.notes.append(f"memory probe for {contender.name} failed: {done.stderr.strip()[-300:]}")
            return
        results.memory.setdefault(contender.name, {}).update(json.loads(done.stdout.strip().splitlines()[-1]))


# --- report ---------------------------------------------------------------------------------------------------


def report(rows: Sequence[Contender], settings: Settings, results: Results, argv: Sequence[str]) -> str:
    out: list[str] = []
    out.append("# Matcher benchmarks\n")
    out.append(
        f"{results.record.line()} Seed {settings.seed}{', --quick' if settings.quick else ''}; one thread. On a "
        "shared machine (load above about 0.5) treat differences under 2x as noise. Seed figures: the "
        "fast-topic-matching article (Go, "
        "2.6 GHz Core i7).\n"
    )
    out.append("## Seed latency (ns/op)\n")
    out.append(
        "Cold: empty matcher. Hot: 1,000 subscriptions of 5 random 63-bit-integer words, every hot topic "
        'looked up once beforehand. `subscribe("foo.*.baz.qux.quux")` with a fresh subscriber per call (batches of '
        f"{SUBSCRIBE_BATCH}, unsubscribed untimed in between); "
        'repeated `unsubscribe` of one subscription; `lookup("foo.bar.baz.qux.quux")`.\n'
    )
    header = ["matcher", "phase", "subscribe", "seed", "unsubscribe", "seed", "lookup", "seed"]
    table = []
    for c in rows:
        for phase in ("cold", "hot"):
            sub, unsub, look = results.latency[c.name][phase]
            seed = SEED_LATENCY.get(c.seed_name or "", {}).get(phase)
            table.append(
                [
                    c.name,
                    phase,
                    fmt_ns(sub),
                    fmt_ns(seed[0] if seed else None),
                    fmt_ns(unsub),
                    fmt_ns(seed[1] if seed else None),
                    fmt_ns(look),
                    fmt_ns(seed[2] if seed else None),
                ]
            )
    out.append(markdown_table(header, table) + "\n")

    out.append("## Seed throughput (msg/s, one thread)\n")
    out.append(
        f"1,000 subscriptions (`*.d.d`, `d.*.d`, `d.d.*`, `d.d.d`), {settings.throughput_lookups:,} lookups of "
        f"`subs[i % 1000]` with `*` filled by a random digit; each run stops after {settings.budget:g} s.\n"
    )
    table = []
    for c in rows:
        rate, done = results.throughput[c.name]
        seed_rate = SEED_THROUGHPUT.get(c.seed_name or "")
        table.append([c.name, fmt_rate(rate), f"{done:,}", fmt_rate(seed_rate)])
    out.append(markdown_table(["matcher", "msg/s", "lookups timed", "seed msg/s"], table) + "\n")

    out.append("## Realistic workload\n")
    out.append(
        f"5-word keys over {settings.vocabulary} words; 85% literal patterns, 10% with one `*`, 5% with `#`; "
        f"up to {settings.realistic_lookups:,} lookups, each run stopping after {settings.budget:g} s. "
        "Measured hit rate: "
        + ", ".join(f"{rate:.0%} at {size:,}" for size, rate in sorted(results.realistic_hit_rate.items()))
        + ".\n"
    )
    header = ["matcher"]
    for size in settings.realistic_sizes:
        header += [f"lookup @ {size:,}", f"msg/s @ {size:,}", f"timed @ {size:,}"]
    table = []
    for c in rows:
        line = [c.name]
        for size in settings.realistic_sizes:
            cell = results.realistic.get(c.name, {}).get(size)
            line += [fmt_ns(cell[0]), fmt_rate(cell[1]), f"{cell[2]:,}"] if cell else ["n/a", "n/a", "n/a"]
        table.append(line)
    out.append(markdown_table(header, table) + "\n")

    out.append("## Memory (bytes per subscription)\n")
    out.append(
        f"{settings.memory_subscriptions:,} realistic subscriptions, each matcher in two fresh processes "
        "(one traced, one not); then "
        f"{settings.memory_lookups:,} realistic lookups. tracemalloc sees only the Python heap (not CRoaring "
        "bitmaps or Rust); RSS growth sees everything but includes allocator slack and page granularity.\n"
    )
    table = []
    for c in rows:
        mem = results.memory.get(c.name)
        if mem is None:
            table.append([c.name, "n/a", "n/a", "n/a", "n/a"])
            continue
        table.append(
            [
                c.name,
                fmt_bytes(mem["tracemalloc_built"]),
                fmt_bytes(mem["rss_built"]),
                fmt_bytes(mem["tracemalloc_after_lookups"]),
                fmt_bytes(mem["rss_after_lookups"]),
            ]
        )
    header = ["matcher", "tracemalloc", "RSS", "tracemalloc after lookups", "RSS after lookups"]
    out.append(markdown_table(header, table) + "\n")
    if any(not c.writes for c in rows):
        out.append(
            "A frozen row's RSS includes what the allocator kept of the CSTrieMatcher it was frozen from "
            "(built and dropped in the same process), so it is an upper bound.\n"
        )

    notes = [f"{c.name}: {c.note}" for c in rows if c.note] + results.notes
    for c in rows:
        _, done = results.throughput[c.name]
        if done < settings.throughput_lookups:
            notes.append(f"{c.name}: seed throughput measured on {done:,} of {settings.throughput_lookups:,} lookups")
        for size, (_, _, timed) in sorted(results.realistic.get(c.name, {}).items()):
            if timed < settings.realistic_lookups:
                notes.append(
                    f"{c.name}: realistic @ {size:,} measured on {timed:,} of {settings.realistic_lookups:,} lookups"
                )
    if notes:
        out.append("## Notes\n")
        out.extend(f"- {note}" for note in notes)
        out.append("")
    return "\n".join(out)


def chart(rows: Sequence[Contender], settings: Settings, results: Results, path: Path) -> None:
    plt = pyplot()

    names = [c.name for c in rows]
    short = [n.replace(" (frozen from CSTrieMatcher)", "").replace(" (CSTrieMatcher)", "") for n in names]
    positions = list(range(len(rows)))
    width = 0.4
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))

    def bars(ax: object, series: list[tuple[str, list[float | None]]], title: str, ylabel: str) -> None:
        axis = ax  # matplotlib Axes
        step = width * 2 / max(1, len(series))
        for index, (label, values) in enumerate(series):
            xs = [p - width + step * (index + 0.5) for p in positions]
            # Values under 1 (e.g. tracemalloc of native rows, which it cannot see) would stretch the log axis.
            axis.bar(xs, [v if v and v >= 1 else 0 for v in values], step, label=label)  # type: ignore[attr-defined]
        axis.set_yscale("log")  # type: ignore[attr-defined]
        axis.set_title(title)  # type: ignore[attr-defined]
        axis.set_ylabel(ylabel)  # type: ignore[attr-defined]
        axis.set_xticks(positions, short, rotation=20, ha="right")  # type: ignore[attr-defined]
        axis.legend()  # type: ignore[attr-defined]

    def seed(c: Contender, phase: str, op: int) -> float | None:
        return SEED_LATENCY[c.seed_name][phase][op] if c.seed_name in SEED_LATENCY else None

    bars(
        axes[0][0],
        [
            ("ours, hot lookup", [results.latency[n]["hot"][2] for n in names]),
            ("seed, hot lookup", [seed(c, "hot", 2) for c in rows]),
            ("ours, hot subscribe", [results.latency[n]["hot"][0] for n in names]),
            ("seed, hot subscribe", [seed(c, "hot", 0) for c in rows]),
        ],
        "Seed latency, hot (log scale)",
        "ns/op",
    )
    bars(
        axes[0][1],
        [
            ("ours", [results.throughput[n][0] for n in names]),
            ("seed", [SEED_THROUGHPUT.get(c.seed_name or "") for c in rows]),
        ],
        "Seed throughput, one thread (log scale)",
        "msg/s",
    )
    bars(
        axes[1][0],
        [
            (f"{size:,} subscriptions", [results.realistic.get(n, {}).get(size, (0, 0.0, 0))[1] for n in names])
            for size in settings.realistic_sizes
        ],
        "Realistic workload throughput (log scale)",
        "msg/s",
    )
    bars(
        axes[1][1],
        [
            ("tracemalloc", [results.memory.get(n, {}).get("tracemalloc_built") for n in names]),
            ("RSS growth", [results.memory.get(n, {}).get("rss_built") for n in names]),
            ("RSS after lookups", [results.memory.get(n, {}).get("rss_after_lookups") for n in names]),
        ],
        f"Memory per subscription, {settings.memory_subscriptions:,} subscriptions (log scale)",
        "bytes",
    )
    fig.suptitle("spark-topic-router matchers (Python 3.11, one thread) vs the seed article (Go)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- main -----------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description="Benchmark the topic matchers: the seed article's latency and throughput harness, "
        "a realistic workload and memory per subscription. Tables on stdout and in bench/results/.",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed for every workload (default 1)")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run: tiny sizes and budgets")
    parser.add_argument("--budget", type=float, help="seconds after which a lookup run stops (default 10, quick 0.2)")
    parser.add_argument(
        "--sizes", type=str, help="realistic subscription counts, comma separated (default 1000,100000; quick 200)"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where matchers.md and the PNG go")
    parser.add_argument("--no-write", action="store_true", help="print the tables only; write no files")
    parser.add_argument("--memory-probe", nargs=2, metavar=("MATCHER", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    sizes = args.sizes or ("200" if quick else "1000,100000")
    settings = Settings(
        seed=args.seed,
        quick=quick,
        budget=args.budget if args.budget is not None else (0.2 if quick else 10.0),
        min_seconds=0.005 if quick else 0.2,
        hot_subscriptions=100 if quick else 1000,
        throughput_lookups=2_000 if quick else 100_000,
        realistic_sizes=tuple(int(s) for s in sizes.split(",")),
        realistic_lookups=500 if quick else 20_000,
        memory_subscriptions=500 if quick else 10_000,
        memory_lookups=50 if quick else 200,
        vocabulary=300,
    )
    return settings, args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings, args = parse_args(argv)
    if args.memory_probe:
        print(json.dumps(memory_probe(args.memory_probe[0], args.memory_probe[1], settings)))
        return 0
    rows, skipped = contenders()
    results = Results(notes=list(skipped))
    for note in skipped:
        progress(f"note: {note}")
    rng = random.Random(settings.seed)
    hot_topics = seed_hot_topics(rng, settings.hot_subscriptions)
    if settings.quick:
        results.notes.append("--quick: 100 hot subscriptions instead of 1,000, tiny budgets; not comparable")
    for c in rows:
        progress(f"seed latency: {c.name}")
        measure_latency(c, settings, hot_topics, results)
    for c in rows:
        progress(f"seed throughput: {c.name}")
        measure_throughput(c, settings, results)
    for size in settings.realistic_sizes:
        for c in rows:
            progress(f"realistic @ {size:,}: {c.name}")
            measure_realistic(c, settings, size, results)
    for c in rows:
        progress(f"memory: {c.name}")
        measure_memory(c, settings, argv, results)
    text = report(rows, settings, results, argv)
    print(text)
    if not args.no_write:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / "matchers.md").write_text(text + "\n![matchers](matchers.png)\n")
        chart(rows, settings, results, args.results_dir / "matchers.png")
        progress(f"wrote {args.results_dir / 'matchers.md'} and matchers.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

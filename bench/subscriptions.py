"""How fast does the driver's CS-trie take subscription writes at scale (issue 9): one by one, in bulk, frozen
for the workers, and from concurrent threads?

The router's driver loads the whole subscription table into a CS-trie at start and applies each refresh's
changes to it, then freezes and serializes the result for the workers; tenants and fan-out topics give the
table the shapes below, up to 1,000,000 pairs. What the refresh does to a running router is
``bench/driver_refresh.py``'s question.

Run ``python bench/subscriptions.py`` for a quick run (n = 1,000 and 10,000);
the full run is::

    python bench/subscriptions.py --sizes 10000,100000,1000000

Markdown goes to stdout and ``bench/results/subscriptions.md``, a chart to
``bench/results/subscriptions.png`` (``--out-dir`` elsewhere); progress lines go
to stderr. Seeded: the same ``--seed`` gives the same subscriptions.

Shapes (n pairs each)
---------------------
* **wide node**: ``tenant<i>.orders.#`` subscribed by ``tenant<i>``, one per
  tenant: n siblings under the root.
* **hot pattern**: n subscribers ``sub-<i>`` of ``audit.#``: one node with n
  subscribers.
* **realistic**: ``bench/workloads.py``'s 5-word patterns over a 300-word
  vocabulary (85% literal, 10% one ``*``, 5% ``#``), subscriber ``sub-<i>``.

Sections
--------
1. **Single subscribes** from Python, one pair per call, for ``CSTrieMatcher``
   and ``TrieMatcher`` on the same pairs. A loop that runs past ``--budget``
   seconds stops, and its rate covers the pairs done (marked "stopped").
2. **Bulk subscribes**: ``CSTrieMatcher.subscribe_many(patterns, subscribers)``
   on two pyarrow string arrays into an empty trie (building the arrays is not
   timed: the driver reads them as Arrow), in one call as the driver's full
   load makes it. "n/a" where the method is missing. Every load, single or
   bulk, runs ``--load-repeats`` times into fresh matchers, the fastest kept,
   after ``--warmup-rounds`` untimed rounds;
   the kinds take turns (round by round), so a slow spell of the host lands
   on one sample of each kind instead of on all samples of one.
3. **Freeze and serialize**: ``freeze()``, ``to_bytes()`` and
   ``FrozenMatcher.from_bytes()`` of the loaded trie (best of ``--repeats``),
   serialized bytes per subscription.
4. **The seed's multithreaded workloads** (50/50 and 90/10, 1, 2 and 4
   threads) run from Rust threads by ``native/core/src/bin/cstrie_workloads.rs``
   (``cargo run --release --bin cstrie_workloads`` from ``native/``), its JSON
   turned into a table here: the seed's own layout (one role per thread) and a
   mixed one (every thread subscribes and looks up); see that file's docs.
5. **Targets**: issue 9's "Done when" ratios, computed from this run, with
   pass/fail.

Every loaded trie is checked (pair counts, and lookups of the frozen matcher
against ``TrieMatcher``) and a disagreement aborts the run. Times are wall clock
and process CPU time; the targets are judged on CPU time, the fairer figure on
a shared machine (the load average is in the header and in every row).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# Timings are process CPU time, and numpy's OpenBLAS (imported with pyarrow) starts a thread per core that
# busy-waits at times: perf put 2-5% of a bulk load's samples in `blas_thread_server`. Nothing here uses BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pyarrow as pa
from harness import RESULTS_DIR, RunRecord, Timed, fmt_bytes, fmt_rate, markdown_table, progress, pyplot
from harness import best_of as harness_best_of
from harness import timed as harness_timed
from workloads import realistic_pattern, vocabulary

from routing.matchers import CSTrieMatcher, FrozenMatcher, TrieMatcher

NATIVE_DIR = Path(__file__).resolve().parents[1] / "native"
RUST_BIN = "cstrie_workloads"
_START = time.perf_counter()

SHAPES: dict[str, str] = {
    "wide": "wide node (`tenant<i>.orders.#`, one per tenant)",
    "hot": "hot pattern (n subscribers of `audit.#`)",
    "realistic": "realistic (bench/workloads.py)",
}
DEFAULT_SIZES = (1000, 10_000)
FULL_SIZES = (10_000, 100_000, 1_000_000)

#: Issue 9's "Done when" limits.
MAX_SLOWDOWN_SMALL_TO_LARGE = 3.0
MIN_SINGLE_VS_TRIE = 0.5
MIN_BULK_VS_TRIE_LOOP = 10.0
MAX_FREEZE_VS_SERIALIZE = 2.0
MIN_TWO_THREAD_SPEEDUP = 1.5
#: subscribe_many is called on this many slices of the arrays (--budget can stop the loop between calls). One,
#: as the driver's full load makes it: ten calls timed nine merges into a growing trie besides the load.
BULK_CALLS = 1
#: Runs of every load (single-subscribe loops of both matchers, bulk loads), each into a fresh matcher, the
#: fastest kept. The same for the baseline and the measured side: on this 2-vCPU host one run of the same
#: code varies by about 25%, and a ratio of two single runs by twice that. Five interleaved rounds: two full
#: runs of 2026-11-27, 15 minutes apart and with three rounds run kind after kind, put the same build's hot
#: single-subscribe ratio at 0.56x and 0.35x and its wide bulk ratio at 6.5x and 13x.
DEFAULT_LOAD_REPEATS = 5
#: Untimed rounds of every load first, the same interleaved way. The first two rounds of a process fault in
#: fresh memory: two matchers of each kind are alive at once from the second round on (the fastest so far and
#: the one loading). On this host a fresh 2 MiB page costs up to ~5 ms of kernel time, so a 1M wide bulk load
#: spent 0.4-1.4 s in the kernel in those rounds and none after them (0.29-0.30 s of its own time in every
#: round), and a best of five was a best of three.
DEFAULT_WARMUP_ROUNDS = 2
#: Lookups per (shape, n) checked against TrieMatcher (distinct keys only: the hot shape has one).
CHECKED_KEYS = 20


def load_average() -> float:
    return os.getloadavg()[0]


# --- workloads ------------------------------------------------------------------------------------------------


def shape_pairs(shape: str, n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """n distinct (pattern, subscriber) pairs of one shape, as two aligned lists."""
    if shape == "wide":
        return [f"tenant{i}.orders.#" for i in range(n)], [f"tenant{i}" for i in range(n)]
    if shape == "hot":
        return ["audit.#"] * n, [f"sub-{i}" for i in range(n)]
    if shape == "realistic":
        vocab = vocabulary(rng, 300)
        return [realistic_pattern(rng, vocab) for _ in range(n)], [f"sub-{i}" for i in range(n)]
    raise ValueError(f"unknown shape {shape!r}")


def matching_key(pattern: str) -> str:
    """A key the pattern matches: every wildcard replaced by one literal word."""
    return ".".join("w" if word in ("*", "#") else word for word in pattern.split("."))


# --- timing ---------------------------------------------------------------------------------------------------


def timed(operation: Callable[[], object]) -> tuple[Timed, object]:
    """:func:`harness.timed` on process CPU time (every thread, so native workers count too)."""
    return harness_timed(operation, time.process_time)


def best_of(repeats: int, operation: Callable[[], object]) -> tuple[Timed, object]:
    """:func:`harness.best_of` on process CPU time."""
    return harness_best_of(repeats, operation, time.process_time)


@dataclass
class LoadRun:
    """One Python loop of single subscribes: how far it got and how long it took."""

    done: int
    total: int
    time: Timed

    @property
    def complete(self) -> bool:
        return self.done == self.total

    @property
    def cpu_rate(self) -> float:
        return self.done / max(self.time.cpu_s, 1e-9)

    @property
    def wall_rate(self) -> float:
        return self.done / max(self.time.wall_s, 1e-9)


def subscribe_loop(
    label: str, subscribe: Callable[[str, str], None], patterns: list[str], subscribers: list[str], budget_s: float
) -> LoadRun:
    """Subscribe pair by pair, in chunks; stop after the chunk that passes ``budget_s`` seconds."""
    total, chunk, done = len(patterns), 1000, 0
    next_report = 15.0
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        while done < total:
            end = min(total, done + chunk)
            for index in range(done, end):
                subscribe(patterns[index], subscribers[index])
            done = end
            elapsed = time.perf_counter() - wall
            if done < total and elapsed > budget_s:
                progress(f"  {label}: stopped at the {budget_s:g} s budget after {done:,} of {total:,} pairs")
                break
            if elapsed > next_report:
                progress(f"  {label}: {done:,} of {total:,} pairs after {elapsed:.0f} s")
                next_report += 15.0
        return LoadRun(done, total, Timed(time.perf_counter() - wall, time.process_time() - cpu))
    finally:
        if was_enabled:
            gc.enable()


# --- results --------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """Everything measured for one (shape, n)."""

    shape: str
    n: int
    load: float
    trie_single: LoadRun | None = None
    cs_single: LoadRun | None = None
    bulk: LoadRun | None = None
    bulk_note: str = ""
    freeze: Timed | None = None
    to_bytes: Timed | None = None
    from_bytes: Timed | None = None
    frozen_pairs: int | None = None
    serialized_bytes: int | None = None
    freeze_source: str = ""


@dataclass
class Report:
    sections: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    rust: dict[str, Any] | None = None
    rust_note: str = ""
    errors: list[str] = field(default_factory=list)

    def add(self, title: str, table: str, notes: str = "") -> None:
        self.sections.append("\n".join([f"## {title}", "", *([notes, ""] if notes else []), table]))

    def text(self, title: str, body: str) -> None:
        self.sections.append(f"## {title}\n\n{body}")


def seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def times(ratio: float) -> str:
    """A ratio with enough digits to tell 0.004x from 0.04x."""
    if ratio >= 10:
        return f"{ratio:,.0f}x"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3g}x"


def rate_cell(run: LoadRun | None) -> str:
    if run is None:
        return "n/a"
    stopped = "" if run.complete else f" (stopped at {run.done:,})"
    return f"{fmt_rate(run.cpu_rate)} (wall {fmt_rate(run.wall_rate)}){stopped}"


# --- 1-3. loading and freezing --------------------------------------------------------------------------------


def bulk_subscribe(matcher: CSTrieMatcher) -> Callable[[pa.Array, pa.Array], object] | None:
    """``matcher.subscribe_many`` if this checkout has it, else None (the report then says n/a)."""
    method: Callable[[pa.Array, pa.Array], object] | None = getattr(matcher, "subscribe_many", None)
    return method


def bulk_loop(
    label: str,
    subscribe_many: Callable[[pa.Array, pa.Array], object],
    patterns: pa.Array,
    subscribers: pa.Array,
    budget_s: float,
) -> tuple[LoadRun, int | None]:
    """``subscribe_many`` over the arrays in ``BULK_CALLS`` zero-copy slices, so ``budget_s`` can stop it.

    Returns the run and the sum of what the calls returned (pairs added), if they return ints.
    """
    total = len(patterns)
    step = max(1, -(-total // BULK_CALLS))
    done, added, counted = 0, 0, True
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        while done < total:
            length = min(step, total - done)
            result = subscribe_many(patterns.slice(done, length), subscribers.slice(done, length))
            if isinstance(result, int):
                added += result
            else:
                counted = False
            done += length
            elapsed = time.perf_counter() - wall
            if done < total and elapsed > budget_s:
                progress(f"  {label}: stopped at the {budget_s:g} s budget after {done:,} of {total:,} pairs")
                break
        return LoadRun(done, total, Timed(time.perf_counter() - wall, time.process_time() - cpu)), (
            added if counted else None
        )
    finally:
        if was_enabled:
            gc.enable()


def faster(best: LoadRun | None, run: LoadRun) -> bool:
    """Whether ``run`` replaces ``best`` as the kept run of its kind (the fastest, by CPU time)."""
    return best is None or run.time.cpu_s < best.time.cpu_s


def measure_row(shape: str, n: int, rng: random.Random, args: argparse.Namespace) -> Row:
    """One (shape, n): a function, so its tries die with it before the next size.

    The loads run in ``--load-repeats`` interleaved rounds, each a TrieMatcher loop, a CSTrieMatcher loop and a
    bulk load into fresh matchers, and the fastest of each kind is kept. Run one kind after another, a slow
    minute of the shared host hit every sample of one kind and none of the other, and the ratios between
    kinds (the targets) moved by half from run to run. A kind whose load stops at ``--budget`` is not repeated.
    """
    row = Row(shape, n, load_average())
    patterns, subscribers = shape_pairs(shape, n, rng)
    label = f"{shape} n={n:,}"
    trie: TrieMatcher | None = None
    single: CSTrieMatcher | None = None
    bulk_loaded: CSTrieMatcher | None = None
    single_wanted = "single" not in args.skip
    bulk_wanted = "bulk" not in args.skip
    pattern_array = pa.array(patterns, pa.string()) if bulk_wanted else None
    subscriber_array = pa.array(subscribers, pa.string()) if bulk_wanted else None
    rounds = max(1, args.load_repeats)
    warmups = max(0, args.warmup_rounds)
    for round_number in range(1 - warmups, rounds + 1):
        # Warm-up rounds (numbered up to 0) run every kind the same way, and keep each kind's latest matcher alive
        # as a timed round keeps its fastest, so that the timed rounds start from the heap they will run in.
        # Their times are not kept.
        warm = round_number <= 0
        name = f"warm-up round {round_number + warmups} of {warmups}" if warm else f"round {round_number} of {rounds}"
        if single_wanted and (warm or row.trie_single is None or row.trie_single.complete):
            progress(f"{label}: TrieMatcher subscribe loop ({name})")
            matcher = TrieMatcher()
            run = subscribe_loop(f"{label} TrieMatcher", matcher.subscribe, patterns, subscribers, args.budget)
            if warm:
                trie = matcher if run.complete else None
            elif faster(row.trie_single, run):
                row.trie_single, trie = run, (matcher if run.complete else None)
            del matcher
        if single_wanted and (warm or row.cs_single is None or row.cs_single.complete):
            progress(f"{label}: CSTrieMatcher subscribe loop ({name})")
            native = CSTrieMatcher()
            run = subscribe_loop(f"{label} CSTrieMatcher", native.subscribe, patterns, subscribers, args.budget)
            check_count(f"{label} CSTrieMatcher single", len(native), run.done)
            if warm:
                single = native if run.complete else None
            elif faster(row.cs_single, run):
                row.cs_single, single = run, (native if run.complete else None)
            del native
        if bulk_wanted and not row.bulk_note and (warm or row.bulk is None or row.bulk.complete):
            assert pattern_array is not None and subscriber_array is not None
            progress(f"{label}: CSTrieMatcher.subscribe_many ({name})")
            target = CSTrieMatcher()
            subscribe_many = bulk_subscribe(target)
            if subscribe_many is None:
                row.bulk_note = "n/a: CSTrieMatcher.subscribe_many is not in this checkout"
                continue
            try:
                run, added = bulk_loop(
                    f"{label} subscribe_many", subscribe_many, pattern_array, subscriber_array, args.budget
                )
            except AttributeError as error:  # the Python wrapper is newer than the built extension
                row.bulk_note = f"n/a: {error} (rebuild with `make native`)"
                continue
            if added is not None:
                check_count(f"{label} subscribe_many's return", added, run.done)
            check_count(f"{label} CSTrieMatcher bulk", len(target), run.done)
            if warm:
                bulk_loaded = target if run.complete else None
            elif faster(row.bulk, run):
                row.bulk, bulk_loaded = run, (target if run.complete else None)
            del target
    del pattern_array, subscriber_array
    # Freeze the bulk-loaded trie when there is one (as the driver's full load makes it), else the single one.
    loaded: CSTrieMatcher | None = None
    if bulk_loaded is not None:
        loaded, row.freeze_source = bulk_loaded, "subscribe_many"
    elif single is not None:
        loaded, row.freeze_source = single, "single subscribes"
    del bulk_loaded, single

    if "freeze" not in args.skip and loaded is None and (row.cs_single or row.bulk):
        row.freeze_source = "n/a: no load finished within --budget"
    elif "freeze" not in args.skip:
        if loaded is None:
            progress(f"{label}: loading a CSTrieMatcher for freeze (untimed: the loading sections were skipped)")
            loaded, row.freeze_source = CSTrieMatcher(), "an untimed subscribe loop"
            for pattern, subscriber in zip(patterns, subscribers, strict=True):
                loaded.subscribe(pattern, subscriber)
        progress(f"{label}: freeze, to_bytes, from_bytes (best of {args.repeats})")
        source = loaded
        row.freeze, frozen_any = best_of(args.repeats, source.freeze)
        frozen: FrozenMatcher = frozen_any  # type: ignore[assignment]
        row.to_bytes, data_any = best_of(args.repeats, frozen.to_bytes)
        data: bytes = data_any  # type: ignore[assignment]
        row.from_bytes, decoded_any = best_of(args.repeats, lambda: FrozenMatcher.from_bytes(data))
        decoded: FrozenMatcher = decoded_any  # type: ignore[assignment]
        row.frozen_pairs, row.serialized_bytes = len(frozen), len(data)
        check_count(f"{label} frozen", len(frozen), n)
        check_count(f"{label} decoded", len(decoded), n)
        if trie is not None:
            check_lookups(label, trie, decoded, patterns)
    return row


class BenchmarkError(RuntimeError):
    """A loaded matcher disagrees with what was loaded: the figures would be meaningless."""


def check_count(what: str, got: int, expected: int) -> None:
    if got != expected:
        raise BenchmarkError(f"{what}: {got:,} pairs, expected {expected:,}")


def check_lookups(label: str, trie: TrieMatcher, frozen: FrozenMatcher, patterns: Sequence[str]) -> None:
    step = max(1, len(patterns) // CHECKED_KEYS)
    keys = sorted({matching_key(pattern) for pattern in patterns[::step]})
    for key in keys:
        if frozen.lookup(key) != trie.lookup(key):
            raise BenchmarkError(f"{label}: the frozen matcher and TrieMatcher disagree on {key!r}")


def loading_sections(report: Report, args: argparse.Namespace) -> None:
    rows = report.rows
    if "single" not in args.skip:
        table = markdown_table(
            [
                "shape",
                "n",
                "load (1 min)",
                "CSTrieMatcher subscribes/s (CPU)",
                "TrieMatcher subscribes/s (CPU)",
                "ratio CS / Trie",
            ],
            [
                [
                    SHAPES[r.shape],
                    f"{r.n:,}",
                    f"{r.load:.1f}",
                    rate_cell(r.cs_single),
                    rate_cell(r.trie_single),
                    times(r.cs_single.cpu_rate / r.trie_single.cpu_rate) if r.cs_single and r.trie_single else "n/a",
                ]
                for r in rows
            ],
        )
        report.add(
            "Single subscribes from Python",
            table,
            "One `subscribe(pattern, subscriber)` call per pair in a Python loop, on an empty matcher, GC off. "
            f"Rates are pairs per CPU second (wall clock in brackets). A loop stops after {args.budget:g} s "
            f"(`--budget`); its rate then covers the pairs done so far. Each loop runs {args.load_repeats} times "
            f"on fresh matchers (`--load-repeats`), after {args.warmup_rounds} untimed rounds (`--warmup-rounds`), "
            "and the fastest is kept. The runs are interleaved: each round "
            "makes one TrieMatcher loop, one CSTrieMatcher loop and one bulk load, so that a slow spell of the "
            "shared host hits one sample of each kind rather than every sample of one.",
        )
    if "bulk" not in args.skip:
        table = markdown_table(
            ["shape", "n", "subscribe_many time (CPU)", "bulk subscribes/s (CPU)", "vs TrieMatcher loop"],
            [
                [
                    SHAPES[r.shape],
                    f"{r.n:,}",
                    f"{seconds(r.bulk.time.cpu_s)} (wall {seconds(r.bulk.time.wall_s)})"
                    if r.bulk
                    else r.bulk_note or "n/a",
                    rate_cell(r.bulk),
                    times(r.bulk.cpu_rate / r.trie_single.cpu_rate) if r.bulk and r.trie_single else "n/a",
                ]
                for r in rows
            ],
        )
        report.add(
            "Bulk subscribes (subscribe_many from Arrow)",
            table,
            "`CSTrieMatcher.subscribe_many(patterns, subscribers)` on two `pa.string()` arrays of n rows into an "
            f"empty trie, in {BULK_CALLS} call(s) (as the driver's full load makes it), the fastest of "
            f"{args.load_repeats} loads into fresh tries (`--load-repeats`, in the same rounds as the loops it is "
            f"compared with, after the same {args.warmup_rounds} untimed rounds); "
            "building the arrays is not timed. CPU is the whole process's, so native worker threads, if any, are "
            "counted.",
        )
    if "freeze" not in args.skip:
        table = markdown_table(
            [
                "shape",
                "n",
                "freeze() (CPU)",
                "to_bytes() (CPU)",
                "from_bytes() (CPU)",
                "freeze / (to_bytes + from_bytes)",
                "bytes",
                "bytes / subscription",
                "trie loaded by",
            ],
            [
                [
                    SHAPES[r.shape],
                    f"{r.n:,}",
                    seconds(r.freeze.cpu_s if r.freeze else None),
                    seconds(r.to_bytes.cpu_s if r.to_bytes else None),
                    seconds(r.from_bytes.cpu_s if r.from_bytes else None),
                    f"{ratio:.2f}x" if (ratio := freeze_ratio(r)) is not None else "n/a",
                    fmt_bytes(r.serialized_bytes),
                    f"{r.serialized_bytes / max(r.frozen_pairs or 0, 1):.1f}" if r.serialized_bytes else "n/a",
                    r.freeze_source,
                ]
                for r in rows
            ],
        )
        report.add(
            "Freeze and serialize",
            table,
            f"Best of {args.repeats} runs each, process CPU time. `freeze()` of the loaded CSTrieMatcher, "
            "`to_bytes()` of that FrozenMatcher, `FrozenMatcher.from_bytes()` of those bytes.",
        )


def freeze_ratio(row: Row) -> float | None:
    if row.freeze is None or row.to_bytes is None or row.from_bytes is None:
        return None
    return row.freeze.cpu_s / max(row.to_bytes.cpu_s + row.from_bytes.cpu_s, 1e-9)


# --- 4. the seed's multithreaded workloads, from Rust threads -------------------------------------------------


def rust_command(args: argparse.Namespace) -> list[str]:
    return [
        args.cargo,
        "run",
        *(["--release"] if args.rust_profile == "release" else []),
        "--quiet",
        "--bin",
        RUST_BIN,
        "--",
        "--json",
        "--threads",
        args.rust_threads,
        "--warmup-ms",
        str(args.rust_warmup_ms),
        "--sample-ms",
        str(args.rust_sample_ms),
        "--samples",
        str(args.rust_samples),
        "--seed",
        str(args.seed),
    ]


def bench_rust(report: Report, args: argparse.Namespace) -> None:
    command = rust_command(args)
    if shutil.which(args.cargo) is None:
        report.rust_note = f"n/a: `{args.cargo}` not found, so the Rust workloads did not run"
        progress(report.rust_note)
        return
    progress(f"seed workloads from Rust threads: {shlex.join(command)} (in native/; builds first if needed)")
    # stderr is passed through: cargo's build output and the binary's progress lines.
    done = subprocess.run(command, cwd=NATIVE_DIR, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        report.rust_note = f"failed: `{shlex.join(command)}` exited with {done.returncode}"
        report.errors.append(report.rust_note)
        return
    report.rust = json.loads(done.stdout)


def rust_section(report: Report, profile: str) -> None:
    release = "--release " if profile == "release" else ""
    command = f"cd native && cargo run {release}--bin cstrie_workloads"
    if report.rust is None:
        report.text("Seed multithreaded workloads (Rust threads)", report.rust_note or "n/a")
        return
    data = report.rust
    rows = []
    for row in data["rows"]:
        hits = f"{100 * row['hits'] / row['lookups']:.1f}%" if row["lookups"] else "no lookups"
        rows.append(
            [
                f"`{row['name']}`",
                row["layout"],
                row["mix"][:2] + "/" + row["mix"][2:],
                str(row["threads"]),
                f"{row['ns_per_round']:,.0f}",
                f"{row['ns_per_operation']:,.1f}",
                fmt_rate(row["ops_per_second"]),
                f"{row['ops_per_round']:,}",
                f"{row['inserts']:,}",
                hits,
            ]
        )
    table = markdown_table(
        [
            "benchmark",
            "layout",
            "lookups/subscribes",
            "threads",
            "ns/op (one round)",
            "ns per operation",
            "ops/s",
            "operations per round",
            "inserts (timed rounds)",
            "lookup hits",
        ],
        rows,
    )
    fresh = "" if not data["fresh"] else " Run with `--fresh`: the items were unsubscribed between rounds."
    report.add(
        "Seed multithreaded workloads (Rust threads)",
        table,
        f"`{command}` (here with `--json`), {data['available_parallelism']} CPUs available. A trie holds "
        f"{data['populate']:,} random 5-word subscriptions (each word a random non-negative int63); every thread "
        f"has the same {data['items']:,} items `j%10.j%50.j` for subscriber `abc`. One round starts all threads "
        "at a barrier and ends when the last finishes; ns/op is ns per round, as in the seed's Go benchmarks. "
        "Thread 0 keeps the time (no separate timekeeper thread), and the barrier spins while every thread has "
        "a core of its own (a futex wake-up per round would time the OS scheduler, not the trie). "
        "**seed** layout: the seed's benchmark5050/9010 exactly, one role per thread (50/50: odd threads "
        "subscribe, even ones look up; 90/10: threads 0, 10, ... subscribe, the rest look up), so 1 thread in "
        "50/50 only looks up (all misses) and 1 thread in 90/10 only subscribes. **mixed** layout: every thread "
        "subscribes each item and then looks it up once (50/50) or nine times (90/10). As in the seed, rounds "
        "repeat the same pairs, so after the first round a subscribe finds its pair present (inserts column)."
        f"{fresh} Median of {data['samples']} samples of at least {data['sample_ms']} ms, each after "
        f"{data['warmup_ms']} ms of warm-up, taken in {data['samples']} passes over all configurations, so that "
        "a slow spell of the host hits one sample of each configuration rather than all of one.",
    )


def rust_rate(report: Report, layout: str, mix: str, threads: int) -> float | None:
    if report.rust is None:
        return None
    for row in report.rust["rows"]:
        if row["layout"] == layout and row["mix"] == mix and row["threads"] == threads:
            return float(row["ops_per_second"])
    return None


# --- 5. targets -----------------------------------------------------------------------------------------------


def verdict(value: float | None, limit: float, higher_is_better: bool, exact: bool = True) -> str:
    if value is None:
        return "n/a"
    ok = value >= limit if higher_is_better else value <= limit
    if not ok:
        return "fail"
    return "pass" if exact else "inconclusive (a loop stopped at --budget)"


def targets(report: Report, args: argparse.Namespace) -> list[list[str]]:
    rows: list[list[str]] = []
    by_shape: dict[str, list[Row]] = {}
    for row in report.rows:
        by_shape.setdefault(row.shape, []).append(row)
    for shape, shape_rows in by_shape.items():
        small, large = min(shape_rows, key=lambda r: r.n), max(shape_rows, key=lambda r: r.n)
        name = SHAPES[shape].split(" (")[0]
        sizes = f"{small.n:,} → {large.n:,}"
        if small is not large and small.cs_single and large.cs_single:
            slowdown = small.cs_single.cpu_rate / large.cs_single.cpu_rate
            exact = small.cs_single.complete and large.cs_single.complete
            rows.append(
                [
                    f"single subscribes/s, {name}, {sizes}",
                    f"within {MAX_SLOWDOWN_SMALL_TO_LARGE:.0f}x",
                    f"{fmt_rate(small.cs_single.cpu_rate)}/s → {fmt_rate(large.cs_single.cpu_rate)}/s "
                    f"(time per subscribe {times(slowdown)})",
                    verdict(slowdown, MAX_SLOWDOWN_SMALL_TO_LARGE, False, exact),
                ]
            )
        else:
            rows.append([f"single subscribes/s, {name}", "within 3x", "n/a (needs two sizes)", "n/a"])
        pairs = [(r.cs_single, r.trie_single) for r in shape_rows if r.cs_single and r.trie_single]
        if pairs:
            worst = min(cs.cpu_rate / trie.cpu_rate for cs, trie in pairs if cs and trie)
            exact = all(cs.complete and trie.complete for cs, trie in pairs if cs and trie)
            rows.append(
                [
                    f"single subscribe vs TrieMatcher, {name} (worst size)",
                    f"≥ {MIN_SINGLE_VS_TRIE}x",
                    times(worst),
                    verdict(worst, MIN_SINGLE_VS_TRIE, True, exact),
                ]
            )
        if large.bulk and large.trie_single:
            speedup = large.bulk.cpu_rate / large.trie_single.cpu_rate
            rows.append(
                [
                    f"bulk load of {large.n:,} pairs vs TrieMatcher loop, {name}",
                    f"≥ {MIN_BULK_VS_TRIE_LOOP:.0f}x",
                    times(speedup),
                    verdict(speedup, MIN_BULK_VS_TRIE_LOOP, True, large.trie_single.complete and large.bulk.complete),
                ]
            )
        else:
            note = large.bulk_note or "not measured"
            rows.append([f"bulk load of {large.n:,} pairs vs TrieMatcher loop, {name}", "≥ 10x", note, "n/a"])
        ratio = freeze_ratio(large)
        rows.append(
            [
                f"freeze vs to_bytes + from_bytes at {large.n:,}, {name}",
                f"≤ {MAX_FREEZE_VS_SERIALIZE:.0f}x",
                times(ratio) if ratio is not None else "n/a",
                verdict(ratio, MAX_FREEZE_VS_SERIALIZE, False),
            ]
        )
    for layout, label in (("seed", "the seed's 90/10 (writer + reader vs writer)"), ("mixed", "mixed 90/10")):
        one, two = rust_rate(report, layout, "9010", 1), rust_rate(report, layout, "9010", 2)
        scaling = two / one if one and two else None
        rows.append(
            [
                f"{label}, ops/s at 2 threads vs 1 (Rust{'' if args.rust_profile == 'release' else ', dev build'})",
                f"≥ {MIN_TWO_THREAD_SPEEDUP}x",
                times(scaling) if scaling is not None else "n/a",
                verdict(scaling, MIN_TWO_THREAD_SPEEDUP, True),
            ]
        )
    report.add(
        "Targets",
        markdown_table(["target (issue 9, Done when)", "goal", "measured", "verdict"], rows),
        "From this run only. Single-thread ratios use CPU time. The 10k → 1M targets need "
        f"`--sizes {','.join(str(s) for s in FULL_SIZES)}`; with other sizes the rows compare the smallest and "
        "largest run and are only indicative.",
    )
    return rows


# --- output ---------------------------------------------------------------------------------------------------


def chart(report: Report, path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    shapes = list(dict.fromkeys(r.shape for r in report.rows))
    colours = dict(zip(SHAPES, ("tab:blue", "tab:orange", "tab:green"), strict=True))

    def series(shape: str, value: Callable[[Row], float | None]) -> tuple[list[int], list[float]]:
        points = [(r.n, v) for r in report.rows if r.shape == shape and (v := value(r)) is not None]
        return [n for n, _ in points], [v for _, v in points]

    single, bulk, freeze, rust = axes[0][0], axes[0][1], axes[1][0], axes[1][1]
    plotted: set[int] = set()

    def line(axis: Any, xs: list[int], ys: list[float], **style: Any) -> None:
        # Only points that exist: a log axis with nothing (or only zeros) on it fails the layout.
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y > 0]
        if points:
            axis.plot([x for x, _ in points], [y for _, y in points], **style)
            plotted.add(id(axis))

    for shape in shapes:
        colour = colours[shape]
        name = SHAPES[shape].split(" (")[0]
        xs, ys = series(shape, lambda r: r.cs_single.cpu_rate if r.cs_single else None)
        line(single, xs, ys, marker="o", color=colour, label=f"{name}: CSTrieMatcher")
        xs, ys = series(shape, lambda r: r.trie_single.cpu_rate if r.trie_single else None)
        line(single, xs, ys, marker="s", linestyle="--", color=colour, label=f"{name}: TrieMatcher")
        line(bulk, xs, ys, marker="s", linestyle="--", color=colour, label=f"{name}: TrieMatcher loop")
        xs, ys = series(shape, lambda r: r.bulk.cpu_rate if r.bulk else None)
        line(bulk, xs, ys, marker="o", color=colour, label=f"{name}: subscribe_many")
        xs, ys = series(shape, lambda r: r.freeze.cpu_s if r.freeze else None)
        line(freeze, xs, ys, marker="o", color=colour, label=f"{name}: freeze()")
        xs, ys = series(shape, lambda r: r.to_bytes.cpu_s + r.from_bytes.cpu_s if r.to_bytes and r.from_bytes else None)
        line(freeze, xs, ys, marker="s", linestyle="--", color=colour, label=f"{name}: to_bytes + from_bytes")
    for axis, title, ylabel in (
        (single, "Single subscribes from Python", "subscribes / CPU s"),
        (bulk, "Bulk load (subscribe_many) vs TrieMatcher loop", "subscribes / CPU s"),
        (freeze, "Freeze vs serialize round trip", "CPU s"),
    ):
        axis.set_xlabel("subscriptions (n)")
        axis.set_ylabel(ylabel)
        axis.set_title(title)
        if id(axis) in plotted:
            axis.set_xscale("log")
            axis.set_yscale("log")
            axis.legend(fontsize=7)
    if report.rust is not None:
        data = report.rust["rows"]
        labels = [f"{r['layout']} {r['mix'][:2]}/{r['mix'][2:]} x{r['threads']}" for r in data]
        rust.barh(labels, [r["ns_per_operation"] for r in data])
        rust.invert_yaxis()
        rust.set_xlabel("ns per operation (lower is better)")
        rust.set_title("Seed multithreaded workloads, Rust threads")
    else:
        rust.set_title("Seed multithreaded workloads: not run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def header(record: RunRecord) -> str:
    return "\n".join(
        [
            "# Subscription write benchmarks",
            "",
            f"{record.line()} Each loading row also gives the "
            "1-minute load when it started. Anything above about 0.5 means other work shared the CPUs, and "
            "wall-clock figures suffer first.",
        ]
    )


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from error
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def parse_shapes(text: str) -> list[str]:
    shapes = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown or not shapes:
        raise argparse.ArgumentTypeError(f"shapes are {', '.join(SHAPES)}; got {text!r}")
    return shapes


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Subscription writes at scale (issue 9): single and bulk subscribes, freeze and serialize, "
        "and the seed's multithreaded workloads from Rust threads. Markdown on stdout and in "
        "bench/results/subscriptions.md, a chart in bench/results/subscriptions.png, progress on stderr. "
        f"Full run: --sizes {','.join(str(s) for s in FULL_SIZES)}.",
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated n (pairs per shape); default %(default)s (quick); the issue's run is "
        + ",".join(str(s) for s in FULL_SIZES),
    )
    parser.add_argument(
        "--shapes", type=parse_shapes, default=list(SHAPES), help="comma-separated, of wide,hot,realistic (all)"
    )
    parser.add_argument("--seed", type=int, default=20241121, help="random seed (default %(default)s)")
    parser.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds after which a single-subscribe loop stops (default %(default)s)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of freeze/to_bytes/from_bytes, best kept (default %(default)s)"
    )
    parser.add_argument(
        "--load-repeats",
        type=int,
        default=DEFAULT_LOAD_REPEATS,
        help="runs of every load (both matchers' single-subscribe loops, the bulk load), each into a fresh "
        "matcher, fastest kept (default %(default)s)",
    )
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=DEFAULT_WARMUP_ROUNDS,
        help="untimed rounds of every load before the timed ones (default %(default)s)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["single", "bulk", "freeze", "rust"],
        help="leave a section out (repeatable)",
    )
    rust = parser.add_argument_group("seed multithreaded workloads (Rust: native/core/src/bin/cstrie_workloads.rs)")
    rust.add_argument("--cargo", default="cargo", help="cargo executable (default %(default)s)")
    rust.add_argument("--rust-threads", default="1,2,4", help="thread counts (default %(default)s)")
    rust.add_argument(
        "--rust-profile",
        choices=("release", "dev"),
        default="release",
        help="cargo profile of the binary (default %(default)s; dev, unoptimized, only to check that it runs: "
        "`cargo test` has built it already)",
    )
    rust.add_argument("--rust-warmup-ms", type=int, default=300, help="warm-up per case (default %(default)s)")
    rust.add_argument("--rust-sample-ms", type=int, default=500, help="minimum sample length (default %(default)s)")
    rust.add_argument(
        "--rust-samples",
        type=int,
        default=5,
        help="passes over every case, one sample each, median kept (default %(default)s)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where subscriptions.md/.png go")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    record = RunRecord.start(__file__, argv)
    rng = random.Random(args.seed)
    report = Report()
    progress(f"sizes {args.sizes}, shapes {args.shapes}; load average {record.load_before[0]:.2f}")
    if {"single", "bulk", "freeze"} - set(args.skip):
        for shape in args.shapes:
            for n in args.sizes:
                report.rows.append(measure_row(shape, n, rng, args))
                gc.collect()
        loading_sections(report, args)
    if "rust" not in args.skip:
        bench_rust(report, args)
        rust_section(report, args.rust_profile)
    for row in targets(report, args):
        progress(f"target: {row[0]}: {row[2]} (goal {row[1]}): {row[3]}")
    markdown = header(record) + "\n\n" + "\n\n".join(report.sections) + "\n"
    if report.errors:
        markdown += "\n## Errors\n\n" + "\n".join(f"- {error}" for error in report.errors) + "\n"
    print(markdown)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "subscriptions.md").write_text(markdown, encoding="utf-8")
    chart(report, args.out_dir / "subscriptions.png")
    progress(f"wrote {args.out_dir / 'subscriptions.md'} and {args.out_dir / 'subscriptions.png'}")
    return 1 if report.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark harness: the matchers under test, per-operation timing, memory probes, tables.

The harness knows nothing about particular workloads (those live in
``bench/matchers.py``). A matcher under test is a :class:`Contender`: a name,
a factory for an empty matcher, and optionally a ``reader`` that turns a
populated matcher into the object lookups run against (how the native
``FrozenMatcher`` plugs in: populate a ``CSTrieMatcher``, freeze it, look up on
the frozen copy). Further matchers plug in by adding a contender to
:func:`contenders`.

Timings use ``time.perf_counter_ns``: each measurement runs an operation in a
loop calibrated to last at least ``min_seconds`` and reports the median of
``repeats`` such loops, in nanoseconds per operation.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol


class Reader(Protocol):
    def lookup(self, key: str) -> frozenset[str]: ...


class Writer(Reader, Protocol):
    def subscribe(self, pattern: str, subscriber: str) -> None: ...

    def unsubscribe(self, pattern: str, subscriber: str) -> None: ...


@dataclasses.dataclass(frozen=True)
class Contender:
    """One row of every table.

    ``reader`` is None for ordinary matchers (lookups run on the matcher
    itself). When set, it maps a populated matcher to the read-only object
    that lookups run on, and the contender has no subscribe/unsubscribe
    figures of its own.
    """

    name: str
    factory: Callable[[], Writer]
    reader: Callable[[Writer], Reader] | None = None
    #: The seed article's name for this algorithm, if it published figures for it.
    seed_name: str | None = None
    #: Short remark printed under the tables (e.g. how the row was built).
    note: str = ""

    @property
    def writes(self) -> bool:
        return self.reader is None

    def populated(self, pairs: Sequence[tuple[str, str]]) -> Reader:
        """A matcher holding ``pairs``, as the object lookups should run on."""
        matcher = self.factory()
        for pattern, subscriber in pairs:
            matcher.subscribe(pattern, subscriber)
        return matcher if self.reader is None else self.reader(matcher)


def native_available() -> tuple[bool, str]:
    """Whether the Rust extension imports; the reason if not."""
    try:
        importlib.import_module("routing._native")
        importlib.import_module("routing.matchers.native")
    except ImportError as error:
        return False, f"native extension not built ({error}); CSTrieMatcher and FrozenMatcher rows skipped"
    return True, ""


def _freeze(matcher: Writer) -> Reader:
    frozen: Reader = matcher.freeze()  # type: ignore[attr-defined]
    return frozen


def contenders() -> tuple[list[Contender], list[str]]:
    """Every matcher to benchmark, and notes on any that were skipped."""
    from routing.matchers import (
        InvertedBitmapMatcher,
        NaiveMatcher,
        OptimizedInvertedBitmapMatcher,
        TrieMatcher,
    )

    rows = [
        Contender("naive", NaiveMatcher, seed_name="naive"),
        Contender(
            "inverted bitmap",
            InvertedBitmapMatcher,
            seed_name="inverted bitmap",
            note="no topic space given up front: each new key is indexed on its first lookup, which scans every "
            "subscription (the seed's reindexing cost; included in the throughput figures). Hot: the 1,000 hot "
            "topics are indexed, so each subscribe runs 1,000 pattern matches.",
        ),
        Contender("optimized inverted bitmap", OptimizedInvertedBitmapMatcher, seed_name="optimized inverted bitmap"),
        Contender("trie", TrieMatcher, seed_name="trie"),
    ]
    notes: list[str] = []
    ok, why = native_available()
    if ok:
        native: Any = importlib.import_module("routing.matchers")
        rows.append(Contender("cs-trie (CSTrieMatcher)", native.CSTrieMatcher, seed_name="cs-trie"))
        rows.append(
            Contender(
                "FrozenMatcher (frozen from CSTrieMatcher)",
                native.CSTrieMatcher,
                reader=_freeze,
                note="read-only: populated through a CSTrieMatcher, then frozen; lookups only",
            )
        )
    else:
        notes.append(why)
    return rows, notes


# --- timing ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Timed:
    wall_s: float
    cpu_s: float


def timed(operation: Callable[[], object], cpu_clock: Callable[[], float] = time.thread_time) -> tuple[Timed, object]:
    """Run once with GC off: wall clock and ``cpu_clock`` (this thread's CPU by default; pass
    ``time.process_time`` to count native worker threads too), and the operation's result."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        cpu, wall = cpu_clock(), time.perf_counter()
        result = operation()
        return Timed(time.perf_counter() - wall, cpu_clock() - cpu), result
    finally:
        if was_enabled:
            gc.enable()


def best_of(
    repeats: int, operation: Callable[[], object], cpu_clock: Callable[[], float] = time.thread_time
) -> tuple[Timed, object]:
    """Per-field minimum over ``repeats`` runs (the least disturbed), and the last run's result.

    Each run's result is dropped before the next run starts, so every run allocates into the same heap. Kept,
    a 1M-pair freeze's three results (tens of MB each) made each later run fault in fresh pages: the wide
    freeze then measured 1.07 s in the benchmark against 0.60-0.62 s for the same freeze repeated alone.
    """
    times: list[Timed] = []
    result: object = None
    for _ in range(max(1, repeats)):
        result = None  # the previous run's result, freed before this run
        run_time, result = timed(operation, cpu_clock)
        times.append(run_time)
    best = Timed(min(t.wall_s for t in times), min(t.cpu_s for t in times))
    return best, result


def ns_per_op(operation: Callable[[], object], *, min_seconds: float, repeats: int = 3) -> float:
    """Median ns per call of ``operation`` over ``repeats`` loops of at least ``min_seconds`` each."""
    # Calibrate: double the loop count until one loop lasts a tenth of the target.
    loops = 1
    while True:
        elapsed = _time_loop(operation, loops)
        if elapsed >= min_seconds * 1e9 / 10 or loops >= 1 << 24:
            break
        loops *= 2
    loops = max(1, int(loops * (min_seconds * 1e9) / max(elapsed, 1)))
    samples = [_time_loop(operation, loops) / loops for _ in range(repeats)]
    return statistics.median(samples)


def _time_loop(operation: Callable[[], object], loops: int) -> float:
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for _ in range(loops):
            operation()
        return time.perf_counter_ns() - start
    finally:
        if gc_was_enabled:
            gc.enable()


def run_lookups(reader: Reader, keys: Sequence[str]) -> float:
    """Seconds to look up every key once, in order (one thread)."""
    lookup = reader.lookup
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for key in keys:
            lookup(key)
        return time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()


# --- formatting -----------------------------------------------------------------------------------------------


def fmt_ns(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f} ns"
    return f"{value:,.1f} ns"


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def fmt_bytes(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(text: str, output: Path) -> Path:
    """Print a benchmark's Markdown report and write it to ``output`` (its folder made); the path of its chart."""
    print(text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    return output.with_suffix(".png")

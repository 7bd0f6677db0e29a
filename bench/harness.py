"""The part every benchmark shares: its run's record, tables and charts, timing, and the Spark/broker setup.

Each ``bench/*.py`` answers one question (its docstring says which, on what workload, how to run it and what
it prints); what they all need lives here, once:

* **a run's record** (:class:`RunRecord`): the command, the date, the machine and the load average before and
  after, the first line under every results file's title; :func:`progress` lines on stderr;
* **tables and charts**: :func:`markdown_table`, the ``fmt_*`` cells, :func:`write_report` (stdout and
  ``bench/results/<name>.md``), :func:`pyplot` (matplotlib without a display);
* **timing**: :func:`timed`, :func:`best_of`, :func:`ns_per_op`, :func:`run_lookups` (``time.perf_counter``,
  the garbage collector off while timing);
* **the matchers under test** (:class:`Contender`, :func:`contenders`): a name, a factory for an empty matcher,
  and optionally a ``reader`` that turns a populated matcher into the object lookups run against (how the
  native ``FrozenMatcher`` plugs in: populate a ``CSTrieMatcher``, freeze it, look up on the frozen copy);
* **Spark and the broker** of the streaming benchmarks: a broker of the bench's own (:func:`bench_kafka`),
  cleaning up after it (:func:`delete_earlier_topics`, :func:`stop_broker_once_topics_gone`), Python workers
  that run this checkout (:func:`python_workers_run_this_checkout`), and the CPU the Spark JVM and its Python
  workers use (:func:`process_cpu`).

Workloads (patterns and keys) are not here: ``bench/workloads.py`` and each benchmark's own.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import importlib
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

#: Where every benchmark writes its results file and chart (``--results-dir``/``--out-dir`` elsewhere).
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: The checkout the benchmarks run from (its ``var/`` holds their work directories).
REPO_ROOT = Path(__file__).resolve().parents[1]
_START = time.perf_counter()

#: 1-, 5- and 15-minute load averages.
LoadAverage = tuple[float, float, float]


# --- a run's record -------------------------------------------------------------------------------------------


def progress(message: str) -> None:
    """One progress line on stderr, with the seconds since the benchmark started."""
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def load_average() -> LoadAverage:
    return os.getloadavg()


def format_load(load: LoadAverage) -> str:
    return "/".join(f"{value:.2f}" for value in load)


@dataclasses.dataclass
class RunRecord:
    """What a results file says of the run that wrote it: the command, when, on what, and the load beside it.

    Made before the benchmark starts anything (:meth:`start`), so ``load_before`` says what else the machine
    was doing; :meth:`line` reads the load again at the end (the run's own, plus whatever else ran meanwhile).
    """

    command: str
    started: datetime.datetime
    load_before: LoadAverage

    @classmethod
    def start(cls, script: str, argv: Sequence[str]) -> RunRecord:
        """``script`` is the benchmark's ``__file__``; ``argv`` its arguments, as given."""
        name = Path(script).resolve()
        shown = name.relative_to(REPO_ROOT) if name.is_relative_to(REPO_ROOT) else name
        return cls(shlex.join(["python", str(shown), *argv]), datetime.datetime.now(datetime.UTC), load_average())

    def line(self, load_after: LoadAverage | None = None) -> str:
        """The record as one Markdown line: command, date, machine, load average (1/5/15 min) before and after."""
        after = load_average() if load_after is None else load_after
        return (
            f"`{self.command}` on {self.started:%Y-%m-%d %H:%M} UTC; Python {platform.python_version()} on "
            f"{platform.machine()}, {os.cpu_count()} CPUs; load average (1/5/15 min) "
            f"{format_load(self.load_before)} before, {format_load(after)} after."
        )


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


def section_rows(report: str, title: str) -> list[list[str]]:
    """The cells of the first table under the heading that starts with ``## title`` (header row dropped): a report
    read back, as its tests and anything comparing two results files do."""
    if f"## {title}" not in report:
        raise ValueError(f"no section {title!r}")
    body = report.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def write_report(text: str, output: Path) -> Path:
    """Print a benchmark's Markdown report and write it to ``output`` (its folder made); the path of its chart."""
    print(text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    return output.with_suffix(".png")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend: charts are written to files, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --- Spark and the broker -------------------------------------------------------------------------------------


def bench_kafka(name: str, port: int) -> dict[str, str]:
    """A broker of the benchmark's own: ``kafka.*`` overrides with ``port`` (clients) and ``port + 1``
    (controller), data in ``var/bench/<name>``. Other users of the default broker neither disturb nor are
    disturbed, and one benchmark stopping the broker it started does not end another's run."""
    return {"client_port": str(port), "controller_port": str(port + 1), "data_dir": str(REPO_ROOT / "var/bench" / name)}


def delete_earlier_topics(settings: Settings, prefix: str) -> None:
    """Delete the topics under ``prefix`` that runs killed before their cleanup left behind (gigabytes each)."""
    from jobs.demo import delete_topics, topics_with_prefix

    stale = topics_with_prefix(settings, prefix)
    if stale:
        progress(f"deleting {len(stale)} topic(s) left by earlier runs: {', '.join(stale)}")
        delete_topics(settings, stale)


def stop_broker_once_topics_gone(settings: Settings, topics: Sequence[str]) -> None:
    """Stop the broker this run started once the files of its deleted ``topics`` are gone (a stopped broker
    would keep them on disk until its next start)."""
    from jobs import local_kafka

    if left := local_kafka.wait_for_topic_files_gone(settings, topics):
        progress(f"{len(left)} deleted partition directories still on disk (gone at the next broker start)")
    local_kafka.stop(settings)
    progress("broker stopped")


def python_workers_run_this_checkout() -> None:
    """PySpark's Python workers (the router's UDF) run this interpreter and import this checkout."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))


@dataclasses.dataclass(frozen=True)
class ProcessCpu:
    """CPU seconds (user + system) used so far by the Spark JVM and by PySpark's Python workers, and the parts of
    the JVM's that its JIT compiler threads, its garbage collector threads and its executor task threads used
    (:data:`JVM_THREAD_KINDS`). Each part counts only threads alive when read (a JVM may stop an idle compiler
    thread, whose time then leaves its sum): a lower bound."""

    jvm_s: float
    python_s: float
    #: Of ``jvm_s``: the C1 and C2 compiler threads'.
    jit_s: float = 0.0
    #: Of ``jvm_s``: the garbage collector's threads' (its workers, G1's concurrent threads, the VM thread that
    #: runs each collection's safepoint).
    gc_s: float = 0.0
    #: Of ``jvm_s``: the executor's task threads' (in local mode: the tasks' JVM work, the Python UDF's
    #: Arrow round trip included, the Python worker's own time not).
    tasks_s: float = 0.0

    def __sub__(self, earlier: ProcessCpu) -> ProcessCpu:
        return ProcessCpu(
            *(now - then for now, then in zip(dataclasses.astuple(self), dataclasses.astuple(earlier), strict=True))
        )

    @property
    def rest_s(self) -> float:
        """Of ``jvm_s``: what none of the parts counted (mostly the driver; an upper bound, as they are lower ones)."""
        return self.jvm_s - self.jit_s - self.gc_s - self.tasks_s


#: What PySpark's Python worker processes run (the daemon, and the workers it forks, which keep its command line).
PYSPARK_DAEMON = b"pyspark.daemon"
#: The JVM threads :class:`ProcessCpu` sums apart, by kind, as /proc names them (their first 15 characters):
#: HotSpot's JIT compiler threads ("C2 CompilerThread0"); the collector's (G1's or the parallel collector's
#: "GC Thread#0", G1's "G1 Conc#0", "G1 Refine#0" and others, and the "VM Thread" that runs their pauses);
#: Spark's executor task threads ("Executor task launch worker for task 12" while a task runs; /proc shows
#: "Executor task i" for the same threads between tasks, when the bench reads them).
JVM_THREAD_KINDS: dict[str, tuple[str, ...]] = {
    "jit": ("C1 CompilerThre", "C2 CompilerThre"),
    "gc": ("GC Thread", "G1 ", "VM Thread"),
    "tasks": ("Executor task ",),
}


def _stat_times(stat: str) -> tuple[int, int]:
    """(own, reaped children's) CPU ticks from a ``/proc/.../stat`` line: utime + stime (fields 14, 15), cutime +
    cstime (16, 17)."""
    from routing.processes import stat_fields

    fields = stat_fields(stat)
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def process_cpu(jvm_pid: int, proc: Path = Path("/proc")) -> ProcessCpu:
    """The CPU the JVM ``jvm_pid`` (in local mode the driver and the executors' task threads) and the Python
    workers have used, from ``/proc/<pid>/stat`` (Linux), and the JVM's threads of each
    :data:`JVM_THREAD_KINDS`, from its ``task/<tid>/stat``.

    The JVM's own time only: the Python daemon is its child, counted apart. For the Python side, each live
    process of the daemon's command line counts its own time, and the daemon also its reaped workers'
    (``cutime``/``cstime``), so a worker that exits between two readings is neither lost nor counted twice.
    """
    tick = os.sysconf("SC_CLK_TCK")
    jvm = python = 0
    kinds = dict.fromkeys(JVM_THREAD_KINDS, 0)
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
            cmdline = b"" if pid == jvm_pid else (entry / "cmdline").read_bytes()
        except OSError:  # the process exited meanwhile
            continue
        own, reaped = _stat_times(stat)
        if pid == jvm_pid:
            jvm += own
            kinds = _thread_ticks(entry / "task")
        elif PYSPARK_DAEMON in cmdline:
            python += own + reaped
    return ProcessCpu(jvm / tick, python / tick, **{f"{kind}_s": ticks / tick for kind, ticks in kinds.items()})


def _thread_ticks(tasks: Path) -> dict[str, int]:
    """CPU ticks of the threads of each :data:`JVM_THREAD_KINDS` among ``tasks`` (a JVM's ``/proc/<pid>/task``)."""
    ticks = dict.fromkeys(JVM_THREAD_KINDS, 0)
    for task in tasks.iterdir() if tasks.is_dir() else ():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread exited meanwhile
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        for kind, prefixes in JVM_THREAD_KINDS.items():
            if name.startswith(prefixes):
                ticks[kind] += _stat_times(stat)[0]
                break
    return ticks


def jvm_gc_totals(spark: SparkSession) -> tuple[int, int]:
    """Collections and milliseconds the session's JVM has spent in its garbage collectors so far (classic Spark;
    in local mode, the driver's and the executors')."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()  # type: ignore[union-attr]
    collections = milliseconds = 0
    for bean in beans:
        collections += max(0, int(bean.getCollectionCount()))
        milliseconds += max(0, int(bean.getCollectionTime()))
    return collections, milliseconds


def jvm_pid(spark: SparkSession) -> int:
    """The pid of the session's JVM (classic Spark; the driver and, in local mode, the executors)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]


def positive_int_list(text: str) -> tuple[int, ...]:
    """An argparse ``type``: comma-separated positive integers, as a sorted tuple without repeats."""
    import argparse

    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return tuple(sorted(set(values)))

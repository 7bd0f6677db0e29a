"""Can coverage-guided fuzzing make the native matcher crash, hang, run out of memory or leak?

Every cargo-fuzz target of ``native/fuzz/`` runs for a set time on inputs a deployment cannot rule out:
arbitrary keys and patterns from producers and subscribers, and arbitrary bytes where a snapshot is decoded.

``make fuzz`` runs ``python bench/fuzz.py --minutes $(FUZZ_MINUTES)`` (default 10 minutes per
target; ``--help`` for every flag). For each target in ``native/fuzz/fuzz_targets/``, in turn:

1. a working corpus is assembled in a temporary directory from the committed corpus
   (``native/fuzz/corpus/<target>/``) and the hand-made seeds (``native/fuzz/seeds/<target>/``);
2. ``cargo +nightly fuzz run`` fuzzes it for the set time: libFuzzer in-process, **one job**, so
   the machine's other core stays free for others (libFuzzer is single-threaded anyway), with a
   per-input timeout so a slow input is a finding rather than a stall;
3. ``cargo +nightly fuzz cmin`` minimizes the working corpus (the smallest set of inputs with the
   same coverage), and that set replaces the committed corpus, so the next run, and ``make
   fuzz-smoke`` in ``make test``, start from everything earlier runs reached;
4. libFuzzer's output (kept in ``native/fuzz/artifacts/<target>/fuzz.log``) is parsed for the
   figures of the report: executions, exec/s, the final ``cov:``/``ft:``, corpus sizes, and
   findings: every ``Test unit written to ...`` line is a reproducer (``crash-``, ``timeout-``,
   ``oom-``, ``leak-``...) that cargo-fuzz leaves in ``native/fuzz/artifacts/<target>/``.

The report, ``bench/results/fuzz.md``, also records the date, the commit, the toolchain versions
and the 1-minute load average (sampled every few seconds while each target runs): libFuzzer is not
a timing benchmark, but exec/s on a shared machine means little without the load beside it.

Exit status: 0 when every target ran its time without a finding, 1 when a target found a crash,
timeout, out-of-memory or leak (or libFuzzer failed: see its log), 2 when the run could not start
(no nightly toolchain, no cargo-fuzz, an unknown target, a bad flag). A finding is a bug in
``native/``: fix it, and keep the reproducer as a regression test of the native crate.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the neighbouring `harness` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import markdown_table, progress

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FUZZ_DIR = REPO / "native" / "fuzz"
DEFAULT_OUTPUT = REPO / "bench" / "results" / "fuzz.md"
#: Where the target bodies live (their doc comments say what each target checks).
FUZZING_SOURCE = REPO / "native" / "core" / "src" / "fuzzing.rs"

#: libFuzzer flags of particular targets. `lookups` builds CS-tries, which free nodes later (epoch
#: reclamation): LeakSanitizer would re-scan the heap after every input and report deferred frees.
TARGET_FLAGS: dict[str, tuple[str, ...]] = {"lookups": ("-detect_leaks=0",)}
#: cargo-fuzz build flags: optimized, with debug assertions and overflow checks (an overflow is a finding), and
#: AddressSanitizer (cargo-fuzz's default). `make fuzz-smoke` builds the same way, so they share one build.
BUILD_FLAGS = ("-O", "-a")
#: `cargo fuzz cmin` keeps the fewest inputs that reach every coverage *edge* the corpus reaches; without
#: `-use_counters=0` it would also keep one input per hit-count bucket of each edge: 4x the files for the same edges.
CMIN_FLAGS = ("-use_counters=0",)
#: How often the load average is sampled while a target runs.
LOAD_SAMPLE_SECONDS = 5.0
#: Beyond libFuzzer's own time limit, how long a run may take before it is killed (start-up, the
#: corpus replay, a last slow input): a safety net, libFuzzer normally stops on time.
GRACE_SECONDS = 300.0

INSTALL_NIGHTLY = "rustup toolchain install nightly"
INSTALL_CARGO_FUZZ = "cargo install cargo-fuzz"


class SetupError(Exception):
    """The run cannot start (exit status 2): a missing tool, an unknown target."""


# --- parsing libFuzzer's output ---------------------------------------------------------------------------------

#: A status line: ``#123456	pulse  cov: 812 ft: 2011 corp: 160/9Kb lim: 1024 exec/s: 4115 rss: 61Mb``.
_STATUS = re.compile(r"^#(?P<runs>\d+)\s+(?P<event>[A-Z]+|pulse)\b(?P<fields>.*)$")
_FIELD = re.compile(r"(?P<key>[a-z/]+): (?P<value>\S+)")
_STAT = re.compile(r"^stat::(?P<key>\w+):\s+(?P<value>\d+)\s*$")
_DONE = re.compile(r"^Done (?P<runs>\d+) runs in (?P<seconds>\d+) second")
_ARTIFACT = re.compile(r"Test unit written to (?P<path>\S+)")
_SUMMARY = re.compile(r"^SUMMARY: (?P<text>.+)$")
#: Rust's panic line, with the thread id newer toolchains print:
#: ``thread '<unnamed>' (14680) panicked at src/x.rs:1:2:``.
_PANIC = re.compile(r"^thread '.*'(?: \(\d+\))? panicked at (?P<text>.+)$")
_MERGED = re.compile(
    r"MERGE-OUTER: (?P<files>\d+) new files with (?P<features>\d+) new features added; (?P<edges>\d+) new"
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One reproducer libFuzzer wrote: its kind (``crash``, ``timeout``, ``oom``, ``leak``...) and path."""

    kind: str
    path: str


@dataclasses.dataclass
class FuzzStats:
    """The figures of one libFuzzer run, as its output states them (None: not printed)."""

    executions: int | None = None
    exec_per_s: int | None = None
    cov: int | None = None
    ft: int | None = None
    #: Units in libFuzzer's in-memory corpus at the last status line.
    corpus_units: int | None = None
    new_units: int | None = None
    peak_rss_mb: int | None = None
    #: libFuzzer's own ``Done N runs in S second(s)`` (absent after a crash).
    seconds: int | None = None
    findings: list[Finding] = dataclasses.field(default_factory=list)
    #: The first sanitizer/libFuzzer ``SUMMARY:`` line, and the first Rust panic's location and message, if any.
    summary: str | None = None
    panic: str | None = None


def _finding_kind(path: str) -> str:
    """``crash``, ``timeout``, ``oom``, ``leak``, ``slow-unit``...: the prefix libFuzzer names the file with."""
    name = Path(path).name
    if name.startswith("slow-unit-"):
        return "slow-unit"
    return name.split("-", 1)[0] if "-" in name else name


def parse_libfuzzer_output(text: str) -> FuzzStats:
    """The run's figures from libFuzzer's output (with ``-print_final_stats=1``).

    Executions and exec/s come from the final ``stat::`` lines when present, else from the last
    status line; coverage (``cov:``, ``ft:``) is always the last status line's, which libFuzzer
    prints with ``DONE`` at the end of a clean run (after a crash, the last line before it).
    """
    stats = FuzzStats()
    last_status: dict[str, str] = {}
    last_runs: int | None = None
    final: dict[str, int] = {}
    panic_message_next = False
    for raw in text.splitlines():
        line = raw.strip()
        if panic_message_next and line:
            stats.panic = f"{stats.panic}: {line}"
            panic_message_next = False
            continue
        if status := _STATUS.match(line):
            last_runs = int(status["runs"])
            fields = {m["key"]: m["value"] for m in _FIELD.finditer(status["fields"])}
            if "cov" in fields or not last_status:
                last_status = fields
        elif stat := _STAT.match(line):
            final[stat["key"]] = int(stat["value"])
        elif done := _DONE.match(line):
            stats.seconds = int(done["seconds"])
        elif summary := _SUMMARY.match(line):
            stats.summary = stats.summary or summary["text"]
        elif (panic := _PANIC.match(line)) and stats.panic is None:
            stats.panic = panic["text"].rstrip(":")
            panic_message_next = True
        if artifact := _ARTIFACT.search(line):
            path = artifact["path"]
            if all(f.path != path for f in stats.findings):
                stats.findings.append(Finding(_finding_kind(path), path))
    stats.executions = final.get("number_of_executed_units", last_runs)
    stats.exec_per_s = final.get("average_exec_per_sec", _int(last_status.get("exec/s")))
    stats.new_units = final.get("new_units_added")
    stats.peak_rss_mb = final.get("peak_rss_mb", _int(last_status.get("rss", "").removesuffix("Mb")))
    stats.cov = _int(last_status.get("cov"))
    stats.ft = _int(last_status.get("ft"))
    corp = last_status.get("corp")
    stats.corpus_units = _int(corp.split("/", 1)[0]) if corp else None
    return stats


def parse_merge_edges(text: str) -> int | None:
    """Coverage edges the minimized corpus reaches, from the last ``MERGE-OUTER: ... new coverage edges`` line."""
    merged = list(_MERGED.finditer(text))
    return int(merged[-1]["edges"]) if merged else None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


# --- the toolchain ------------------------------------------------------------------------------------------------


def _output(command: Sequence[str], cwd: Path | None = None) -> str | None:
    """First line of a command's stdout, or None when it is missing or fails."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


@dataclasses.dataclass(frozen=True)
class Toolchain:
    cargo: str
    rustc: str
    cargo_fuzz: str
    libfuzzer_sys: str


def check_toolchain(fuzz_dir: Path) -> Toolchain:
    """The versions of everything the run uses; a SetupError naming what to install when missing."""
    if shutil.which("cargo") is None:
        raise SetupError(
            "cargo not found on PATH: install Rust (https://rustup.rs), then a nightly toolchain "
            f"(`{INSTALL_NIGHTLY}`) and cargo-fuzz (`{INSTALL_CARGO_FUZZ}`)"
        )
    cargo = _output(["cargo", "+nightly", "--version"])
    if cargo is None:
        raise SetupError(f"no nightly Rust toolchain (cargo-fuzz needs one): install it with `{INSTALL_NIGHTLY}`")
    cargo_fuzz = _output(["cargo", "+nightly", "fuzz", "--version"])
    if cargo_fuzz is None:
        raise SetupError(f"cargo-fuzz is not installed: install it with `{INSTALL_CARGO_FUZZ}`")
    return Toolchain(
        cargo=cargo,
        rustc=_output(["rustc", "+nightly", "--version"]) or "rustc: unknown",
        cargo_fuzz=cargo_fuzz,
        libfuzzer_sys=_locked_version(fuzz_dir / "Cargo.lock", "libfuzzer-sys") or "unknown",
    )


def _locked_version(lockfile: Path, package: str) -> str | None:
    try:
        text = lockfile.read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(rf'name = "{re.escape(package)}"\nversion = "([^"]+)"', text)
    return found[1] if found else None


def discover_targets(fuzz_dir: Path) -> list[str]:
    return sorted(path.stem for path in (fuzz_dir / "fuzz_targets").glob("*.rs"))


def describe_target(fuzz_dir: Path, target: str) -> str:
    """What a target checks: the doc comment of the body it calls in ``native/core/src/fuzzing.rs``."""
    try:
        source = (fuzz_dir / "fuzz_targets" / f"{target}.rs").read_text(encoding="utf-8")
        body = re.search(r"fuzzing::(\w+)\(", source)
        bodies = FUZZING_SOURCE.read_text(encoding="utf-8")
    except OSError:
        return ""
    if body is None:
        return ""
    doc = re.search(rf"((?:^///.*\n)+)pub fn {re.escape(body[1])}\b", bodies, re.MULTILINE)
    if doc is None:
        return ""
    text = " ".join(line.removeprefix("///").strip() for line in doc[1].splitlines())
    return f"`fuzzing::{body[1]}`: {text}"


# --- one target ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CorpusSize:
    files: int
    bytes: int

    def __str__(self) -> str:
        return f"{self.files:,} ({_fmt_bytes(self.bytes)})"


def corpus_size(directory: Path) -> CorpusSize:
    files = [path for path in directory.iterdir() if path.is_file()] if directory.is_dir() else []
    return CorpusSize(len(files), sum(path.stat().st_size for path in files))


def _fmt_bytes(count: int) -> str:
    if count < 10_000:
        return f"{count:,} B"
    if count < 10_000_000:
        return f"{count / 1000:,.0f} kB"
    return f"{count / 1_000_000:,.1f} MB"


@dataclasses.dataclass
class LoadSamples:
    """The 1-minute load average, sampled while a target runs."""

    samples: list[float] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        if not self.samples:
            return "n/a"
        mean = sum(self.samples) / len(self.samples)
        return f"{self.samples[0]:.1f} / {mean:.1f} / {max(self.samples):.1f}"


@contextlib.contextmanager
def sampling_load(load: LoadSamples, interval: float = LOAD_SAMPLE_SECONDS) -> Iterator[None]:
    stop = threading.Event()

    def sample() -> None:
        while True:
            load.samples.append(os.getloadavg()[0])
            if stop.wait(interval):
                break

    thread = threading.Thread(target=sample, name="load-sampler", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        load.samples.append(os.getloadavg()[0])


@dataclasses.dataclass
class TargetRun:
    target: str
    stats: FuzzStats
    exit_code: int
    wall_seconds: float
    corpus_before: CorpusSize
    corpus_fuzzed: CorpusSize
    corpus_after: CorpusSize
    #: Coverage edges the minimized corpus reaches (cmin's own count), None without cmin.
    cmin_edges: int | None
    load: LoadSamples
    log: Path
    #: Why the committed corpus was left as it was, if it was.
    corpus_note: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.stats.findings) or self.exit_code != 0


@dataclasses.dataclass(frozen=True)
class Plan:
    fuzz_dir: Path
    seconds: int
    max_len: int
    timeout: int
    minimize: bool

    @property
    def corpus_root(self) -> Path:
        return self.fuzz_dir / "corpus"

    def libfuzzer_flags(self, target: str) -> list[str]:
        return [f"-max_len={self.max_len}", f"-timeout={self.timeout}", *TARGET_FLAGS.get(target, ())]


def stream(
    command: Sequence[str], cwd: Path, log: Path, limit_seconds: float, echo: Callable[[str], bool] | None = None
) -> int:
    """Run ``command`` with its output appended to ``log``; echo libFuzzer's milestones to stderr.

    Its own process group, so that the safety-net timer and Ctrl-C stop cargo-fuzz *and* the
    fuzzer it started, and nothing else.
    """
    with log.open("a", encoding="utf-8") as sink:
        sink.write(f"$ {shlex.join(command)}\n")
        sink.flush()
        child = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        timer = threading.Timer(limit_seconds, _stop_group, (child, signal.SIGKILL))
        timer.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                sink.write(line)
                if (echo or _is_milestone)(line):
                    progress(line.rstrip())
            return child.wait()
        except KeyboardInterrupt:
            _stop_group(child, signal.SIGINT)
            child.wait()
            raise
        finally:
            timer.cancel()


def _is_milestone(line: str) -> bool:
    """libFuzzer's status at start, at each doubling of runs and at the end; anything alarming."""
    if re.match(r"#\d+\s+(INITED|pulse|DONE)\b", line):
        return True
    return any(marker in line for marker in ("ERROR:", "SUMMARY:", "panicked at", "Test unit written"))


def _is_merge_result(line: str) -> bool:
    return "new coverage edges" in line or "ERROR:" in line


def _stop_group(child: subprocess.Popen[str], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, sig)


def fuzz_target(plan: Plan, target: str) -> TargetRun:
    committed = plan.corpus_root / target
    seeds = plan.fuzz_dir / "seeds" / target
    artifacts = plan.fuzz_dir / "artifacts" / target
    artifacts.mkdir(parents=True, exist_ok=True)
    log = artifacts / "fuzz.log"
    log.write_text("", encoding="utf-8")
    before = corpus_size(committed)
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as scratch:
        work = Path(scratch) / "corpus"
        work.mkdir()
        for source in (committed, seeds):
            if source.is_dir():
                for path in source.iterdir():
                    if path.is_file():
                        shutil.copyfile(path, work / path.name)
        progress(f"{target}: fuzzing {plan.seconds} s from {corpus_size(work)} inputs (log: {_rel(log)})")
        load = LoadSamples()
        flags = plan.libfuzzer_flags(target)
        run = ["cargo", "+nightly", "fuzz", "run", *BUILD_FLAGS, target, str(work), "--"]
        run += [*flags, f"-max_total_time={plan.seconds}", "-print_final_stats=1"]
        started = time.perf_counter()
        with sampling_load(load):
            exit_code = stream(run, plan.fuzz_dir.parent, log, plan.seconds + GRACE_SECONDS)
        wall = time.perf_counter() - started
        stats = parse_libfuzzer_output(log.read_text(encoding="utf-8", errors="replace"))
        # A reproducer named relative to cargo's directory: name it from anywhere.
        stats.findings = [
            dataclasses.replace(found, path=str(plan.fuzz_dir.parent / found.path)) for found in stats.findings
        ]
        fuzzed = corpus_size(work)
        after, note, cmin_edges = before, "", None
        if not plan.minimize:
            note = "not minimized (--no-minimize): committed corpus unchanged"
        else:
            progress(f"{target}: minimizing {fuzzed} inputs")
            cmin = ["cargo", "+nightly", "fuzz", "cmin", *BUILD_FLAGS, target, str(work), "--", *flags, *CMIN_FLAGS]
            logged = log.stat().st_size
            if stream(cmin, plan.fuzz_dir.parent, log, GRACE_SECONDS * 4, echo=_is_merge_result) == 0 and any(
                work.iterdir()
            ):
                replace_corpus(committed, work)
                after = corpus_size(committed)
                with log.open(encoding="utf-8", errors="replace") as text:
                    text.seek(logged)
                    cmin_edges = parse_merge_edges(text.read())
            else:
                note = f"cmin failed (see {_rel(log)}): committed corpus unchanged"
    outcome = TargetRun(target, stats, exit_code, wall, before, fuzzed, after, cmin_edges, load, log, note)
    progress(
        f"{target}: {stats.executions} executions, cov {stats.cov}, ft {stats.ft}, "
        f"{len(stats.findings)} finding(s), exit {exit_code}"
    )
    return outcome


def replace_corpus(committed: Path, minimized: Path) -> None:
    """Make ``committed`` hold exactly the minimized inputs (names are content hashes: unchanged inputs
    keep their files, so the git diff shows only what the run added or dropped)."""
    committed.mkdir(parents=True, exist_ok=True)
    keep = {path.name for path in minimized.iterdir() if path.is_file()}
    for path in committed.iterdir():
        if path.is_file() and path.name not in keep:
            path.unlink()
    for name in keep:
        if not (committed / name).exists():
            shutil.copyfile(minimized / name, committed / name)


def _rel(path: Path | str) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).resolve().relative_to(REPO))
    return str(path)


# --- the report ---------------------------------------------------------------------------------------------------


def _num(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


#: What the fuzz build compiles; not the corpus, which the run itself rewrites.
NATIVE_SOURCES = (
    "native/core/src",
    "native/core/Cargo.toml",
    "native/Cargo.toml",
    "native/Cargo.lock",
    "native/fuzz/fuzz_targets",
    "native/fuzz/Cargo.toml",
)


def _git_state() -> str:
    """The native sources the build compiles: the last commit that changed them (others commit to the same
    branch while a run goes on, mostly elsewhere), HEAD, and whether the working tree differs."""
    head = _output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO)
    if head is None:
        return "outside git"
    last = _output(["git", "log", "-1", "--format=%h", "--", *NATIVE_SOURCES], cwd=REPO) or head
    dirty = _output(["git", "status", "--porcelain", "--", *NATIVE_SOURCES], cwd=REPO)
    return f"native/ as of commit {last} (HEAD {head})" + (" with uncommitted changes in native/" if dirty else "")


def _native_state(git_state: str) -> str:
    return git_state.split(" (HEAD ", 1)[0] + (" with uncommitted" if "uncommitted" in git_state else "")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def report(
    plan: Plan,
    toolchain: Toolchain,
    runs: Sequence[TargetRun],
    argv: Sequence[str],
    started: datetime.datetime,
    load_at: tuple[float, float],
    git_at: tuple[str, str],
) -> str:
    command = shlex.join(["python", "bench/fuzz.py", *argv])
    flags = " ".join(plan.libfuzzer_flags("")) + f" -max_total_time={plan.seconds}"
    special = "; ".join(
        f"`{t}` also `{' '.join(f)}`" for t, f in TARGET_FLAGS.items() if any(r.target == t for r in runs)
    )
    total = sum(run.wall_seconds for run in runs)
    lines = [
        "# Fuzzing record",
        "",
        f"Generated by `{command}` (`make fuzz`) on {started:%Y-%m-%d %H:%M} UTC, built from {git_at[0]}"
        + (f" (at the end: {git_at[1]})" if _native_state(git_at[1]) != _native_state(git_at[0]) else "")
        + "; "
        f"{len(runs)} target(s), {_duration(total)} of fuzzing in all. "
        "Coverage-guided fuzzing of the native crate's cargo-fuzz targets (`native/fuzz/fuzz_targets/`), one after "
        "the other, each as one libFuzzer job (in-process, single-threaded).",
        "",
        f"Toolchain: {toolchain.rustc}; {toolchain.cargo}; {toolchain.cargo_fuzz}; libfuzzer-sys "
        f"{toolchain.libfuzzer_sys}. Build: `cargo fuzz run {' '.join(BUILD_FLAGS)}` (optimized, debug assertions "
        "and overflow checks on, AddressSanitizer, `--cfg fuzzing`).",
        "",
        f"libFuzzer flags: `{flags} -print_final_stats=1`" + (f" ({special})" if special else "") + ".",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs ({_cpu_model()}), shared with other engineers' "
        f"builds and tests. Load average (1 min) {load_at[0]:.1f} at the start, {load_at[1]:.1f} at the end; per "
        "target in the table (first / mean / max of samples every "
        f"{LOAD_SAMPLE_SECONDS:.0f} s). This is not a timing benchmark: exec/s is the fuzzer's throughput beside "
        "that load, and executions are what counts.",
        "",
        "## Results",
        "",
        "Executions and exec/s are libFuzzer's final stats; cov (coverage edges) and ft (features) its last "
        "status line. Corpus sizes in files (bytes): the committed corpus before the run, the working corpus "
        "after fuzzing (committed + seeds + what the run added), and the committed corpus after `cargo fuzz cmin` "
        f"with `{' '.join(CMIN_FLAGS)}` (the fewest inputs that reach every coverage edge the working corpus "
        "reaches, with cmin's count of those edges).",
        "",
    ]
    header = [
        "target",
        "duration",
        "executions",
        "exec/s",
        "cov",
        "ft",
        "corpus before",
        "after fuzzing",
        "after cmin",
        "findings",
        "load avg (1 min) first / mean / max",
    ]
    rows = [
        [
            f"`{run.target}`",
            _duration(run.wall_seconds),
            _num(run.stats.executions),
            _num(run.stats.exec_per_s),
            _num(run.stats.cov),
            _num(run.stats.ft),
            str(run.corpus_before),
            str(run.corpus_fuzzed),
            str(run.corpus_after) + (f", {run.cmin_edges:,} edges" if run.cmin_edges is not None else ""),
            _findings_cell(run),
            str(run.load),
        ]
        for run in runs
    ]
    lines += [markdown_table(header, rows), ""]
    notes = [f"- `{run.target}`: {run.corpus_note}" for run in runs if run.corpus_note]
    if notes:
        lines += [*notes, ""]
    lines += ["## Findings", ""]
    failed = [run for run in runs if run.failed]
    if not failed:
        lines += [
            "None: no crash, panic, timeout (over "
            f"{plan.timeout} s per input), out-of-memory or leak in any target during this run.",
            "",
        ]
    for run in failed:
        detail = "; ".join(text for text in (run.stats.panic, run.stats.summary) if text)
        lines.append(
            f"- `{run.target}` (libFuzzer exit {run.exit_code}, log `{_rel(run.log)}`)"
            + (f": {detail}" if detail else "")
        )
        lines += [f"  - {finding.kind}: `{_rel(finding.path)}`" for finding in run.stats.findings]
        if not run.stats.findings:
            lines.append("  - no reproducer written: libFuzzer or the build failed, see the log")
    if failed:
        lines += [
            "",
            "Reproduce with `cd native && cargo +nightly fuzz run <target> <reproducer>`; fix the bug in `native/` "
            "and keep the reproducer as a regression test of the native crate.",
            "",
        ]
    lines += ["## Targets", ""]
    lines += [f"- `{run.target}`: {describe_target(plan.fuzz_dir, run.target) or 'see its source'}" for run in runs]
    lines += [
        "",
        f"The minimized corpora are committed in `{_rel(plan.corpus_root)}/<target>/`; the next `make fuzz` starts "
        "from them (plus `native/fuzz/seeds/<target>/`), and so does `make fuzz-smoke` in `make test`.",
        "",
    ]
    return "\n".join(lines)


def _findings_cell(run: TargetRun) -> str:
    if run.stats.findings:
        return ", ".join(f"{f.kind} `{_rel(f.path)}`" for f in run.stats.findings)
    return f"none (exit {run.exit_code}: see log)" if run.exit_code else "none"


# --- main ---------------------------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 7 * 24 * 60:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected minutes above 0 and at most a week, got {text!r}")
    return value


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Exit status: 0 no finding, 1 a finding (crash, timeout, oom, leak) or a failed run, 2 cannot start.",
    )
    parser.add_argument(
        "--minutes",
        type=positive_minutes,
        # A string default goes through `type` too: a bad $FUZZ_MINUTES is a usage error, not a traceback.
        default=os.environ.get("FUZZ_MINUTES", "10"),
        help="fuzzing time per target (default: $FUZZ_MINUTES, else 10)",
    )
    parser.add_argument(
        "--targets", default=None, help="comma-separated targets (default: every file in native/fuzz/fuzz_targets/)"
    )
    parser.add_argument("--max-len", type=positive_int, default=1024, help="libFuzzer -max_len (default 1024 bytes)")
    parser.add_argument(
        "--timeout", type=positive_int, default=10, help="seconds one input may take before it is a finding (10)"
    )
    parser.add_argument(
        "--no-minimize", action="store_true", help="leave the committed corpus as it is (no cargo fuzz cmin)"
    )
    parser.add_argument("--fuzz-dir", type=Path, default=DEFAULT_FUZZ_DIR, help="the cargo-fuzz directory")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the report (bench/results/fuzz.md)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    fuzz_dir: Path = args.fuzz_dir.resolve()
    try:
        available = discover_targets(fuzz_dir)
        if not available:
            raise SetupError(f"no cargo-fuzz targets in {fuzz_dir / 'fuzz_targets'}")
        targets = available if args.targets is None else [t.strip() for t in args.targets.split(",") if t.strip()]
        unknown = sorted(set(targets) - set(available))
        if unknown or not targets:
            raise SetupError(
                f"unknown target(s) {', '.join(unknown) or '(none given)'}; available: {', '.join(available)}"
            )
        toolchain = check_toolchain(fuzz_dir)
    except SetupError as error:
        print(f"fuzz: error: {error}", file=sys.stderr)
        return 2
    plan = Plan(fuzz_dir, max(1, round(args.minutes * 60)), args.max_len, args.timeout, not args.no_minimize)
    started = datetime.datetime.now(datetime.UTC)
    load_start = os.getloadavg()[0]
    # The tree the build starts from: others may commit while the run goes on (a target rebuilds only
    # if its sources changed on disk, which the end state then shows).
    git_start = _git_state()
    progress(f"{toolchain.cargo_fuzz}, {toolchain.rustc}; targets {', '.join(targets)}, {plan.seconds} s each")
    progress(f"building the fuzz targets (cargo +nightly fuzz build {' '.join(BUILD_FLAGS)})")
    build = subprocess.run(["cargo", "+nightly", "fuzz", "build", *BUILD_FLAGS], cwd=fuzz_dir.parent, check=False)
    if build.returncode != 0:
        print(f"fuzz: error: building the fuzz targets failed (exit {build.returncode})", file=sys.stderr)
        return 1
    try:
        runs = [fuzz_target(plan, target) for target in targets]
    except KeyboardInterrupt:
        print("fuzz: interrupted: no report written", file=sys.stderr)
        return 130
    markdown = report(plan, toolchain, runs, argv, started, (load_start, os.getloadavg()[0]), (git_start, _git_state()))
    output: Path = args.output
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".tmp")
    partial.write_text(markdown, encoding="utf-8")
    partial.replace(output)
    print(markdown)
    progress(f"wrote {_rel(output)}")
    failed = [run.target for run in runs if run.failed]
    if failed:
        print(f"fuzz: findings or failures in {', '.join(failed)}: see {_rel(output)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

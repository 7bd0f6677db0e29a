"""``bench/fuzz.py`` (``make fuzz``): libFuzzer's output parsed right, and the run's plumbing.

The parser is checked against libFuzzer output whose figures are written into the fixture by hand
(the oracle), for a clean run and for a crash. The plumbing runs the real script against a fake
``cargo`` (a small Python script first on ``PATH``) in a throwaway cargo-fuzz directory: the fake
prints known figures, adds known inputs to the working corpus and keeps a known subset on ``cmin``,
and records the flags it was given, so the tests can check the report's table, the committed
corpus after minimization, the flags each target got, the exit status on a finding, and the
messages and exit status 2 when the nightly toolchain or cargo-fuzz is missing. Nothing here needs
nightly Rust or takes more than a few seconds; ``make fuzz-smoke`` runs the real targets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
SCRIPT = BENCH / "fuzz.py"
sys.path.append(str(BENCH))  # bench/ scripts import their neighbours as top-level modules

import fuzz  # noqa: E402

CLEAN_RUN = """\
INFO: Running with entropic power schedule (0xFF, 100).
INFO: Seed: 2841007416
INFO: Loaded 1 modules   (10532 inline 8-bit counters): 10532 [0x55d1, 0x55d3),
INFO:       12 files found in /tmp/fuzz-lookups-x/corpus
INFO: seed corpus: files: 12 min: 1b max: 301b total: 1520b rss: 33Mb
#13	INITED cov: 701 ft: 1800 corp: 11/1400b exec/s: 0 rss: 41Mb
#20	NEW    cov: 702 ft: 1803 corp: 12/1450b lim: 301 exec/s: 0 rss: 41Mb L: 50/301 MS: 2 ChangeBit-CMP-
#524288	pulse  cov: 760 ft: 2100 corp: 150/9Kb lim: 1024 exec/s: 4000 rss: 90Mb
#2400009	REDUCE cov: 771 ft: 2222 corp: 171/11Kb lim: 1024 exec/s: 3999 rss: 120Mb L: 12/300 MS: 1 EraseBytes-
#2401234	DONE   cov: 771 ft: 2223 corp: 171/11Kb lim: 1024 exec/s: 4001 rss: 121Mb
Done 2401234 runs in 601 second(s)
stat::number_of_executed_units: 2401234
stat::average_exec_per_sec:     3995
stat::new_units_added:          187
stat::slowest_unit_time_sec:    0
stat::peak_rss_mb:              122
"""

CRASH_RUN = """\
#2	INITED cov: 90 ft: 91 corp: 1/1b exec/s: 0 rss: 30Mb
#1000	NEW    cov: 95 ft: 99 corp: 2/3b lim: 4 exec/s: 0 rss: 31Mb L: 2/2 MS: 1 InsertByte-

thread '<unnamed>' (14680) panicked at src/codec.rs:321:17:
index out of bounds: the len is 3 but the index is 7
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
==4242== ERROR: libFuzzer: deadly signal
    #0 0x55 in __sanitizer_print_stack_trace
NOTE: libFuzzer has rudimentary signal handlers.
SUMMARY: libFuzzer: deadly signal
MS: 2 ChangeByte-InsertByte-; base unit: abc
artifact_prefix='/work/x/native/fuzz/artifacts/from_bytes/'; \
Test unit written to /work/x/native/fuzz/artifacts/from_bytes/crash-0123abcd
Base64: AAE=
stat::number_of_executed_units: 1234
stat::average_exec_per_sec:     617
stat::new_units_added:          1
stat::slowest_unit_time_sec:    0
stat::peak_rss_mb:              31
"""


def test_parse_clean_run() -> None:
    stats = fuzz.parse_libfuzzer_output(CLEAN_RUN)
    assert stats.executions == 2401234
    assert stats.exec_per_s == 3995  # the final stat, not the last status line's 4001
    assert (stats.cov, stats.ft, stats.corpus_units) == (771, 2223, 171)
    assert stats.new_units == 187
    assert stats.peak_rss_mb == 122
    assert stats.seconds == 601
    assert stats.findings == []
    assert stats.summary is None and stats.panic is None


def test_parse_crash() -> None:
    stats = fuzz.parse_libfuzzer_output(CRASH_RUN)
    assert stats.findings == [fuzz.Finding("crash", "/work/x/native/fuzz/artifacts/from_bytes/crash-0123abcd")]
    assert stats.panic == "src/codec.rs:321:17: index out of bounds: the len is 3 but the index is 7"
    assert stats.summary == "libFuzzer: deadly signal"
    assert (stats.executions, stats.exec_per_s) == (1234, 617)
    assert (stats.cov, stats.ft) == (95, 99)  # the last status line before the crash
    assert stats.seconds is None


def test_parse_a_panic_line_without_thread_id() -> None:
    # Older toolchains print no thread id; only the first panic counts.
    text = "thread '<unnamed>' panicked at src/a.rs:1:2:\nboom\nthread 'x' panicked at src/b.rs:3:4:\nagain\n"
    assert fuzz.parse_libfuzzer_output(text).panic == "src/a.rs:1:2: boom"


def test_parse_without_final_stats_falls_back_to_the_last_status_line() -> None:
    text = "\n".join(line for line in CLEAN_RUN.splitlines() if not line.startswith("stat::"))
    stats = fuzz.parse_libfuzzer_output(text)
    assert (stats.executions, stats.exec_per_s, stats.peak_rss_mb) == (2401234, 4001, 121)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("crash-ab12", "crash"), ("timeout-ab12", "timeout"), ("oom-ab12", "oom"), ("slow-unit-ab12", "slow-unit")],
)
def test_reproducer_kinds(name: str, kind: str) -> None:
    stats = fuzz.parse_libfuzzer_output(f"Test unit written to ./fuzz/artifacts/t/{name}\n")
    assert stats.findings == [fuzz.Finding(kind, f"./fuzz/artifacts/t/{name}")]


# --- the script against a fake cargo -------------------------------------------------------------------------------

FAKE_CARGO = """\
#!{python}
# A stand-in for `cargo +nightly fuzz ...`: known output, known corpus changes, its arguments recorded.
import hashlib, json, os, pathlib, sys

args = sys.argv[1:]
record = pathlib.Path(os.environ["FAKE_RECORD"])
with (record / "calls.jsonl").open("a") as calls:
    calls.write(json.dumps(args) + "\\n")
if args[:1] != ["+nightly"]:
    sys.exit(101)
if args[1:] == ["--version"]:
    if os.environ.get("FAKE_NO_NIGHTLY"):
        print("error: toolchain 'nightly' is not installed", file=sys.stderr)
        sys.exit(1)
    print("cargo 1.99.0-nightly (fake)")
    sys.exit(0)
if args[1:2] != ["fuzz"] or os.environ.get("FAKE_NO_CARGO_FUZZ"):
    print("error: no such command: `fuzz`", file=sys.stderr)
    sys.exit(101)
command = args[2]
if command == "--version":
    print("cargo-fuzz 9.9.9")
    sys.exit(0)
if command == "build":
    sys.exit(0)
positional = [arg for arg in args[3 : args.index("--")] if not arg.startswith("-")]
target, corpus = positional[0], pathlib.Path(positional[1])
figures = json.loads(os.environ["FAKE_FIGURES"])[target]
if command == "run":
    for index in range(figures["new"]):
        data = f"{{target}} input {{index}}".encode()
        (corpus / hashlib.sha1(data).hexdigest()).write_bytes(data)
    print(f"#2\\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb", flush=True)
    if os.environ.get("FAKE_CRASH") == target:
        artifacts = pathlib.Path("fuzz/artifacts") / target
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "crash-feed").write_bytes(b"boom")
        print("thread '<unnamed>' (4242) panicked at src/fake.rs:1:2:")
        print("index out of bounds")
        print("SUMMARY: libFuzzer: deadly signal")
        print(f"Test unit written to fuzz/artifacts/{{target}}/crash-feed")
        print(f"stat::number_of_executed_units: {{figures['executions']}}")
        sys.exit(1)
    print(f"#{{figures['executions']}}\\tDONE   cov: {{figures['cov']}} ft: {{figures['ft']}} corp: 9/99b "
          f"lim: 1024 exec/s: 1 rss: 50Mb")
    print(f"Done {{figures['executions']}} runs in 61 second(s)")
    print(f"stat::number_of_executed_units: {{figures['executions']}}")
    print(f"stat::average_exec_per_sec:     {{figures['exec_per_s']}}")
    sys.exit(0)
if command == "cmin":
    names = sorted(path.name for path in corpus.iterdir())
    kept = names[: figures["keep"]]
    for name in names[figures["keep"]:]:
        (corpus / name).unlink()
    (record / f"kept-{{target}}.json").write_text(json.dumps(kept))
    print("MERGE-OUTER: 3 new files with 4 new features added; 5 new coverage edges")
    sys.exit(0)
sys.exit(101)
"""

FIGURES = {
    "lookups": {"new": 5, "keep": 3, "executions": 1234567, "exec_per_s": 2057, "cov": 812, "ft": 2011},
    "zeta": {"new": 2, "keep": 4, "executions": 7654321, "exec_per_s": 12757, "cov": 345, "ft": 678},
}


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, Path]:
    """A cargo-fuzz directory with targets ``lookups`` and ``zeta``, and a fake cargo on PATH."""
    fuzz_dir = tmp_path / "native" / "fuzz"
    (fuzz_dir / "fuzz_targets").mkdir(parents=True)
    for target in FIGURES:
        (fuzz_dir / "fuzz_targets" / f"{target}.rs").write_text("// fake\n")
    (fuzz_dir / "Cargo.lock").write_text('[[package]]\nname = "libfuzzer-sys"\nversion = "0.4.77"\n')
    (fuzz_dir / "corpus" / "lookups").mkdir(parents=True)
    for name in ("0000-old", "ffff-old"):  # cmin keeps the names that sort first: one old input goes
        (fuzz_dir / "corpus" / "lookups" / name).write_bytes(b"old " + name.encode())
    (fuzz_dir / "seeds" / "zeta").mkdir(parents=True)
    (fuzz_dir / "seeds" / "zeta" / "seed.bin").write_bytes(b"seed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"
    cargo.write_text(FAKE_CARGO.format(python=sys.executable))
    cargo.chmod(0o755)
    record = tmp_path / "record"
    record.mkdir()
    return {"fuzz_dir": fuzz_dir, "bin": bin_dir, "record": record, "output": tmp_path / "results" / "fuzz.md"}


def run_script(fake: dict[str, Path], *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PATH": f"{fake['bin']}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FAKE_RECORD": str(fake["record"]),
        "FAKE_FIGURES": json.dumps(FIGURES),
    }
    environment.pop("FUZZ_MINUTES", None)  # the developer's own setting must not leak into the tests
    environment.update(env)
    command = [sys.executable, str(SCRIPT), "--fuzz-dir", str(fake["fuzz_dir"]), "--output", str(fake["output"])]
    return subprocess.run([*command, *flags], capture_output=True, text=True, env=environment, check=False, timeout=120)


def table(report: str) -> dict[str, list[str]]:
    """The results table's rows by target name."""
    body = report.split("## Results", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in body.splitlines() if line.startswith("| `")
    ]
    return {row[0].strip("`"): row for row in rows}


def target_of(call: list[str]) -> str:
    """The target of a recorded ``cargo +nightly fuzz run|cmin [flags] <target> <corpus> -- ...``."""
    return next(arg for arg in call[3 : call.index("--")] if not arg.startswith("-"))


def calls(fake: dict[str, Path]) -> list[list[str]]:
    lines = (fake["record"] / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_clean_run_reports_every_target_and_commits_the_minimized_corpus(fake: dict[str, Path]) -> None:
    done = run_script(fake, "--minutes", "1.5", "--max-len", "300", "--timeout", "7")
    assert done.returncode == 0, done.stderr
    report = fake["output"].read_text()
    assert done.stdout.strip() == report.strip()
    rows = table(report)
    assert set(rows) == set(FIGURES)
    for target, figures in FIGURES.items():
        row = rows[target]
        expected = [f"{figures[key]:,}" for key in ("executions", "exec_per_s", "cov", "ft")]
        assert row[2:6] == expected, row
        assert row[9] == "none", row
        assert re.fullmatch(r"[\d.]+ / [\d.]+ / [\d.]+", row[10]), row  # load average first / mean / max
        kept = json.loads((fake["record"] / f"kept-{target}.json").read_text())
        committed = fake["fuzz_dir"] / "corpus" / target
        assert sorted(path.name for path in committed.iterdir()) == sorted(kept)
        assert row[8].startswith(f"{len(kept)} (") and row[8].endswith(", 5 edges"), row  # cmin's MERGE-OUTER
    # lookups: 2 committed inputs before; after fuzzing 2 + 5 new; cmin keeps 3 (one old input dropped).
    assert rows["lookups"][6].startswith("2 (") and rows["lookups"][7].startswith("7 (")
    assert (fake["fuzz_dir"] / "corpus" / "lookups" / "0000-old").read_bytes() == b"old 0000-old"
    assert not (fake["fuzz_dir"] / "corpus" / "lookups" / "ffff-old").exists()
    # zeta: nothing committed, the seed joins the working corpus: 1 + 2 new, all kept (keep 4 > 3).
    assert rows["zeta"][6].startswith("0 (") and rows["zeta"][7].startswith("3 (")
    assert (fake["fuzz_dir"] / "corpus" / "zeta" / "seed.bin").read_bytes() == b"seed"
    assert "## Findings\n\nNone" in report
    assert "cargo-fuzz 9.9.9" in report and "libfuzzer-sys 0.4.77" in report and "Load average" in report

    runs = {target_of(call): call for call in calls(fake) if call[2:3] == ["run"]}
    for target, call in runs.items():
        flags = call[call.index("--") + 1 :]
        assert {"-max_len=300", "-timeout=7", "-max_total_time=90", "-print_final_stats=1"} <= set(flags)
        assert ("-detect_leaks=0" in flags) == (target == "lookups")
    cmins = {target_of(call): call for call in calls(fake) if call[2:3] == ["cmin"]}
    assert set(cmins) == set(FIGURES)
    for target, call in cmins.items():  # minimized on edges only, with the run's own flags
        flags = call[call.index("--") + 1 :]
        assert {"-use_counters=0", "-max_len=300", "-timeout=7"} <= set(flags)
        assert ("-detect_leaks=0" in flags) == (target == "lookups")
    log = (fake["fuzz_dir"] / "artifacts" / "lookups" / "fuzz.log").read_text()
    assert "DONE   cov: 812" in log and "MERGE-OUTER" in log


def test_a_crash_is_reported_with_its_reproducer_and_exit_1(fake: dict[str, Path]) -> None:
    done = run_script(fake, "--minutes", "0.01", FAKE_CRASH="lookups")
    assert done.returncode == 1, done.stderr
    report = fake["output"].read_text()
    rows = table(report)
    # The fake names it relative to cargo's directory (native/), as the report must not.
    reproducer = fake["fuzz_dir"] / "artifacts" / "lookups" / "crash-feed"
    assert reproducer.read_bytes() == b"boom"
    assert rows["lookups"][9] == f"crash `{reproducer}`"
    assert rows["zeta"][9] == "none"  # the other target still ran
    findings = report.split("## Findings", 1)[1].split("\n## ", 1)[0]
    assert "src/fake.rs:1:2: index out of bounds" in findings and f"crash: `{reproducer}`" in findings
    assert "lookups" in done.stderr.splitlines()[-1]


def test_no_minimize_leaves_the_committed_corpus(fake: dict[str, Path]) -> None:
    before = sorted(path.name for path in (fake["fuzz_dir"] / "corpus" / "lookups").iterdir())
    done = run_script(fake, "--minutes", "0.01", "--no-minimize", "--targets", "lookups")
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in (fake["fuzz_dir"] / "corpus" / "lookups").iterdir()) == before
    assert set(table(fake["output"].read_text())) == {"lookups"}
    assert not any(call[2:3] == ["cmin"] for call in calls(fake))


@pytest.mark.parametrize(
    ("env", "advice"),
    [
        ({"FAKE_NO_NIGHTLY": "1"}, "rustup toolchain install nightly"),
        ({"FAKE_NO_CARGO_FUZZ": "1"}, "cargo install cargo-fuzz"),
    ],
)
def test_a_missing_tool_says_what_to_install_and_exits_2(
    fake: dict[str, Path], env: dict[str, str], advice: str
) -> None:
    done = run_script(fake, "--minutes", "0.01", **env)
    assert done.returncode == 2, done.stderr
    assert advice in done.stderr
    assert "Traceback" not in done.stderr
    assert not fake["output"].exists()
    assert not any(call[2:3] in (["build"], ["run"]) for call in calls(fake))


def test_no_cargo_at_all_exits_2(fake: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = run_script({**fake, "bin": empty}, "--minutes", "0.01")
    assert done.returncode == 2
    assert "cargo not found" in done.stderr and "cargo install cargo-fuzz" in done.stderr
    assert not fake["output"].exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--targets", "nope"), "unknown target(s) nope; available: lookups, zeta"),
        (("--minutes", "0"), "expected minutes above 0"),
        (("--minutes", "nan"), "expected minutes above 0"),
        (("--max-len", "-3"), "expected a positive integer"),
    ],
)
def test_usage_errors_exit_2(fake: dict[str, Path], flags: tuple[str, ...], message: str) -> None:
    done = run_script(fake, *flags)
    assert done.returncode == 2
    assert message in done.stderr
    assert not fake["output"].exists()


def test_a_bad_fuzz_minutes_variable_is_a_usage_error(fake: dict[str, Path]) -> None:
    done = run_script(fake, FUZZ_MINUTES="ten")
    assert done.returncode == 2
    assert "expected minutes above 0" in done.stderr and "Traceback" not in done.stderr

"""Fresh Spark driver JVMs with and without the class-data archive (``routing.class_archive``) and quick JIT.

Three variants: **no archive**, **archive**, and **archive + quick JIT** (the archive and ``spark.jit =
"quick"``: ``-XX:TieredStopAtLevel=1``, the JVM compiles with C1 only); the first two run ``spark.jit =
"full"`` (C1, then C2). Each run is a new Python process, as a scheduled job or a test worker is, that measures:

* **start**: ``routing.spark.get_spark`` (the driver JVM's launch up to a usable session);
* **first write**: the first Delta write (``spark.range(1000)`` saved as a new table: Delta's classes,
  its log and the first job);
* **merge**: a SQL ``MERGE INTO`` of 100 rows into that table (the refresh job's kind of statement);
* **total**: the process, from spawn to exit (interpreter and imports, the above, the JVM's shutdown);
* **JVM CPU**: the driver JVM's user + system CPU seconds up to the end of the merge (``/proc/<pid>/stat``),
  what concurrent jobs on a small machine compete for.

Each round runs every variant once, rotating which goes first, after one discarded warm-up round, so all
see the same page cache and machine. Every run checks that its JVM really mapped the archive when it had
it (``/proc/<pid>/maps``) and ran with ``-XX:TieredStopAtLevel=1`` exactly when quick (its input
arguments). The archive is the one of the current settings, built first if missing. It prints a table of
medians with the ratios archive / no archive and quick / archive, records the machine's load average,
and writes ``bench/results/jvm_start.md`` and ``.png``::

    python bench/jvm_start.py [--runs 5] [--conf FILE] [--set SECTION.KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import markdown_table, write_report

from routing.config import ConfigError
from routing.settings import JIT_MODES, REPO_ROOT, Settings, add_settings_arguments, settings_from_args

RESULTS = Path(__file__).resolve().parent / "results"
#: Each variant's driver JVM: whether it maps the class-data archive, and its ``spark.jit``.
SETUPS: dict[str, tuple[bool, str]] = {
    "no archive": (False, "full"),
    "archive": (True, "full"),
    "archive + quick JIT": (True, "quick"),
}
VARIANTS = tuple(SETUPS)
#: The report's ratios: (column, variant, the variant it is measured against).
COMPARISONS = (
    ("archive / no archive", "archive", "no archive"),
    ("quick / archive", "archive + quick JIT", "archive"),
)
#: Wall-clock stages, then the driver JVM's CPU time; all in seconds.
STAGES = ("start", "first write", "merge", "total", "JVM CPU")
#: The options ``spark.jit = "quick"`` gives the driver JVM; the report names them, so each run checks them.
QUICK_JIT_OPTIONS = JIT_MODES["quick"]

CHILD = """
import json, os, sys, time
spec = json.loads(sys.argv[1])
from routing.settings import Settings, SparkSettings
from routing.spark import get_spark

settings = Settings(spark=SparkSettings(**spec["spark"]))
started = time.perf_counter()
spark = get_spark(settings, app_name="bench-jvm-start")
session = time.perf_counter()
spark.range(1000).selectExpr("id", "id % 10 AS key").write.format("delta").save(spec["table"])
written = time.perf_counter()
spark.range(950, 1050).selectExpr("id", "-1 AS key").createOrReplaceTempView("changes")
spark.sql(
    f"MERGE INTO delta.`{spec['table']}` AS t USING changes AS s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)
merged = time.perf_counter()
runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
pid = runtime.getPid()
with open(f"/proc/{pid}/stat") as stat:
    # utime and stime (fields 14 and 15) in clock ticks, counted after the command name, which may hold spaces
    ticks = stat.read().rsplit(")", 1)[1].split()[11:13]
jvm_cpu = sum(int(tick) for tick in ticks) / os.sysconf("SC_CLK_TCK")
with open(f"/proc/{pid}/maps") as maps:
    mapped = sorted({line.split()[-1] for line in maps.read().splitlines() if line.endswith(".jsa")})
arguments = [str(argument) for argument in runtime.getInputArguments()]
spark.stop()
result = {
    "start": session - started, "first write": written - session, "merge": merged - written, "JVM CPU": jvm_cpu,
    "mapped": mapped, "arguments": arguments,
}
print("RESULT " + json.dumps(result), flush=True)
"""


def progress(message: str) -> None:
    print(f"[jvm_start {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_once(settings: Settings, archive: Path | None, jit: str) -> dict[str, Any]:
    """One fresh process with ``archive`` (None: without) and ``spark.jit = jit``; its stages in seconds.

    Raises if its JVM did not map ``archive`` or did not compile as ``jit`` says.
    """
    spark = {field.name: getattr(settings.spark, field.name) for field in dataclasses.fields(settings.spark)}
    with tempfile.TemporaryDirectory(prefix="jvm-start-") as scratch:
        spark.update(
            remote="",
            class_archive=str(archive.parent) if archive else "",
            jit=jit,
            ivy_dir=os.path.join(scratch, "ivy"),
            local_dir=os.path.join(scratch, "spark-local"),
            warehouse_dir=os.path.join(scratch, "spark-warehouse"),
        )
        spec = {"spark": spark, "table": os.path.join(scratch, "table")}
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(spec)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        total = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or len(lines) != 1:
        raise RuntimeError(f"the run failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    result: dict[str, Any] = json.loads(lines[0].removeprefix("RESULT "))
    result["total"] = total
    result["used archive"] = archive is not None and str(archive) in result.pop("mapped")
    if archive is not None and not result["used archive"]:
        raise RuntimeError(f"the JVM did not map {archive}: the figures would not be what they say")
    arguments = result.pop("arguments")
    quick_options = [option in arguments for option in QUICK_JIT_OPTIONS.split()]
    if quick_options != [jit == "quick"] * len(quick_options):
        raise RuntimeError(
            f"spark.jit = {jit!r} but the JVM ran with {' '.join(arguments)}: the figures would not be what they say"
        )
    return result


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Median of each stage per variant."""
    return {
        variant: {stage: statistics.median(run[stage] for run in runs[variant]) for stage in STAGES}
        for variant in VARIANTS
    }


def report(
    runs: dict[str, list[dict[str, Any]]],
    medians: dict[str, dict[str, float]],
    *,
    archive: Path,
    loads: list[float],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    command: str,
) -> str:
    rows = [
        [
            stage,
            *(f"{medians[variant][stage]:.1f}" for variant in VARIANTS),
            *(f"{medians[variant][stage] / medians[baseline][stage]:.2f}x" for _, variant, baseline in COMPARISONS),
        ]
        for stage in STAGES
    ]
    header = ["stage", *(f"{variant} s" for variant in VARIANTS), *(column for column, _, _ in COMPARISONS)]
    table = markdown_table(header, rows)
    each = [
        [variant, *(" / ".join(f"{run[stage]:.1f}" for run in runs[variant]) for stage in STAGES)]
        for variant in VARIANTS
    ]
    count = len(runs[VARIANTS[0]])
    overlaps = "; ".join(
        f"*{variant}* against *{baseline}*: "
        + (", ".join(stage for stage in STAGES if _overlap(runs, stage, variant, baseline)) or "none")
        for _, variant, baseline in COMPARISONS
    )
    from routing.class_archive import pyspark_version

    return "\n".join(
        [
            "# Fresh Spark driver JVMs: the class-data archive and quick JIT",
            "",
            f"`{command}`: {count} fresh processes per variant, interleaved (rotating which goes first) after "
            f"one discarded warm-up round; medians. Python {platform.python_version()}, pyspark {pyspark_version()}, "
            f"{_java_version()}, {os.cpu_count()} CPUs, master `local[2]`. Archive `{archive.name}` "
            f"({archive.stat().st_size / 1e6:.0f} MB), mapped by every run that had it; `{QUICK_JIT_OPTIONS}` in the "
            "JVM options of every quick run and of no other. Load average (1 min) "
            f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; {min(loads):.2f} to {max(loads):.2f} at the "
            "start of the runs (each run's own JVM keeps both cores busy: a load of 2 to 3 is the benchmark's own).",
            "",
            "*start* = `get_spark` until the session is usable; *first write* = the first Delta table (1,000 rows); "
            "*merge* = a SQL MERGE INTO of 100 rows into it; *total* = the whole process, spawn to exit; "
            "*JVM CPU* = the driver JVM's user + system CPU time up to the end of the merge (on a 2-core machine "
            'CPU, not wall time, is what concurrent jobs compete for). *Quick JIT* = `spark.jit = "quick"`: '
            f"`{QUICK_JIT_OPTIONS}`, the JVM compiles with C1 only, skipping C2's costlier optimizing compilations.",
            "",
            table,
            "",
            f"Stages whose runs overlap (neither variant faster in every run: no clear difference): {overlaps}.",
            "",
            "Each run (s), in order:",
            "",
            markdown_table(["variant", *STAGES], each),
            "",
        ]
    )


def _overlap(runs: dict[str, list[dict[str, Any]]], stage: str, a: str, b: str) -> bool:
    """Whether variants ``a`` and ``b``'s runs of ``stage`` overlap (neither is faster in every run)."""
    first, second = ([float(run[stage]) for run in runs[variant]] for variant in (a, b))
    return max(first) >= min(second) and max(second) >= min(first)


def _java_version() -> str:
    from routing.class_archive import java_binary

    java = java_binary()
    if java is None:
        return "no java"
    done = subprocess.run([str(java), "-version"], capture_output=True, text=True, check=False, timeout=60)
    first = (done.stderr or done.stdout).splitlines()
    return first[0].replace('"', "") if first else str(java)


def plot(runs: dict[str, list[dict[str, Any]]], medians: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(VARIANTS)
    for offset, variant in enumerate(VARIANTS):
        shift = (offset - (len(VARIANTS) - 1) / 2) * width  # the group centred on its stage's tick
        positions = [index + shift for index in range(len(STAGES))]
        axis.bar(positions, [medians[variant][stage] for stage in STAGES], width, label=f"{variant} (median)")
        for position, stage in zip(positions, STAGES, strict=True):
            values = [run[stage] for run in runs[variant]]
            axis.scatter([position] * len(values), values, color="black", s=8, zorder=3)
    axis.set_xticks(range(len(STAGES)), list(STAGES))
    axis.set_ylabel("seconds (dots: each run)")
    axis.set_title("Fresh Spark driver JVMs: the class-data archive and quick JIT")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/jvm_start.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per variant (default 5)")
    parser.add_argument("--output", default=str(RESULTS / "jvm_start.md"), help="the Markdown report (and .png)")
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be positive")
    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        print(f"jvm_start: {error}", file=sys.stderr)
        return 2
    if not settings.spark.class_archive:
        print("jvm_start: spark.class_archive is empty: there is no archive to compare with", file=sys.stderr)
        return 2
    from routing.class_archive import ClassArchiveError, build

    try:
        archive = build(settings, log=progress).path
    except ClassArchiveError as error:
        print(f"jvm_start: {error}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    loads: list[float] = []
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    for repeat in range(args.runs + 1):
        # Interleaved, the order rotated each round, so no variant always goes first.
        rotation = repeat % len(VARIANTS)
        for variant in VARIANTS[rotation:] + VARIANTS[:rotation]:
            uses_archive, jit = SETUPS[variant]
            loads.append(os.getloadavg()[0])
            run = run_once(settings, archive if uses_archive else None, jit)
            progress(
                f"{'warm-up' if not repeat else f'run {repeat}/{args.runs}'} {variant}: "
                + ", ".join(f"{stage} {run[stage]:.1f} s" for stage in STAGES)
                + f" (load {loads[-1]:.2f})"
            )
            if repeat:  # the first round warms the page cache, discarded
                runs[variant].append(run)
    load_after = os.getloadavg()
    medians = summarize(runs)
    command = "python bench/jvm_start.py" + (f" --runs {args.runs}" if args.runs != 5 else "")
    text = report(
        runs,
        medians,
        archive=archive,
        loads=loads,
        load_before=load_before,
        load_after=load_after,
        command=command,
    )
    plot(runs, medians, write_report(text, Path(args.output)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where does a refresh-job batch's time go, and how much does deciding add to the Delta floor under it?

A subscription table is seeded with ``--rows`` pairs (one import), then ``--batches`` import files of
``--events`` events each are applied the way the refresh job applies them
(:func:`jobs.refresh_subscriptions.apply_import_files`): subscribes of new pairs, unsubscribes and
refreshes of held ones, stale copies, and a few malformed lines that end in the rejects table. The first
``--warmup`` batches warm the JVM and are not counted.

Each counted batch is timed whole, its Spark jobs counted (a job group per batch), and its seconds split
from Spark's own event log: every top-level SQL execution the batch ran, by what it was (collecting the
events, the two table queries of :func:`routing.subscriptions.table.decide`, the MERGE, the rejects
append, the table-version reads), plus what ran outside any of them (Python, planning, py4j: the driver).
Delta's state reconstruction for a new table version, which runs inside the read or write that first
needs it, is shown separately.

Baseline, in the same run and session: the Delta work alone, a MERGE of the same number of rows into a
twin table and an idempotent append of the same number of rejects, with nothing decided. The ratio says
what deciding adds to the floor any design of the batch pays.

    python bench/refresh_batch.py                       # ~3 minutes on 2 cores
    python bench/refresh_batch.py --rows 100000 --batches 8

Writes ``bench/results/refresh_batch.md`` and ``.png``; run it on an idle machine (the load average is
recorded).
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import RunRecord, markdown_table, pyplot, write_report

RESULTS = Path(__file__).resolve().parent / "results"
#: Stages, in batch order; each top-level SQL execution falls in one (see :func:`stage_of`).
STAGES = ("collect events", "decide: table rows", "decide: held counts", "MERGE", "rejects append", "other SQL")


def event_line(op: str, subscriber: str, pattern: str, ts: int) -> str:
    return json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts})


def write_batch(path: Path, index: int, events: int, held: list[tuple[str, str]], rng: random.Random) -> None:
    """Mostly new subscribes, some unsubscribes and refreshes of held pairs, a stale copy, two bad lines (rejects)."""
    ts = 1_800_000_000_000 + index * 10_000
    lines = []
    for number in range(events - 3):
        roll = rng.random()
        if roll < 0.6 or not held:
            pair = (f"tenant{rng.randrange(10**6)}.orders.#", f"sub-{index}-{number}")
            held.append(pair)
            lines.append(event_line("subscribe", pair[1], pair[0], ts + number))
        elif roll < 0.8:
            pair = held.pop(rng.randrange(len(held)))
            lines.append(event_line("unsubscribe", pair[1], pair[0], ts + number))
        else:
            pair = held[rng.randrange(len(held))]
            lines.append(event_line("subscribe", pair[1], pair[0], ts + number))
    if held:
        pattern, subscriber = held[0]
        lines.append(event_line("subscribe", subscriber, pattern, 1))  # older than its row: stale
    lines += ["not json", json.dumps({"op": "resubscribe", "subscriber": "x", "pattern": "a", "ts": ts})]
    path.write_text("\n".join(lines) + "\n")


def stage_of(execution: dict[str, Any], collects_seen: int) -> str:
    plan = execution["plan"]
    if "MergeIntoCommand" in plan:
        return "MERGE"
    if "SaveIntoDataSourceCommand" in plan:
        return "rejects append"
    if "collectAsArrowToPython" in execution["details"]:
        return ("collect events", "decide: table rows", "decide: held counts")[min(collects_seen, 2)]
    return "other SQL"


def read_event_log(directory: str) -> list[dict[str, Any]]:
    """Top-level SQL executions (start, end, plan, details) and Delta state reconstructions from the event log."""
    executions: dict[int, dict[str, Any]] = {}
    for path in sorted(glob.glob(f"{directory}/**/events_*", recursive=True) + glob.glob(f"{directory}/*.inprogress")):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                event = json.loads(line)
                kind = event["Event"]
                if kind.endswith("SparkListenerSQLExecutionStart"):
                    description = event.get("description") or ""
                    executions[event["executionId"]] = {
                        "start": event["time"],
                        "root": event.get("rootExecutionId", event["executionId"]) == event["executionId"],
                        "plan": (event.get("physicalPlanDescription") or "").split("\n", 2)[1:2],
                        "details": event.get("details") or "",
                        "state": "Compute snapshot" in description or "Filtering files for query: C" in description,
                    }
                    executions[event["executionId"]]["plan"] = "".join(executions[event["executionId"]]["plan"])
                elif kind.endswith("SparkListenerSQLExecutionEnd") and event["executionId"] in executions:
                    executions[event["executionId"]]["end"] = event["time"]
    return [execution for _, execution in sorted(executions.items()) if "end" in execution]


def breakdown(executions: list[dict[str, Any]], start_ms: float, end_ms: float) -> dict[str, float]:
    """Seconds per stage of one batch's window, plus ``driver`` (outside every SQL execution) and ``delta state``."""
    seconds = dict.fromkeys((*STAGES, "delta state"), 0.0)
    collects = 0
    covered = 0.0
    for execution in executions:
        if not start_ms <= execution["start"] <= end_ms:
            continue
        length = (execution["end"] - execution["start"]) / 1000
        if execution["state"]:
            seconds["delta state"] += length
        if not execution["root"]:
            continue
        stage = stage_of(execution, collects)
        collects += stage.startswith(("collect", "decide"))
        seconds[stage] += length
        covered += length
    seconds["driver"] = max(0.0, (end_ms - start_ms) / 1000 - covered)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/refresh_batch.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20000, help="pairs seeded into the table (default %(default)s)")
    parser.add_argument("--events", type=int, default=200, help="events per batch (default %(default)s)")
    parser.add_argument("--batches", type=int, default=6, help="counted batches (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=3, help="batches run first, not counted (default %(default)s)")
    parser.add_argument("--seed", type=int, default=20261126)
    parser.add_argument("--output", default=str(RESULTS / "refresh_batch.md"))
    args = parser.parse_args(argv)
    if min(args.rows, args.events - 3, args.batches, args.warmup + 1) < 1:
        parser.error("--rows, --batches must be positive, --events at least 4, --warmup not negative")

    from pyspark.sql import functions as F

    from jobs.refresh_subscriptions import import_files
    from routing import delta_tables
    from routing.appends import idempotent_append
    from routing.settings import load_settings
    from routing.spark import get_spark

    rng = random.Random(args.seed)
    record = RunRecord.start(__file__, sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="refresh-batch-") as work:
        root = Path(work)
        events_dir = root / "events"
        settings = load_settings(
            overrides={
                "subscriptions": {
                    "table_path": str(root / "subscriptions"),
                    "rejects_path": str(root / "rejects"),
                    "checkpoint_path": str(root / "checkpoint"),
                },
                "spark": {
                    "conf": {
                        "spark.local.dir": str(root / "spark-local"),
                        "spark.eventLog.enabled": "true",
                        "spark.eventLog.dir": str(events_dir),
                        "spark.eventLog.compress": "false",
                    },
                },
            }
        )
        events_dir.mkdir()
        spark = get_spark(settings, app_name="bench-refresh-batch")
        print(f"seeding {args.rows:,} pairs", flush=True)
        seed = root / "seed.jsonl"
        held = [(f"tenant{index}.orders.#", f"seed-{index}") for index in range(args.rows)]
        seed.write_text("\n".join(event_line("subscribe", s, p, 1_700_000_000_000) for p, s in held) + "\n")
        import_files(spark, settings, [str(seed)])

        tracker = spark.sparkContext.statusTracker()
        batches: list[dict[str, Any]] = []
        for index in range(args.warmup + args.batches):
            path = root / f"batch-{index}.jsonl"
            write_batch(path, index, args.events, held, rng)
            group = f"batch-{index}"
            spark.sparkContext.setJobGroup(group, group)
            started = time.time()
            summary = import_files(spark, settings, [str(path)])
            ended = time.time()
            counted = index >= args.warmup
            print(f"batch {index}{'' if counted else ' (warm-up)'}: {ended - started:.2f} s; {summary.describe()}")
            if counted:
                batches.append(
                    {
                        "start": started * 1000,
                        "end": ended * 1000,
                        "jobs": len(tracker.getJobIdsForGroup(group)),
                        "changed": sum(summary.counts[kind] for kind in ("subscribed", "unsubscribed", "refreshed")),
                        "rejected": sum(summary.rejected.values()),
                    }
                )

        # The floor: the same number of rows MERGEd into a twin table, the same rejects appended, nothing decided.
        print("baseline: MERGE and append alone", flush=True)
        twin, twin_rejects = str(root / "twin"), str(root / "twin_rejects")
        spark.read.format("delta").load(settings.subscriptions.table_path).write.format("delta").save(twin)
        baseline: list[float] = []
        sizes = [(batches[0]["changed"], batches[0]["rejected"])] * args.warmup
        sizes += [(batch["changed"], batch["rejected"]) for batch in batches]
        for index, (changed, rejected) in enumerate(sizes):
            source = spark.read.format("delta").load(twin).limit(changed).withColumn("change_id", F.lit(f"b{index}"))
            rejects = spark.read.format("delta").load(settings.subscriptions.rejects_path).limit(rejected)
            started = time.time()
            delta_tables.merge(
                twin,
                source,
                "ON t.subscriber_id = s.subscriber_id AND t.pattern = s.pattern "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            )
            idempotent_append(rejects, twin_rejects, "bench-baseline", index)
            if index >= args.warmup:
                baseline.append(time.time() - started)
        spark.stop()
        executions = read_event_log(str(events_dir))

    parts = [breakdown(executions, batch["start"], batch["end"]) for batch in batches]
    totals = [(batch["end"] - batch["start"]) / 1000 for batch in batches]
    median_total, median_floor = statistics.median(totals), statistics.median(baseline)
    columns = [*STAGES, "driver"]
    rows = [
        [
            stage,
            f"{statistics.median(part[stage] for part in parts):.2f}",
            f"{statistics.median(part[stage] for part in parts) / median_total:.0%}",
        ]
        for stage in columns
    ]
    rows.append(
        [
            "of which Delta state for a new version",
            f"{statistics.median(part['delta state'] for part in parts):.2f}",
            "",
        ]
    )
    rows.append(
        [
            "**batch**",
            f"**{median_total:.2f}**",
            f"{statistics.median(batch['jobs'] for batch in batches):.0f} Spark jobs",
        ]
    )
    comparison = markdown_table(
        ["run", "median s", "vs baseline"],
        [
            ["refresh batch (apply_import_files)", f"{median_total:.2f}", f"{median_total / median_floor:.2f}x"],
            ["baseline: MERGE + rejects append alone", f"{median_floor:.2f}", "1.00x"],
        ],
    )
    text = "\n".join(
        [
            "# A refresh-job batch, stage by stage",
            "",
            f"{record.line()} {args.rows:,} rows, {args.events:,} events per batch: medians of {args.batches} "
            f"batches after {args.warmup} warm-up batches, one session, local[2].",
            "",
            "Seconds per stage, from Spark's event log (top-level SQL executions in each batch's window; *driver* is "
            "the rest: Python, planning, py4j). Each row is its own median, so the rows need not sum to the batch's.",
            "",
            markdown_table(["stage", "median s", "share"], rows),
            "",
            comparison,
            "",
        ]
    )
    plot(parts, columns, write_report(text, Path(args.output)))
    return 0


def plot(parts: list[dict[str, float]], columns: list[str], path: Path) -> None:
    plt = pyplot()

    figure, axis = plt.subplots(figsize=(8, 4))
    bottoms = [0.0] * len(parts)
    for stage in columns:
        values = [part[stage] for part in parts]
        axis.bar(range(len(parts)), values, bottom=bottoms, label=stage)
        bottoms = [bottom + value for bottom, value in zip(bottoms, values, strict=True)]
    axis.set_xlabel("batch (after warm-up)")
    axis.set_ylabel("seconds")
    axis.set_title("Refresh-job batch: seconds per stage")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())

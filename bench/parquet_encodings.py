"""What do each deliveries column's Parquet dictionary and the timestamp type cost the router's writes?

The router's deliveries rows are wider than a Kafka copy's (13 columns against 8), and in ``perf`` profiles of
``bench/stream.py`` their Parquet encoding was the largest part of the router's extra executor CPU. This
benchmark takes real deliveries rows, the files a ``bench/stream.py`` run wrote (``--deliveries``: one
router run's table; each file is one task's output of one batch, in the order the router wrote it, which
matters: a message's fan-out rows sit next to each other), caches ``--files`` of them as they are (one
partition per file), and writes them again as Parquet, partitioned like the table, once per variant:

* **before**: the dictionary off for ``delivery_id`` only, ``INT96`` timestamps (Spark's default): the
  deliveries table before ``routing.router.tables.PLAIN_ENCODED_COLUMNS``;
* one variant per column of ``PLAIN_ENCODED_COLUMNS["deliveries"]`` (beyond ``delivery_id``) with only that
  column's dictionary also off, and one with only the timestamps as ``TIMESTAMP_MICROS``;
* **after**: what the router writes now (every plain column and ``TIMESTAMP_MICROS``);
* **read only**: the cached frame written to Spark's ``noop`` sink, the part of each write that is not Parquet.

Rounds run every variant once in a shuffled order (seeded); the first ``--warmup`` rounds are discarded. Per
variant it reports the median wall time of a write, the mean CPU of the executor's task threads and of the whole
JVM (``/proc``, 10 ms ticks: means over many rounds), the ratio of that CPU to *before*, and the files' size
per column (``pyarrow`` metadata). It records the machine's load average and writes
``bench/results/parquet_encodings.md`` and ``.png``::

    python bench/stream.py --variants b --sizes 10000 --repeats 1   # leaves var/bench/stream/b_10000_r1
    python bench/parquet_encodings.py [--deliveries DIR] [--files 10] [--rounds 30]
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import RunRecord, jvm_pid, markdown_table, process_cpu, pyplot, write_report

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_DELIVERIES = REPO / "var" / "bench" / "stream" / "b_10000_r1" / "deliveries"
TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
BEFORE, AFTER, READ_ONLY = "before", "after", "read only"


def variants() -> dict[str, tuple[dict[str, str], str] | None]:
    """Name -> (Parquet writer options, timestamp type), or None for the read-only write."""
    from routing.router.tables import PLAIN_ENCODED_COLUMNS
    from routing.router.tables import dictionary_off as off

    plain = PLAIN_ENCODED_COLUMNS["deliveries"]
    table: dict[str, tuple[dict[str, str], str] | None] = {BEFORE: (off(["delivery_id"]), "INT96")}
    for column in plain:
        if column != "delivery_id":
            table[f"+ {column} plain"] = (off(["delivery_id", column]), "INT96")
    table["+ TIMESTAMP_MICROS"] = (off(["delivery_id"]), "TIMESTAMP_MICROS")
    table[AFTER] = (off(plain), "TIMESTAMP_MICROS")
    table[READ_ONLY] = None
    return table


def column_sizes(directory: Path) -> dict[str, int]:
    """Compressed bytes per column over the Parquet files under ``directory``."""
    import pyarrow.parquet as pq

    sizes: collections.Counter[str] = collections.Counter()
    for file in directory.rglob("*.parquet"):
        metadata = pq.ParquetFile(file).metadata
        for group in range(metadata.num_row_groups):
            for index in range(metadata.num_columns):
                column = metadata.row_group(group).column(index)
                sizes[column.path_in_schema] += column.total_compressed_size
    return dict(sizes)


def cached_rows(spark: Any, deliveries: Path, files: int) -> tuple[Any, int]:
    """The first ``files`` data files of a deliveries table, cached one partition per file in their own order."""
    from pyspark.sql import functions as F

    paths = sorted(str(path) for path in deliveries.glob("kafka_date=*/*.parquet"))[:files]
    if not paths:
        raise SystemExit(f"no deliveries files under {deliveries}: run bench/stream.py first (see --help)")
    # A file per partition: Spark would otherwise pack small files into one task and lose the per-task layout.
    spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 30))
    date = Path(paths[0]).parent.name.split("=", 1)[1]
    frame = spark.read.parquet(*paths).withColumn("kafka_date", F.lit(date).cast("date")).cache()
    return frame, frame.count()


def write(frame: Any, options: tuple[dict[str, str], str] | None, output: Path) -> None:
    spark = frame.sparkSession
    if options is None:
        frame.write.format("noop").mode("overwrite").save()
        return
    writer_options, timestamps = options
    spark.conf.set(TIMESTAMP_TYPE, timestamps)
    writer = frame.write.mode("overwrite").format("parquet").partitionBy("kafka_date")
    for key, value in writer_options.items():
        writer = writer.option(key, value)
    writer.save(str(output))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/parquet_encodings.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--deliveries", type=Path, default=DEFAULT_DELIVERIES, help="a bench/stream.py deliveries table"
    )
    parser.add_argument("--files", type=int, default=10, help="data files of it to write again (one per task)")
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds (every variant once per round)")
    parser.add_argument("--warmup", type=int, default=3, help="rounds first, discarded")
    parser.add_argument("--seed", type=int, default=7, help="seed of each round's order")
    parser.add_argument("--output", type=Path, default=RESULTS / "parquet_encodings.md")
    args = parser.parse_args(argv)
    if args.files < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--files and --rounds must be positive, --warmup not negative")
    if not args.deliveries.is_dir():
        parser.error(f"--deliveries {args.deliveries}: no such table (run bench/stream.py first, see --help)")

    from routing.settings import load_settings
    from routing.spark import get_spark

    record = RunRecord.start(__file__, sys.argv[1:] if argv is None else argv)
    spark = get_spark(load_settings(), app_name="bench-parquet-encodings")
    pid = jvm_pid(spark)
    frame, rows = cached_rows(spark, args.deliveries, args.files)
    table = variants()
    print(f"{rows:,} rows in {frame.rdd.getNumPartitions()} partitions; {len(table)} variants", file=sys.stderr)
    wall: dict[str, list[float]] = {name: [] for name in table}
    tasks: dict[str, list[float]] = {name: [] for name in table}
    jvm: dict[str, list[float]] = {name: [] for name in table}
    order = random.Random(args.seed)
    outputs = Path(tempfile.mkdtemp(prefix="parquet-encodings-"))
    try:
        for round_index in range(args.warmup + args.rounds):
            names = list(table)
            order.shuffle(names)
            for name in names:
                before, started = process_cpu(pid), time.perf_counter()
                write(frame, table[name], outputs / name.replace(" ", "_"))
                elapsed, used = time.perf_counter() - started, process_cpu(pid)
                if round_index >= args.warmup:
                    wall[name].append(elapsed)
                    tasks[name].append(used.tasks_s - before.tasks_s)
                    jvm[name].append(used.jvm_s - before.jvm_s)
            print(f"round {round_index + 1}/{args.warmup + args.rounds}", file=sys.stderr, flush=True)
        sizes = {name: column_sizes(outputs / name.replace(" ", "_")) for name in table if table[name] is not None}
    finally:
        shutil.rmtree(outputs, ignore_errors=True)
        spark.stop()
    text = report(args, rows, table, wall, tasks, jvm, sizes, record)
    plot(tasks, jvm, write_report(text, args.output))
    return 0


def report(
    args: argparse.Namespace,
    rows: int,
    table: dict[str, Any],
    wall: dict[str, list[float]],
    tasks: dict[str, list[float]],
    jvm: dict[str, list[float]],
    sizes: dict[str, dict[str, int]],
    record: RunRecord,
) -> str:
    base_tasks, base_jvm = statistics.mean(tasks[BEFORE]), statistics.mean(jvm[BEFORE])
    lines = []
    for name in table:
        total = sum(sizes[name].values()) if name in sizes else None
        lines.append(
            [
                name,
                f"{statistics.median(wall[name]) * 1000:,.0f}",
                f"{statistics.mean(tasks[name]) * 1000:,.0f}",
                f"{statistics.mean(tasks[name]) / base_tasks:.2f}x",
                f"{statistics.mean(jvm[name]) * 1000:,.0f}",
                f"{statistics.mean(jvm[name]) / base_jvm:.2f}x",
                "-" if total is None else f"{total / 1024:,.0f}",
            ]
        )
    columns = sorted(sizes[BEFORE], key=lambda column: -sizes[BEFORE][column])
    size_rows = [
        [column, *(f"{sizes[name].get(column, 0) / 1024:,.0f}" for name in (BEFORE, AFTER))]
        for column in columns
        if sizes[BEFORE][column] >= 4096 or sizes[AFTER].get(column, 0) >= 4096
    ]
    source = args.deliveries.relative_to(REPO) if args.deliveries.is_relative_to(REPO) else args.deliveries
    return "\n".join(
        [
            "# Parquet encodings of the deliveries",
            "",
            f"{record.line()} Spark local mode (the run's own JVM keeps the cores busy). {rows:,} deliveries rows "
            f"of `{source}` "
            f"({args.files} files, written again one task per file, in their order), every variant once per round "
            f"in a shuffled order, {args.rounds} rounds after {args.warmup} discarded.",
            "",
            "*before*: the dictionary off for `delivery_id` only, INT96 timestamps; each *+* row adds one change to "
            "*before*; *after*: `routing.router.tables.PLAIN_ENCODED_COLUMNS['deliveries']` plain and "
            "TIMESTAMP_MICROS, what the router writes. Task CPU = the executor's task threads; JVM CPU = the whole "
            "process (driver, JIT, GC too); means per write, from `/proc` in 10 ms ticks.",
            "",
            markdown_table(
                ["variant", "wall ms (median)", "task CPU ms", "vs before", "JVM CPU ms", "vs before", "files KB"],
                lines,
            ),
            "",
            "Compressed KB per column (columns of at least 4 KB):",
            "",
            markdown_table(["column", BEFORE, AFTER], size_rows),
            "",
        ]
    )


def plot(tasks: dict[str, list[float]], jvm: dict[str, list[float]], path: Path) -> None:
    plt = pyplot()

    names = list(tasks)
    figure, axis = plt.subplots(figsize=(8, 4))
    positions = range(len(names))
    axis.barh([p + 0.2 for p in positions], [statistics.mean(jvm[n]) * 1000 for n in names], 0.4, label="JVM CPU")
    axis.barh([p - 0.2 for p in positions], [statistics.mean(tasks[n]) * 1000 for n in names], 0.4, label="task CPU")
    axis.set_yticks(list(positions), names)
    axis.invert_yaxis()
    axis.set_xlabel("ms of CPU per write (mean)")
    axis.set_title("Writing the deliveries rows again as Parquet")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    print(f"chart: {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

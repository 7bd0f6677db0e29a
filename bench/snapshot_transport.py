"""In classic mode, which gets a new snapshot version to the UDF faster: a Spark broadcast or its snapshot file?

Spark Connect has no broadcasts, so there the router ships each snapshot version as its snapshot file
(``routing.router.snapshot_files.SnapshotFileRef``); issue 12 asks to measure the file against the
broadcast in classic mode and keep whichever is faster there. Both reach the same per-worker matcher
cache (``udfs.route.WORKER_CACHE``), so they differ only when the version changes. Per transport and
snapshot size, each repeat publishes a *new* version with each transport (interleaved, alternating
which goes first) and times:

* **ship**: the driver's part (``sparkContext.broadcast(bytes)``, or writing the file);
* **first batch**: a routing job over ``--keys`` keys with the real UDF (``udfs.route.make_router``),
  whose Python workers must fetch and decode the new version (the broadcast's blocks, or one file read
  and a SHA-256 check), then ``FrozenMatcher.from_bytes``;
* **steady batch**: the same job again, the matcher cached: the baseline both share.

It prints a table (median of ``--repeats``, after one warm-up round), the first batch's overhead over
the steady batch, and the ratio file / broadcast, records the machine's load average, and writes
``bench/results/snapshot_transport.md`` and ``.png``::

    python bench/snapshot_transport.py [--sizes 10000,1000000] [--repeats 5] [--keys 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import RunRecord, markdown_table, pyplot, write_report

RESULTS = Path(__file__).resolve().parent / "results"
TRANSPORTS = ("broadcast", "file")


def snapshot_bytes(size: int) -> bytes:
    """A frozen matcher of ``size`` pairs: one wide node of tenants plus broad and exact patterns."""
    import pyarrow as pa

    from routing.matchers.native import FrozenMatcher

    patterns = [f"tenant{index}.orders.#" if index % 4 else f"stock.*.s{index}" for index in range(size)]
    subscribers = [f"sub-{index % 5000}" for index in range(size)]
    return bytes(FrozenMatcher.from_arrow(pa.array(patterns), pa.array(subscribers)).to_bytes())


def route_job(spark: Any, keys: Any, version: int, load: Callable[[], bytes], table: str) -> float:
    """Seconds for one routing job over ``keys`` with the UDF of ``version`` (forced by a sum)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

    from udfs.route import ROUTE_DDL, make_router

    route = make_router(
        version, load, max_fanout=100_000, max_batch_rows=1 << 20, max_output_bytes=1 << 28, table=table
    )
    udf = arrow_udf(route, ROUTE_DDL, ArrowUDFType.SCALAR_ITER).asNondeterministic()
    started = time.perf_counter()
    keys.select(udf(F.col("routing_key")).alias("route")).agg(F.sum("route.fanout")).collect()
    return time.perf_counter() - started


def measure(spark: Any, keys: Any, data: bytes, transport: str, version: int, directory: str) -> dict[str, float]:
    from routing.router.snapshot_files import SnapshotFiles

    started = time.perf_counter()
    if transport == "broadcast":
        carrier: Any = spark.sparkContext.broadcast(data)
    else:
        files = SnapshotFiles(directory, keep=2, table_id="bench-snapshot-transport")
        name = files.write(version, data)
        assert name is not None, "the snapshot file was not written"
        carrier = files.ref(version, name)
    ship = time.perf_counter() - started
    table = f"bench-{transport}"
    first = route_job(spark, keys, version, lambda: carrier.value, table)
    steady = route_job(spark, keys, version, lambda: carrier.value, table)
    carrier.destroy()
    return {"ship": ship, "first": first, "steady": steady, "total": ship + first}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/snapshot_transport.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,1000000", help="snapshot sizes in pairs, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="versions published per (size, transport)")
    parser.add_argument("--keys", type=int, default=20000, help="routing keys per job")
    parser.add_argument("--output", default=str(RESULTS / "snapshot_transport.md"))
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.repeats < 1 or args.keys < 1 or any(size < 1 for size in sizes):
        parser.error("--sizes, --repeats and --keys must be positive")

    from routing.settings import load_settings
    from routing.spark import get_spark

    record = RunRecord.start(__file__, sys.argv[1:] if argv is None else argv)
    spark = get_spark(load_settings(), app_name="bench-snapshot-transport")
    keys = (
        spark.createDataFrame(
            [
                (f"tenant{index % 50000}.orders.created" if index % 2 else f"stock.nyse.s{index % 1000}",)
                for index in range(args.keys)
            ],
            "routing_key STRING",
        )
        .repartition(2)
        .cache()
    )
    keys.count()
    rows: list[list[str]] = []
    medians: dict[tuple[int, str], dict[str, float]] = {}
    version = 0
    with tempfile.TemporaryDirectory(prefix="snapshot-transport-") as directory:
        for size in sizes:
            data = snapshot_bytes(size)
            print(f"{size:,} pairs: {len(data):,} bytes", flush=True)
            runs: dict[str, list[dict[str, float]]] = {transport: [] for transport in TRANSPORTS}
            for repeat in range(args.repeats + 1):
                # Interleaved, in alternating order, so neither transport gains from running after the other.
                for transport in TRANSPORTS if repeat % 2 else TRANSPORTS[::-1]:
                    version += 1
                    run = measure(spark, keys, data, transport, version, directory)
                    if repeat:  # the first round warms up, discarded
                        runs[transport].append(run)
            for transport in TRANSPORTS:
                median = {
                    stage: statistics.median(run[stage] for run in runs[transport]) for stage in runs[transport][0]
                }
                medians[size, transport] = median
                print(f"  {transport}: {median}", flush=True)
        for size in sizes:
            broadcast, file = medians[size, "broadcast"], medians[size, "file"]
            for transport, median in (("broadcast", broadcast), ("file", file)):
                rows.append(
                    [
                        f"{size:,}",
                        transport,
                        f"{median['ship'] * 1000:.1f}",
                        f"{median['first'] * 1000:.0f}",
                        f"{median['steady'] * 1000:.0f}",
                        f"{(median['first'] - median['steady']) * 1000:.0f}",
                        f"{median['total'] * 1000:.0f}",
                        f"{median['total'] / broadcast['total']:.2f}x",
                    ]
                )
    spark.stop()
    header = [
        "pairs",
        "transport",
        "ship ms",
        "first batch ms",
        "steady batch ms",
        "version change ms",
        "ship + first ms",
        "vs broadcast",
    ]
    table = markdown_table(header, rows)
    faster = {size: min(TRANSPORTS, key=lambda transport: medians[size, transport]["total"]) for size in sizes}
    text = "\n".join(
        [
            "# Snapshot transport in classic mode: broadcast vs snapshot file",
            "",
            f"{record.line()} Sizes {args.sizes}, {args.keys:,} keys: median of {args.repeats} new versions per "
            "transport, interleaved, after one warm-up round; local[2].",
            "",
            "*version change* = first batch - steady batch: what fetching and decoding a new version adds to the "
            "first batch that routes with it (the steady batch finds the matcher in the worker cache either way).",
            "",
            table,
            "",
            "Faster in classic mode (ship + first batch): "
            + ", ".join(f"{size:,} pairs: {faster[size]}" for size in sizes),
            "",
        ]
    )
    plot(medians, sizes, write_report(text, Path(args.output)))
    return 0


def plot(medians: dict[tuple[int, str], dict[str, float]], sizes: list[int], path: Path) -> None:
    plt = pyplot()

    figure, axis = plt.subplots(figsize=(7, 4))
    width = 0.35
    for offset, transport in enumerate(TRANSPORTS):
        positions = [index + offset * width for index in range(len(sizes))]
        ship = [medians[size, transport]["ship"] * 1000 for size in sizes]
        change = [(medians[size, transport]["first"] - medians[size, transport]["steady"]) * 1000 for size in sizes]
        axis.bar(positions, ship, width, label=f"{transport}: ship")
        axis.bar(positions, change, width, bottom=ship, label=f"{transport}: version change in first batch", alpha=0.6)
    axis.set_xticks([index + width / 2 for index in range(len(sizes))], [f"{size:,} pairs" for size in sizes])
    axis.set_ylabel("ms per new version")
    axis.set_title("New snapshot version: broadcast vs snapshot file (classic mode)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())

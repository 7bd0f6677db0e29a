"""How close does the router come to a plain Kafka -> Delta copy, and how far ahead is it of a Python matcher
and of a Spark SQL join?

A real broker and real Spark, draining a backlog as a router catching up after a deploy does: 10,000 and
1,000,000 subscriptions over a Zipf-weighted vocabulary, so popular topics get most subscribers.

Run ``python bench/stream.py`` (``--quick`` for a smoke run, ``--help`` for
flags). Markdown goes to stdout and ``bench/results/stream.md``; charts to
``bench/results/stream_throughput.png`` and ``bench/results/stream_latency.png``;
progress lines go to stderr. Seeded: the same ``--seed`` gives the same topic and
the same subscriptions.

Workload
--------
* **Messages**: one topic filled once by :func:`jobs.produce.produce` with the
  ``vocab`` distribution (5 words, Zipf-weighted over ``w0``..``w299``, 64-byte
  payloads whose text starts with the message's index, which identifies a
  message across variants).
* **Subscriptions** at each size (10,000 and 1,000,000): random 5-word patterns
  over the same vocabulary and weights (subscribers follow what is popular), 85%
  literal, 10% with one ``*``, 5% with ``#`` anchored by two literal words
  (``a.b.#`` or ``#.d.e``); one subscriber per pattern. Written straight into a
  Delta subscription table (the refresh job is not what is measured here).
  With this mix about 30% of the messages match at 10,000 subscriptions (the
  hit rate at each size is measured and reported). Past
  ``--active-subscriptions`` (10,000) a table's pairs are idle tenants: the same
  shapes with one literal word a tenant id the traffic never carries, so they
  weigh on the matcher (node sizes, snapshot bytes, trie builds) without
  changing the deliveries per message. Drawn all from the 300 popular words, a
  1M table would fan every message out to ~90 subscribers and the run would
  time the rows written rather than the routing (``--active-subscriptions 0``
  runs that).

Variants
--------
Every variant reads the topic from ``earliest`` with the available-now trigger,
the same ``maxOffsetsPerTrigger``, its own checkpoint and its own Delta paths:

(a) **passthrough**: Kafka -> Delta copy, no routing (``foreachBatch`` append
    of the source columns, partitioned like the router's tables): one Spark job
    and one commit per batch, the same append as the router's first attempt at a
    batch (``routing.appends.first_append``,
    :func:`routing.appends.first_append`), which skips Delta's txn-version
    check because its ledger proves no earlier attempt wrote. Without a ledger the
    copy is not replay-safe; with that check (``txnAppId``, a state reconstruction
    of three Spark jobs per batch in Delta 4.4) it would be slower, so this is the
    harder baseline. Its table is created with the router's table properties
    (Delta's ``checkpointInterval``), not the deliveries' own (file statistics
    columns, the per-message columns without a Parquet dictionary:
    ``routing.router.tables.table_properties``): those name the deliveries' columns,
    and a plain copy writes Parquet's defaults. It shares the router's
    SparkSession and so every session setting: the two pay the same Delta costs;
(b) **native router**: the real :class:`routing.router.pipeline.Router`;
(c) **python trie**: the same ``Router`` with only the matcher swapped for
    :class:`routing.matchers.TrieMatcher`, called per key in Python inside the
    same scalar Arrow UDF (same classification, fan-out expansion, ledger and
    writes): the bench passes its own UDF factory as ``Router(make_route=...)``
    (:func:`python_trie_router`; nothing in ``routing`` knows about it). Like the native
    matcher (deserialized once per Python worker per snapshot), each Python
    worker builds its trie once per size from a broadcast list of pairs and
    caches it (:data:`TRIE_CACHE`); the builds happen in the warm-up, so the
    figure is routing only, for both. The built trie is moved out of the
    garbage collector's reach (``gc.freeze()``): PySpark's daemon calls
    ``gc.collect()`` after every task of a reused worker, and at 1M pairs that
    pass over the trie's millions of dicts took seconds per task (it slowed
    (c) and, in the same workers, every later variant: ~4,000 msg/s);
(d) **sql rlike**: what a Spark user might write: each pattern translated to an
    anchored Java regex (:func:`pattern_regex`), a small broadcast DataFrame of
    (regex, subscriber) joined to the classified messages with ``rlike``,
    deliveries appended to Delta. It costs patterns x messages regex
    evaluations, so it reads a *prefix topic* (the first ``--rlike-messages``
    messages, produced again with the same seed: identical keys and payloads)
    and its msg/s is computed on that prefix. Its deliveries are checked against
    (b)'s deliveries of the same messages;
(e) **native router + Kafka sink**: (b) also publishing every delivery to a
    Kafka topic (``router.kafka_sink_topic``), once per size.

Every variant is warmed up first on a separate warm-up topic of
``--warmup-messages`` (1,000,000) messages, unreported: the passthrough once, every
router variant at each size. A few thousand messages were not enough: the
first measured passthrough then ran at half the speed of the last one (JIT),
and the first router run of a session plans and loads everything for the first
time, and each worker loads its matcher there. 200,000 were not enough either:
at the first size the two repeats of each variant still differed by 26-49%
(passthrough 96,862 then 144,653 msg/s, router 81,920 then 103,393); after
warm-ups of 1,000,000, in three runs, they agreed to 3-12% and 0.1-9%. The warm-up's router also writes
each size's snapshot file (``router.snapshot_files_path``, beside the subscription
table), so a measured run starts as a restarted router does: its first snapshot
comes from that file, not from a build (the profile's last row says which).

Figures
-------
* **msg/s** = messages / wall time from ``start()`` to the drained query (query
  start-up, planning and checkpointing included); also messages / the summed
  per-batch times.
* **Per-batch latency**: the time of each ``foreachBatch`` call (Kafka read,
  classification, matching, writes; for (b) and (c) ``Router``'s own batch
  timer), recorded in an HDR histogram (1 us .. 1 h, 3 significant digits).
  These are *service* times of a backlog drained as fast as possible; with no
  arrival schedule there is no coordinated omission to correct, and with tens of
  batches per run the high percentiles equal the maximum (the table gives the
  batch count).
* **Repeats**: (b) and (c) run ``--repeats`` times per size in ABBA order,
  then (e) as many times, with (a) before and after (b) and (c) at each size, so that (b) is compared with the
  passthrough of its own stretch of the run (the JVM keeps speeding up for
  minutes); tables use each variant's best repeat at a size, the latency table
  pools every repeat's batches. The machine is shared, so single runs drift.
* **Targets** (issue 10): (b) >= 0.8 x (a) at 10,000 subscriptions and >= 0.7 x (a)
  at 1,000,000; (b) >= 3 x (c) at 1,000,000; and (issue 60) (e) >= 0.7 x (b) at both sizes. They count
  only for runs of at least 1,000,000 messages and 10 batches per variant (the defaults).
* **Profile**: per batch, the driver time of each router stage, the Python UDF's
  task time and the query progress's ``durationMs`` phases.

The broker is ``jobs.local_kafka``'s, on the bench's own ports and data
directory by default (``--set kafka.client_port=...`` to change them), so other
users of the default broker neither disturb nor are disturbed; it is stopped at
the end only if this run started it. Everything the run writes lives under
``var/bench/stream/`` (wiped first); the run's topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing`, `jobs`, `udfs` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
elif str(Path(__file__).resolve().parent) not in sys.path:  # imported as bench.stream (Python workers): `harness`
    sys.path.append(str(Path(__file__).resolve().parent))

from harness import (
    RESULTS_DIR,
    ProcessCpu,
    RunRecord,
    bench_kafka,
    delete_earlier_topics,
    jvm_pid,
    markdown_table,
    process_cpu,
    progress,
    pyplot,
    python_workers_run_this_checkout,
    stop_broker_once_topics_gone,
)

from jobs.demo import create_topics, delete_topics
from jobs.local_kafka import NUM_PARTITIONS
from routing.settings import REPO_ROOT, Settings, add_settings_arguments, load_settings, parse_overrides
from routing.topic import HASH, STAR, split_words

if TYPE_CHECKING:
    import pyarrow as pa
    from hdrh.histogram import HdrHistogram
    from pyspark import Broadcast
    from pyspark.accumulators import Accumulator
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from udfs.route import RouteBody, RouterFactory, UdfStats

WORK_DIR = REPO_ROOT / "var" / "bench" / "stream"

PASSTHROUGH = "(a) passthrough"
NATIVE = "(b) native router"
PYTHON_TRIE = "(c) python trie"
SQL_RLIKE = "(d) sql rlike"
KAFKA_SINK = "(e) native router + Kafka sink"
VARIANTS = (PASSTHROUGH, NATIVE, PYTHON_TRIE, SQL_RLIKE, KAFKA_SINK)

#: Baselines of the ratio table, in its column order.
BASELINES = (PASSTHROUGH, PYTHON_TRIE, SQL_RLIKE)
#: Targets of issue 10: subscriptions -> (baseline, minimum ratio of (b) to it).
TARGETS: dict[int, tuple[tuple[str, float], ...]] = {
    10_000: ((PASSTHROUGH, 0.8),),
    1_000_000: ((PASSTHROUGH, 0.7), (PYTHON_TRIE, 3.0)),
}
#: Target of issue 60: at these sizes (e), the router also publishing to Kafka, runs at this fraction of (b) or more.
KAFKA_SINK_TARGET: tuple[tuple[int, ...], float] = ((10_000, 1_000_000), 0.7)
#: A run must be at least this long to count: messages and batches per variant.
MIN_MESSAGES, MIN_BATCHES = 1_000_000, 10

#: Percentiles of the latency table and plot (the plot goes out to 99.99%).
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
#: Histogram range in microseconds: 1 us .. 1 hour.
HISTOGRAM_MAX_US = 3_600_000_000

#: The bench's own broker (ports and data directory), unless --set says otherwise.
BENCH_KAFKA = bench_kafka("kafka", 19192)


@dataclasses.dataclass(frozen=True)
class Plan:
    seed: int
    quick: bool
    messages: int
    rlike_messages: int
    repeats: int
    sizes: tuple[int, ...]
    max_offsets_per_trigger: int
    vocabulary: int
    #: Messages of the warm-up topic every variant drains first at each size (unreported).
    warmup_messages: int = 1_000_000
    #: (d) runs only at sizes up to this: it costs patterns x messages regex evaluations (4 x 10^9 at
    #: 1,000,000 subscriptions and 4,000 messages, about 20 minutes here).
    rlike_max_subscriptions: int = 100_000
    #: Subscriptions that draw from the traffic's words; the rest of a larger table are idle tenants
    #: (:func:`subscription_pairs`). ``None``: every subscription is active.
    active_subscriptions: int | None = 10_000
    #: Letters of the variants to run (a..e); (b) always runs.
    variants: str = "abcde"


@dataclasses.dataclass
class Run:
    """One variant's pass over its topic at one subscription count (for (a), the count of the runs it ran beside)."""

    variant: str
    size: int
    messages: int
    wall_s: float
    batch_s: list[float]
    deliveries: int
    matched_messages: int | None = None
    #: Seconds spent inside ``match_batch`` (the UDF's own timer), for (b) and (c).
    match_s: float | None = None
    #: Task seconds inside the Python UDF (the round trip's Python side, matching included), for (b) and (c).
    python_s: float | None = None
    #: Driver wall seconds per router stage, summed over batches (``BatchReport.stages``), for (b) and (c).
    stages: dict[str, float] = dataclasses.field(default_factory=dict)
    #: The query progress's ``durationMs`` per phase, summed over batches (milliseconds).
    duration_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    #: How the router's first snapshot was published (``SnapshotBroadcasts.history``: mode, seconds), for (b)/(c)/(e).
    first_snapshot: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: CPU the JVM and the Python workers used over the run (:func:`process_cpu`), start-up included.
    cpu: ProcessCpu | None = None

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.wall_s if self.wall_s else 0.0

    @property
    def batch_msg_per_s(self) -> float:
        total = sum(self.batch_s)
        return self.messages / total if total else 0.0


@dataclasses.dataclass
class Results:
    runs: list[Run] = dataclasses.field(default_factory=list)
    checks: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    produced: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The command, the date and the load average before the run started anything.
    record: RunRecord = dataclasses.field(default_factory=lambda: RunRecord.start(__file__, sys.argv[1:]))

    def runs_of(self, variant: str, size: int) -> list[Run]:
        """Every repeat of ``variant`` at ``size`` (for (a): those run beside that size's router runs)."""
        return [run for run in self.runs if run.variant == variant and run.size == size]

    def get(self, variant: str, size: int) -> Run | None:
        """The best repeat (highest msg/s): on a shared machine the least disturbed one."""
        return max(self.runs_of(variant, size), key=lambda run: run.msg_per_s, default=None)

    def groups(self) -> list[tuple[str, int]]:
        """(variant, size) in the order first measured."""
        return list(dict.fromkeys((run.variant, run.size) for run in self.runs))

    def batch_seconds(self, variant: str, size: int) -> list[float]:
        """Per-batch times of every repeat, pooled."""
        return [seconds for run in self.runs_of(variant, size) for seconds in run.batch_s]


# --- workload -------------------------------------------------------------------------------------------------


def subscription_pairs(
    rng: random.Random, count: int, vocabulary: int, active: int | None = None
) -> list[tuple[str, str]]:
    """``count`` (pattern, subscriber) pairs over ``jobs.produce``'s vocab words and weights.

    The first ``active`` pairs (all when ``None``) are the traffic's subscribers. The rest are idle
    tenants: the same shapes with one literal word replaced by ``t<index>``, a word the producer never
    emits. They fill the matcher's nodes (``w0.w1.t7.w3.w4`` sits under the busy ``w0.w1`` branch) but
    never match, so the deliveries per message stay those of the active share: a 1M table whose every
    pair drew from 300 popular words would fan each message out to ~90 subscribers, and the run would
    measure the volume written, not the routing.
    """
    words = [f"w{index}" for index in range(vocabulary)]
    weights = [1.0 / (rank + 1) for rank in range(vocabulary)]
    active = count if active is None else min(active, count)
    pairs = []
    for index in range(count):
        chosen = rng.choices(words, weights, k=5)
        roll = rng.random()
        if index >= active:
            # Any literal position but the anchors of the '#' shapes below keeps the shape mix.
            chosen[rng.randrange(5)] = f"t{index}"
        if roll < 0.10:
            chosen[rng.randrange(5)] = STAR
        elif roll < 0.15:
            # Two literal words anchor the '#': one anchor word would match a sixth of all traffic.
            chosen = [*chosen[:2], HASH] if rng.random() < 0.5 else [HASH, *chosen[3:]]
        if index >= active and not any(word.startswith("t") for word in chosen):
            # The '#' shape dropped the idle word, or a '*' replaced it: anchor it again.
            literal = [i for i, word in enumerate(chosen) if word not in (STAR, HASH)]
            chosen[rng.choice(literal)] = f"t{index}"
        pairs.append((".".join(chosen), f"s{index}"))
    return pairs


def _literal_regex(word: str) -> str:
    """A Java regex matching exactly ``word``: ASCII punctuation backslashed, non-ASCII as ``\\x{...}``."""
    out = []
    for char in word:
        if char.isascii() and char.isalnum():
            out.append(char)
        elif char.isascii():
            out.append("\\" + char)
        else:
            out.append(f"\\x{{{ord(char):x}}}")
    return "".join(out)


def pattern_regex(pattern: str) -> str:
    """An anchored Java regex over the *dotted* key (:func:`dotted_key`) that matches as the pattern does.

    In the dotted form every word carries its leading dot (``a.b`` -> ``.a.b``, the zero-word key ``""``
    stays ``""``), so each pattern word is one self-contained piece: a literal is ``\\.word``, ``*`` is
    ``\\.[^.]*`` (exactly one word, possibly empty) and ``#`` is ``(?:\\.[^.]*)*`` (zero or more words with
    their dots). ``\\z`` anchors the very end (``$`` would also match before a final line break).
    """
    pieces = []
    for word in split_words(pattern):
        if word == STAR:
            pieces.append(r"\.[^.]*")
        elif word == HASH:
            pieces.append(r"(?:\.[^.]*)*")
        else:
            pieces.append(r"\." + _literal_regex(word))
    return "^" + "".join(pieces) + r"\z"


# --- the stack ------------------------------------------------------------------------------------------------


def base_settings(args: argparse.Namespace, plan: Plan, topic: str) -> Settings:
    overrides: dict[str, dict[str, object]] = {
        "kafka": dict(BENCH_KAFKA),
        "router": {
            "topics": topic,
            "trigger": "available_now",
            "max_offsets_per_trigger": str(plan.max_offsets_per_trigger),
        },
    }
    for section, values in parse_overrides(args.settings_overrides).items():
        overrides.setdefault(section, {}).update(values)
    return load_settings(args.conf, overrides=overrides)


def variant_settings(
    settings: Settings, work: Path, name: str, *, topic: str, table: Path, sink: str = NATIVE
) -> Settings:
    """Settings of one variant run: its own app id, checkpoint, outputs and subscription table.

    ``sink`` :data:`KAFKA_SINK` also publishes the deliveries to a topic of the run's own.
    """
    root = work / name
    router = dataclasses.replace(
        settings.router,
        kafka_sink_topic=f"{topic}.{name}.deliveries" if sink == KAFKA_SINK else "",
        topics=(topic,),
        app_id=f"bench-stream-{name}",
        checkpoint_path=str(root / "checkpoint"),
        deliveries_path=str(root / "deliveries"),
        dead_letters_path=str(root / "dead_letters"),
        unrouted_path="",  # not written, as by default
        # The per-batch profile reads every batch's report (bench/latency.py's runs hold hundreds).
        retain_batches=0,
    )
    subscriptions = dataclasses.replace(settings.subscriptions, table_path=str(table))
    return settings.replace(router=router, subscriptions=subscriptions)


def sink_topics(settings: Settings, topic: str) -> list[str]:
    """The delivery topics the Kafka-sink variant (e) created for this run's ``topic``."""
    from confluent_kafka.admin import AdminClient

    names = AdminClient(settings.kafka_client_config()).list_topics(timeout=30).topics
    return [name for name in names if name.startswith(f"{topic}.") and name.endswith(".deliveries")]


def write_subscriptions(spark: SparkSession, path: Path, pairs: Sequence[tuple[str, str]]) -> None:
    """The subscription table holding exactly ``pairs`` (written directly, as one import would leave it)."""
    from pyspark.sql.types import StructType

    from routing.subscriptions.table import TABLE_DDL

    now = datetime.datetime.now(datetime.UTC)
    rows = [
        (
            subscriber,
            pattern,
            True,
            now,
            f"bench-{index}",
            "import",
            now,
            len(split_words(pattern)),
            STAR in split_words(pattern) or HASH in split_words(pattern),
        )
        for index, (pattern, subscriber) in enumerate(pairs)
    ]
    schema = StructType.fromDDL(TABLE_DDL)
    assert isinstance(schema, StructType)
    spark.createDataFrame(rows, schema=schema).write.format("delta").mode("overwrite").save(str(path))


def _drain(start: Callable[[], Any], durations: list[dict[str, int]] | None = None) -> float:
    """Start a query, wait until the available-now trigger has drained the topic; wall seconds.

    ``durations`` receives the ``durationMs`` of every batch that read rows (``recentProgress``).
    """
    started = time.perf_counter()
    query = start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"query {query.name} failed: {failure}")
    if durations is not None:
        durations += [dict(p.durationMs or {}) for p in query.recentProgress if p.numInputRows]
    return elapsed


def summed(dicts: Sequence[dict[str, Any]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for entry in dicts:
        for name, value in entry.items():
            total[name] = total.get(name, 0.0) + float(value)
    return total


def _count_rows(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return 0
    return int(spark.read.format("delta").load(path).count())


# --- variants -------------------------------------------------------------------------------------------------


def start_passthrough(
    spark: SparkSession,
    settings: Settings,
    *,
    trigger_interval: str | None = None,
    batch_seconds: list[float] | None = None,
    stages: dict[int, dict[str, float]] | None = None,
) -> StreamingQuery:
    """Variant (a), the baseline: the router's Kafka source copied to the deliveries table as it is.

    The same source, partitioning and table properties as the router, and the same append as the router's first
    attempt at a batch (:func:`routing.appends.first_append`: one Spark job and one commit carrying the batch's
    ``txn`` version, which ``bench/latency.py`` maps commits to batches by). Without the router's ledger this copy
    cannot know a batch is a first attempt, so it is not replay-safe (the benchmark re-executes no batch); with
    Delta's ``txnAppId`` check, which a replay-safe copy needs, each batch would also reconstruct the table's state
    first (three Spark jobs, 0.4-0.8 s a batch on this host). Available-now unless ``trigger_interval`` is given
    (``bench/latency.py`` runs it on the processing-time trigger); each ``foreachBatch`` call's seconds go to
    ``batch_seconds``, and its ``write`` seconds to ``stages[batch id]``, when given.
    """
    from pyspark.sql import functions as F

    from routing.appends import first_append
    from routing.router.columns import SOURCE_DDL
    from routing.router.pipeline import kafka_stream
    from routing.router.tables import PARTITION_COLUMN
    from routing.streaming import create_delta_table_if_absent, start_query

    router = settings.router
    # Created like the router's tables (partitioning; Delta's session defaults such as its checkpointInterval).
    create_delta_table_if_absent(
        spark,
        router.deliveries_path,
        f"{SOURCE_DDL}, {PARTITION_COLUMN} DATE",
        partition_by=(PARTITION_COLUMN,),
    )

    def copy(batch: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        frame = batch.withColumn(PARTITION_COLUMN, F.to_date(F.col("timestamp")))
        if not first_append(frame, router.deliveries_path, router.app_id, batch_id):
            raise RuntimeError(f"the passthrough cannot append to {router.deliveries_path} as the router does")
        finished = time.perf_counter()
        if batch_seconds is not None:
            batch_seconds.append(finished - started)
        if stages is not None:
            stages[batch_id] = {"write": finished - started}

    return start_query(
        kafka_stream(spark, settings),
        copy,
        checkpoint=router.checkpoint_path,
        bind=lambda _: None,
        trigger_interval=trigger_interval,
        query_name=router.app_id,
    )


def run_passthrough(spark: SparkSession, settings: Settings, messages: int, *, size: int = 0) -> Run:
    """One passthrough run; ``size`` is the subscription count of the runs it is compared with (0: any)."""
    router = settings.router
    batch_s: list[float] = []
    stages: dict[int, dict[str, float]] = {}

    def start() -> Any:
        return start_passthrough(spark, settings, batch_seconds=batch_s, stages=stages)

    durations: list[dict[str, int]] = []
    pid = jvm_pid(spark)
    before = process_cpu(pid)
    wall = _drain(start, durations)
    cpu = process_cpu(pid) - before
    copied = _count_rows(spark, router.deliveries_path)
    if copied != messages:
        raise RuntimeError(f"passthrough copied {copied} rows, expected {messages}")
    return Run(
        PASSTHROUGH,
        size,
        messages,
        wall,
        batch_s,
        deliveries=copied,
        duration_ms=summed(durations),
        stages=summed(list(stages.values())),
        cpu=cpu,
    )


def route_variant(
    spark: SparkSession,
    settings: Settings,
    variant: str,
    size: int,
    messages: int,
    trie_pairs: Broadcast[list[tuple[str, str]]] | None,
) -> Run:
    """One run of a router variant: (b) and (e) as they are, (c) with the Python trie as the router's UDF factory."""
    if variant != PYTHON_TRIE:
        return run_router(spark, settings, variant, size, messages)
    assert trie_pairs is not None
    return run_router(spark, settings, variant, size, messages, make_route=python_trie_router(trie_pairs))


def run_router(
    spark: SparkSession,
    settings: Settings,
    variant: str,
    size: int,
    messages: int,
    *,
    make_route: RouterFactory | None = None,
) -> Run:
    from routing.router.pipeline import Router

    router = Router(spark, settings) if make_route is None else Router(spark, settings, make_route=make_route)
    pid = jvm_pid(spark)
    before = process_cpu(pid)
    try:
        wall = _drain(router.start)
        cpu = process_cpu(pid) - before
    finally:
        router.close(progress_wait_s=1.0)
    reports = [router.reports[batch_id] for batch_id in sorted(router.reports)]
    routed = sum(report.metrics.get("input_rows", 0) for report in reports)
    if routed != messages:
        raise RuntimeError(f"{variant} routed {routed} messages, expected {messages}")
    deliveries = sum(report.metrics.get("deliveries", 0) for report in reports)
    unmatched = sum(report.metrics.get("unmatched", 0) for report in reports)
    dead = sum(report.metrics.get("dead_letters", 0) for report in reports)
    return Run(
        variant,
        size,
        messages,
        wall,
        [report.seconds for report in reports],
        deliveries,
        matched_messages=messages - unmatched - dead,
        match_s=sum(report.metrics.get("match_ns", 0) for report in reports) / 1e9,
        python_s=sum(report.metrics.get("python_ns", 0) for report in reports) / 1e9,
        stages=summed([report.stages for report in reports]),
        duration_ms=summed([router.durations_ms.get(report.batch_id, {}) for report in reports]),
        first_snapshot=next((dict(entry) for entry in router.snapshots.history if "mode" in entry), {}),
        cpu=cpu,
    )


class PythonTrieBatch:
    """``route_batch`` over a :class:`TrieMatcher`: one Python ``lookup`` per key, no de-duplication.

    The same contract as the native ``route_batch`` (``udfs.route.BatchRouter``): a prefix of the keys cut
    by bytes, a null list over ``max_fanout``, the fan-out count per row.
    """

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        from routing.matchers import TrieMatcher

        self.trie = TrieMatcher()
        for pattern, subscriber in pairs:
            self.trie.subscribe(pattern, subscriber)

    def route_batch(
        self,
        keys: pa.Array,
        max_rows: int | None = None,
        max_fanout: int | None = None,
        max_bytes: int | None = None,
    ) -> pa.StructArray:
        import pyarrow as pa

        if max_rows is not None and len(keys) > max_rows:
            raise ValueError(f"batch of {len(keys)} keys is over max_rows={max_rows}")
        lookup = self.trie.lookup
        lists: list[list[str] | None] = []
        fanouts: list[int | None] = []
        size = 0
        for key in keys.to_pylist():
            found = None if key is None else lookup(key)
            listed = found is not None and (max_fanout is None or len(found) <= max_fanout)
            cost = 8 + (sum(4 + len(subscriber.encode()) for subscriber in found) if found and listed else 0)
            if lists and max_bytes is not None and size + cost > max_bytes:
                break
            size += cost
            lists.append(list(found) if found is not None and listed else None)
            fanouts.append(None if found is None else len(found))
        list_type = pa.list_(pa.field("element", pa.string()))
        return pa.StructArray.from_arrays(
            [pa.array(lists, type=list_type), pa.array(fanouts, type=pa.int32())], names=["subscribers", "fanout"]
        )


#: (c)'s worker-wide cache: token of the broadcast -> trie, so each Python worker builds a size's trie once, as the
#: native matcher is deserialized once per worker (``udfs.route.MatcherCache``).
TRIE_CACHE: dict[str, PythonTrieBatch] = {}


def cached_trie(pairs: Broadcast[list[tuple[str, str]]], token: str) -> PythonTrieBatch:
    """The worker's trie of ``pairs`` (this module imported by name on the worker: one cache per worker)."""
    import importlib

    module = importlib.import_module("bench.stream")  # not __main__: the driver pickles that by value
    cache: dict[str, PythonTrieBatch] = module.TRIE_CACHE
    if token not in cache:
        gc.unfreeze()
        cache.clear()
        cache[token] = module.PythonTrieBatch(pairs.value)
        # PySpark's daemon runs gc.collect() after every task of a reused worker; at 1M pairs that full
        # pass over millions of trie dicts took seconds per task, in (c) and in any variant run later in
        # the same worker. Frozen objects are skipped by the collector (they are freed by refcount).
        gc.collect()
        gc.freeze()
    return cache[token]


def python_trie_router(pairs: Broadcast[list[tuple[str, str]]]) -> RouterFactory:
    """A ``Router`` UDF factory (``make_route``) that matches with :class:`PythonTrieBatch` instead of native code."""
    import uuid

    from udfs.route import route_keys

    token = uuid.uuid4().hex  # names this broadcast in the workers' caches

    def make_router(
        version: int,
        load_bytes: Callable[[], bytes],
        *,
        table: str = "",
        stats: Accumulator[UdfStats] | None = None,
        **limits: int,
    ) -> RouteBody:
        """``udfs.route.make_router``'s arguments; the snapshot is ignored (the trie comes from ``pairs``)."""

        def route(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            matcher = cached_trie(pairs, token)
            for keys in batches:
                yield from route_keys(matcher, keys, stats=stats, **limits)

        return route

    return make_router


def run_sql_rlike(
    spark: SparkSession, settings: Settings, size: int, messages: int, pairs: Sequence[tuple[str, str]]
) -> Run:
    from pyspark.sql import functions as F

    from routing.appends import idempotent_append
    from routing.router.classify import classify
    from routing.router.columns import CLASSIFIED_COLUMNS, deliveries_frame
    from routing.router.pipeline import kafka_stream
    from routing.router.tables import PARTITION_COLUMN
    from routing.streaming import start_query

    router = settings.router
    validator = settings.validator()
    regexes = spark.createDataFrame(
        [(pattern_regex(pattern), subscriber) for pattern, subscriber in pairs], "regex STRING, subscriber_id STRING"
    ).cache()
    regexes.count()
    batch_s: list[float] = []
    deliveries = 0

    def route(batch: DataFrame, batch_id: int) -> None:
        nonlocal deliveries
        started = time.perf_counter()
        classified = classify(batch, router, validator).select(*CLASSIFIED_COLUMNS)
        classified = classified.where(F.col("routing_key").isNotNull())
        key = F.col("routing_key")
        dotted = classified.withColumn("dotted_key", F.when(key == "", key).otherwise(F.concat(F.lit("."), key)))
        joined = dotted.join(F.broadcast(regexes), F.expr("dotted_key rlike regex"))
        out = deliveries_frame(joined, 0, batch_id).cache()
        deliveries += out.count()
        idempotent_append(out, router.deliveries_path, router.app_id, batch_id, partition_by=(PARTITION_COLUMN,))
        out.unpersist()
        batch_s.append(time.perf_counter() - started)

    def start() -> Any:
        return start_query(
            kafka_stream(spark, settings),
            route,
            checkpoint=router.checkpoint_path,
            bind=lambda _: None,
            query_name=router.app_id,
        )

    try:
        wall = _drain(start)
    finally:
        regexes.unpersist()
    return Run(SQL_RLIKE, size, messages, wall, batch_s, deliveries)


# --- checks ---------------------------------------------------------------------------------------------------


def _delivered(spark: SparkSession, path: str, below_index: int | None = None) -> DataFrame:
    """(message index, subscriber) of every delivery at ``path`` (the index is the payload's prefix)."""
    from pyspark.sql import functions as F

    index = F.split(F.col("payload").cast("string"), ":").getItem(0).cast("long")
    frame = spark.read.format("delta").load(path).select(index.alias("message"), "subscriber_id")
    return frame if below_index is None else frame.where(F.col("message") < below_index)


@dataclasses.dataclass(frozen=True)
class DeliveryCheck:
    """One comparison of a variant's deliveries with (b)'s; ``actual_path`` None: a line saying why there is none."""

    label: str
    actual_path: str | None
    below_index: int | None = None


def delivery_checks(
    plan: Plan, size: int, deliveries_paths: dict[str, str], rlike_path: str | None
) -> list[DeliveryCheck]:
    """The checks of one size: (c) against (b) if (c) ran, (d) against (b) if (d) ran at this size (else why not)."""
    checks = []
    if PYTHON_TRIE in deliveries_paths:
        label = f"(c) vs (b) at {size:,} subscriptions, all {plan.messages:,} messages"
        checks.append(DeliveryCheck(label, deliveries_paths[PYTHON_TRIE]))
    if "d" in plan.variants and rlike_path is None:
        label = f"(d) vs (b) at {size:,} subscriptions: not checked, (d) skipped (over --rlike-max-subscriptions)"
        checks.append(DeliveryCheck(label, None))
    elif rlike_path is not None:
        label = f"(d) vs (b) at {size:,} subscriptions, first {plan.rlike_messages:,} messages"
        checks.append(DeliveryCheck(label, rlike_path, below_index=plan.rlike_messages))
    return checks


def compare_deliveries(
    spark: SparkSession, label: str, expected_path: str, actual_path: str, below_index: int | None = None
) -> str:
    """One line: whether two variants delivered exactly the same (message, subscriber) rows."""
    expected = _delivered(spark, expected_path, below_index)
    actual = _delivered(spark, actual_path, below_index)
    missing = expected.exceptAll(actual).count()
    extra = actual.exceptAll(expected).count()
    total = expected.count()
    verdict = "same" if missing == 0 and extra == 0 else "DIFFERENT"
    return f"{label}: {verdict} ({total:,} deliveries expected; {missing:,} missing, {extra:,} extra)"


# --- report ---------------------------------------------------------------------------------------------------


def histogram(seconds: Sequence[float]) -> HdrHistogram:
    from hdrh.histogram import HdrHistogram

    recorded = HdrHistogram(1, HISTOGRAM_MAX_US, 3)
    for value in seconds:
        recorded.record_value(min(max(1, round(value * 1e6)), HISTOGRAM_MAX_US))
    return recorded


def _ms(value_us: float) -> str:
    return f"{value_us / 1000:,.0f}" if value_us >= 10_000 else f"{value_us / 1000:,.1f}"


def verdict(target: str, size: int, ratio: float, minimum: float) -> str:
    """One line of the Targets list: ``target`` at ``size`` subscriptions, met or missed, and by how much."""
    outcome = "met" if ratio >= minimum else "MISSED"
    return f"{target} at {size:,} subscriptions: {outcome} ({ratio:,.3f}x, {ratio / minimum:.3f} of the target)"


def ratio_lines(results: Results, plan: Plan) -> tuple[list[list[str]], list[str]]:
    rows: list[list[str]] = []
    verdicts: list[str] = []
    for size in plan.sizes:
        native = results.get(NATIVE, size)
        if native is None:
            continue
        row = [f"{size:,}"]
        minimums = dict(TARGETS.get(size, ()))
        for baseline in BASELINES:
            other = results.get(baseline, size)
            if other is None or not other.msg_per_s:
                row.append("n/a")
                continue
            ratio = native.msg_per_s / other.msg_per_s
            row.append(f"{ratio:,.2f}x")
            if baseline in minimums:
                minimum = minimums[baseline]
                verdicts.append(verdict(f"(b) >= {minimum:g} x {baseline.split()[0]}", size, ratio, minimum))
        rows.append(row)
    sink_sizes, sink_minimum = KAFKA_SINK_TARGET
    for size in sink_sizes:
        sink, native = results.get(KAFKA_SINK, size), results.get(NATIVE, size)
        if sink is None or native is None or not native.msg_per_s:
            continue
        ratio = sink.msg_per_s / native.msg_per_s
        verdicts.append(verdict(f"(e) >= {sink_minimum:g} x (b)", size, ratio, sink_minimum))
    for size in sorted(set(TARGETS) - set(plan.sizes)):
        verdicts.append(f"targets at {size:,} subscriptions: not measured by this run")
    if plan.messages < MIN_MESSAGES or plan.messages < MIN_BATCHES * plan.max_offsets_per_trigger:
        verdicts.append(
            f"this run is shorter than the targets ask ({MIN_MESSAGES:,} messages and {MIN_BATCHES} batches per "
            "variant): a development run, not a verdict"
        )
    return rows, verdicts


#: Router stages in batch order (``BatchReport.stages``, driver wall time) with what each covers.
ROUTER_STAGES = (
    ("ledger", "ledger lookup and record"),
    ("snapshot", "snapshot version check, pin (the first batch also waits for the first snapshot)"),
    ("plan", "the batch's frames from the prebuilt expressions"),
    ("warm_wait", "router, background warm: waiting for the previous batch's Delta warm, run since its commit"),
    ("count", "counting pass of a re-executed batch"),
    ("write", "the passthrough's copy: Kafka read + Delta commit"),
    ("write_deliveries", "deliveries: pass over the input (Kafka read, classification, UDF, fan-out) + Delta commit"),
    ("observe", "the write's counters (the UDF's accumulator; an Observation on Spark Connect)"),
    ("write_dead_letters", "dead letters: write + commit (only when the batch has some)"),
    ("write_unmatched", "unmatched: write + commit (only when written and the batch has some)"),
    ("kafka_sink", "Kafka sink"),
    ("warm", "Delta state for the next append's txn check, in line after the commit (router through the writer)"),
    ("metrics", "metrics table row"),
)
#: Phases of the query progress's ``durationMs`` outside ``addBatch`` (the foreachBatch call).
PROGRESS_PHASES = ("latestOffset", "queryPlanning", "walCommit", "commitOffsets")


def profile_lines(results: Results) -> list[str]:
    """Where each second of a batch goes: mean ms per batch, per stage, for each variant's best run."""
    runs = [run for group in results.groups() if (run := results.get(*group)) and run.variant != SQL_RLIKE]
    if not runs:
        return []
    header = ["stage (ms per batch)"] + [
        f"{run.variant.split()[0]}" + (f" {run.size:,}" if run.size else "") for run in runs
    ]
    rows: list[list[str]] = []

    def row(label: str, values: list[float | None]) -> None:
        if any(value for value in values):
            rows.append([label] + ["-" if value is None else f"{value:,.0f}" for value in values])

    def per_batch(run: Run, seconds: float | None) -> float | None:
        return None if seconds is None or not run.batch_s else 1000 * seconds / len(run.batch_s)

    for stage, what in ROUTER_STAGES:
        row(f"`{stage}`: {what}", [per_batch(run, run.stages.get(stage)) for run in runs])
    row("(task time) Python UDF, matching included", [per_batch(run, run.python_s) for run in runs])
    row("(task time) matching alone", [per_batch(run, run.match_s) for run in runs])
    row("foreachBatch total (own timer)", [per_batch(run, sum(run.batch_s)) for run in runs])
    row("`addBatch` (progress)", [per_batch(run, run.duration_ms.get("addBatch", 0) / 1000) for run in runs])
    for phase in PROGRESS_PHASES:
        row(f"`{phase}` (progress)", [per_batch(run, run.duration_ms.get(phase, 0) / 1000) for run in runs])
    rest = [
        per_batch(
            run,
            (
                run.duration_ms.get("triggerExecution", 0)
                - run.duration_ms.get("addBatch", 0)
                - sum(run.duration_ms.get(phase, 0) for phase in PROGRESS_PHASES)
            )
            / 1000,
        )
        for run in runs
    ]
    row("rest of the trigger (progress)", rest)
    row(
        "`triggerExecution` (progress)",
        [per_batch(run, run.duration_ms.get("triggerExecution", 0) / 1000) for run in runs],
    )
    row(
        "(process CPU) Spark JVM: driver and executors",
        [per_batch(run, None if run.cpu is None else run.cpu.jvm_s) for run in runs],
    )
    for label, part in (
        ("its executor task threads (the tasks' JVM work)", "tasks_s"),
        ("its JIT compiler threads (C1, C2)", "jit_s"),
        ("its garbage collector threads", "gc_s"),
        ("the rest (the driver: planning, commits, py4j, scheduling)", "rest_s"),
    ):
        row(
            f"(process CPU) of the JVM's: {label}",
            [per_batch(run, None if run.cpu is None else getattr(run.cpu, part)) for run in runs],
        )
    row("(process CPU) Python workers", [per_batch(run, None if run.cpu is None else run.cpu.python_s) for run in runs])
    per_message = [None if run.cpu is None else 1e6 * (run.cpu.jvm_s + run.cpu.python_s) / run.messages for run in runs]
    rows.append(["(process CPU) µs per message, both"] + ["-" if us is None else f"{us:,.1f}" for us in per_message])
    # The first publish is what the first batch waits for: built from the table, or read from its snapshot file.
    rows.append(
        ["first snapshot published by (s, whole run)"]
        + [
            f"{run.first_snapshot['mode']} {run.first_snapshot.get('seconds', 0):.2f}" if run.first_snapshot else "-"
            for run in runs
        ]
    )
    return [
        "## Per-batch profile (best repeat of each variant)",
        "",
        "Driver wall time per router stage (`BatchReport.stages`), task time inside the Python UDF (summed "
        "over tasks on 2 cores, so it can exceed its stage's wall time), and the query progress's "
        "`durationMs`: `addBatch` is the foreachBatch call, the other phases are Spark's own (offsets, "
        "planning, offset and commit logs). *Process CPU* is what the Spark JVM (driver and executors: one "
        "process in local mode) and PySpark's Python workers used over the whole run, start-up included, from "
        "`/proc`, per batch and per message: on 2 cores, the CPU a variant needs per message is what decides "
        "its rate once other processes (a producer, the broker) want the cores too (`latency.md`). The JVM's "
        "is split by thread: the executor's task threads, the JIT compilers, the garbage collector, and the rest "
        "(mostly the driver's stream thread: planning, the Delta commit, py4j); threads that exit during a run "
        "leave their part, so the rest is an upper bound.",
        "",
        markdown_table(header, rows),
        "",
    ]


def report(plan: Plan, results: Results) -> str:
    lines = [
        "# Streaming router vs baselines (Kafka -> Delta)",
        "",
        f"{results.record.line()} Spark local mode; the load before says what else the machine was doing, the "
        "load after is mostly the run's own (its JVM, Python workers and broker keep both cores busy: 2 to 3). "
        f"Seed {plan.seed}; {plan.messages:,} messages ({plan.rlike_messages:,} for (d)); "
        f"maxOffsetsPerTrigger {plan.max_offsets_per_trigger:,}; vocabulary {plan.vocabulary}; "
        + (
            "every subscription active."
            if plan.active_subscriptions is None
            else f"{plan.active_subscriptions:,} active subscriptions, the rest of each table idle tenants "
            "(never matched; see Workload in bench/stream.py)."
        )
        + (" **--quick: a smoke run, not comparable.**" if plan.quick else ""),
        "",
        "## Throughput",
        "",
        "msg/s = messages / wall time from query start to drained (start-up and checkpoints included); "
        "batch msg/s = messages / summed per-batch times; match s = time inside the matcher call of the UDF "
        "(summed over tasks); matched = messages with at least one subscriber.",
        "",
    ]
    header = ["variant", "subscriptions", "messages", "wall s", "msg/s", "batch msg/s", "match s", "matched"]
    header += ["deliveries", "per msg", "msg/s of each repeat"]
    rows = []
    for variant, size in results.groups():
        run = results.get(variant, size)
        assert run is not None
        repeats = ", ".join(f"{other.msg_per_s:,.0f}" for other in results.runs_of(variant, size))
        matched = "n/a" if run.matched_messages is None else f"{run.matched_messages / run.messages:.0%}"
        rows.append(
            [
                run.variant,
                ("-" if not run.size else f"(beside {run.size:,})" if run.variant == PASSTHROUGH else f"{run.size:,}"),
                f"{run.messages:,}" + (" (prefix)" if run.variant == SQL_RLIKE else ""),
                f"{run.wall_s:,.1f}",
                f"{run.msg_per_s:,.0f}",
                f"{run.batch_msg_per_s:,.0f}",
                "n/a" if run.match_s is None else f"{run.match_s:,.2f}",
                matched,
                f"{run.deliveries:,}",
                f"{run.deliveries / run.messages:.2f}" if run.size and run.variant != PASSTHROUGH else "-",
                repeats,
            ]
        )
    lines += [markdown_table(header, rows), "", "## Ratios of (b) to each baseline (msg/s)", ""]
    ratio_rows, verdicts = ratio_lines(results, plan)
    lines += [markdown_table(["subscriptions", "(b)/(a)", "(b)/(c)", "(b)/(d)"], ratio_rows), ""]
    steady_rows = []
    for size in plan.sizes:
        native = results.get(NATIVE, size)
        if native is None or not native.batch_msg_per_s:
            continue
        cells = [f"{size:,}"]
        for baseline in (PASSTHROUGH, PYTHON_TRIE):
            other = results.get(baseline, size)
            ok = other is not None and other.batch_msg_per_s
            cells.append(f"{native.batch_msg_per_s / other.batch_msg_per_s:,.2f}x" if ok and other else "n/a")
        steady_rows.append(cells)
    if steady_rows:
        lines += [
            "The same from batch msg/s (messages / summed per-batch times: the query's start-up, which for the "
            "router includes loading and broadcasting the first snapshot, left out; informational, the targets "
            "use msg/s):",
            "",
            markdown_table(["subscriptions", "(b)/(a)", "(b)/(c)"], steady_rows),
            "",
        ]
    sink_rows = [
        [f"{size:,}", f"{sink.msg_per_s:,.0f}", f"{sink.msg_per_s / native.msg_per_s:,.2f}x"]
        for size in plan.sizes
        if (sink := results.get(KAFKA_SINK, size)) and (native := results.get(NATIVE, size)) and native.msg_per_s
    ]
    if sink_rows:
        lines += ["(e), the router also publishing every delivery to Kafka (`router.kafka_sink_topic`):", ""]
        lines += [markdown_table(["subscriptions", "(e) msg/s", "(e)/(b)"], sink_rows), ""]
    lines += ["Targets:", ""] + [f"- {verdict}" for verdict in verdicts] + [""]
    lines += ["Matching alone (time inside the UDF's matcher call, best repeats):", ""]
    for size in plan.sizes:
        native, trie = results.get(NATIVE, size), results.get(PYTHON_TRIE, size)
        if native and trie and native.match_s and trie.match_s is not None:
            share = native.match_s / sum(native.batch_s) if native.batch_s else 0.0
            lines.append(
                f"- {size:,} subscriptions: native {native.match_s:,.2f} s, Python trie {trie.match_s:,.2f} s "
                f"({trie.match_s / native.match_s:,.1f}x); native matching is {share:.1%} of (b)'s summed batch "
                "time (task time over 2 cores vs wall batch time)"
            )
    lines.append("")
    lines += profile_lines(results)
    lines += ["## Per-batch latency (ms, HDR histogram of foreachBatch times, all repeats pooled)", ""]
    header = ["variant", "subscriptions", "batches"] + [f"p{p:g}" for p in PERCENTILES] + ["max"]
    rows = []
    for variant, size in results.groups():
        batches = results.batch_seconds(variant, size)
        recorded = histogram(batches)
        rows.append(
            [variant, f"{size:,}" if size else "-", str(len(batches))]
            + [_ms(recorded.get_value_at_percentile(p)) for p in PERCENTILES]
            + [_ms(recorded.get_max_value())]
        )
    lines += [markdown_table(header, rows), ""]
    lines += ["## Correctness checks (printed, not tests)", ""] + [f"- {check}" for check in results.checks] + [""]
    lines += ["## Notes", ""] + [f"- {note}" for note in results.notes] + [""]
    lines += ["Charts: `stream_throughput.png` (msg/s), `stream_latency.png` (per-batch latency by percentile).", ""]
    return "\n".join(lines)


def charts(plan: Plan, results: Results, directory: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.8 / len(VARIANTS)
    for offset, variant in enumerate(VARIANTS):
        values = [(run.msg_per_s if (run := results.get(variant, size)) else 0.0) for size in plan.sizes]
        positions = [index + (offset - (len(VARIANTS) - 1) / 2) * width for index in range(len(plan.sizes))]
        bars = ax.bar(positions, values, width, label=variant)
        ax.bar_label(bars, labels=[f"{value:,.0f}" for value in values], fontsize=7)
    ax.set_xticks(range(len(plan.sizes)), [f"{size:,} subscriptions" for size in plan.sizes])
    ax.set_yscale("log")
    ax.set_ylabel("messages / s (log)")
    ax.set_title("Kafka -> Delta throughput ((a) has no subscriptions; (d) on a prefix)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "stream_throughput.png", dpi=100)
    plt.close(fig)

    # The classic HDR plot: x = 1 / (1 - percentile) on a log axis, labelled by percentile.
    fig, ax = plt.subplots(figsize=(9, 5))
    grid = [0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99]
    for variant, size in results.groups():
        batches = results.batch_seconds(variant, size)
        recorded = histogram(batches)
        xs = [1 / (1 - p / 100) for p in grid]
        ys = [recorded.get_value_at_percentile(p) / 1000 for p in grid]
        label = f"{variant}" + (f", {size:,} subs" if size else "") + f" ({len(batches)} batches)"
        ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([1 / (1 - p / 100) for p in (0.0, 90.0, 99.0, 99.9, 99.99)], ["0%", "90%", "99%", "99.9%", "99.99%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("batch latency, ms (log)")
    ax.set_title("Per-batch latency distribution (service time of a drained backlog)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(directory / "stream_latency.png", dpi=100)
    plt.close(fig)


# --- main -----------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python bench/stream.py",
        description="Kafka -> Delta msg/s and per-batch latency of the native router against passthrough, a "
        "Python trie UDF and a Spark SQL rlike join, on a real broker and real Spark. Tables on stdout and in "
        "bench/results/stream.md, charts in bench/results/stream_*.png.",
    )
    add_settings_arguments(parser)
    parser.add_argument("--seed", type=int, default=7, help="seed of the topic and the subscriptions (default 7)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small topic and sizes (about 3 minutes)")
    parser.add_argument("--messages", type=int, help="messages in the topic (default 1000000, quick 10000)")
    parser.add_argument(
        "--rlike-messages", type=int, help="messages (d) reads: a prefix of the topic (default 4000, quick 500)"
    )
    parser.add_argument(
        "--warmup-messages",
        type=int,
        help="messages of the warm-up topic each variant drains first, unreported (default 1000000, quick 1000)",
    )
    parser.add_argument("--sizes", help="comma-separated subscription counts (default 10000,1000000; quick 1000,10000)")
    parser.add_argument("--max-offsets", type=int, help="maxOffsetsPerTrigger (default 100000, quick 1000)")
    parser.add_argument(
        "--repeats", type=int, help="runs of (b), (c) and (e) per size; (b) and (c) in ABBA order (default 2, quick 1)"
    )
    parser.add_argument(
        "--variants",
        default="abcde",
        help="letters of the variants to run, e.g. ab (default abcde; (b) always runs)",
    )
    parser.add_argument("--vocabulary", type=int, default=300, help="words of the vocab distribution (default 300)")
    parser.add_argument(
        "--active-subscriptions",
        type=int,
        default=10_000,
        help="subscriptions drawn from the traffic's words; the rest of a larger table are idle tenants that "
        "never match, so deliveries per message stay flat across sizes (default 10000; 0: all active)",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where stream.md and the PNGs go")
    parser.add_argument(
        "--rlike-max-subscriptions",
        type=int,
        default=100_000,
        help="run (d) only at sizes up to this many subscriptions: it makes patterns x messages regex "
        "evaluations (default 100000)",
    )
    parser.add_argument("--no-write", action="store_true", help="print the tables only; write no files")
    parser.add_argument("--keep-broker", action="store_true", help="leave a broker this run started running")
    args = parser.parse_args(argv)
    messages = args.messages or (10_000 if args.quick else 1_000_000)
    rlike = args.rlike_messages or (500 if args.quick else 4_000)
    warmup = args.warmup_messages or (1_000 if args.quick else 1_000_000)
    default_sizes = (1_000, 10_000) if args.quick else (10_000, 1_000_000)
    sizes = tuple(int(size) for size in args.sizes.split(",")) if args.sizes else default_sizes
    plan = Plan(
        seed=args.seed,
        quick=args.quick,
        messages=messages,
        rlike_messages=min(rlike, messages),
        warmup_messages=warmup,
        repeats=args.repeats or (1 if args.quick else 2),
        sizes=sizes,
        max_offsets_per_trigger=args.max_offsets or (1_000 if args.quick else 100_000),
        vocabulary=args.vocabulary,
        active_subscriptions=args.active_subscriptions or None,
        variants="".join(sorted(set(args.variants.lower()) | {"b"})),
        rlike_max_subscriptions=args.rlike_max_subscriptions,
    )
    if set(plan.variants) - set("abcde"):
        parser.error("--variants takes letters among a, b, c, d, e")
    if min(plan.messages, plan.rlike_messages, plan.warmup_messages, plan.max_offsets_per_trigger, plan.repeats) < 1:
        parser.error("--messages, --rlike-messages, --warmup-messages, --max-offsets and --repeats must be positive")
    if not sizes:
        parser.error("--sizes must list at least one size")
    if args.active_subscriptions < 0:
        parser.error("--active-subscriptions must be >= 0")
    if any(size < 1 for size in sizes):
        parser.error("--sizes must be positive")
    return plan, args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plan, args = parse_args(argv)
    from dev import local_spark
    from jobs import local_kafka
    from jobs.produce import produce

    if local_spark.SUBMIT_ARGS not in os.environ:  # both sessions' JVMs as the demo's and the tests' (dev/)
        local_spark.use()

    run_id = time.strftime("%Y%m%d%H%M%S")
    topic, prefix_topic = f"bench.stream.{run_id}", f"bench.stream.{run_id}.prefix"
    warmup_topic = f"bench.stream.{run_id}.warmup"
    settings = base_settings(args, plan, topic)
    shutil.rmtree(WORK_DIR, ignore_errors=True)
    WORK_DIR.mkdir(parents=True)
    python_workers_run_this_checkout()
    results = Results(record=RunRecord.start(__file__, argv))

    progress(f"broker at {settings.kafka.bootstrap_servers}")
    broker = local_kafka.ensure_running(settings)
    try:
        delete_earlier_topics(settings, "bench.stream.")
        create_topics(settings, [topic, prefix_topic, warmup_topic])
        progress(f"producing {plan.messages:,} vocab messages to {topic}")
        results.produced = produce(
            settings,
            topic=topic,
            count=plan.messages,
            distribution="vocab",
            seed=plan.seed,
            vocabulary=plan.vocabulary,
            report=progress,
        )
        prefix = produce(
            settings,
            topic=prefix_topic,
            count=plan.rlike_messages,
            distribution="vocab",
            seed=plan.seed,
            vocabulary=plan.vocabulary,
            report=progress,
        )
        warmup = produce(
            settings,
            topic=warmup_topic,
            count=plan.warmup_messages,
            distribution="vocab",
            seed=plan.seed + 1,
            vocabulary=plan.vocabulary,
            report=progress,
        )
        if results.produced["failed"] or prefix["failed"] or warmup["failed"]:
            raise RuntimeError(f"producing failed: {results.produced} {prefix} {warmup}")
        progress(f"produced: {results.produced['msg_per_s']:,.0f} msg/s")
        measure(plan, settings, results, topic=topic, prefix_topic=prefix_topic, warmup_topic=warmup_topic)
    finally:
        # The main topic's prefix also covers the warm-up topic's sink topics; each name once.
        run_topics = list(dict.fromkeys([topic, prefix_topic, warmup_topic, *sink_topics(settings, topic)]))
        with contextlib.suppress(Exception):
            delete_topics(settings, run_topics)
        if broker.started and not args.keep_broker:
            stop_broker_once_topics_gone(settings, run_topics)
    text = report(plan, results)
    print(text)
    if not args.no_write:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / "stream.md").write_text(text, encoding="utf-8")
        charts(plan, results, args.results_dir)
        progress(f"wrote {args.results_dir / 'stream.md'} and stream_*.png")
    return 0


def measure(
    plan: Plan, settings: Settings, results: Results, *, topic: str, prefix_topic: str, warmup_topic: str
) -> None:
    from routing.spark import get_spark

    spark = get_spark(settings, app_name="bench-stream")
    work = WORK_DIR
    # One table for the whole run, overwritten per size: each size is a new version of it, as a live change
    # of the subscriptions would be (the workers' matcher cache is keyed by table and version).
    table = work / "subscriptions"
    write_subscriptions(spark, table, [])

    progress(f"warm-up: passthrough of the {plan.warmup_messages:,}-message warm-up topic (not reported)")
    run_passthrough(
        spark, variant_settings(settings, work, "warmup", topic=warmup_topic, table=table), plan.warmup_messages
    )

    def passthrough(size: int, repeat: int) -> None:
        progress(f"(a) passthrough, beside the runs at {size:,} subscriptions, repeat {repeat}")
        name = f"passthrough_{size}_r{repeat}"
        run = run_passthrough(
            spark, variant_settings(settings, work, name, topic=topic, table=table), plan.messages, size=size
        )
        results.runs.append(run)
        progress(f"(a) {run.msg_per_s:,.0f} msg/s")

    # At each size (a) first and again after (b) and (c), which run in ABBA order: (b) is compared with the
    # passthrough of its own stretch of the run. The JVM keeps getting faster for minutes (JIT): with (a) only
    # at the start and the end of the whole run, the last (a) ran 1.9x faster than the first and was compared
    # with a (b) measured long before it.
    for size in plan.sizes:
        pairs = subscription_pairs(
            random.Random(plan.seed * 1_000_003 + size), size, plan.vocabulary, plan.active_subscriptions
        )
        progress(f"writing {size:,} subscriptions")
        write_subscriptions(spark, table, pairs)
        deliveries_paths: dict[str, str] = {}
        order = [NATIVE, PYTHON_TRIE, PYTHON_TRIE, NATIVE] * plan.repeats
        order = order[: 2 * plan.repeats]
        if "c" not in plan.variants:
            order = [variant for variant in order if variant != PYTHON_TRIE]
        if "e" in plan.variants:
            # As often as (b): (e)/(b) compares best repeat with best repeat (one run of (e) against the best of
            # three of (b) read 0.63x where single runs of each read 0.71x).
            order += [KAFKA_SINK] * plan.repeats
        # One broadcast of the pairs per size for (c): its workers build their trie once, in the warm-up.
        trie_pairs = spark.sparkContext.broadcast(list(pairs)) if PYTHON_TRIE in order else None
        try:
            # Warm-up of every router variant on the warm-up topic (unreported): the first router run in a
            # session plans and loads everything for the first time, and each worker loads its matcher.
            for variant in dict.fromkeys(order):
                name = f"warmup_{variant.split()[0].strip('()')}_{size}"
                warm = variant_settings(settings, work, name, topic=warmup_topic, table=table, sink=variant)
                progress(f"warm-up: {variant}, {size:,} subscriptions, warm-up topic (not reported)")
                route_variant(spark, warm, variant, size, plan.warmup_messages, trie_pairs)
            # (a), the ABBA block of (b) and (c), (a) again, then (e), which is not compared with (a).
            runs = list(enumerate(order, start=1))
            before = [(1, PASSTHROUGH)] if "a" in plan.variants else []
            after = [(2, PASSTHROUGH)] if "a" in plan.variants and plan.repeats > 1 else []
            abba = [run for run in runs if run[1] != KAFKA_SINK]
            sink = [run for run in runs if run[1] == KAFKA_SINK]
            for repeat, variant in [*before, *abba, *after, *sink]:
                if variant == PASSTHROUGH:
                    passthrough(size, repeat)
                    continue
                name = f"{variant.split()[0].strip('()')}_{size}_r{repeat}"
                router_settings = variant_settings(settings, work, name, topic=topic, table=table, sink=variant)
                deliveries_paths.setdefault(variant, router_settings.router.deliveries_path)
                progress(f"{variant}, {size:,} subscriptions ({repeat}/{len(order)})")
                run = route_variant(spark, router_settings, variant, size, plan.messages, trie_pairs)
                results.runs.append(run)
                progress(f"{variant}: {run.msg_per_s:,.0f} msg/s")
        finally:
            if trie_pairs is not None:
                trie_pairs.destroy()

        rlike_path: str | None = None
        if "d" in plan.variants and size > plan.rlike_max_subscriptions:
            progress(f"(d) sql rlike skipped at {size:,} subscriptions (over --rlike-max-subscriptions)")
        elif "d" in plan.variants:
            rlike_settings = variant_settings(settings, work, f"rlike_{size}", topic=prefix_topic, table=table)
            progress(f"(d) sql rlike, {size:,} subscriptions, {plan.rlike_messages:,} messages")
            rlike = run_sql_rlike(spark, rlike_settings, size, plan.rlike_messages, pairs)
            results.runs.append(rlike)
            rlike_path = rlike_settings.router.deliveries_path
            progress(f"(d) {rlike.msg_per_s:,.0f} msg/s")

        progress("checking deliveries")
        for check in delivery_checks(plan, size, deliveries_paths, rlike_path):
            if check.actual_path is None:
                results.checks.append(check.label)
            else:
                results.checks.append(
                    compare_deliveries(
                        spark, check.label, deliveries_paths[NATIVE], check.actual_path, below_index=check.below_index
                    )
                )
            progress(results.checks[-1])
    results.notes += [
        f"producer: {results.produced.get('msg_per_s', 0):,.0f} msg/s into {NUM_PARTITIONS} "
        "partitions (not part of any figure).",
        f"Repeats: at each size (a) {min(plan.repeats, 2)}x (before and after (b) and (c)), (b) and (c) "
        f"{plan.repeats}x each in ABBA order, then (e) {plan.repeats}x, (d) once; the throughput table and the "
        "ratios use each variant's best repeat at that size (the least disturbed by the machine's other jobs), "
        "the latency table pools every repeat's batches. (a) does not depend on the subscriptions; it runs beside "
        "each size's (b) so that both meet the same JIT state and load.",
        "(b) and (c) write per batch: a ledger file, then the deliveries in one pass with one Delta commit "
        "(dead letters and unmatched only when a batch has them; this workload has no dead letters and does not "
        "write unmatched messages); (a) and (d) one Delta commit (the copy / the deliveries).",
        f"(d) reads a prefix topic of the first {plan.rlike_messages:,} messages (same seed: identical keys and "
        "payloads); with patterns x messages regex evaluations the whole topic would not fit the time budget, "
        f"and it runs only at sizes up to {plan.rlike_max_subscriptions:,} subscriptions "
        "(`--rlike-max-subscriptions`: at 1,000,000 and 4,000 messages it is 4 x 10^9 evaluations, ~20 minutes).",
        "(c)'s workers freeze their built trie out of the garbage collector (`gc.freeze()`): PySpark's daemon "
        "runs `gc.collect()` after every task, and over a 1M-pair Python trie that took seconds per task, in (c) "
        "and in every later variant sharing the workers.",
        f"Warm-ups, unreported: a passthrough of a {plan.warmup_messages:,}-message warm-up topic first (JIT, "
        "Python workers), then every router variant at each size on the same topic (JIT of the routing paths, "
        "query planning, each worker's matcher: the native snapshot deserialized, or (c)'s Python trie built from "
        "the broadcast pairs, once per worker and size).",
    ]


if __name__ == "__main__":
    sys.exit(main())

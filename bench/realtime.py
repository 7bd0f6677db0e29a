"""What latency does a message see through the real-time lane, at fixed offered rates, beside a Real-Time Mode
copy and the micro-batch router's Kafka sink, and up to what rate does each keep up?

Run ``python bench/realtime.py`` (``--help`` for flags). Markdown goes to stdout and
``bench/results/realtime.md``, the chart to ``bench/results/realtime.png``, progress lines to stderr. It
follows ``benchmarking-message-queue-latency``, as ``bench/latency.py`` does: fixed rates in steps, response
time rather than service time, HDR histograms out to the maximum.

Load: open loop, no coordinated omission
----------------------------------------
``bench/latency.py``'s producer: a fresh process per step sends ``rate x --step-seconds`` messages on a fixed
schedule, each stamped (header ``bench-schedule``) with its *intended* send time, never the moment it went
out, and never waits for the system. Keys are ``jobs.produce``'s vocab distribution, payloads 64 bytes.

Receive: a consumer of the output topic
---------------------------------------
A consumer process of its own (``bench/jvm``'s ``LatencyConsumer``, a Java ``KafkaConsumer`` in a JVM of its
own: neither the producer nor the Spark driver can stall it) reads the variant's output topic and records, per
message, ``receive - intended`` in the step's HDR histogram (microseconds, 1 us .. 1 h). Every output record
carries the source's headers, so the schedule stamp arrives with it. The routers' records are timed through the
catch-all subscription ``#`` of ``bench-realtime-all`` (one record per message, whatever else it matched); the
copy's records are its messages. Java, because a Python consumer (confluent-kafka, a Python object per record)
took more than half of one of the two cores at 20,000 routed msg/s (~60,000 records a second), and the Spark
task was left a quarter of a core: the harness, not the router, set the sustained rate.

Variants (in one run)
---------------------
(r0) **one broker hop**: the consumer reads the producer's own topic, no Spark: the clients and the broker
     alone, for *where the time goes*;
(r1) **real-time passthrough**: Kafka to Kafka in Real-Time Mode with no matching, the same source options and
     sink: the lane's limit on this machine;
(r2) **real-time router**: ``python -m jobs.route --real-time``'s :class:`routing.realtime.RealTimeRouter`, over
     ``--subscriptions`` random patterns (``bench.stream.subscription_pairs``) and the catch-all;
(r3) **micro-batch router with its Kafka sink**: :class:`routing.router.pipeline.Router` at a
     ``--trigger-seconds`` processing-time trigger, deliveries to Delta and then Kafka.

Each variant reads a topic of its own with one partition (Real-Time Mode runs one long-lived task per partition
and needs a core for each: with two cores, one is left for the producer, the consumer and the driver), starts its
query, sends a warm-up, then the rates in increasing order. ``--interval-seconds`` (Real-Time Mode's checkpoint
interval) defaults to the one ``docs/realtime.md`` recommends, ``router.real_time_interval``'s default of one
minute, and each step of ``--step-seconds`` crosses two or three batch boundaries, where Spark pauses the
long-lived tasks: the latency a user gets, boundaries included.

After its warm-up, each router gets a subscription change while 1,000 msg/s flow: ``#`` for
``LATE_SUBSCRIBER`` through the refresh job's import (``jobs.refresh_subscriptions.import_files``), unsubscribed
again before the steps. Its figures
run from the Delta commit to the driver's publish, and on to the first delivery to that subscriber received from
the output topic, with ``router.refresh_interval_s`` at ``--refresh-seconds``.

Figures
-------
Per variant, subscription count and rate: p50, p99, p99.9, max, and whether the variant **kept up**: the
producer kept its schedule and every message was received, first to last over at most the step's length / 0.99
plus ``--grace-seconds`` (falling behind: the receive rate more than 1% below the offered rate). The
highest rate kept up is the variant's sustained rate. **Boundary pause**: per step of a real-time variant, the
median over its batch boundaries of the worst latency of a message intended within
``BOUNDARY_WINDOW_MS`` of a boundary (the query's progress timestamps), beside the step's p50. **At a batch
boundary**: the driver's phases between two batches' tasks, from each progress's ``durationMs``. *Spark GC*: the
collections of the Spark JVM (driver and executor, local mode) during the step and their total time, from its
garbage-collector MXBeans. *Producer lag*: how late the producer sent against its schedule.

The numbers mean something only on an idle machine: the producer, the consumer, the broker and Spark share its
cores; the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import select
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # a script: `routing`, `jobs` importable (harness, latency, stream: this directory)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import (
    RESULTS_DIR,
    RunRecord,
    bench_kafka,
    delete_earlier_topics,
    jvm_gc_totals,
    markdown_table,
    positive_int_list,
    progress,
    pyplot,
    python_workers_run_this_checkout,
    stop_broker_once_topics_gone,
)
from latency import SCHEDULE_HEADER, Step, run_producer
from latency import Plan as ProducerPlan
from stream import subscription_pairs, write_subscriptions

from jobs.demo import create_topics, delete_topics
from routing.settings import REPO_ROOT, Settings, add_settings_arguments, load_settings, parse_overrides

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

WORK_DIR = REPO_ROOT / "var" / "bench" / "realtime"
CATCH_ALL = ("#", "bench-realtime-all")
#: Pairs of a table the traffic matches (``bench.stream.subscription_pairs``' ``active``); the rest never match.
ACTIVE_SUBSCRIPTIONS = 10_000
WARMUP_STEP = 0
PERCENTILES = (50.0, 99.0, 99.9)
#: Latency histograms in microseconds: 1 us .. 1 hour, 3 significant digits.
HISTOGRAM_MAX_US = 3_600_000_000
#: A message intended this close to a batch boundary counts toward the boundary pause.
BOUNDARY_WINDOW_MS = 500
#: The share of a step's messages that must arrive within the grace for the variant to have kept up.
KEPT_UP_SHARE = 0.99
BENCH_KAFKA = bench_kafka("realtime-kafka", 19392)
#: After its warm-up, each router's subscription table gains ``#`` for this subscriber while traffic flows.
LATE_SUBSCRIBER = "bench-realtime-late"
#: That traffic: CHANGE_RATE msg/s, the subscription imported CHANGE_AFTER_S in; the first delivery is awaited
#: for CHANGE_SECONDS after the import returns, the traffic flowing until it arrives.
CHANGE_RATE = 1_000
CHANGE_SECONDS = 30.0
CHANGE_AFTER_S = 3.0
#: The change's producer step: an index no rate step uses.
CHANGE_STEP = 1_000
#: The variants that run once, whatever ``--subscriptions`` says.
WITHOUT_SUBSCRIPTIONS = ("r0", "r1")
#: The progress's phases between two batches' tasks (the driver's), in the boundary table.
BOUNDARY_PHASES = ("latestOffset", "queryPlanning", "walCommit", "commitOffsets")
VARIANTS = {
    "r0": "(r0) one broker hop, no Spark",
    "r1": "(r1) real-time passthrough",
    "r2": "(r2) real-time router",
    "r3": "(r3) micro-batch router, Kafka sink",
}


@dataclasses.dataclass(frozen=True)
class Plan:
    rates: tuple[int, ...]
    step_seconds: float
    warmup_seconds: float
    interval_seconds: float
    trigger_seconds: float
    grace_seconds: float
    refresh_seconds: float
    subscriptions: tuple[int, ...]
    variants: tuple[str, ...]
    seed: int
    vocabulary: int
    payload_bytes: int

    def steps(self) -> list[tuple[int, int, float]]:
        warmup = [(WARMUP_STEP, self.rates[0], self.warmup_seconds)] if self.warmup_seconds > 0 else []
        return warmup + [(index, rate, self.step_seconds) for index, rate in enumerate(self.rates, start=1)]

    def producer_plan(self) -> ProducerPlan:
        """The fields ``bench/latency.py``'s producer reads (the rest are that benchmark's own)."""
        return ProducerPlan(
            rates=self.rates,
            step_seconds=self.step_seconds,
            warmup_seconds=self.warmup_seconds,
            trigger_seconds=self.trigger_seconds,
            drain_seconds=self.grace_seconds,
            subscriptions=0,
            max_offsets=1,
            variants=(),
            seed=self.seed,
            vocabulary=self.vocabulary,
            payload_bytes=self.payload_bytes,
        )


@dataclasses.dataclass
class Received:
    """What the consumer saw of one step."""

    count: int = 0
    #: Seconds from the step's first record received to its last.
    receive_seconds: float = 0.0
    histogram: HdrHistogram | None = None
    #: Per 100 ms of intended time (epoch ms // 100): the worst latency (us) of a message intended then.
    worst_by_tick: dict[int, int] = dataclasses.field(default_factory=dict)

    def percentile(self, percentile: float) -> float | None:
        if self.histogram is None or not self.count:
            return None
        return float(self.histogram.get_value_at_percentile(percentile)) / 1000

    def max_ms(self) -> float | None:
        return None if self.histogram is None or not self.count else float(self.histogram.get_max_value()) / 1000


@dataclasses.dataclass(frozen=True)
class ChangeResult:
    """A router's subscription change, from the table's commit to the first delivery it caused."""

    variant: str
    subscriptions: int
    #: The Delta commit (its log file's modification time), epoch ms.
    committed_ms: int
    #: The driver published the version (its snapshot file written first), epoch ms; None if it never did.
    published_ms: int | None
    #: The consumer received the first record for :data:`LATE_SUBSCRIBER`, epoch ms; None if none came.
    received_ms: int | None
    #: The driver's work for the version (change feed read, apply, freeze, file), from its refresh history.
    publish_work_s: float | None

    def seconds(self, since: int | None, until: int | None) -> float | None:
        return None if since is None or until is None else (until - since) / 1000


@dataclasses.dataclass
class RunExtras:
    """What a variant's run records beside its steps: each batch's progress ``durationMs`` (the first batch,
    the query's start-up, left out) and, for a router, its subscription change."""

    variant: str
    subscriptions: int
    durations: list[dict[str, int]] = dataclasses.field(default_factory=list)
    change: ChangeResult | None = None


@dataclasses.dataclass
class StepResult:
    variant: str
    subscriptions: int
    step: Step
    received: Received
    boundaries_ms: list[int] = dataclasses.field(default_factory=list)

    grace_seconds: float = 0.0
    #: The Spark JVM's garbage collections and their milliseconds while the step's producer ran.
    gc: tuple[int, int] = (0, 0)

    @property
    def kept_up(self) -> bool:
        """Every message received, at a rate within 1% of the offered one: its records arrived over at most the
        step's length / 0.99, plus the grace (a micro-batch's last batch lands a trigger after its first)."""
        sent = self.step.sent
        window = self.step.seconds / KEPT_UP_SHARE + self.grace_seconds
        return sent > 0 and self.received.count >= sent and self.received.receive_seconds <= window

    def boundary_pause_ms(self) -> float | None:
        """Median over the step's batch boundaries of the worst latency within the window around each."""
        worst = self.received.worst_by_tick
        pauses = []
        for boundary in self.boundaries_ms:
            ticks = range((boundary - BOUNDARY_WINDOW_MS) // 100, (boundary + BOUNDARY_WINDOW_MS) // 100 + 1)
            seen = [worst[tick] for tick in ticks if tick in worst]
            if seen:
                pauses.append(max(seen) / 1000)
        return statistics.median(pauses) if pauses else None


# --- the consumer (its own process) ----------------------------------------------------------------------------

#: bench/jvm/'s consumer (``make jars``) and the broker's client jars it runs on.
CONSUMER_CLASS = "sparktopicrouter.bench.LatencyConsumer"
CONSUMER_CLASS_PATH = (
    REPO_ROOT / "var" / "jars" / "bench" / "spark-topic-router-bench.jar",
    REPO_ROOT / "var" / "jars" / "kafka" / "*",
)
#: Seconds the consumer may take to answer a command (its results included) before the run fails.
CONSUMER_ANSWER_S = 120.0


def consumer_config(settings: Settings, topic: str, timed_suffix: str | None) -> dict[str, str]:
    """The Java consumer's configs: the cluster's Java client configs (SASL included), its reading options and
    what it times (``bench/jvm/sparktopicrouter/bench/LatencyConsumer.java``)."""
    config = {name.removeprefix("kafka."): value for name, value in settings.spark_kafka_options().items()}
    config.update(
        {
            "group.id": f"bench-realtime-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
            # A fetch answers at the first record (fetch.min.bytes 1) or after 5 ms: latency, not throughput.
            "fetch.max.wait.ms": "5",
            "metadata.max.age.ms": "1000",
            "bench.topic": topic,
            "bench.schedule.header": SCHEDULE_HEADER,
            "bench.late.suffix": f"|{LATE_SUBSCRIBER}",
            "bench.histogram.max.us": str(HISTOGRAM_MAX_US),
        }
    )
    if timed_suffix is not None:
        config["bench.timed.suffix"] = timed_suffix
    return config


class ConsumerProcess:
    """The output topic's consumer: a JVM of its own (neither the producer nor the Spark driver can stall it)
    that reads ``topic`` from its start and times each record (or those whose key ends with ``timed_suffix``)."""

    def __init__(self, settings: Settings, topic: str, timed_suffix: str | None) -> None:
        if not CONSUMER_CLASS_PATH[0].is_file():
            raise RuntimeError(f"the latency consumer is not built ({CONSUMER_CLASS_PATH[0]}): run `make jars`")
        self.process = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-cp",
                os.pathsep.join(map(str, CONSUMER_CLASS_PATH)),
                CONSUMER_CLASS,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        lines = [f"{name}={value}" for name, value in consumer_config(settings, topic, timed_suffix).items()]
        if any("\n" in line for line in lines):
            raise ValueError("a consumer config holds a line break")
        self.process.stdin.write("\n".join(lines) + "\n\n")
        self.process.stdin.flush()

    def _ask(self, command: str) -> Any:
        """Send ``command`` and read its one-line answer, waiting at most :data:`CONSUMER_ANSWER_S`."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        # One command is in flight at a time and each answer is one line, so nothing is left buffered between
        # answers and the pipe's readiness says whether this one has begun.
        ready, _, _ = select.select([self.process.stdout], [], [], CONSUMER_ANSWER_S)
        if not ready:
            raise RuntimeError(f"the latency consumer did not answer {command!r} within {CONSUMER_ANSWER_S:g} s")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"the latency consumer exited (status {self.process.poll()}) before answering {command!r}"
            )
        return json.loads(line)

    def counts(self) -> dict[int, int]:
        return {int(step): int(count) for step, count in self._ask("counts").items()}

    def late_received_us(self) -> int | None:
        value = self._ask("late")
        return None if value is None else int(value)

    def stop(self) -> dict[int, Received]:
        from hdrh.histogram import HdrHistogram

        raw = self._ask("stop")
        self.process.wait(30)
        received = {}
        for step, figures in raw.items():
            received[int(step)] = Received(
                int(figures["count"]),
                (int(figures["last_us"]) - int(figures["first_us"])) / 1e6,
                HdrHistogram.decode(figures["histogram"]),
                {int(k): int(v) for k, v in figures["worst_by_tick"].items()},
            )
        return received

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


# --- the variants ----------------------------------------------------------------------------------------------


class BoundaryRecorder:
    """The progress timestamps (batch starts) of every query, in epoch milliseconds."""

    def __init__(self) -> None:
        from pyspark.sql.streaming.listener import StreamingQueryListener

        recorder = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                import datetime

                stamp = datetime.datetime.fromisoformat(event.progress.timestamp.replace("Z", "+00:00"))
                recorder.boundaries.append(round(stamp.timestamp() * 1000))
                recorder.durations.append(dict(event.progress.durationMs))

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.boundaries: list[int] = []
        self.durations: list[dict[str, int]] = []
        self.listener = Listener()


def start_passthrough(spark: SparkSession, settings: Settings, out_topic: str, interval: str) -> StreamingQuery:
    """(r1): the router's Kafka source, copied to ``out_topic`` as it is, in Real-Time Mode."""
    from routing.streaming import kafka_source

    router = settings.router
    source = kafka_source(
        spark,
        settings,
        topics=router.topics,
        starting_offsets="earliest",
        max_offsets_per_trigger=None,
        include_headers=True,
    )
    query: StreamingQuery = (
        source.selectExpr("key", "value", "headers")
        .writeStream.format("kafka")
        .options(**settings.spark_kafka_options())
        .option("topic", out_topic)
        .option("checkpointLocation", router.checkpoint_path)
        .outputMode("update")
        .trigger(realTime=interval)  # type: ignore[call-overload]  # not in pyspark 4.2's overloads
        .start()
    )
    return query


def first_data_change(delta_log: Path, first: int, last: int) -> int:
    """The first version in ``first..last`` whose commit adds or removes data (not a property, not a compaction)."""
    for version in range(first, last + 1):
        for line in (delta_log / f"{version:020d}.json").read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if action.get(kind, {}).get("dataChange"):
                    return version
    raise RuntimeError(f"no commit between table versions {first} and {last} changed data")


def measure_change(
    spark: SparkSession, settings: Settings, plan: Plan, snapshots: Any, consumer: ConsumerProcess, topic: str
) -> tuple[int, int | None, int | None, float | None]:
    """Subscribe :data:`LATE_SUBSCRIBER` to ``#`` through the refresh job's import while traffic flows; the
    commit, the publish and the first delivery's times (epoch ms) and the driver's publish work (s)."""
    import threading

    from jobs.refresh_subscriptions import import_files

    # Traffic flows until the first delivery is seen or the wait ends, however long the import takes: with one
    # fixed-length step a slow import (a contended machine, a large table) published after the traffic stopped.
    # Each further step is a new producer process, whose start-up is a gap in the traffic: steps as long as the
    # wait keep a gap out of the usual case.
    done = threading.Event()

    def traffic() -> None:
        while not done.is_set():
            step = Step("change", CHANGE_STEP, CHANGE_RATE, CHANGE_SECONDS)
            run_producer(settings, plan.producer_plan(), topic, step)

    producer = threading.Thread(target=traffic, daemon=True)
    events = Path(settings.router.checkpoint_path).parent / "late-subscriber.jsonl"
    producer.start()
    try:
        time.sleep(CHANGE_AFTER_S)
        event = {"op": "subscribe", "subscriber": LATE_SUBSCRIBER, "pattern": "#", "ts": time.time_ns() // 1_000_000}
        events.write_text(json.dumps(event) + "\n", encoding="utf-8")
        delta_log = Path(settings.subscriptions.table_path) / "_delta_log"
        before = max(int(path.stem) for path in delta_log.glob("*.json"))
        summary = import_files(spark, settings, [str(events)])
        if summary.rejected:
            raise RuntimeError(f"the refresh job rejected the late subscription: {summary.rejected}")
        # The import may commit a table property before the subscription and compact after it (the summary's
        # version), and the routers may publish and route the subscription's commit before that: the first
        # commit of the import that changed data is the change.
        version = first_data_change(delta_log, before + 1, summary.table_version)
        committed_ms = (delta_log / f"{version:020d}.json").stat().st_mtime_ns // 1_000_000
        # The publish and the first delivery may both come before the import returns (its sweep runs after
        # the commit): their times are the ones recorded when they happened, never when this loop saw them.
        deadline = time.monotonic() + CHANGE_SECONDS
        work = None
        while work is None and time.monotonic() < deadline:
            work = next((entry for entry in list(snapshots.history) if entry.get("version", -1) >= version), None)
            time.sleep(0.005)
        published_ms = None if work is None else work.get("published_at_ms")
        received_us = None
        while received_us is None and time.monotonic() < deadline:
            received_us = consumer.late_received_us()
            time.sleep(0.01)
        publish_work_s = (
            None if work is None else float(work.get("seconds", 0.0)) + float(work.get("file_write_s", 0.0))
        )
        return committed_ms, published_ms, None if received_us is None else received_us // 1000, publish_work_s
    finally:
        done.set()
        producer.join(CHANGE_SECONDS + 60)
        # Gone again before the steps, so they route the table they were given: published by the driver, then
        # two of the executors' checks for a newer file (a step that began sooner routed the first seconds of a
        # large table with one more delivery a message).
        event = {"op": "unsubscribe", "subscriber": LATE_SUBSCRIBER, "pattern": "#", "ts": time.time_ns() // 1_000_000}
        events.write_text(json.dumps(event) + "\n", encoding="utf-8")
        gone = import_files(spark, settings, [str(events)]).table_version
        deadline = time.monotonic() + CHANGE_SECONDS
        while time.monotonic() < deadline and not any(
            entry.get("version", -1) >= gone for entry in list(snapshots.history)
        ):
            time.sleep(0.05)
        time.sleep(2 * plan.refresh_seconds)


def run_variant(
    spark: SparkSession, settings: Settings, plan: Plan, variant: str, subscriptions: int, topics: dict[str, str]
) -> tuple[list[StepResult], RunExtras]:
    from routing.realtime import RealTimeRouter
    from routing.router.pipeline import Router

    out_topic = topics["out"]
    timed = None if variant in WITHOUT_SUBSCRIPTIONS else f"|{CATCH_ALL[1]}"
    consumer = ConsumerProcess(settings, topics["in"] if variant == "r0" else out_topic, timed)
    recorder = BoundaryRecorder()
    spark.streams.addListener(recorder.listener)
    interval = f"{round(plan.interval_seconds * 1000)} milliseconds"
    closer: Any = None
    query: StreamingQuery | None = None
    steps: list[tuple[Step, int, tuple[int, int]]] = []
    extras = RunExtras(variant, subscriptions)
    settings = settings.replace(router=dataclasses.replace(settings.router, refresh_interval_s=plan.refresh_seconds))
    try:
        if variant == "r0":
            pass  # the consumer reads the producer's topic: the clients and the broker alone
        elif variant == "r1":
            query = start_passthrough(spark, settings, out_topic, interval)
        elif variant == "r2":
            router = dataclasses.replace(settings.router, trigger="real_time", real_time_interval=interval)
            closer = RealTimeRouter(spark, settings.replace(router=router))
            query = closer.start()
        else:
            router = dataclasses.replace(
                settings.router,
                trigger="processing_time",
                trigger_interval=f"{round(plan.trigger_seconds * 1000)} milliseconds",
            )
            closer = Router(spark, settings.replace(router=router))
            query = closer.start()
        for index, rate, seconds in plan.steps():
            if steps and not _kept_up_so_far(consumer, steps[-1][0]):
                progress(f"{VARIANTS[variant]} at {subscriptions:,}: rate {rate:,} not run: a lower rate fell behind")
                break
            step = Step(variant, index, rate, seconds)
            label = "warm-up" if index == WARMUP_STEP else f"step {index}/{len(plan.rates)}"
            progress(
                f"{VARIANTS[variant]} at {subscriptions:,} subscriptions: {label}, {rate:,} msg/s for {seconds:g} s"
            )
            started_ms = time.time_ns() // 1_000_000
            gc_before = jvm_gc_totals(spark)
            run_producer(settings, plan.producer_plan(), topics["in"], step)
            gc_after = jvm_gc_totals(spark)
            steps.append((step, started_ms, (gc_after[0] - gc_before[0], gc_after[1] - gc_before[1])))
            _wait_received(consumer, step, plan.grace_seconds + 2 * plan.interval_seconds + 10)
            if closer is not None and extras.change is None:
                # After the first step (the warm-up), when nothing is queued: a backlog would time the backlog.
                progress(f"{VARIANTS[variant]} at {subscriptions:,} subscriptions: a subscription change under traffic")
                committed, published, received_at, work = measure_change(
                    spark, settings, plan, closer.snapshots, consumer, topics["in"]
                )
                extras.change = ChangeResult(variant, subscriptions, committed, published, received_at, work)
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                query.stop()
        if closer is not None:
            with contextlib.suppress(Exception):
                closer.close()
        time.sleep(1.0)
        spark.streams.removeListener(recorder.listener)
    extras.durations = recorder.durations[1:]
    received = consumer.stop()
    results = []
    for step, started_ms, gc in steps:
        ended_ms = started_ms + round(step.seconds * 1000)
        boundaries = [at for at in recorder.boundaries if started_ms <= at <= ended_ms] if variant != "r3" else []
        results.append(
            StepResult(
                variant, subscriptions, step, received.get(step.index, Received()), boundaries, plan.grace_seconds, gc
            )
        )
    return results, extras


def _wait_received(consumer: ConsumerProcess, step: Step, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while consumer.counts().get(step.index, 0) < step.sent and time.monotonic() < deadline:
        time.sleep(0.2)


def _kept_up_so_far(consumer: ConsumerProcess, step: Step) -> bool:
    """Whether the last step's messages all arrived (the full verdict, lateness included, is made at the end)."""
    return consumer.counts().get(step.index, 0) >= step.sent


# --- the report ------------------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def sustained(results: Sequence[StepResult], variant: str, subscriptions: int) -> int | None:
    kept = [
        r.step.rate
        for r in results
        if r.variant == variant and r.subscriptions == subscriptions and r.step.index != WARMUP_STEP and r.kept_up
    ]
    return max(kept, default=None)


def _run_label(variant: str, subscriptions: int) -> str:
    return VARIANTS[variant] if variant in WITHOUT_SUBSCRIPTIONS else f"{VARIANTS[variant]}, {subscriptions:,}"


def boundary_rows(results: Sequence[StepResult], extras: Sequence[RunExtras]) -> list[list[str]]:
    """Per real-time run: the median over its batches of each driver phase between two batches' tasks, their
    sum with the rest of the trigger outside ``addBatch``, and the median boundary pause of its steps."""
    rows = []
    for run in extras:
        if run.variant == "r3" or not run.durations:
            continue
        phases = [statistics.median(d.get(name, 0) for d in run.durations) for name in BOUNDARY_PHASES]
        outside = statistics.median(d.get("triggerExecution", 0) - d.get("addBatch", 0) for d in run.durations)
        pauses = [
            pause
            for r in results
            if r.variant == run.variant and r.subscriptions == run.subscriptions and r.step.index != WARMUP_STEP
            for pause in [r.boundary_pause_ms()]
            if pause is not None
        ]
        rows.append(
            [
                _run_label(run.variant, run.subscriptions),
                f"{len(run.durations)}",
                *(f"{value:,.0f}" for value in phases),
                f"{outside:,.0f}",
                _ms(statistics.median(pauses) if pauses else None),
            ]
        )
    return rows


def where_rows(results: Sequence[StepResult]) -> list[list[str]]:
    """Per rate and table size that (r0), (r1) and (r2) all ran: their p50s and what each layer adds."""
    p50 = {
        (r.variant, r.subscriptions, r.step.rate): r.received.percentile(50.0)
        for r in results
        if r.step.index != WARMUP_STEP
    }
    rows = []
    for (variant, subscriptions, rate), routed in sorted(p50.items(), key=lambda item: (item[0][1], item[0][2])):
        hop, copy = p50.get(("r0", 0, rate)), p50.get(("r1", 0, rate))
        if variant != "r2" or hop is None or copy is None or routed is None:
            continue
        rows.append(
            [
                f"{subscriptions:,}",
                f"{rate:,}",
                _ms(hop),
                _ms(copy),
                _ms(routed),
                _ms(copy - 2 * hop),
                _ms(routed - copy),
            ]
        )
    return rows


def change_rows(extras: Sequence[RunExtras]) -> list[list[str]]:
    rows = []
    for run in extras:
        change = run.change
        if change is None:
            continue
        rows.append(
            [
                _run_label(run.variant, run.subscriptions),
                _ms(change.seconds(change.committed_ms, change.published_ms)),
                "-" if change.publish_work_s is None else f"{change.publish_work_s:,.2f}",
                _ms(change.seconds(change.published_ms, change.received_ms)),
                _ms(change.seconds(change.committed_ms, change.received_ms)),
            ]
        )
    return rows


def report(plan: Plan, results: Sequence[StepResult], extras: Sequence[RunExtras], record: RunRecord) -> str:
    where = where_rows(results)
    rows = []
    for r in results:
        if r.step.index == WARMUP_STEP:
            continue
        rows.append(
            [
                VARIANTS[r.variant],
                f"{r.subscriptions:,}",
                f"{r.step.rate:,}",
                f"{r.step.sent:,}",
                f"{r.received.count:,}",
                *(_ms(r.received.percentile(p)) for p in PERCENTILES),
                _ms(r.received.max_ms()),
                _ms(r.boundary_pause_ms()),
                f"{r.step.lag_p99_ms:,.1f}",
                f"{r.gc[1]:,} ({r.gc[0]:,})",
                "yes" if r.kept_up else "no",
            ]
        )
    table = markdown_table(
        [
            "variant",
            "subscriptions",
            "rate (msg/s)",
            "sent",
            "received",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "boundary pause ms",
            "producer lag p99 ms",
            "Spark GC ms (collections)",
            "kept up",
        ],
        rows,
    )
    sustained_rows = [
        [
            VARIANTS[v],
            "-" if v in WITHOUT_SUBSCRIPTIONS else f"{n:,}",
            f"{sustained(results, v, 0 if v in WITHOUT_SUBSCRIPTIONS else n) or 0:,}",
        ]
        for n in plan.subscriptions
        for v in plan.variants
        if v not in WITHOUT_SUBSCRIPTIONS or n == plan.subscriptions[0]
    ]
    return "\n".join(
        [
            "# Real-time lane latency",
            "",
            record.line(),
            "",
            "Workload: an open-loop producer at fixed rates (intended send times, no coordinated omission), one "
            "input partition per variant, 64-byte payloads, vocab keys, "
            f"{ACTIVE_SUBSCRIPTIONS:,} active subscriptions in each table (the rest idle tenants); latency is the "
            "consumer's receive time minus the intended send time (HDR histograms). "
            f"Real-Time Mode checkpoint interval {plan.interval_seconds:g} s, micro-batch trigger "
            f"{plan.trigger_seconds:g} s, steps of {plan.step_seconds:g} s after a {plan.warmup_seconds:g} s warm-up. "
            "The producer (Python, confluent-kafka), the consumer (Java, `bench/jvm`), the broker and Spark share the "
            "machine's two cores.",
            "",
            "## Latency by rate",
            "",
            table,
            "",
            "## Highest rate kept up",
            "",
            markdown_table(["variant", "subscriptions", "msg/s"], sustained_rows),
            "",
            "## At a batch boundary",
            "",
            "The driver's phases between one batch's tasks and the next's (the query progress's `durationMs`, "
            "median over the run's batches after the first, ms): while they run, no task reads. *Outside "
            "addBatch* is `triggerExecution - addBatch`, every phase included. The boundary pause is the "
            "median of the steps' (the latency table's column).",
            "",
            markdown_table(
                [
                    "variant",
                    "batches",
                    *(f"`{name}`" for name in BOUNDARY_PHASES),
                    "outside addBatch",
                    "boundary pause",
                ],
                boundary_rows(results, extras),
            ),
            "",
            *(
                [
                    "## Where the time goes",
                    "",
                    "Medians (ms) at each rate (r0), (r1) and (r2) ran. A message crosses the broker twice in (r1) "
                    "and (r2) (into Spark, out of it) and once in (r0), so *Spark's Kafka source and sink* is "
                    "(r1) - 2 x (r0): the source's poll, the sink's produce and the task between them. *Routing* is "
                    "(r2) - (r1): the key rules, the native lookup through JNI, the fan-out limit, the explode and "
                    "the records beyond the first (the deliveries besides the timed catch-all's).",
                    "",
                    markdown_table(
                        [
                            "subscriptions",
                            "rate (msg/s)",
                            "(r0) hop",
                            "(r1) copy",
                            "(r2) router",
                            "Spark's Kafka source and sink",
                            "routing",
                        ],
                        where,
                    ),
                    "",
                ]
                if where
                else []
            ),
            "## Subscription change to routable",
            "",
            f"After its warm-up, each router's table gains `#` for `{LATE_SUBSCRIBER}` through the refresh job's "
            f"import, with {CHANGE_RATE:,} msg/s flowing; `router.refresh_interval_s` = {plan.refresh_seconds:g} "
            "(the driver's check of the table and, in the real-time lane, each executor's check for a newer "
            "snapshot file). *Publish* is the Delta commit (its log file's time) to the driver's publish of "
            "the version (its snapshot file written first), *publish work* the driver's part of that (change "
            "feed read, apply, freeze, file), *to routable* the publish to the first delivery to the new "
            "subscriber received from the output topic (a message's own latency included). Seconds.",
            "",
            markdown_table(
                [
                    "variant",
                    "commit to published",
                    "publish work",
                    "published to first delivery",
                    "commit to first delivery",
                ],
                change_rows(extras),
            ),
            "",
        ]
    )


def chart(plan: Plan, results: Sequence[StepResult], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 5))
    for subscriptions in plan.subscriptions:
        for variant in plan.variants:
            points = [
                (r.step.rate, r.received.percentile(99.0))
                for r in results
                if r.variant == variant and r.subscriptions == subscriptions and r.step.index != WARMUP_STEP
            ]
            points = [(rate, p99) for rate, p99 in points if p99 is not None]
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=f"{VARIANTS[variant]}, {subscriptions:,}")
    axis.set_xlabel("offered rate (msg/s)")
    axis.set_ylabel("p99 latency (ms)")
    axis.set_yscale("log")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# --- the run ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python bench/realtime.py",
        description="Latency (intended send -> received from the output topic) of the real-time router, a "
        "Real-Time Mode copy and the micro-batch router's Kafka sink at fixed offered rates; HDR histograms. "
        "Tables on stdout and in bench/results/realtime.md, chart in bench/results/realtime.png.",
    )
    add_settings_arguments(parser)
    parser.add_argument(
        "--rates",
        type=positive_int_list,
        default=(2_000, 10_000, 20_000, 30_000, 40_000, 50_000),
        help="offered rates in msg/s (default 2000,10000,20000,30000,40000,50000)",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=120.0,
        help="length of each step (default 120: two boundaries at the default interval)",
    )
    parser.add_argument("--warmup-seconds", type=float, default=60.0, help="warm-up at the lowest rate (default 60)")
    parser.add_argument(
        "--interval-seconds",
        type=float,
        default=60.0,
        help="Real-Time Mode's checkpoint interval (default 60: router.real_time_interval's default, the one "
        "docs/realtime.md recommends)",
    )
    parser.add_argument(
        "--refresh-seconds",
        type=float,
        default=1.0,
        help="the routers' router.refresh_interval_s (default 1, as docs/realtime.md recommends for the lane)",
    )
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="(r3)'s processing-time trigger (default 1)")
    parser.add_argument(
        "--grace-seconds",
        type=float,
        default=2.0,
        help="seconds a step's records may take to arrive beyond the step's length / 0.99, first to last, and still "
        "count as kept up (default 2: the micro-batch router's last batch lands a trigger or two after its first)",
    )
    parser.add_argument(
        "--subscriptions",
        type=positive_int_list,
        default=(10_000, 1_000_000),
        help="subscription counts, each a run of every variant but r0 and r1 (default 10000,1000000)",
    )
    parser.add_argument("--variants", default="r0,r1,r2,r3", help="of r0, r1, r2, r3, comma-separated (default all)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--vocabulary", type=int, default=300)
    parser.add_argument("--payload-bytes", type=int, default=64)
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    variants = tuple(dict.fromkeys(part.strip().lower() for part in args.variants.split(",") if part.strip()))
    if not variants or set(variants) - set(VARIANTS):
        parser.error("--variants takes r0, r1, r2 and r3, comma-separated")
    if (
        min(args.step_seconds, args.interval_seconds, args.trigger_seconds, args.grace_seconds, args.refresh_seconds)
        <= 0
    ):
        parser.error(
            "--step-seconds, --interval-seconds, --trigger-seconds, --grace-seconds and --refresh-seconds must be "
            "positive"
        )
    plan = Plan(
        rates=args.rates,
        step_seconds=args.step_seconds,
        warmup_seconds=max(0.0, args.warmup_seconds),
        interval_seconds=args.interval_seconds,
        trigger_seconds=args.trigger_seconds,
        grace_seconds=args.grace_seconds,
        refresh_seconds=args.refresh_seconds,
        subscriptions=args.subscriptions,
        variants=variants,
        seed=args.seed,
        vocabulary=args.vocabulary,
        payload_bytes=args.payload_bytes,
    )
    return plan, args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plan, args = parse_args(argv)
    from jobs import local_kafka
    from routing.spark import get_spark

    record = RunRecord.start(__file__, argv)
    # No ACL rules and every subscriber allowed: the late subscriber's import must pass, and a rule for it alone
    # would have the import's sweep deactivate every pair of the table (a run lost them all so).
    overrides: dict[str, dict[str, object]] = {"kafka": dict(BENCH_KAFKA), "acl": {"default_allow": True}}
    for section, values in parse_overrides(args.settings_overrides).items():
        overrides.setdefault(section, {}).update(values)
    settings = load_settings(args.conf, overrides=overrides)
    run_id = time.strftime("%Y%m%d%H%M%S")
    work: Path = args.work_dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    python_workers_run_this_checkout()
    broker = local_kafka.ensure_running(settings)
    watchdog = local_kafka.stop_with_this_process(broker, settings) if broker.started else None
    created: list[str] = []
    results: list[StepResult] = []
    extras: list[RunExtras] = []
    spark: SparkSession | None = None
    try:
        delete_earlier_topics(settings, "bench.realtime.")
        spark = get_spark(settings, app_name="bench-realtime")
        runs = [(v, 0) for v in WITHOUT_SUBSCRIPTIONS if v in plan.variants]
        runs += [(v, n) for n in plan.subscriptions for v in plan.variants if v not in WITHOUT_SUBSCRIPTIONS]
        for variant, subscriptions in runs:
            name = f"{variant}-{subscriptions}"
            topics = {part: f"bench.realtime.{run_id}.{name}.{part}" for part in ("in", "out", "dead")}
            create_topics(settings, [topics["in"]], partitions=1)
            created += list(topics.values())
            table = work / name / "subscriptions"
            # As bench/stream.py: the first ACTIVE_SUBSCRIPTIONS pairs are the traffic's, the rest idle tenants, so a
            # larger table costs matching, not a larger fan-out to write.
            pairs = subscription_pairs(
                random.Random(plan.seed * 1_000_003 + subscriptions),
                subscriptions,
                plan.vocabulary,
                min(ACTIVE_SUBSCRIPTIONS, subscriptions),
            )
            write_subscriptions(spark, table, [*pairs, CATCH_ALL])
            variant_conf = settings.replace(
                subscriptions=dataclasses.replace(
                    settings.subscriptions,
                    table_path=str(table),
                    rejects_path=str(work / name / "subscription_rejects"),
                    checkpoint_path=str(work / name / "refresh_checkpoint"),
                ),
                router=dataclasses.replace(
                    settings.router,
                    topics=(topics["in"],),
                    subscribe_pattern="",
                    starting_offsets="earliest",
                    app_id=f"bench-realtime-{name}",
                    checkpoint_path=str(work / name / "checkpoint"),
                    deliveries_path=str(work / name / "deliveries"),
                    dead_letters_path=str(work / name / "dead_letters"),
                    kafka_sink_topic=topics["out"],
                    dead_letter_topic=topics["dead"],
                    snapshot_files_path=str(work / name / "snapshots"),
                ),
            )
            steps, run = run_variant(spark, variant_conf, plan, variant, subscriptions, topics)
            results += steps
            extras.append(run)
    finally:
        if spark is not None:
            for query in spark.streams.active:
                with contextlib.suppress(Exception):
                    query.stop()
        with contextlib.suppress(Exception):
            delete_topics(settings, created)
        if spark is not None:
            spark.stop()
        if broker.started:
            stop_broker_once_topics_gone(settings, created)
        if watchdog is not None:
            watchdog.close()
    text = report(plan, results, extras, record)
    print(text)
    if not args.no_write:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / "realtime.md").write_text(text, encoding="utf-8")
        chart(plan, results, args.results_dir / "realtime.png")
        progress(f"wrote {args.results_dir / 'realtime.md'} and realtime.png")
    if args.json:
        figures = [
            {
                "variant": r.variant,
                "subscriptions": r.subscriptions,
                "rate": r.step.rate,
                "step": r.step.index,
                "sent": r.step.sent,
                "received": r.received.count,
                "receive_seconds": r.received.receive_seconds,
                **{f"p{p:g}_ms": r.received.percentile(p) for p in PERCENTILES},
                "max_ms": r.received.max_ms(),
                "boundary_pause_ms": r.boundary_pause_ms(),
                "kept_up": r.kept_up,
            }
            for r in results
        ]
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    return 0 if all(r.received.count >= r.step.sent for r in results if r.kept_up) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What latency does a message see at a sustained rate, through the router and through a plain copy, and up
to what rate does each keep it within three trigger intervals?

Producers in a deployment send at their own pace, whatever the router is doing: an open-loop producer at fixed
rates, the router and the passthrough on a 1 s processing-time trigger, as a live deployment runs them.

Run ``python bench/latency.py`` (``--help`` for flags). Markdown goes to stdout
and ``bench/results/latency.md``, the chart to ``bench/results/latency.png``,
progress lines to stderr; ``--json FILE`` also writes every figure and the
encoded HDR histograms. It follows ``benchmarking-message-queue-latency``:
fixed request rates in steps, response time rather than service time, HDR
histograms out to the maximum.

Load: open loop, no coordinated omission
----------------------------------------
For each step a fresh producer process (confluent-kafka, its own interpreter,
so the Spark driver's GIL cannot stall it) sends ``rate x --step-seconds``
messages on a fixed schedule: message ``j`` of the step is *intended* at
``t0 + j / rate``. Its intended time (epoch microseconds, from the schedule,
never the moment of the send) travels in the header ``bench-schedule`` as
``step:j:intended_us``. The producer never waits for the system: whenever it
wakes up it sends, at once, every message whose intended time has passed, each
with its own intended time, so a stall of the producer, the broker or the host
shows up as latency instead of disappearing from the sample. How far behind
its schedule the producer fell (p99 and max, per burst) is reported beside
each step. Keys are the ``vocab`` distribution of ``jobs.produce``, payloads
64 bytes.

Variants
--------
Each reads its own topic with its own checkpoint and tables, with the
processing-time trigger (``--trigger-seconds``) and the same
``maxOffsetsPerTrigger`` (``--max-offsets``, high, so a batch after a slow one
takes the whole backlog):

(a) **passthrough**: the Kafka -> Delta copy of ``bench/stream.py`` (one append
    of the source columns per batch: one Spark job and one commit, the same append
    as the router's first attempt at a batch, ``routing.appends.first_append``);
    its table is created with the router's table properties, and the two share
    the SparkSession and so every session setting);
(b) **native router**: the real :class:`routing.router.pipeline.Router`, over
    ``--subscriptions`` random patterns (``bench.stream.subscription_pairs``)
    plus one catch-all subscription ``#`` of subscriber ``bench-latency-all``.
    The catch-all gives every message exactly one delivery row whose
    visibility can be timed, so both variants make every message visible
    (none is unmatched) and the message count is the same for both. It
    also gives the router about twice the rows of the copy to write (1.9
    deliveries per message against 0.9 without it). ``--no-catch-all``
    routes with the random subscriptions alone, as ``bench/stream.py``
    does: only the matched messages (about a third) have deliveries, and
    they are the ones timed, each once, at its last delivery's commit;
    the unmatched ones are counted by the router, not written
    (``router.unrouted_path`` empty, the default). What each step must
    have written is recomputed from its seeded keys and the Python trie
    (an oracle independent of the native matcher), and the accounting
    holds the table to it. Its results go to ``latency_matched.md``.

The variants run one after the other in one SparkSession (``--variants``).
Each starts its query, sends a warm-up step (``--warmup-seconds`` at the
lowest rate: JIT, Python workers, the matcher's broadcast; timed and
accounted, but not reported as a rate), then the rates in increasing order.
After each step the driver waits until the query has caught up (its last
progress's end offsets reach the offsets the producer's delivery reports
returned), at most ``--drain-seconds``; a step that does not catch up is
saturated, and the variant's higher rates are not run.

Latency of a message, exactly
-----------------------------
``latency = commit_ms - intended_ms``, where ``commit_ms`` is the timestamp of
the Delta commit that added the data file holding the message's row (its
catch-all delivery for (b), its copy for (a)):

1. ``DeltaTable.history()`` (= ``DESCRIBE HISTORY``) gives each table version
   its timestamp, in milliseconds. Without in-commit timestamps (this project
   does not enable them) that is the modification time of the commit file
   ``_delta_log/<version>.json``, i.e. the moment the commit was published
   and readers could see the rows (the report checks this for every commit it
   uses); with them it is the commit's ``inCommitTimestamp``.
   ``commitInfo.timestamp`` in the same file is taken when the commit
   *starts*, earlier by the commit's own work; the report gives that gap.
2. Each commit file lists the data files it added (``add.path``); a data file
   is added by exactly one commit, and nothing here rewrites files (no
   OPTIMIZE, no auto-compaction: the report lists the operations seen), so
   file name -> version -> timestamp is exact.
3. Every row is read with the hidden column ``_metadata.file_name`` (the file
   it lives in), joined to that map, and its latency computed in Spark,
   rounded *up* to the millisecond; Spark aggregates (step, latency ms) ->
   count, and the driver fills one HDR histogram per step (1 ms .. 1 h,
   3 significant digits) with those counts.

No timestamp comes from the pipeline itself (neither ``routed_at`` nor the
batch id), so (a) and (b) are timed the same way, and every clock read is the
host's wall clock (the producer's ``time.time_ns`` and the JVM's file times).
A row whose file is in no commit, a duplicate row, a latency <= 0 or a sent
message with no row is counted and reported; the accounting table says
whether sent = in histograms for every step.

Figures
-------
Per variant and rate: p50, p99, p99.9 and max. The *sustained* rate of a
variant is the highest rate whose step caught up and whose p99 is within
``3 x --trigger-seconds`` (issue 10: the router's >= 0.7 x the passthrough's).
The numbers mean something only on an idle machine: the producer, the broker
and Spark share its cores, and the load average is printed with the results.

**Where a batch's time goes.** A listener records every batch's query progress;
the batches that ran from a step's first send until it caught up belong to it
(they read exactly its messages: the previous step had drained). Per step the
report gives, over those batches, *trigger -> visible commit* (the trigger's
start, the progress's ``timestamp``, to the history timestamp of the commit that
carries the batch's ``txn`` version: the part of each latency the batch itself
adds, besides waiting for its trigger), the whole batch (``triggerExecution``),
the progress's ``durationMs`` phases, and inside ``addBatch`` the driver's stage
timers (the router's ``BatchReport.stages``; the passthrough's write).

The broker is ``jobs.local_kafka``'s, on this bench's own ports and data
directory (``--set kafka.client_port=...`` to change them); it is stopped at
the end only if this run started it. Everything else the run writes lives
under ``--work-dir`` (default ``var/bench/latency/``, wiped first); the run's
topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing
import random
import shutil
import sys
import time
import urllib.parse
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # a script: `routing`, `jobs` importable (harness, stream: this directory)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import (
    RESULTS_DIR,
    RunRecord,
    bench_kafka,
    delete_earlier_topics,
    markdown_table,
    positive_int_list,
    progress,
    pyplot,
    python_workers_run_this_checkout,
    stop_broker_once_topics_gone,
)
from stream import NATIVE, PASSTHROUGH, start_passthrough, subscription_pairs, variant_settings, write_subscriptions

from jobs.demo import create_topics, delete_topics
from routing.settings import REPO_ROOT, Settings, add_settings_arguments, load_settings, parse_overrides

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from hdrh.histogram import HdrHistogram
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

WORK_DIR = REPO_ROOT / "var" / "bench" / "latency"

#: The header carrying ``step:index:intended_us`` (the schedule, not the send).
SCHEDULE_HEADER = "bench-schedule"
#: The router variant's catch-all subscription: one delivery per message, the row that is timed.
CATCH_ALL = ("#", "bench-latency-all")
#: Step index of the warm-up (the rates are 1, 2, ...).
WARMUP_STEP = 0
#: Percentiles of the tables and the JSON (max is separate).
PERCENTILES = (50.0, 99.0, 99.9)
#: Latency histograms: 1 ms .. 1 hour, 3 significant digits.
HISTOGRAM_MAX_MS = 3_600_000
#: The bound of a sustained rate: p99 within this many trigger intervals (issue 10).
BOUND_TRIGGERS = 3.0
#: Issue 10's target: the router's sustained rate at least this share of the passthrough's.
TARGET_RATIO = 0.7
#: Seconds a producer may take to flush its last messages after its schedule ends.
FLUSH_S = 60.0

#: This bench's own broker (ports and data directory), unless --set says otherwise: another benchmark
#: stopping the broker it started must not end this run.
BENCH_KAFKA = bench_kafka("latency-kafka", 19292)

VARIANT_LETTERS = {"a": PASSTHROUGH, "b": NATIVE}


@dataclasses.dataclass(frozen=True)
class Plan:
    rates: tuple[int, ...]
    step_seconds: float
    warmup_seconds: float
    trigger_seconds: float
    drain_seconds: float
    subscriptions: int
    max_offsets: int
    variants: tuple[str, ...]
    seed: int
    vocabulary: int
    payload_bytes: int
    #: Whether the router also holds :data:`CATCH_ALL` (every message delivered and timed) or only the random
    #: subscriptions (only matched messages have deliveries; they are the ones timed).
    catch_all: bool = True

    @property
    def report_name(self) -> str:
        """Stem of the report and chart files: the two workloads keep their own results."""
        return "latency" if self.catch_all else "latency_matched"

    @property
    def bound_ms(self) -> float:
        return BOUND_TRIGGERS * self.trigger_seconds * 1000

    @property
    def trigger_interval(self) -> str:
        return f"{round(self.trigger_seconds * 1000)} milliseconds"

    def steps(self) -> list[tuple[int, int, float]]:
        """(step index, rate, seconds): the warm-up, then each rate."""
        warmup = [(WARMUP_STEP, self.rates[0], self.warmup_seconds)] if self.warmup_seconds > 0 else []
        return warmup + [(index, rate, self.step_seconds) for index, rate in enumerate(self.rates, start=1)]

    def max_seconds(self) -> float:
        """An upper bound of the run's time after start-up (producer start and flush, drains, analysis)."""
        per_step = [seconds + self.drain_seconds + 30 for _, _, seconds in self.steps()]
        return len(self.variants) * (sum(per_step) + 120)


@dataclasses.dataclass
class BatchPhases:
    """Where one micro-batch's time went: the query progress's phases, the driver stages inside
    ``foreachBatch``, and when the batch's Delta commit made its rows visible."""

    batch_id: int
    input_rows: int
    #: Epoch ms of the trigger that started the batch (the progress's ``timestamp``).
    trigger_ms: int
    #: The progress's ``durationMs``: latestOffset, walCommit, queryPlanning, getBatch, addBatch, commitOffsets,
    #: triggerExecution (the whole batch).
    duration_ms: dict[str, int]
    #: Seconds of each stage inside ``foreachBatch`` (the router's ``BatchReport.stages``; the passthrough's
    #: write).
    stages: dict[str, float] = dataclasses.field(default_factory=dict)
    #: Epoch ms of the Delta commit carrying the batch's rows (the history timestamp), None if it made none.
    commit_ms: int | None = None
    #: Whether Delta wrote a checkpoint of the table's log at that commit: every ``delta.checkpointInterval``
    #: (10) versions, in the committing writer's post-commit hook, so inside this batch.
    checkpointed: bool = False

    @property
    def visible_ms(self) -> int | None:
        """Trigger -> visible commit: the part of a message's latency the batch itself adds."""
        return None if self.commit_ms is None else self.commit_ms - self.trigger_ms

    def phase(self, name: str) -> float:
        """A phase in ms: a ``durationMs`` key, ``planning`` (queryPlanning + getBatch), a stage, or ``other``
        (``addBatch`` minus the stages: the call into Python and back, and anything untimed)."""
        if name == "planning":
            return float(self.duration_ms.get("queryPlanning", 0) + self.duration_ms.get("getBatch", 0))
        if name == "other":
            return float(self.duration_ms.get("addBatch", 0)) - 1000 * sum(self.stages.values())
        if name in self.duration_ms:
            return float(self.duration_ms[name])
        return 1000 * self.stages.get(name, 0.0)


class ProgressRecorder:
    """Every query progress of the session's queries, by query id and batch id (a ``StreamingQueryListener``,
    so no batch is lost to ``recentProgress``'s bound); events arrive asynchronously."""

    def __init__(self) -> None:
        from pyspark.sql.streaming.listener import StreamingQueryListener

        recorder = self
        self.progress: dict[str, dict[int, Any]] = {}

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                progress = event.progress
                recorder.progress.setdefault(str(progress.id), {})[int(progress.batchId)] = progress

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.listener = Listener()

    def of(self, query_id: str) -> dict[int, Any]:
        return dict(self.progress.get(query_id, {}))


def last_batch_id(query: StreamingQuery) -> int:
    """The id of the query's last completed batch (-1 before any)."""
    last = query.lastProgress
    if last is None:
        return -1
    return int(last["batchId"] if isinstance(last, dict) else last.batchId)


def batch_phases(
    progress: dict[int, Any],
    batch_ids: Sequence[int],
    stages: dict[int, dict[str, float]],
    commits: dict[int, int],
    checkpointed: Collection[int] = (),
) -> list[BatchPhases]:
    """The phases of ``batch_ids`` that read rows (``commits``: batch id -> commit epoch ms; ``checkpointed``: the
    batch ids whose commit Delta checkpointed)."""
    import datetime as dt

    phases = []
    for batch_id in batch_ids:
        event = progress.get(batch_id)
        if event is None or not int(event.numInputRows):
            continue
        trigger = dt.datetime.fromisoformat(str(event.timestamp).replace("Z", "+00:00"))
        phases.append(
            BatchPhases(
                batch_id,
                int(event.numInputRows),
                round(trigger.timestamp() * 1000),
                {name: int(value) for name, value in dict(event.durationMs or {}).items()},
                dict(stages.get(batch_id, {})),
                commits.get(batch_id),
                batch_id in checkpointed,
            )
        )
    return phases


@dataclasses.dataclass
class Step:
    """One step of one variant: what the producer sent and what became visible, when."""

    variant: str
    index: int
    rate: int
    seconds: float
    #: The producer's summary (:func:`produce_step`).
    sent: int = 0
    failed: int = 0
    send_seconds: float = 0.0
    lag_p99_ms: float = 0.0
    lag_max_ms: float = 0.0
    buffer_full_waits: int = 0
    end_offsets: dict[int, int] = dataclasses.field(default_factory=dict)
    #: Whether the query reached the step's end offsets within --drain-seconds, and how long after the last send.
    caught_up: bool = False
    drain_seconds: float = 0.0
    #: What the table must hold for the step: rows, and distinct messages among them. ``None``: one row per
    #: sent message (the passthrough's copies, the router's catch-all deliveries); set by :func:`expect_matched`
    #: for a router without the catch-all.
    expected_rows: int | None = None
    expected_messages: int | None = None
    #: From the Delta table (:func:`measure_latencies`).
    rows: int = 0
    distinct: int = 0
    commits: int = 0
    without_commit: int = 0
    nonpositive: int = 0
    histogram: HdrHistogram | None = None
    #: The micro-batches that ran from the step's first send until it caught up (:func:`batch_phases`).
    batches: list[BatchPhases] = dataclasses.field(default_factory=list)

    @property
    def warmup(self) -> bool:
        return self.index == WARMUP_STEP

    @property
    def recorded(self) -> int:
        return 0 if self.histogram is None else int(self.histogram.get_total_count())

    @property
    def rows_expected(self) -> int:
        """Rows the step must have: one per sent message, or the matched deliveries (:attr:`expected_rows`)."""
        return self.sent if self.expected_rows is None else self.expected_rows

    @property
    def visible_expected(self) -> int:
        """Messages that must have a row: every sent one, or the matched ones (:attr:`expected_messages`)."""
        return self.sent if self.expected_messages is None else self.expected_messages

    @property
    def invisible(self) -> int:
        """Messages that should have a row and had none when the query stopped."""
        return max(0, self.visible_expected - self.distinct)

    @property
    def accounted(self) -> bool:
        """Every expected row there once, every expected message in the histogram once, every row's commit found."""
        exact = self.expected_messages is None or not self.failed  # a failed send leaves the expectation unknown
        return (
            exact
            and self.rows == self.rows_expected
            and self.distinct == self.visible_expected == self.recorded
            and not self.without_commit
        )

    def percentile(self, percentile: float) -> float | None:
        if self.histogram is None or not self.recorded:
            return None
        return float(self.histogram.get_value_at_percentile(percentile))

    def max_ms(self) -> float | None:
        return None if self.histogram is None or not self.recorded else float(self.histogram.get_max_value())

    def within_bound(self, bound_ms: float) -> bool:
        p99 = self.percentile(99.0)
        return self.caught_up and self.invisible == 0 and p99 is not None and p99 <= bound_ms


@dataclasses.dataclass
class VariantRun:
    variant: str
    steps: list[Step] = dataclasses.field(default_factory=list)
    #: Rates not run, and why (a lower rate saturated, or the run's time bound was reached).
    skipped: dict[int, str] = dataclasses.field(default_factory=dict)
    operations: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Milliseconds from ``commitInfo.timestamp`` to the history timestamp, over the commits that carried rows.
    commit_gap_ms: tuple[float, float] = (0.0, 0.0)
    #: (commits whose history timestamp is the commit file's modification time, to within 1 ms; commits checked).
    mtime_matches: tuple[int, int] = (0, 0)

    def rate_steps(self) -> list[Step]:
        return [step for step in self.steps if not step.warmup]

    def sustained(self, bound_ms: float) -> int | None:
        rates = [step.rate for step in self.rate_steps() if step.within_bound(bound_ms)]
        return max(rates, default=None)

    def missed_below(self, bound_ms: float) -> list[int]:
        """Rates below :meth:`sustained` whose step missed the bound: then the limit is not one rate but a
        band in which p99 is within the run's noise, and the grid cannot place it."""
        top = self.sustained(bound_ms)
        if top is None:
            return []
        return [step.rate for step in self.rate_steps() if step.rate < top and not step.within_bound(bound_ms)]


# --- the open-loop producer (its own process) ------------------------------------------------------------------

#: Distinct keys a step cycles through: message ``j`` carries key ``j`` mod the pool's size.
KEY_POOL = 100_000


def step_count(rate: int, seconds: float) -> int:
    """Messages a step sends: ``rate x seconds``, at least one."""
    return max(1, round(rate * seconds))


def key_pool(seed: int, step: int, vocabulary: int, count: int) -> list[bytes | None]:
    """The keys of step ``step`` of ``count`` messages: message ``j`` carries ``pool[j % len(pool)]``.

    Seeded by the step, so the driver can recompute what the producer process sent (:func:`expect_matched`).
    """
    from jobs.produce import vocab_keys

    keys = vocab_keys(random.Random(seed * 1_000_003 + step), vocabulary)
    return [next(keys) for _ in range(min(KEY_POOL, count))]


def expected_from_pool(fanouts: Sequence[int], count: int, max_fanout: int) -> tuple[int, int]:
    """(delivery rows, messages with a delivery) of ``count`` messages cycling through keys of ``fanouts``.

    A key matching more than ``max_fanout`` subscribers is dead-lettered, not delivered.
    """
    if not fanouts:
        return 0, 0
    laps, rest = divmod(count, len(fanouts))
    rows = messages = 0
    for position, fanout in enumerate(fanouts):
        if 0 < fanout <= max_fanout:
            times = laps + (position < rest)
            rows += fanout * times
            messages += times
    return rows, messages


def expect_matched(run: VariantRun, plan: Plan, pairs: Sequence[tuple[str, str]], max_fanout: int) -> None:
    """Set what a router without the catch-all must have written for each step: its keys recomputed from the
    seed and matched by the Python trie (an oracle independent of the native matcher under test)."""
    from routing.matchers.trie import TrieMatcher

    trie = TrieMatcher()
    for pattern, subscriber in pairs:
        trie.subscribe(pattern, subscriber)
    for step in run.steps:
        count = step_count(step.rate, step.seconds)
        pool = key_pool(plan.seed, step.index, plan.vocabulary, count)
        # A message without a key is dead-lettered (this workload never sends one).
        fanouts = [0 if key is None else len(trie.lookup(key.decode())) for key in pool]
        step.expected_rows, step.expected_messages = expected_from_pool(fanouts, count, max_fanout)


def produce_step(
    settings: Settings,
    topic: str,
    step: int,
    rate: int,
    seconds: float,
    seed: int,
    vocabulary: int,
    payload_bytes: int,
    out: Connection,
) -> None:
    """Send ``rate x seconds`` messages to ``topic`` on a fixed schedule; the summary goes to ``out``.

    Message ``j`` is intended at ``t0 + j / rate``. Whenever the loop wakes it sends every message that is
    due, each stamped with its own intended time, and never waits for an acknowledgement: late messages go
    out at once, so no stall is hidden (open loop). A full local queue (``BufferError``) is waited out by
    serving delivery reports; those waits only make later messages later, and that lateness is reported.
    """
    from confluent_kafka import Producer
    from hdrh.histogram import HdrHistogram

    from jobs.produce import placed

    count = step_count(rate, seconds)
    pool = key_pool(seed, step, vocabulary, count)
    producer = Producer({**settings.kafka_client_config(), "linger.ms": 5, "enable.idempotence": True})
    producer.list_topics(topic, timeout=30)  # connected before the schedule starts
    failures: list[str] = []
    end_offsets: dict[int, int] = {}
    lag = HdrHistogram(1, 3_600_000_000, 3)  # microseconds behind the schedule, per burst (its first message)
    waits = 0

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            partition = int(message.partition())
            end_offsets[partition] = max(end_offsets.get(partition, 0), int(message.offset()) + 1)

    padding = b"x" * payload_bytes
    t0 = time.monotonic()
    epoch0_us = time.time_ns() // 1000
    sent = 0
    while sent < count:
        now = time.monotonic()
        due = min(count, int((now - t0) * rate) + 1)
        if due <= sent:
            time.sleep(max(0.0, t0 + sent / rate - now))
            continue
        lag.record_value(max(1, round((now - t0 - sent / rate) * 1e6)), due - sent)
        for index in range(sent, due):
            intended_us = epoch0_us + (index * 1_000_000) // rate
            payload = (f"{index}:".encode() + padding)[:payload_bytes]
            arguments = placed(settings, pool[index % len(pool)], payload)
            headers = [*arguments.pop("headers", []), (SCHEDULE_HEADER, f"{step}:{index}:{intended_us}".encode())]
            while True:
                try:
                    producer.produce(topic, **arguments, headers=headers, on_delivery=delivered)
                    break
                except BufferError:
                    waits += 1
                    producer.poll(0.01)
        producer.poll(0)
        sent = due
    send_seconds = time.monotonic() - t0
    remaining = producer.flush(FLUSH_S)
    out.send(
        {
            "sent": count - len(failures) - remaining,
            "failed": len(failures) + remaining,
            "first_error": failures[0] if failures else None,
            "send_seconds": send_seconds,
            "lag_p99_ms": lag.get_value_at_percentile(99.0) / 1000,
            "lag_max_ms": lag.get_max_value() / 1000,
            "buffer_full_waits": waits,
            "end_offsets": end_offsets,
        }
    )
    out.close()


def run_producer(settings: Settings, plan: Plan, topic: str, step: Step) -> None:
    """One step's producer in a fresh process (spawned: no Spark, no GIL shared with the driver)."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(
        target=produce_step,
        args=(settings, topic, step.index, step.rate, step.seconds, plan.seed, plan.vocabulary, plan.payload_bytes),
        kwargs={"out": send},
        name=f"bench-latency-producer-{step.index}",
    )
    process.start()
    send.close()
    try:
        if not receive.poll(step.seconds + FLUSH_S + 60):
            raise RuntimeError(f"the producer of step {step.index} sent no summary in time")
        summary = receive.recv()
        process.join(30)
    finally:
        if process.is_alive():
            process.terminate()
            process.join(10)
        receive.close()
    if summary["failed"]:
        raise RuntimeError(f"producer: {summary['failed']} messages not acknowledged ({summary['first_error']})")
    step.sent = int(summary["sent"])
    step.failed = int(summary["failed"])
    step.send_seconds = float(summary["send_seconds"])
    step.lag_p99_ms = float(summary["lag_p99_ms"])
    step.lag_max_ms = float(summary["lag_max_ms"])
    step.buffer_full_waits = int(summary["buffer_full_waits"])
    step.end_offsets = {int(partition): int(offset) for partition, offset in summary["end_offsets"].items()}


# --- the queries ---------------------------------------------------------------------------------------------------


def bench_settings(args: argparse.Namespace, plan: Plan) -> Settings:
    overrides: dict[str, dict[str, object]] = {
        "kafka": dict(BENCH_KAFKA),
        "router": {
            "trigger": "processing_time",
            "trigger_interval": plan.trigger_interval,
            "max_offsets_per_trigger": str(plan.max_offsets),
            "starting_offsets": "earliest",
        },
    }
    for section, values in parse_overrides(args.settings_overrides).items():
        overrides.setdefault(section, {}).update(values)
    return load_settings(args.conf, overrides=overrides)


def committed_offsets(query: StreamingQuery, topic: str) -> dict[int, int]:
    """End offsets of the query's last completed batch (its data is committed to Delta by then)."""
    last = query.lastProgress
    if last is None:
        return {}
    sources = last["sources"] if isinstance(last, dict) else last.sources
    offsets: dict[int, int] = {}
    for source in sources:
        end = source["endOffset"] if isinstance(source, dict) else source.endOffset
        parsed = json.loads(end) if isinstance(end, str) else end
        if isinstance(parsed, dict) and isinstance(parsed.get(topic), dict):
            offsets.update({int(partition): int(offset) for partition, offset in parsed[topic].items()})
    return offsets


def wait_caught_up(query: StreamingQuery, topic: str, end_offsets: dict[int, int], timeout_s: float) -> bool:
    """Whether the query's committed offsets reach ``end_offsets`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        failure = query.exception()
        if failure is not None or not query.isActive:
            raise RuntimeError(f"query {query.name} stopped: {failure}")
        committed = committed_offsets(query, topic)
        if all(committed.get(partition, 0) >= offset for partition, offset in end_offsets.items()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def run_variant(
    spark: SparkSession, settings: Settings, plan: Plan, variant: str, topic: str, deadline: float
) -> VariantRun:
    """Start the variant's query, run its steps, stop it (always), then time every visible row and batch."""
    from routing.router.pipeline import Router

    run = VariantRun(variant)
    router: Router | None = None
    query: StreamingQuery | None = None
    recorder = ProgressRecorder()
    spark.streams.addListener(recorder.listener)
    passthrough_stages: dict[int, dict[str, float]] = {}
    step_batches: dict[int, range] = {}
    try:
        if variant == NATIVE:
            router = Router(spark, settings)
            query = router.start()
        else:
            query = start_passthrough(
                spark, settings, trigger_interval=settings.router.trigger_interval, stages=passthrough_stages
            )
        for index, rate, seconds in plan.steps():
            why = ""
            if run.steps and not run.steps[-1].caught_up:
                why = "not run: a lower rate saturated"
            elif time.monotonic() > deadline:
                why = "not run: the run's time bound was reached"
            if why:
                if index != WARMUP_STEP:
                    run.skipped[rate] = why
                    progress(f"{variant}: rate {rate:,} {why}")
                continue
            step = Step(variant, index, rate, seconds)
            label = "warm-up" if step.warmup else f"step {index}/{len(plan.rates)}"
            progress(f"{variant}: {label}, {rate:,} msg/s for {seconds:g} s")
            first_batch = last_batch_id(query) + 1
            run_producer(settings, plan, topic, step)
            run.steps.append(step)
            started = time.monotonic()
            step.caught_up = wait_caught_up(query, topic, step.end_offsets, plan.drain_seconds)
            step.drain_seconds = time.monotonic() - started
            step_batches[index] = range(first_batch, last_batch_id(query) + 1)
            behind = step.send_seconds - seconds
            progress(
                f"{variant}: sent {step.sent:,} ({step.sent / step.send_seconds:,.0f} msg/s, last send "
                f"{max(0.0, behind):.2f} s behind schedule, burst lag p99 {step.lag_p99_ms:,.1f} ms); "
                + (
                    f"caught up {step.drain_seconds:.1f} s after the last send"
                    if step.caught_up
                    else f"NOT caught up {plan.drain_seconds:g} s after the last send: saturated"
                )
            )
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                query.stop()
        if router is not None:
            with contextlib.suppress(Exception):
                router.close(progress_wait_s=1.0)
        time.sleep(1.0)  # progress events reach the listener asynchronously
        spark.streams.removeListener(recorder.listener)
    progress(f"{variant}: timing the visible rows against the Delta log")
    commits, checkpointed = measure_latencies(spark, settings, run, catch_all=plan.catch_all)
    if query is not None:
        if router is not None:
            stages = {batch_id: dict(report.stages) for batch_id, report in router.reports.items()}
        else:
            stages = passthrough_stages
        progress_of = recorder.of(str(query.id))
        for step in run.steps:
            step.batches = batch_phases(
                progress_of, step_batches.get(step.index, range(0)), stages, commits, checkpointed
            )
    return run


# --- latency from the Delta log ------------------------------------------------------------------------------------


def commit_files(table: Path) -> tuple[dict[str, int], dict[int, int], dict[int, int], dict[int, int]]:
    """From the Delta log: data file name -> the version that added it, and per version the
    ``commitInfo.timestamp`` and the commit file's modification time (both epoch ms), and the batch id
    (``txn.version``: each batch's idempotent append carries one) of every commit that has one."""
    added: dict[str, int] = {}
    started: dict[int, int] = {}
    modified: dict[int, int] = {}
    batches: dict[int, int] = {}
    for commit in sorted((table / "_delta_log").glob("*.json")):
        if not commit.stem.isdigit():
            continue
        version = int(commit.stem)
        modified[version] = commit.stat().st_mtime_ns // 1_000_000
        for line in commit.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                name = urllib.parse.unquote(action["add"]["path"]).rsplit("/", 1)[-1]
                if name in added:
                    raise RuntimeError(f"{table}: data file {name} added by versions {added[name]} and {version}")
                added[name] = version
            elif "commitInfo" in action and "timestamp" in action["commitInfo"]:
                started[version] = int(action["commitInfo"]["timestamp"])
            elif "txn" in action:
                batches[version] = int(action["txn"]["version"])
    return added, started, modified, batches


def checkpoint_versions(table: Path) -> set[int]:
    """The versions of ``table`` that have a Delta checkpoint (``<version>.checkpoint.parquet``, or its multi-part
    and V2 forms ``<version>.checkpoint.<part>.<parts>.parquet`` and ``<version>.checkpoint.<uuid>.<ext>``)."""
    versions = set()
    for path in (table / "_delta_log").glob("*.checkpoint*"):
        version, _, rest = path.name.partition(".")
        if version.isdigit() and rest.startswith("checkpoint") and path.suffix in {".parquet", ".json"}:
            versions.add(int(version))
    return versions


def measure_latencies(
    spark: SparkSession, settings: Settings, run: VariantRun, *, catch_all: bool = True
) -> tuple[dict[int, int], set[int]]:
    """Fill each step's histogram: latency = history timestamp of the row's commit - its intended time.

    The router's rows timed are its catch-all deliveries (``catch_all``), one per message; without the
    catch-all, every delivery, and a message with several counts once, at the latest of their commits.

    Returns batch id -> history timestamp of the commit that batch's append made, and the ids of the batches
    whose commit Delta checkpointed (for :class:`BatchPhases`).
    """
    from delta.tables import DeltaTable
    from hdrh.histogram import HdrHistogram
    from pyspark.sql import functions as F

    path = settings.router.deliveries_path
    if not run.steps or not DeltaTable.isDeltaTable(spark, path):
        return {}, set()
    history = (
        DeltaTable.forPath(spark, path)
        .history()
        .select("version", F.unix_millis("timestamp").alias("commit_ms"), "operation")
    )
    versions = {int(row["version"]): (int(row["commit_ms"]), str(row["operation"])) for row in history.collect()}
    added, started, modified, batches = commit_files(Path(path))
    files = spark.createDataFrame(
        [(name, version, versions[version][0]) for name, version in added.items() if version in versions],
        "file_name STRING, version BIGINT, commit_ms BIGINT",
    )
    rows = spark.read.format("delta").load(path)
    if run.variant == NATIVE and catch_all:
        rows = rows.where(F.col("subscriber_id") == CATCH_ALL[1])
    header = F.try_element_at(F.filter("headers", lambda h: h["key"] == F.lit(SCHEDULE_HEADER)), F.lit(1))
    schedule = F.split(header["value"].cast("string"), ":")
    timed = (
        rows.select(
            F.col("_metadata.file_name").alias("file_name"),
            schedule.getItem(0).cast("int").alias("step"),
            schedule.getItem(1).cast("long").alias("seq"),
            schedule.getItem(2).cast("long").alias("intended_us"),
        )
        .join(F.broadcast(files), "file_name", "left")
        .select(
            "step",
            "seq",
            "version",
            F.ceil((F.col("commit_ms") * 1000 - F.col("intended_us")) / 1000).cast("long").alias("latency_ms"),
        )
        .persist()
    )
    try:
        per_step = {
            int(row["step"]): row
            for row in timed.groupBy("step")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.count_distinct("seq").alias("distinct"),
                F.count_distinct("version").alias("commits"),
                F.count_if(F.col("version").isNull()).alias("without_commit"),
                F.count_if(F.col("latency_ms") <= 0).alias("nonpositive"),
            )
            .collect()
        }
        latencies = timed.where(F.col("latency_ms").isNotNull())
        if run.variant == NATIVE and not catch_all:
            # One value per message: its last delivery's (one append per batch puts them in one commit).
            latencies = latencies.groupBy("step", "seq").agg(F.max("latency_ms").alias("latency_ms"))
        counts = latencies.groupBy("step", "latency_ms").count().collect()
        used = [
            int(row["version"]) for row in timed.select("version").distinct().collect() if row["version"] is not None
        ]
    finally:
        timed.unpersist()
    for step in run.steps:
        step.histogram = HdrHistogram(1, HISTOGRAM_MAX_MS, 3)
        found = per_step.get(step.index)
        if found is not None:
            step.rows, step.distinct, step.commits = int(found["rows"]), int(found["distinct"]), int(found["commits"])
            step.without_commit, step.nonpositive = int(found["without_commit"]), int(found["nonpositive"])
    by_index = {step.index: step for step in run.steps}
    for row in counts:
        recorded = by_index.get(int(row["step"]))
        if recorded is not None and recorded.histogram is not None:
            value = min(max(1, int(row["latency_ms"])), HISTOGRAM_MAX_MS)
            recorded.histogram.record_value(value, int(row["count"]))
    for version in used:
        operation = versions[version][1]
        run.operations[operation] = run.operations.get(operation, 0) + 1
    gaps = sorted(versions[version][0] - started[version] for version in used if version in started)
    if gaps:
        run.commit_gap_ms = (float(gaps[len(gaps) // 2]), float(gaps[-1]))
    # Cross-check of the docstring's claim: the history timestamp is the commit file's modification time.
    run.mtime_matches = (sum(abs(versions[v][0] - modified.get(v, -10)) <= 1 for v in used), len(used))
    commits = {batch_id: versions[version][0] for version, batch_id in batches.items() if version in versions}
    checkpoints = checkpoint_versions(Path(path))
    return commits, {batch_id for version, batch_id in batches.items() if version in checkpoints}


# --- report --------------------------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


#: The query progress's phases of the batch table, in the order a batch runs them.
PROGRESS_PHASES = ("latestOffset", "walCommit", "planning", "addBatch", "commitOffsets")


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    return None if not ordered else ordered[len(ordered) // 2]


def phase_lines(plan: Plan, runs: Sequence[VariantRun]) -> list[str]:
    """Where each batch's time went, per variant and rate (median ms over the step's batches)."""
    header = ["variant", "msg/s", "batches", "rows/batch", "trigger -> visible commit, p50 / max"]
    header += ["whole batch, p50 / max", "of them with a Delta checkpoint: batches, whole batch p50"]
    header += [*PROGRESS_PHASES, "inside addBatch (median ms)"]
    rows = []
    for run in runs:
        for step in run.steps:
            batches = step.batches
            if not batches:
                continue
            visible = [float(b.visible_ms) for b in batches if b.visible_ms is not None]
            whole = [float(b.duration_ms.get("triggerExecution", 0)) for b in batches]
            checkpointed = [float(b.duration_ms.get("triggerExecution", 0)) for b in batches if b.checkpointed]
            stage_names = list(dict.fromkeys(name for b in batches for name in b.stages))
            inside = ", ".join(
                f"{name} {_ms(_median([b.phase(name) for b in batches]))}" for name in [*stage_names, "other"]
            )
            rows.append(
                [
                    run.variant,
                    "warm-up" if step.warmup else f"{step.rate:,}",
                    f"{len(batches):,}",
                    _ms(_median([float(b.input_rows) for b in batches])),
                    f"{_ms(_median(visible))} / {_ms(max(visible, default=None))}",
                    f"{_ms(_median(whole))} / {_ms(max(whole, default=None))}",
                    f"{len(checkpointed)}, {_ms(_median(checkpointed))}" if checkpointed else "0",
                    *[_ms(_median([b.phase(name) for b in batches])) for name in PROGRESS_PHASES],
                    inside,
                ]
            )
    return [
        "## Where a batch's time goes (ms)",
        "",
        "Per step, over the batches that read rows: *trigger -> visible commit* is the batch's share of every "
        "latency above (the trigger's start to the history timestamp of the commit its append made; a message "
        "also waits for its batch's trigger); *whole batch* is the progress's `triggerExecution` (after it the "
        "query waits for the next trigger, or starts at once when it is behind). Every "
        "`delta.checkpointInterval` (10) commits Delta also writes a checkpoint of the table's log, in the "
        "commit's post-commit hook, so inside that batch: the batches with one, and their whole batch's median, "
        "are counted apart. The phases are the query "
        "progress's `durationMs` (medians; planning = queryPlanning + getBatch); inside `addBatch` (the "
        "`foreachBatch` call) the driver's own stage timers: the router's `BatchReport.stages` (ledger, snapshot, "
        "plan: building the frames, write_deliveries: the append and its commit, observe: the counters; a "
        "router through Delta's public writer (a catalog table) also has warm: the Delta state for the next "
        "append's txn check, in line after the commit, or warm_wait: waiting for it in the background), the "
        "passthrough's write (the same append); other = "
        "addBatch minus the stages.",
        "",
        markdown_table(header, rows),
        "",
    ]


def ratio_line(router: int, passthrough: int, rates: Sequence[int], *, not_monotone: Sequence[str] = ()) -> str:
    """The router / passthrough line: the ratio of the highest rates each sustained, and what the grid proves.

    A variant that held the bound at ``rate`` and not at the next rate of the grid has its limit in
    between; one that held it at the grid's top rate has a limit of at least that, and no upper bound.
    So the true ratio lies above ``router / next rate of the passthrough`` and below ``next rate of the
    router / passthrough``, and the target is met or missed only when both bounds agree.

    That reading assumes a variant that held the bound at a rate held it at every lower one. The variants
    in ``not_monotone`` missed it below their highest (:meth:`VariantRun.missed_below`): then nothing is
    decided, whatever the bounds say.
    """

    def above(rate: int) -> int | None:
        return min((higher for higher in rates if higher > rate), default=None)

    router_next, passthrough_next = above(router), above(passthrough)
    low = 0.0 if passthrough_next is None else router / passthrough_next
    high = math.inf if router_next is None else router_next / passthrough
    if not_monotone:
        verdict = "not decided: " + " and ".join(not_monotone) + " missed the bound at a lower rate"
    elif low >= TARGET_RATIO:
        verdict = "met"
    elif high <= TARGET_RATIO:
        verdict = "MISSED"
    else:
        verdict = "not decided by this grid"
    limits = []
    for name, rate, following in (("router", router, router_next), ("passthrough", passthrough, passthrough_next)):
        if following is None:
            limits.append(f"the {name} held the bound at the grid's top rate, so its limit is {rate:,} msg/s or more")
        else:
            limits.append(f"the {name}'s limit is from {rate:,} to under {following:,} msg/s")
    if passthrough_next is not None and router_next is not None:
        bounds = f"from {low:.2f}x to under {high:.2f}x"
    elif passthrough_next is not None:
        bounds = f"above {low:.2f}x"
    elif router_next is not None:
        bounds = f"under {high:.2f}x"
    else:
        bounds = "unknown"
    limits_text = "; ".join(limits)
    return (
        f"Router / passthrough: **{router / passthrough:.2f}x** by the grid (target >= {TARGET_RATIO:g}x: {verdict}). "
        f"{limits_text[:1].upper()}{limits_text[1:]}: the true ratio is {bounds}."
    )


def sustained_lines(plan: Plan, runs: Sequence[VariantRun]) -> list[str]:
    bound = plan.bound_ms
    rows = []
    sustained: dict[str, int | None] = {}
    not_monotone = []
    for run in runs:
        rate = run.sustained(bound)
        sustained[run.variant] = rate
        missed = run.missed_below(bound)
        if missed:
            not_monotone.append(run.variant)
        rows.append(
            [
                run.variant,
                "none of the rates" if rate is None else f"{rate:,}",
                ", ".join(f"{below:,}" for below in missed) or "none",
            ]
        )
    lines = [
        f"## Highest sustained rate (p99 <= {BOUND_TRIGGERS:g} x trigger = {bound:,.0f} ms, every message visible)",
        "",
        markdown_table(["variant", "msg/s", "lower rates that missed the bound"], rows),
        "",
    ]
    if not_monotone:
        lines += [
            f"Not monotone: {' and '.join(not_monotone)} missed the bound at a lower rate than one it held. Its "
            "p99 there sits in a band around the bound that the run's noise decides (on this workload, the "
            "batches that also write a Delta checkpoint), so the grid does not place its limit.",
            "",
        ]
    router, passthrough = sustained.get(NATIVE), sustained.get(PASSTHROUGH)
    if router and passthrough:
        lines.append(ratio_line(router, passthrough, plan.rates, not_monotone=not_monotone))
    elif NATIVE in sustained and PASSTHROUGH in sustained:
        lines.append("Router / passthrough: n/a (a variant sustained none of the rates; try lower --rates).")
    else:
        lines.append("Router / passthrough: n/a (this run measured one variant).")
    return [*lines, ""]


def workload_text(plan: Plan, runs: Sequence[VariantRun]) -> str:
    """What the router's subscriptions add to the run's description: the catch-all, or the matched share."""
    if plan.catch_all:
        return " plus the catch-all `#` (every message delivered at least once: the row timed)"
    steps = [step for run in runs if run.variant == NATIVE for step in run.steps if step.expected_messages is not None]
    sent = sum(step_count(step.rate, step.seconds) for step in steps)
    if not sent:
        return ", no catch-all"
    messages = sum(step.visible_expected for step in steps)
    rows = sum(step.expected_rows or 0 for step in steps)
    return (
        f", no catch-all: {messages / sent:.0%} of the messages have a delivery, {rows / sent:.2f} deliveries per "
        "message (as in bench/stream.py)"
    )


def report(plan: Plan, runs: Sequence[VariantRun], record: RunRecord) -> str:
    lines = [
        "# Sustained-rate latency (open-loop Kafka producer -> Delta commit)",
        "",
        f"{record.line()} Spark local mode, producer, broker and Spark on the same host (other jobs on the "
        "machine disturb every figure). "
        f"Processing-time trigger {plan.trigger_seconds:g} s; steps of {plan.step_seconds:g} s after a "
        f"{plan.warmup_seconds:g} s warm-up at {plan.rates[0]:,} msg/s; the router over {plan.subscriptions:,} "
        f"subscriptions{workload_text(plan, runs)}; maxOffsetsPerTrigger {plan.max_offsets:,}; seed {plan.seed}.",
        "",
        "Latency of a message = timestamp of the Delta commit that made its row visible (`DESCRIBE HISTORY`) - "
        "its *intended* send time from the producer's fixed schedule (open loop: no coordinated omission). "
        "HDR histograms, ms."
        + (
            ""
            if plan.catch_all
            else " For (b) the messages timed are those with a delivery, each once (at its last delivery's commit)."
        ),
        "",
        "## Latency by rate (ms)",
        "",
    ]
    header = ["variant", "msg/s", "sent", *[f"p{p:g}" for p in PERCENTILES], "max", "commits", "within bound"]
    header += ["producer behind, p99 / max ms", "caught up after s"]
    rows = []
    for run in runs:
        for step in run.rate_steps():
            rows.append(
                [
                    run.variant,
                    f"{step.rate:,}",
                    f"{step.sent:,}",
                    *[_ms(step.percentile(p)) for p in PERCENTILES],
                    _ms(step.max_ms()),
                    f"{step.commits:,}",
                    "yes" if step.within_bound(plan.bound_ms) else "no",
                    f"{step.lag_p99_ms:,.1f} / {step.lag_max_ms:,.1f}",
                    f"{step.drain_seconds:.1f}" if step.caught_up else f"no (> {plan.drain_seconds:g})",
                ]
            )
        for rate, why in run.skipped.items():
            rows.append([run.variant, f"{rate:,}", why, *["-"] * (len(header) - 3)])
    lines += [markdown_table(header, rows), ""]
    lines += sustained_lines(plan, runs)
    lines += phase_lines(plan, runs)
    lines += [
        "## Accounting (every message in a histogram?)",
        "",
        "sent = acknowledged by the broker; rows = rows timed (for (b) "
        + ("the catch-all deliveries" if plan.catch_all else "every delivery")
        + "); distinct = distinct messages among them; expected = the rows and messages the step must have "
        "(one of each per sent message"
        + (
            ""
            if plan.catch_all
            else "; for (b), the deliveries and matched messages of the step's keys, recomputed from the seed and "
            "matched by the Python trie"
        )
        + "); not visible = expected messages with no row when the query stopped; the warm-up is included here "
        "and left out of the tables above.",
        "",
    ]
    header = ["variant", "step", "sent", "rows", "distinct", "expected rows / messages", "in histogram"]
    header += ["not visible", "no commit", "<= 0 ms", "all accounted"]
    rows = []
    for run in runs:
        for step in run.steps:
            rows.append(
                [
                    run.variant,
                    "warm-up" if step.warmup else f"{step.rate:,} msg/s",
                    f"{step.sent:,}",
                    f"{step.rows:,}",
                    f"{step.distinct:,}",
                    f"{step.rows_expected:,} / {step.visible_expected:,}",
                    f"{step.recorded:,}",
                    f"{step.invisible:,}",
                    f"{step.without_commit:,}",
                    f"{step.nonpositive:,}",
                    "yes" if step.accounted else "NO",
                ]
            )
    lines += [markdown_table(header, rows), ""]
    lines += ["## Notes", ""]
    for run in runs:
        operations = ", ".join(f"{name} x{count}" for name, count in sorted(run.operations.items())) or "none"
        warmup = next((step for step in run.steps if step.warmup), None)
        lines.append(
            f"- {run.variant}: commits that carried rows: {operations}. `commitInfo.timestamp` (taken when a "
            f"commit starts) precedes the history timestamp by {run.commit_gap_ms[0]:,.0f} ms at the median, "
            f"{run.commit_gap_ms[1]:,.0f} ms at most. The history timestamp is the commit file's modification "
            f"time (within 1 ms) for {run.mtime_matches[0]} of {run.mtime_matches[1]} commits."
            + (
                f" Warm-up: p99 {_ms(warmup.percentile(99.0))} ms, max {_ms(warmup.max_ms())} ms."
                if warmup is not None
                else ""
            )
        )
    lines += [
        "- Producer behind = how late a burst's first message went out relative to its intended time (the "
        "producer sends every due message at once); its lateness is inside the latencies, not hidden.",
        "- A step that did not catch up within --drain-seconds is saturated: the variant's higher rates are not "
        "run, and its rows still missing when the query stopped are counted as not visible.",
        "",
        "Chart: `latency.png` (p50 and p99 against rate, one line per variant).",
        "",
    ]
    return "\n".join(lines)


def chart(plan: Plan, runs: Sequence[VariantRun], path: Path) -> None:
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, NullLocator

    fig, ax = plt.subplots(figsize=(9, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for number, run in enumerate(runs):
        steps = [step for step in run.rate_steps() if step.recorded]
        color = colors[number % len(colors)]
        rates = [step.rate for step in steps]
        for percentile, style in ((50.0, "--"), (99.0, "-")):
            values = [step.percentile(percentile) or math.nan for step in steps]
            ax.plot(rates, values, style, marker="o", color=color, label=f"{run.variant}, p{percentile:g}")
        for step in steps:
            if not step.within_bound(plan.bound_ms):
                ax.plot([step.rate], [step.percentile(99.0) or math.nan], "x", color="black", markersize=9)
    ax.axhline(plan.bound_ms, color="grey", linewidth=1, linestyle=":")
    ax.annotate(f"{BOUND_TRIGGERS:g} x trigger", (0.01, plan.bound_ms), xycoords=("axes fraction", "data"), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(plan.rates), [f"{rate:,}" for rate in plan.rates])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if str(value)[0] in "25" else ""))
    ax.set_xlabel("offered rate, messages / s (open loop)")
    ax.set_ylabel("latency to the visible Delta commit, ms (log)")
    ax.set_title(f"Latency against rate, {plan.trigger_seconds:g} s trigger (x: over the bound or saturated)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def as_json(plan: Plan, runs: Sequence[VariantRun]) -> dict[str, Any]:
    def step_json(step: Step) -> dict[str, Any]:
        encoded = step.histogram.encode() if step.histogram is not None and step.recorded else b""
        return {
            "step": step.index,
            "warmup": step.warmup,
            "rate": step.rate,
            "seconds": step.seconds,
            "sent": step.sent,
            "rows": step.rows,
            "distinct": step.distinct,
            "recorded": step.recorded,
            "expected_rows": step.rows_expected,
            "expected_messages": step.visible_expected,
            "accounted": step.accounted,
            "not_visible": step.invisible,
            "without_commit": step.without_commit,
            "nonpositive": step.nonpositive,
            "commits": step.commits,
            "caught_up": step.caught_up,
            "drain_seconds": round(step.drain_seconds, 3),
            "send_seconds": round(step.send_seconds, 3),
            "lag_p99_ms": step.lag_p99_ms,
            "lag_max_ms": step.lag_max_ms,
            "percentiles_ms": {f"p{p:g}": step.percentile(p) for p in (*PERCENTILES, 99.99)},
            "max_ms": step.max_ms(),
            "within_bound": step.within_bound(plan.bound_ms),
            "batches": [
                {
                    "batch_id": b.batch_id,
                    "input_rows": b.input_rows,
                    "trigger_ms": b.trigger_ms,
                    "commit_ms": b.commit_ms,
                    "duration_ms": b.duration_ms,
                    "stage_seconds": {name: round(value, 4) for name, value in b.stages.items()},
                }
                for b in step.batches
            ],
            # HdrHistogram's compressed encoding (base64 text), for re-analysis.
            "histogram": encoded.decode() if isinstance(encoded, bytes) else str(encoded),
        }

    return {
        "plan": {**dataclasses.asdict(plan), "bound_ms": plan.bound_ms},
        "variants": {
            run.variant: {
                "sustained_rate": run.sustained(plan.bound_ms),
                "skipped_rates": {str(rate): why for rate, why in run.skipped.items()},
                "operations": run.operations,
                "history_is_mtime": list(run.mtime_matches),
                "commit_gap_ms": list(run.commit_gap_ms),
                "steps": [step_json(step) for step in run.steps],
            }
            for run in runs
        },
    }


# --- main ----------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python bench/latency.py",
        description="End-to-end latency (intended send time -> visible Delta commit) of the router and the "
        "passthrough copy at fixed offered rates, from an open-loop producer on a real broker; HDR histograms. "
        "Tables on stdout and in bench/results/latency.md, chart in bench/results/latency.png.",
    )
    add_settings_arguments(parser)
    parser.add_argument(
        "--rates",
        type=positive_int_list,
        # Up to twice the passthrough's 20,000 msg/s, which the first grid (2,000-20,000) sustained at its top.
        default=(10_000, 15_000, 20_000, 30_000, 40_000),
        help="offered rates in msg/s, comma-separated, run in increasing order (default 10000,15000,20000,30000,40000)",
    )
    parser.add_argument("--step-seconds", type=float, default=60.0, help="length of each rate's step (default 60)")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=150.0,
        help="warm-up at the lowest rate before the steps (default 150: with 30, a run of 2026-11-28 measured a "
        "router still compiling, whose batches took 1.1 s for 40k records against 0.9 s for 100k when warm)",
    )
    parser.add_argument(
        "--trigger-seconds", type=float, default=1.0, help="processing-time trigger interval of both (default 1)"
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        help="how long after a step's last send the query may take to catch up before the step counts as "
        "saturated (default max(30, 10 x trigger))",
    )
    parser.add_argument(
        "--subscriptions", type=int, default=10_000, help="random subscriptions of the router (default 10000)"
    )
    parser.add_argument("--max-offsets", type=int, default=1_000_000, help="maxOffsetsPerTrigger (default 1000000)")
    parser.add_argument("--variants", default="ab", help="a = passthrough, b = native router (default ab)")
    parser.add_argument(
        "--catch-all",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give the router the catch-all subscription `#` as well, so that every message has a delivery to time "
        "(default; results in latency.md). --no-catch-all: only the random subscriptions, as bench/stream.py routes "
        "them; only matched messages have deliveries and are timed, checked against the deliveries a Python trie "
        "expects from each step's seeded keys (results in latency_matched.md)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the keys and subscriptions (default 7)")
    parser.add_argument("--vocabulary", type=int, default=300, help="words of the vocab key distribution (default 300)")
    parser.add_argument("--payload-bytes", type=int, default=64, help="payload size (default 64)")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help=f"checkpoints and tables (default {WORK_DIR})")
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS_DIR, help="where latency[_matched].md and its chart go"
    )
    parser.add_argument("--json", type=Path, help="also write every figure and the encoded histograms here")
    parser.add_argument("--no-write", action="store_true", help="print the tables only; write no report files")
    parser.add_argument("--keep-broker", action="store_true", help="leave a broker this run started running")
    args = parser.parse_args(argv)
    letters = "".join(dict.fromkeys(args.variants.lower()))
    if not letters or set(letters) - set(VARIANT_LETTERS):
        parser.error("--variants takes letters among a (passthrough) and b (router)")
    if min(args.step_seconds, args.trigger_seconds) <= 0 or args.warmup_seconds < 0:
        parser.error("--step-seconds and --trigger-seconds must be positive, --warmup-seconds not negative")
    if min(args.subscriptions + 1, args.max_offsets, args.payload_bytes + 1, args.vocabulary) < 1:
        parser.error("--subscriptions and --payload-bytes must not be negative, --max-offsets positive")
    plan = Plan(
        rates=args.rates,
        step_seconds=args.step_seconds,
        warmup_seconds=args.warmup_seconds,
        trigger_seconds=args.trigger_seconds,
        drain_seconds=args.drain_seconds if args.drain_seconds is not None else max(30.0, 10 * args.trigger_seconds),
        subscriptions=args.subscriptions,
        max_offsets=args.max_offsets,
        variants=tuple(VARIANT_LETTERS[letter] for letter in sorted(letters)),
        seed=args.seed,
        vocabulary=args.vocabulary,
        payload_bytes=args.payload_bytes,
        catch_all=args.catch_all,
    )
    return plan, args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plan, args = parse_args(argv)
    from jobs import local_kafka
    from routing.spark import get_spark

    record = RunRecord.start(__file__, argv)
    settings = bench_settings(args, plan)
    run_id = time.strftime("%Y%m%d%H%M%S")
    topics = {variant: f"bench.latency.{run_id}.{variant[1]}" for variant in plan.variants}
    work: Path = args.work_dir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    python_workers_run_this_checkout()
    bound_s = plan.max_seconds()
    progress(f"plan: {len(plan.steps())} steps per variant, at most ~{bound_s / 60:,.0f} min after start-up")
    progress(f"broker at {settings.kafka.bootstrap_servers}")
    broker = local_kafka.ensure_running(settings)
    # A broker this run started dies with it, even if the run is killed (unless --keep-broker).
    keep = args.keep_broker
    watchdog = local_kafka.stop_with_this_process(broker, settings) if broker.started and not keep else None
    runs: list[VariantRun] = []
    spark: SparkSession | None = None
    try:
        delete_earlier_topics(settings, "bench.latency.")
        create_topics(settings, list(topics.values()))
        spark = get_spark(settings, app_name="bench-latency")
        deadline = time.monotonic() + bound_s
        table = work / "subscriptions"
        pairs = subscription_pairs(
            random.Random(plan.seed * 1_000_003 + plan.subscriptions), plan.subscriptions, plan.vocabulary
        )
        write_subscriptions(spark, table, [*pairs, CATCH_ALL] if plan.catch_all else pairs)
        for variant in plan.variants:
            name = "passthrough" if variant == PASSTHROUGH else "router"
            variant_conf = variant_settings(settings, work, name, topic=topics[variant], table=table)
            variant_conf = variant_conf.replace(
                router=dataclasses.replace(variant_conf.router, app_id=f"bench-latency-{name}")
            )
            runs.append(run_variant(spark, variant_conf, plan, variant, topics[variant], deadline))
            if variant == NATIVE and not plan.catch_all:
                progress(f"{variant}: the expected deliveries of each step, from its keys and the Python trie")
                expect_matched(runs[-1], plan, pairs, settings.limits.max_fanout)
    finally:
        if spark is not None:
            for query in spark.streams.active:
                with contextlib.suppress(Exception):
                    query.stop()
        with contextlib.suppress(Exception):
            delete_topics(settings, list(topics.values()))
        if spark is not None:
            spark.stop()
        if broker.started and not keep:
            stop_broker_once_topics_gone(settings, list(topics.values()))
        if watchdog is not None:
            watchdog.close()
    text = report(plan, runs, record)
    print(text)
    if not args.no_write:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / f"{plan.report_name}.md").write_text(text, encoding="utf-8")
        chart(plan, runs, args.results_dir / f"{plan.report_name}.png")
        progress(f"wrote {args.results_dir / plan.report_name}.md and {plan.report_name}.png")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(as_json(plan, runs), indent=1), encoding="utf-8")
    accounted = all(step.accounted for run in runs for step in run.steps if step.caught_up)
    return 0 if accounted else 1


if __name__ == "__main__":
    sys.exit(main())

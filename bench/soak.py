"""Does the router stay flat over an hour of steady traffic, subscription churn and SIGKILLs?

Run ``python bench/soak.py`` (``make soak``; ``--help`` for flags). It writes ``bench/results/soak.md`` and
``soak.png``; exit status 0 when every criterion held, 1 when one failed (the work directory is then kept
for the logs), 2 for bad flags. It is the long sibling of ``bench/chaos.py``, whose job runner it shares.

What runs, all real and on this machine, under ``--work`` (a broker of its own on free ports):

* the router (``python -m jobs.route``, the shipped ``conf/router.toml`` but for the run's own tables, and
  ``max_offsets_per_trigger`` raised so that one trigger can take twice what arrives in an interval; the
  metrics table on), as its own process group;
* the refresh job (``python -m jobs.refresh_subscriptions --every 5``) over the subscription events topic;
* ``--subscriptions`` initial subscriptions (realistic 5-word patterns over a 300-word vocabulary) and then
  churn: every ``--churn-every`` seconds a few events (subscribes of new patterns, unsubscribes of earlier
  ones, now and then a malformed event: a reject);
* a producer thread offering a steady rate of messages (keys from a fixed pool: about 30% matching some
  subscription, a null key and an over-long key every thousand: dead letters).

Phases:

1. **Capacity.** Before the router starts, ``--calibration-messages`` are produced as a backlog; the router
   drains it and its capacity is the backlog over the summed batch times (``triggerExecution``) of the batches
   that drained it, the first batch (the JVM's warm-up and the first snapshot) left out.
2. **Steady.** For ``--minutes`` the producer offers ``--capacity-share`` of that capacity (``--rate``
   overrides), churn runs, and the router is SIGKILLed from outside every ``--kill-every`` seconds and
   restarted from its checkpoint. Every ``--interval`` seconds a sample records the router's driver (its
   Python and JVM) and Python worker RSS, the refresh job's, their open files, the sizes of the ledger, the
   checkpoint's offset and commit logs, the snapshot files and the metrics table, the router's lag, and the
   batches logged since the last sample; and it checks conservation over the messages the router committed
   since the last check (below).
3. **End.** Production and churn stop, the router catches up to the topic's end and is stopped with SIGTERM
   (exit 0), a last conservation check covers the rest, and the subscription table is held to the plain-Python
   model of every acked event (as in ``bench/chaos.py``).

**Conservation, every interval.** The producer's records get contiguous offsets per partition (one idempotent
producer, no transactions; the broker's end offsets are checked against its count at the end). Each check
takes the offsets the router's checkpoint has committed now, per partition, and the range since the last
check, and reads the three output tables (deliveries, dead letters, unrouted) within it: every offset of the
range is in exactly one table, dead letters and unrouted hold one row per message, no delivery id twice, and
each delivery id is the text of its coordinates and subscriber. Ranges are disjoint and cover everything
produced, and an id names its coordinates, so no delivery id repeats over the whole run either. (Which
subscribers each message reached is ``bench/chaos.py``'s and the tests' oracle's job; a soak's millions of
messages are counted, not matched one by one in Python.)

**Criteria** (issue 58): conservation exact at every check and over the run; RSS flat (each process kind's mean
over the last 15 minutes within 10% of its mean over minutes 15 to 30; scaled to a shorter run as the last
quarter against the second; samples of a router up for under a minute, just restarted after a kill, left out of
the router's means); every file set within its retention (ledger entries at most twice
``router.retain_batches``, which prunes every that many batches; offset and commit log entries at most
Spark's ``minBatchesToRetain`` plus the batches in flight; snapshot files of at most
``router.snapshot_files_keep`` versions plus the ones batches still pin); batch p99 of the last quarter within
1.5 times the first quarter's. The metrics table is output, one row per batch: its growth is reported, and
bounded only by the Delta retention and VACUUM its owner runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing`, `jobs` and tests/'s oracle importable
    _ROOT = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]

from chaos import Job, check_subscriptions, committed_offsets, end_offsets
from harness import RunRecord, markdown_table, pyplot, write_report
from router_support import WAIT_TIMEOUT_S, job_flags, produce, router_settings, subscription_event
from workloads import realistic_hit, realistic_pattern, vocabulary

from routing.processes import stat_fields
from routing.settings import REPO_ROOT, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "soak.md"
WORK_DIR = REPO_ROOT / "var" / "bench" / "soak"

MESSAGES_TOPIC = "soak-messages"
EVENTS_TOPIC = "soak-subscription-events"
MESSAGE_PARTITIONS = 2
#: The messages topic's retention: the broker's disk stays bounded over the hour, while the router (which
#: fails on data loss) is never more than minutes behind.
TOPIC_RETENTION_MS = 15 * 60 * 1000
#: Spark's default ``spark.sql.streaming.minBatchesToRetain``: offset and commit log entries it keeps.
MIN_BATCHES_TO_RETAIN = 100
#: Batches beyond the retained ones that may be in a log or pinned at once (the one in flight, the one being
#: purged, a replay).
IN_FLIGHT = 2
#: The router's trigger interval: the shipped default.
TRIGGER_S = 5
KEY_POOL = 50_000
VALUE = b"soak payload of a steady size"
#: Process kinds whose RSS a sample records (:func:`process_kind`).
KINDS = ("router driver (Python)", "router driver (JVM)", "router Python workers", "refresh job")
BATCH_MARKER = b'"event": "router_batch"'


@dataclasses.dataclass(frozen=True)
class SoakPlan:
    seed: int
    minutes: float = 60.0
    interval_s: float = 60.0
    kill_every_s: float = 600.0
    subscriptions: int = 10_000
    churn_every_s: float = 3.0
    churn_events: int = 4
    calibration_messages: int = 2_000_000
    capacity_share: float = 0.5
    #: Messages per second offered; None: ``capacity_share`` of the capacity measured first.
    rate: float | None = None
    refresh_every_s: int = 5


class SoakFailure(Exception):
    """The run could not go on; the message says why."""


# -- traffic ----------------------------------------------------------------------------------------------------


def message_keys(rng: random.Random, vocab: Sequence[str], patterns: Sequence[str], count: int) -> list[bytes | None]:
    """The producer's key pool: 30% hits of ``patterns``, the rest random 5-word keys; every thousandth a null key
    and the one after it over the 255-byte limit (dead letters of two reasons)."""
    keys: list[bytes | None] = []
    for index in range(count):
        if index % 1000 == 0:
            keys.append(None)
        elif index % 1000 == 1:
            keys.append(b"k" * 300)
        elif rng.random() < 0.3:
            keys.append(realistic_hit(rng, vocab, rng.choice(patterns)).encode())
        else:
            keys.append(".".join(rng.choice(vocab) for _ in range(5)).encode())
    return keys


class SteadyProducer:
    """A thread offering ``rate`` messages per second (keys cycling through a pool, partitions round-robin)
    until :meth:`stop`; counts what it sent per partition, and any delivery error."""

    def __init__(self, settings: Settings, keys: Sequence[bytes | None]) -> None:
        from confluent_kafka import Producer

        self.keys = keys
        self.sent = 0
        self.errors: list[object] = []
        self.rate = 0.0
        self._producer = Producer(
            {
                **settings.kafka_client_config(),
                "enable.idempotence": True,
                "linger.ms": 20,
                "queue.buffering.max.messages": 1_000_000,
            }
        )
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def per_partition(self) -> dict[int, int]:
        return {
            p: self.sent // MESSAGE_PARTITIONS + (p < self.sent % MESSAGE_PARTITIONS) for p in range(MESSAGE_PARTITIONS)
        }

    def _on_delivery(self, error: object, _message: object) -> None:
        if error is not None:
            self.errors.append(error)

    def send(self, count: int) -> None:
        """Produce the next ``count`` messages now (the backlog), and flush them."""
        self._produce_until(self.sent + count)
        self.flush()

    def _produce_until(self, total: int) -> None:
        keys, pool, produce_one = self.keys, len(self.keys), self._producer.produce
        while self.sent < total:
            try:
                produce_one(
                    MESSAGES_TOPIC,
                    key=keys[self.sent % pool],
                    value=VALUE,
                    partition=self.sent % MESSAGE_PARTITIONS,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self._producer.poll(0.05)
                continue
            self.sent += 1
            if self.sent % 10_000 == 0:
                self._producer.poll(0)

    def flush(self) -> None:
        if self._producer.flush(120) != 0:
            raise SoakFailure("the producer could not flush its messages within 120 s")
        if self.errors:
            raise SoakFailure(f"producing failed: {self.errors[0]}")

    def start(self, rate: float) -> None:
        self.rate = rate
        self._thread = threading.Thread(target=self._run, name="soak-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        first, started = self.sent, time.monotonic()
        while not self._stopping.wait(0.05):
            self._produce_until(first + int((time.monotonic() - started) * self.rate))
            self._producer.poll(0)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_TIMEOUT_S)
        self.flush()


class Churn:
    """A thread producing a few subscription events every ``every_s`` seconds until :meth:`stop`; keeps the acked
    events for the model check."""

    def __init__(self, settings: Settings, plan: SoakPlan, rng: random.Random, vocab: Sequence[str]) -> None:
        self.settings, self.plan, self.rng, self.vocab = settings, plan, rng, vocab
        self.events: list[Any] = []
        self.held: list[tuple[str, str]] = []
        self.failed: list[BaseException] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-churn", daemon=True)

    def initial(self, patterns: Sequence[str]) -> None:
        events = [subscription_event("subscribe", p, f"tenant-{i % 2000}") for i, p in enumerate(patterns)]
        self.events += produce(self.settings, EVENTS_TOPIC, [(None, event, []) for event in events])

    def _round(self) -> list[bytes]:
        events = []
        for _ in range(self.plan.churn_events):
            roll = self.rng.random()
            if roll < 0.05:
                events.append(b'{"op": "subscribe", "subscriber": "broken"')  # a reject: malformed_json
            elif roll < 0.45 and self.held:
                pattern, subscriber = self.held.pop(self.rng.randrange(len(self.held)))
                events.append(subscription_event("unsubscribe", pattern, subscriber))
            else:
                pair = (realistic_pattern(self.rng, self.vocab), f"churn-{self.rng.randrange(500)}")
                self.held.append(pair)
                events.append(subscription_event("subscribe", *pair))
        return events

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.plan.churn_every_s):
                batch = self._round()
                self.events += produce(self.settings, EVENTS_TOPIC, [(None, event, []) for event in batch])
        except BaseException as error:  # reported by stop()
            self.failed.append(error)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=WAIT_TIMEOUT_S)
        if self.failed:
            raise SoakFailure(f"producing subscription events failed: {self.failed[0]!r}")


# -- what a sample reads ----------------------------------------------------------------------------------------


def process_kind(cmdline: bytes) -> str | None:
    """Which of :data:`KINDS` (the router's) a process of the router's tree is, from its command line."""
    words = cmdline.split(b"\0")
    if words and words[0].endswith(b"java"):
        return KINDS[1]
    if b"jobs.route" in words:
        return KINDS[0]
    if any(b"pyspark" in word and (b"daemon" in word or b"worker" in word) for word in words):
        return KINDS[2]
    return None


def process_tree(root: int, proc: Path = Path("/proc")) -> list[int]:
    """``root`` and every process descended from it (by parent pid: PySpark's worker daemon leaves its parent's
    process group with ``setsid``, so the group would miss the Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            # The command name, in parentheses, may hold spaces: the parent pid is the second field after it.
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


def rss_and_files(pid: int, proc: Path = Path("/proc")) -> tuple[int, int]:
    """(resident bytes, open file descriptors) of ``pid``; (0, 0) if it is gone."""
    try:
        status = (proc / str(pid) / "status").read_text()
        rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return rss_kb * 1024, len(os.listdir(proc / str(pid) / "fd"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return 0, 0


#: What the soak's own process tree (the producer thread and the checker's JVM) counts as, for its CPU.
HARNESS = "this harness (producer, checker)"
BROKER = "broker"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float:
    """User plus system CPU seconds ``pid`` has used; 0.0 if it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    fields = stat_fields(stat)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: fields 14 and 15 of stat(5)


def tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``; (0, 0) if it does not exist."""
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += (Path(root) / name).stat().st_size
                files += 1
            except FileNotFoundError:
                continue
    return files, size


def log_entries(directory: Path) -> int:
    """Entries of a Spark metadata log (``offsets/``, ``commits/``): its files named by a batch id."""
    return sum(1 for entry in directory.iterdir() if entry.name.isdigit()) if directory.is_dir() else 0


#: A base (``<version>-<sha256>.frozen``) or a delta (``<version>-from-<base>-<sha256>.delta``).
SNAPSHOT_NAME = re.compile(r"^(\d+)-(?:from-\d+-)?[0-9a-f]{64}\.(?:frozen|delta)$")


def snapshot_versions(directory: Path) -> tuple[int, int]:
    """(distinct table versions, bytes) of the snapshot files under ``directory`` (every table's)."""
    versions: set[int] = set()
    size = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            if match := SNAPSHOT_NAME.match(name):
                versions.add(int(match.group(1)))
                size += (Path(root) / name).stat().st_size
    return len(versions), size


def batch_durations_ms(lines: Sequence[bytes]) -> list[float]:
    """``triggerExecution`` of each router batch metrics line among ``lines``."""
    found = []
    for line in lines:
        if BATCH_MARKER in line:
            start = line.find(b"{")
            duration = json.loads(line[start:]).get("duration_ms", {}).get("triggerExecution")
            if duration is not None:
                found.append(float(duration))
    return found


def p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


@dataclasses.dataclass
class Sample:
    at_s: float
    rss: dict[str, int]
    open_files: int
    ledger_entries: int
    ledger_bytes: int
    offsets_entries: int
    commits_entries: int
    checkpoint_bytes: int
    snapshot_versions: int
    snapshot_bytes: int
    metrics_bytes: int
    lag: int
    batches_ms: list[float]
    checked_messages: int
    #: Seconds since the router process was (re)started.
    router_uptime_s: float = math.inf
    #: Cores each process kind (:data:`KINDS`, :data:`HARNESS`) used since the previous sample.
    cores: dict[str, float] = dataclasses.field(default_factory=dict)


# -- conservation -----------------------------------------------------------------------------------------------


def check_range(spark: SparkSession, settings: Settings, low: dict[int, int], high: dict[int, int]) -> list[str]:
    """The problems of the outputs over the offsets [low, high) per partition (module docstring); [] if none."""
    from pyspark.sql import functions as F

    from routing import delta_tables

    router = settings.router
    if all(high.get(p, 0) <= low.get(p, 0) for p in high):
        return []
    in_range = F.lit(False)
    for partition, end in high.items():
        in_range = in_range | (
            (F.col("source_partition") == partition)
            & (F.col("source_offset") >= low.get(partition, 0))
            & (F.col("source_offset") < end)
        )
    expected = sum(end - low.get(p, 0) for p, end in high.items())
    problems: list[str] = []
    coordinates = []
    for name, path in (
        ("deliveries", router.deliveries_path),
        ("dead letters", router.dead_letters_path),
        ("unrouted", router.unrouted_path),
    ):
        rows = delta_tables.read(spark, path).where(in_range)
        if name == "deliveries":
            forged = F.concat_ws("|", "source_topic", "source_partition", "source_offset", "subscriber_id")
            (stats,) = rows.agg(
                F.count(F.lit(1)).alias("rows"),
                F.countDistinct("delivery_id").alias("ids"),
                F.sum((F.col("delivery_id") != forged).cast("long")).alias("wrong_ids"),
            ).collect()
            if stats["rows"] != stats["ids"]:
                problems.append(f"{stats['rows'] - stats['ids']} duplicate delivery id(s) in {low}..{high}")
            if stats["wrong_ids"]:
                problems.append(f"{stats['wrong_ids']} delivery id(s) not naming their coordinates in {low}..{high}")
            coordinates.append(rows.select("source_partition", "source_offset").distinct())
        else:
            (stats,) = rows.agg(
                F.count(F.lit(1)).alias("rows"),
                F.countDistinct("source_partition", "source_offset").alias("messages"),
            ).collect()
            if stats["rows"] != stats["messages"]:
                problems.append(f"{name}: {stats['rows'] - stats['messages']} message(s) twice in {low}..{high}")
            coordinates.append(rows.select("source_partition", "source_offset"))
    union = coordinates[0].unionAll(coordinates[1]).unionAll(coordinates[2])
    (counts,) = (
        union.groupBy("source_partition", "source_offset")
        .count()
        .agg(F.count(F.lit(1)).alias("messages"), F.max("count").alias("most"))
        .collect()
    )
    if counts["messages"] != expected:
        problems.append(f"{expected - counts['messages']} message(s) of {low}..{high} in no output")
    if (counts["most"] or 0) > 1:
        problems.append(f"a message of {low}..{high} in two outputs")
    return problems


# -- the criteria -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    name: str
    figure: str
    #: None: a figure reported beside the criteria, not one of them.
    passed: bool | None


#: Samples of a router up for less than this are left out of its RSS means: a process seconds after a kill has
#: not reached its working set yet (its RSS says when the kill came, not whether memory grows).
WARM_S = 60.0


def window_mean(samples: Sequence[Sample], kind: str, start_s: float, end_s: float) -> float | None:
    values = [
        s.rss.get(kind, 0)
        for s in samples
        if start_s <= s.at_s < end_s and (kind == KINDS[3] or s.router_uptime_s >= WARM_S)
    ]
    return statistics.fmean(values) if values else None


def rss_windows(minutes: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """(reference, last) windows of the RSS criterion, in seconds of the steady phase: minutes 15-30 and the last
    15 of an hour, the second quarter and the last of a shorter run."""
    total = minutes * 60
    if minutes >= 60:
        return (900.0, 1800.0), (total - 900.0, total + 1.0)
    return (total / 4, total / 2), (total * 3 / 4, total + 1.0)


def verdicts(samples: Sequence[Sample], plan: SoakPlan, settings: Settings, problems: Sequence[str]) -> list[Verdict]:
    router = settings.router
    found = [
        Verdict(
            "conservation exact at every check, no duplicate delivery id",
            f"{sum(s.checked_messages for s in samples):,} messages checked, {len(problems)} problem(s)",
            not problems,
        )
    ]
    (ref_start, ref_end), (last_start, last_end) = rss_windows(plan.minutes)
    for kind in KINDS:
        # The criterion is the router's driver and workers; the refresh job's is reported beside them.
        name = f"RSS flat: {kind}" if kind != KINDS[3] else f"RSS of the {kind} (reported, not a criterion)"
        reference = window_mean(samples, kind, ref_start, ref_end)
        last = window_mean(samples, kind, last_start, last_end)
        if reference is None or last is None or reference == 0:
            found.append(Verdict(name, "no samples in a window", None if kind == KINDS[3] else False))
            continue
        ratio = last / reference
        found.append(
            Verdict(
                name,
                f"{last / 2**20:,.0f} MiB / {reference / 2**20:,.0f} MiB = {ratio:.2f}",
                None if kind == KINDS[3] else abs(ratio - 1) <= 0.10,
            )
        )
    bounds = [
        ("ledger entries", "ledger_entries", 2 * router.retain_batches + IN_FLIGHT, "2 x router.retain_batches + 2"),
        ("offset log entries", "offsets_entries", MIN_BATCHES_TO_RETAIN + IN_FLIGHT, "minBatchesToRetain + 2"),
        ("commit log entries", "commits_entries", MIN_BATCHES_TO_RETAIN + IN_FLIGHT, "minBatchesToRetain + 2"),
        (
            "snapshot file versions",
            "snapshot_versions",
            router.snapshot_files_keep + IN_FLIGHT,
            "router.snapshot_files_keep + 2",
        ),
    ]
    for name, field, bound, rule in bounds:
        most = max((getattr(s, field) for s in samples), default=0)
        found.append(Verdict(f"{name} within retention", f"at most {most} (bound {bound}: {rule})", most <= bound))
    total = plan.minutes * 60
    first_p99 = p99([ms for s in samples if s.at_s <= total / 4 for ms in s.batches_ms])
    last_p99 = p99([ms for s in samples if s.at_s > total * 3 / 4 for ms in s.batches_ms])
    if first_p99 is None or last_p99 is None:
        found.append(Verdict("batch p99: last quarter within 1.5x the first", "no batches in a quarter", False))
    else:
        found.append(
            Verdict(
                "batch p99: last quarter within 1.5x the first",
                f"{last_p99:,.0f} ms / {first_p99:,.0f} ms = {last_p99 / first_p99:.2f}",
                last_p99 <= 1.5 * first_p99,
            )
        )
    return found


# -- the run ----------------------------------------------------------------------------------------------------


class SoakRun:
    def __init__(
        self, spark: SparkSession, base: Settings, plan: SoakPlan, work: Path, *, say: Callable[[str], None]
    ) -> None:
        self.spark, self.plan, self.work, self.say = spark, plan, work, say
        work.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(plan.seed)
        self.vocab = vocabulary(self.rng, 300)
        self.patterns = [realistic_pattern(self.rng, self.vocab) for _ in range(plan.subscriptions)]
        self.base = base
        self.settings = self._settings(max_offsets=max(plan.calibration_messages // 10, 1000))
        self.events: list[tuple[float, str]] = []
        self.problems: list[str] = []
        self.samples: list[Sample] = []
        self.capacity = 0.0
        self.rate = 0.0
        self.checked: dict[int, int] = {}
        self._log_positions: dict[Path, int] = {}
        self.started_at = time.monotonic()
        self.steady_at = 0.0
        self.router = self._job("router")
        self.refresh = self._job("refresh job")
        self.producer = SteadyProducer(self.settings, message_keys(self.rng, self.vocab, self.patterns, KEY_POOL))
        self.churn = Churn(self.settings, plan, random.Random(self.rng.getrandbits(64)), self.vocab)
        self.subscription_counts: dict[str, str] = {}
        self.router_started = 0.0
        self._cpu_seen: dict[int, float] = {}
        self._cpu_at = time.monotonic()

    def _settings(self, *, max_offsets: int) -> Settings:
        settings = router_settings(
            self.base,
            self.work,
            [MESSAGES_TOPIC],
            trigger="processing_time",
            trigger_interval=f"{TRIGGER_S} seconds",
            max_offsets_per_trigger=max_offsets,
            metrics_path=str(self.work / "metrics"),
        )
        return settings.replace(subscriptions=dataclasses.replace(settings.subscriptions, events_topic=EVENTS_TOPIC))

    def _job(self, which: str) -> Job:
        flags = job_flags(self.settings)
        if which == "router":
            return Job(
                "router",
                "jobs.route",
                [*flags, "--topics", MESSAGES_TOPIC],
                self.work,
                progress_marker=BATCH_MARKER,
                ready_marker=b"router query started",
            )
        return Job(
            "refresh job",
            "jobs.refresh_subscriptions",
            ["--every", str(self.plan.refresh_every_s), "--json", *flags],
            self.work,
            progress_marker=b'{"applied": ',
        )

    def record(self, what: str) -> None:
        at = time.monotonic() - self.started_at
        self.events.append((at, what))
        self.say(f"{at:8.1f} s  {what}")

    # -- pieces -----------------------------------------------------------------------------------------------

    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(self.settings.kafka_client_config())
        topics = [
            NewTopic(MESSAGES_TOPIC, MESSAGE_PARTITIONS, 1, config={"retention.ms": str(TOPIC_RETENTION_MS)}),
            NewTopic(EVENTS_TOPIC, 1, 1),
        ]
        for future in admin.create_topics(topics).values():
            future.result(30)

    def reap(self) -> None:
        """A job that exited on its own is a problem; restart it."""
        for job in (self.router, self.refresh):
            if job.process is not None and not job.retired and job.exit_code() is not None:
                self.problems.append(f"the {job.name} exited {job.exit_code()} on its own: {job.last_error()}")
                self.record(f"{job.name} exited {job.exit_code()}; restarted")
                if job is self.router:
                    self.start_router()
                else:
                    job.start()

    def wait_until(self, condition: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.reap()
            if time.monotonic() > deadline:
                raise SoakFailure(f"gave up waiting for {what} after {timeout_s:g} s")
            time.sleep(0.5)

    def start_router(self) -> None:
        self.router_started = time.monotonic()
        self.router.start()

    def new_batch_lines(self) -> list[bytes]:
        """Router metrics lines logged since the last call, over every router process's log."""
        lines: list[bytes] = []
        for path in sorted(self.work.glob("router-*.log")):
            data = path.read_bytes()
            start = self._log_positions.get(path, 0)
            end = data.rfind(b"\n") + 1
            if end > start:
                lines += [line for line in data[start:end].splitlines() if BATCH_MARKER in line]
                self._log_positions[path] = end
        return lines

    def committed(self) -> dict[int, int]:
        return committed_offsets(Path(self.settings.router.checkpoint_path))

    def conserve(self) -> int:
        """Check the outputs over what the router committed since the last check; the messages checked."""
        high = self.committed()
        if not high:
            return 0
        problems = check_range(self.spark, self.settings, self.checked, high)
        for problem in problems:
            self.problems.append(problem)
            self.record(f"conservation: {problem}")
        checked = sum(end - self.checked.get(p, 0) for p, end in high.items())
        self.checked = high
        return checked

    def cores_since_last(self, cpu: dict[int, tuple[str, float]]) -> dict[str, float]:
        """Cores per kind since the previous call, from each live process's CPU seconds (``cpu``: pid -> (kind,
        seconds)); a process that ended meanwhile loses its last interval, one per kill."""
        now = time.monotonic()
        elapsed = max(now - self._cpu_at, 1e-9)
        used: dict[str, float] = {}
        for pid, (kind, seconds) in cpu.items():
            used[kind] = used.get(kind, 0.0) + (seconds - self._cpu_seen.get(pid, 0.0)) / elapsed
        self._cpu_seen = {pid: seconds for pid, (_, seconds) in cpu.items()}
        self._cpu_at = now
        return {kind: round(value, 2) for kind, value in used.items()}

    def cpu_now(self) -> dict[int, tuple[str, float]]:
        """pid -> (kind, CPU seconds so far) of every process of the run: the jobs' trees, the broker, the rest."""
        cpu: dict[int, tuple[str, float]] = {}
        for job, default in ((self.router, None), (self.refresh, KINDS[3])):
            for pid in process_tree(job.process.pid) if job.process is not None else []:
                try:
                    kind = default or process_kind((Path("/proc") / str(pid) / "cmdline").read_bytes())
                except FileNotFoundError:
                    continue
                if kind is not None:
                    cpu[pid] = (kind, cpu_seconds(pid))
        for pid in process_tree(os.getpid()):
            if pid not in cpu:  # the jobs are this process's children too
                try:
                    broker = b"kafka.Kafka" in (Path("/proc") / str(pid) / "cmdline").read_bytes()
                except FileNotFoundError:
                    continue
                cpu[pid] = (BROKER if broker else HARNESS, cpu_seconds(pid))
        return cpu

    def sample(self) -> Sample:
        rss = dict.fromkeys(KINDS, 0)
        files = 0
        router_process = self.router.process
        for pid in process_tree(router_process.pid) if router_process is not None else []:
            try:
                kind = process_kind((Path("/proc") / str(pid) / "cmdline").read_bytes())
            except FileNotFoundError:
                continue
            resident, fds = rss_and_files(pid)
            if kind is not None:
                rss[kind] += resident
            files += fds
        refresh_process = self.refresh.process
        for pid in process_tree(refresh_process.pid) if refresh_process is not None else []:
            rss[KINDS[3]] += rss_and_files(pid)[0]
        cores = self.cores_since_last(self.cpu_now())
        checkpoint = Path(self.settings.router.checkpoint_path)
        ledger_entries, ledger_bytes = tree_size(checkpoint / "router_ledger")
        _, checkpoint_bytes = tree_size(checkpoint)
        versions, snapshot_bytes = snapshot_versions(Path(self.settings.subscriptions.table_path) / "_snapshots")
        _, metrics_bytes = tree_size(self.work / "metrics")
        checked = self.conserve()
        lag = self.producer.sent - sum(self.committed().values())
        sample = Sample(
            at_s=time.monotonic() - self.steady_at,
            rss=rss,
            open_files=files,
            ledger_entries=ledger_entries,
            ledger_bytes=ledger_bytes,
            offsets_entries=log_entries(checkpoint / "offsets"),
            commits_entries=log_entries(checkpoint / "commits"),
            checkpoint_bytes=checkpoint_bytes - ledger_bytes,
            snapshot_versions=versions,
            snapshot_bytes=snapshot_bytes,
            metrics_bytes=metrics_bytes,
            lag=lag,
            batches_ms=batch_durations_ms(self.new_batch_lines()),
            checked_messages=checked,
            router_uptime_s=time.monotonic() - self.router_started,
            cores=cores,
        )
        self.say(
            f"  sample at {sample.at_s:6.0f} s: RSS "
            + ", ".join(f"{kind} {rss[kind] / 2**20:,.0f} MiB" for kind in KINDS)
            + f"; {files} open files; lag {lag:,}; {len(sample.batches_ms)} batches; {checked:,} messages checked"
            + "; cores "
            + ", ".join(f"{kind} {value:.2f}" for kind, value in sorted(cores.items()))
        )
        return sample

    # -- phases -----------------------------------------------------------------------------------------------

    def calibrate(self) -> None:
        """Drain a backlog; capacity = its messages over the summed batch times, the first batch left out."""
        self.producer.send(self.plan.calibration_messages)
        self.record(f"backlog of {self.plan.calibration_messages:,} messages produced; the router starts")
        self.start_router()
        backlog = self.producer.per_partition()
        self.wait_until(lambda: self.committed() == backlog, "the router to drain the backlog", timeout_s=1800)
        lines = self.new_batch_lines()
        metrics = [json.loads(line[line.find(b"{") :]) for line in lines]
        measured = [m for m in metrics[1:] if m.get("input_rows")]
        if not measured:
            raise SoakFailure("the backlog drained in one batch: raise --calibration-messages")
        rows = sum(m["input_rows"] for m in measured)
        seconds = sum(m["duration_ms"]["triggerExecution"] for m in measured) / 1000
        self.capacity = rows / seconds
        self.rate = self.plan.rate if self.plan.rate is not None else self.plan.capacity_share * self.capacity
        self.record(
            f"capacity {self.capacity:,.0f} msg/s ({rows:,} messages in {len(measured)} batches, {seconds:.1f} s); "
            f"offering {self.rate:,.0f} msg/s"
        )

    def restart_for_steady(self) -> None:
        """Restart the router (SIGTERM) with ``max_offsets_per_trigger`` at twice what arrives per trigger, so a
        trigger can take a kill's backlog, and start the traffic; the steady phase starts after two batches."""
        self.settings = self._settings(max_offsets=max(int(2 * self.rate * TRIGGER_S), 1000))
        self.stop_router()
        self.router.retired = False
        self.router.args = self._job("router").args
        self.start_router()
        self.wait_until(lambda: self.router.count(self.router.ready_marker) >= 1, "the restarted router's query")
        self.producer.start(self.rate)
        self.churn.start()
        self.wait_until(lambda: self.router.count(BATCH_MARKER) >= 2, "the restarted router's first batches")
        self.new_batch_lines()  # its warm-up: not the steady phase's
        self.cores_since_last(self.cpu_now())  # the steady phase's CPU counts from here
        self.record(
            f"router restarted with max_offsets_per_trigger {self.settings.router.max_offsets_per_trigger:,}; "
            "traffic and churn flowing"
        )

    def stop_router(self) -> None:
        """SIGTERM to the router's driver; it must exit 0 (after the batch in flight)."""
        code = self.router.terminate()
        self.record(f"router stopped: SIGTERM, exit {code}")
        if code != 0:
            self.problems.append(f"the router exited {code} on SIGTERM, not 0")

    def steady(self) -> None:
        plan = self.plan
        self.steady_at = time.monotonic()
        self.record(f"steady phase: {plan.minutes:g} minutes")
        next_sample = plan.interval_s
        next_kill = plan.kill_every_s
        end = plan.minutes * 60
        while (now := time.monotonic() - self.steady_at) < end:
            self.reap()
            if self.churn.failed:
                raise SoakFailure(f"producing subscription events failed: {self.churn.failed[0]!r}")
            if now >= next_kill:
                self.router.kill()
                self.record(f"router SIGKILL (run {self.router.runs}); restarted from its checkpoint")
                self.start_router()
                next_kill += plan.kill_every_s
            if now >= next_sample:
                self.samples.append(self.sample())
                next_sample += plan.interval_s
            time.sleep(0.5)
        self.samples.append(self.sample())

    def finish(self) -> None:
        self.producer.stop()
        self.churn.stop()
        self.record(f"production stopped: {self.producer.sent:,} messages, {len(self.churn.events):,} events")
        ends = self.producer.per_partition()
        self.wait_until(lambda: self.committed() == ends, "the router to catch up", timeout_s=1800)
        self.stop_router()
        checked = self.conserve()
        self.record(f"last conservation check: {checked:,} messages")
        broker_ends = self.broker_end_offsets()
        if broker_ends != ends:
            self.problems.append(f"the broker's end offsets {broker_ends} are not the producer's count {ends}")
        if self.checked != ends:
            self.problems.append(f"checks covered {self.checked}, not everything produced {ends}")
        self.wait_until(self.refresh_caught_up, "the refresh job to catch up", timeout_s=600)
        self.refresh.retired = True
        self.refresh.kill()
        try:
            self.subscription_counts = check_subscriptions(self.spark, self.settings, self.churn.events)
        except AssertionError as error:
            self.problems.append(f"subscriptions: {error}")

    def refresh_caught_up(self) -> bool:
        return committed_offsets(Path(self.settings.subscriptions.checkpoint_path)) == end_offsets(self.churn.events)

    def broker_end_offsets(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.settings.kafka_client_config(), "group.id": "soak-check"})
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(MESSAGES_TOPIC, p), timeout=30)[1]
                for p in range(MESSAGE_PARTITIONS)
            }
        finally:
            consumer.close()

    def run(self) -> SoakResult:
        from jobs import local_kafka
        from jobs.refresh_subscriptions import prepare_tables

        load_before = os.getloadavg()
        broker = local_kafka.start(self.settings)
        watchdog = local_kafka.stop_with_this_process(broker, self.settings)
        self.record(f"broker started: {self.settings.kafka.bootstrap_servers}")
        completed = False
        try:
            self.create_topics()
            prepare_tables(self.spark, self.settings)
            self.churn.initial(self.patterns)
            self.refresh.start()
            self.wait_until(self.refresh_caught_up, "the initial subscriptions", timeout_s=600)
            self.record(f"{self.plan.subscriptions:,} subscriptions applied")
            self.calibrate()
            self.restart_for_steady()
            self.steady()
            self.finish()
            completed = True
        except SoakFailure as error:
            self.problems.append(f"the run stopped: {error}")
        finally:
            for job in (self.router, self.refresh):
                job.kill_if_running()
            local_kafka.stop(self.settings)
            watchdog.close()
        return SoakResult(
            self.plan,
            self.samples,
            self.events,
            self.problems,
            verdicts(self.samples, self.plan, self.settings, self.problems) if completed else [],
            self.capacity,
            self.rate,
            self.producer.sent if completed else 0,
            self.subscription_counts,
            (load_before, os.getloadavg()),
        )


@dataclasses.dataclass
class SoakResult:
    plan: SoakPlan
    samples: list[Sample]
    events: list[tuple[float, str]]
    problems: list[str]
    verdicts: list[Verdict]
    capacity: float
    rate: float
    messages: int
    subscription_counts: dict[str, str]
    load: tuple[tuple[float, float, float], tuple[float, float, float]]

    @property
    def passed(self) -> bool:
        return not self.problems and bool(self.verdicts) and all(v.passed is not False for v in self.verdicts)

    def markdown(self, record: RunRecord, chart: str) -> str:
        verdict = "**PASS**: every criterion held" if self.passed else "**FAIL**"
        rows = [
            [
                f"{s.at_s / 60:.1f}",
                *(f"{s.rss[kind] / 2**20:,.0f}" for kind in KINDS),
                str(s.open_files),
                f"{s.ledger_entries} / {s.ledger_bytes / 1024:,.0f}",
                f"{s.offsets_entries} / {s.commits_entries} / {s.checkpoint_bytes / 1024:,.0f}",
                f"{s.snapshot_versions} / {s.snapshot_bytes / 2**20:,.1f}",
                f"{s.metrics_bytes / 2**20:,.2f}",
                f"{s.lag:,}",
                str(len(s.batches_ms)),
                f"{p99(s.batches_ms) or 0:,.0f}",
                f"{s.checked_messages:,}",
            ]
            for s in self.samples
        ]
        header = [
            "min",
            *(f"{kind} MiB" for kind in KINDS),
            "router open files",
            "ledger entries / KiB",
            "offsets / commits / checkpoint KiB",
            "snapshot versions / MiB",
            "metrics MiB",
            "lag (msgs)",
            "batches",
            "batch p99 ms",
            "conserved msgs",
        ]
        plan = self.plan
        return "\n".join(
            [
                "# Soak",
                "",
                f"{record.line(self.load[1])} What runs and what is checked: the docstring of `bench/soak.py`.",
                "",
                "Method (a judgment call, as a deployment would run): the producer runs on the router's machine, "
                "as a client would beside a small broker, so it shares the 2 cores; the offered rate is "
                f"{plan.capacity_share:g} x the capacity the router showed draining a backlog in this run "
                f"({self.capacity:,.0f} msg/s, so {self.rate:,.0f} msg/s offered); {plan.subscriptions:,} "
                f"subscriptions and {plan.churn_events} events every {plan.churn_every_s:g} s; a router SIGKILL "
                f"from outside every {plan.kill_every_s / 60:g} minutes; a sample every {plan.interval_s:g} s.",
                "",
                f"Verdict: {verdict}.",
                *(f"- {problem}" for problem in self.problems),
                "",
                "## Criteria",
                "",
                markdown_table(
                    ["criterion", "figure", "held"],
                    [[v.name, v.figure, {True: "yes", False: "**no**", None: "-"}[v.passed]] for v in self.verdicts],
                ),
                "",
                "## Counts",
                "",
                markdown_table(
                    ["what", "count"],
                    [
                        ["messages produced (acked, every one checked)", f"{self.messages:,}"],
                        *([k, v] for k, v in self.subscription_counts.items()),
                    ],
                ),
                "",
                "## Quarters",
                "",
                "Where the time and the cores went, quarter by quarter of the steady phase (cores: the mean of each "
                "sample's CPU seconds per second, per process kind).",
                "",
                self.quarters_table(),
                "",
                "## Samples",
                "",
                f"![soak]({chart})",
                "",
                markdown_table(header, rows),
                "",
                "## Events",
                "",
                markdown_table(["at (s)", "what"], [[f"{at:.0f}", what.replace("|", "/")] for at, what in self.events]),
                "",
            ]
        )

    def quarters_table(self) -> str:
        total = self.plan.minutes * 60
        kinds = sorted({kind for s in self.samples for kind in s.cores})
        rows = []
        for quarter in range(4):
            inside = [s for s in self.samples if quarter * total / 4 < s.at_s <= (quarter + 1) * total / 4]
            batches = sorted(ms for s in inside for ms in s.batches_ms)
            if not batches:
                continue

            def at(share: float, ordered: list[float] = batches) -> str:
                return f"{ordered[min(len(ordered) - 1, int(share * len(ordered)))]:,.0f}"

            mean_cores = [statistics.fmean(s.cores.get(kind, 0.0) for s in inside) for kind in kinds]
            rows.append(
                [
                    str(quarter + 1),
                    f"{len(batches):,}",
                    f"{at(0.5)} / {at(0.9)} / {p99(batches) or 0:,.0f}",
                    f"{statistics.fmean(s.lag for s in inside):,.0f}",
                    *(f"{value:.2f}" for value in mean_cores),
                ]
            )
        header = ["quarter", "batches", "batch ms p50 / p90 / p99", "mean lag (msgs)", *(f"{k} cores" for k in kinds)]
        return markdown_table(header, rows)

    def plot(self, path: Path) -> None:
        plt = pyplot()
        minutes = [s.at_s / 60 for s in self.samples]
        figure, axes = plt.subplots(2, 2, figsize=(12, 8))
        for kind in KINDS:
            axes[0][0].plot(minutes, [s.rss[kind] / 2**20 for s in self.samples], label=kind)
        axes[0][0].set_title("RSS (MiB)")
        axes[0][0].legend(fontsize=7)
        axes[0][1].plot(minutes, [s.ledger_entries for s in self.samples], label="ledger entries")
        axes[0][1].plot(minutes, [s.offsets_entries for s in self.samples], label="offset log entries")
        axes[0][1].plot(minutes, [s.snapshot_versions for s in self.samples], label="snapshot file versions")
        axes[0][1].plot(minutes, [s.open_files / 10 for s in self.samples], label="router open files / 10")
        axes[0][1].set_title("file sets")
        axes[0][1].legend(fontsize=7)
        axes[1][0].plot(minutes, [p99(s.batches_ms) or 0 for s in self.samples])
        axes[1][0].set_title("batch p99 per sample (ms)")
        axes[1][1].plot(minutes, [s.lag / 1e5 for s in self.samples], label="router lag (100k messages)")
        for kind in sorted({kind for s in self.samples for kind in s.cores}):
            axes[1][1].plot(minutes, [s.cores.get(kind, 0.0) for s in self.samples], label=f"{kind} (cores)")
        axes[1][1].set_title("lag, and cores per process kind")
        axes[1][1].legend(fontsize=7)
        for axis in axes.flat:
            axis.set_xlabel("minutes of the steady phase")
        figure.tight_layout()
        figure.savefig(path)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/soak.py",
        description="Run the router for an hour at a steady share of its capacity, with subscription churn and a "
        "SIGKILL every ten minutes; sample memory, files and batch times, check conservation every interval, and "
        "write bench/results/soak.md. Exit 0 when every criterion held, 1 when one failed.",
    )

    def positive(text: str) -> float:
        value = float(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    parser.add_argument("--seed", type=int, default=58, help="the workload (default 58)")
    parser.add_argument("--minutes", type=positive, default=60.0, help="the steady phase (default 60)")
    parser.add_argument("--interval", type=positive, default=60.0, help="seconds between samples (default 60)")
    parser.add_argument("--kill-every", type=positive, default=600.0, help="seconds between router kills (default 600)")
    parser.add_argument("--subscriptions", type=int, default=10_000, help="initial subscriptions (default 10,000)")
    parser.add_argument("--churn-every", type=positive, default=3.0, help="seconds between churn rounds (default 3)")
    parser.add_argument(
        "--calibration-messages", type=int, default=2_000_000, help="the backlog capacity is measured on (default 2M)"
    )
    parser.add_argument("--capacity-share", type=positive, default=0.5, help="share of capacity offered (default 0.5)")
    parser.add_argument("--rate", type=positive, help="messages per second offered (default: the share of capacity)")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help=f"the results file (default {RESULTS_PATH})")
    parser.add_argument(
        "--work", type=Path, default=WORK_DIR, help=f"the run's state, wiped first (default {WORK_DIR})"
    )
    parser.add_argument("--keep", action="store_true", help="keep --work after a passing run too")
    args = parser.parse_args(argv)
    if args.calibration_messages < 10_000:
        parser.error("--calibration-messages must be at least 10,000")
    if args.subscriptions < 1:
        parser.error("--subscriptions must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    record = RunRecord.start(__file__, argv)
    from conftest import make_test_settings

    from jobs.cluster import free_ports
    from routing.spark import get_spark

    plan = SoakPlan(
        seed=args.seed,
        minutes=args.minutes,
        interval_s=args.interval,
        kill_every_s=args.kill_every,
        subscriptions=args.subscriptions,
        churn_every_s=args.churn_every,
        calibration_messages=args.calibration_messages,
        capacity_share=args.capacity_share,
        rate=args.rate,
    )
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    client_port, controller_port = free_ports(2)
    base = make_test_settings(args.work / "var", client_port=client_port, controller_port=controller_port)
    # The checker's session reads the outputs between samples: one core, so the router keeps the other.
    spark = get_spark(base, app_name="soak-check", master="local[1]")
    try:
        result = SoakRun(
            spark, base, plan, args.work / "run", say=lambda line: print(line, file=sys.stderr, flush=True)
        ).run()
    finally:
        spark.stop()
    chart = args.output.with_suffix(".png")
    report = result.markdown(record, chart.name)
    write_report(report, args.output)
    if result.samples:
        result.plot(chart)
    if result.passed:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
        return 0
    print(f"soak: FAIL; the logs are kept in {args.work}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

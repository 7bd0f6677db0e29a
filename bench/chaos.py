"""Does any message get lost or delivered twice when the router, the refresh job and the broker are SIGKILLed
at random while messages and subscription changes keep arriving?

Every message is checked against an independent oracle. Processes die this way in a deployment (an OOM kill,
a lost node, a broker restart); the run makes it happen dozens of times in one sitting.

Run ``python bench/chaos.py`` (``make chaos``; ``--help`` for flags). It is not a timing benchmark: it
prints its verdict and writes ``bench/results/chaos.md`` (the seed, the counts, every fault injected and
when, what each job did about it, the verdict); exit status 0 when every check passed, 1 when one failed
(the work directory is then kept for the logs), 2 for bad flags. ``tests/integration/test_chaos.py`` runs
the same harness with a few kills in ``make test``.

What runs, all real and on this machine (a run uses its own broker, topics, tables and checkpoints under
``--work``, so the default broker and other users are left alone):

* a Kafka broker of the run's own (:mod:`jobs.local_kafka` on free ports);
* the router, ``python -m jobs.route`` with a processing-time trigger, as its own process group (a kill
  reaches its JVM and Python workers too), restarted from its checkpoint after every kill;
* the refresh job, ``python -m jobs.refresh_subscriptions --every 2`` (a run every two seconds over
  the subscription events topic, each from its checkpoint), likewise;
* a producer thread: every round a few subscription events (subscribes and unsubscribes over a small pool
  of patterns, a malformed event now and then) and then a batch of messages (keys over a small vocabulary,
  a null key and an over-long key now and then: dead letters). So the subscription table the router pins
  keeps changing under it.

Faults come in a seeded random order, each a seeded random time after the router's query has started (the
first only once a batch has committed, so restarts resume from real progress):

* **router SIGKILL**, then a restart from its checkpoint. Most (:attr:`ChaosPlan.aimed_share`) are aimed
  inside a batch: the router is started with the test-only crash hook armed at a point of a batch one or
  two past what its checkpoint has planned (:data:`AIMED_POINTS`: after its ledger entry, after its
  deliveries, after all its writes; never while the JVM starts), and SIGKILLs its own process group there.
  The rest come from outside at the fault's random moment. The report counts where each landed;
* **refresh job SIGKILL**, then a restart;
* **broker SIGKILL** (:func:`jobs.local_kafka.kill`), a random downtime, a restart on the same data
  directory and ports; then the run waits until each job either rides through (completes a batch, or a
  refresh run) or exits 1, which is recorded and answered with a restart. A job exiting any other way, a
  job exiting (or a refresh run failing) outside a broker fault, or a job that does neither within
  :data:`router_support.WAIT_TIMEOUT_S` fails the run.

At the end production stops, both jobs catch up on their own (their checkpoints reach the topics' end
offsets), the router is stopped with SIGTERM (it must exit 0; in ``make test`` a last router kill is
instead followed by an in-process drain, :attr:`ChaosPlan.drain_in_process`) and everything is checked,
with the oracle of ``tests/router_support.py``, independent of the router:

* every acked message is in exactly one output (in = delivered + unmatched + dead-lettered), none is
  routed that was never produced, no delivery or dead-letter id twice, each id the hash of its coordinates;
* the ledger holds each batch id once, and every routed row carries its batch's recorded version;
* each message's outcome (its subscribers, or its dead-letter reason, or unmatched) is what the regex
  oracle gives for its key over the subscription table *at the version its batch recorded* (read back by
  Delta time travel), so a batch replayed after a kill must have routed with its old version;
* the subscription table and its rejects equal the plain-Python model
  (:func:`routing.subscriptions.model.apply_events_model`) fed every acked event: nothing lost or applied
  twice however the refresh job was killed. (Event timestamps only grow and no limit is approached, so the
  table's final state does not depend on how the job cut its batches.)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script from a checkout: make `routing`, `jobs` and tests/'s oracle importable
    _ROOT = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]

from harness import RunRecord
from router_support import (
    DELIVERED,
    UNROUTED,
    WAIT_TIMEOUT_S,
    Record,
    active_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    job_flags,
    kill_group,
    ledger_versions,
    produce,
    read_routed,
    router_settings,
    run_available_now,
    start_job,
    subscription_event,
)

from routing.settings import REPO_ROOT, Settings
from routing.streaming import AFTER_DELIVERIES, AFTER_LEDGER, AFTER_WRITES, CRASH_AFTER_WRITES_ENV

if TYPE_CHECKING:
    import subprocess

    from pyspark.sql import SparkSession

RESULTS_PATH = Path(__file__).resolve().parent / "results" / "chaos.md"
WORK_DIR = REPO_ROOT / "var" / "bench" / "chaos"

MESSAGES_TOPIC = "chaos-messages"
EVENTS_TOPIC = "chaos-subscription-events"
MESSAGE_PARTITIONS = 2

#: In a router's metrics line of a batch whose id was in the ledger already (Spark re-executed it after a kill).
REPLAYED = b'"replayed_version": true'
ROUTER_KILL = "router SIGKILL"
REFRESH_KILL = "refresh job SIGKILL"
BROKER_KILL = "broker SIGKILL"
#: Where an aimed router kill lands, in a batch's order: its ledger entry recorded and nothing written; its
#: deliveries written and its dead letters not; every write done and its checkpoint commit not.
AIMED_POINTS = (AFTER_LEDGER, AFTER_DELIVERIES, AFTER_WRITES)
#: The exit status of a process SIGKILLed (the router's crash hook kills its own process group).
KILLED = -signal.SIGKILL

#: The table the run starts from, then (pattern, subscriber) pairs the events subscribe and unsubscribe.
INITIAL_SUBSCRIPTIONS = [
    ("stock.*.msft", "msft-desk"),
    ("stock.#", "equities"),
    ("#.ibm", "ibm-watch"),
    ("forex.#", "fx"),
    ("#", "audit"),
    ("*.*.*", "three-words"),
]
SUBSCRIPTION_POOL = [
    *INITIAL_SUBSCRIPTIONS,
    ("stock.nyse.*", "nyse-desk"),
    ("*.eur", "eur-watch"),
    ("forex.*.#", "fx-pairs"),
    ("#.msft.#", "msft-anywhere"),
    ("nasdaq", "one-word"),
    ("*", "one-word"),
    ("#.", "empty-last-word"),
]
KEY_WORDS = ["stock", "forex", "nasdaq", "nyse", "msft", "ibm", "eur", ""]


def message_keys(rng: random.Random, first_index: int, count: int) -> list[bytes | None]:
    """Keys of 1 to 4 words over :data:`KEY_WORDS` (empty words included); a null key every 97th message and
    an over-long one every 89th, so dead letters of two reasons arrive all along."""
    keys: list[bytes | None] = []
    for index in range(first_index, first_index + count):
        if index % 97 == 0:
            keys.append(None)
        elif index % 89 == 0:
            keys.append(b"stock." + b"x" * 300)
        else:
            keys.append(".".join(rng.choice(KEY_WORDS) for _ in range(rng.randrange(1, 5))).encode())
    return keys


@dataclasses.dataclass(frozen=True)
class ChaosPlan:
    """What one run does: how many faults of each kind, and the traffic around them."""

    seed: int
    router_kills: int = 20
    broker_kills: int = 3
    refresh_kills: int = 3
    #: Messages, and subscription events, produced each round (a round every ``round_interval_s``).
    messages_per_round: int = 50
    events_per_round: int = 2
    round_interval_s: float = 1.0
    #: The router's ``max_offsets_per_trigger``: batches of a few rounds, so a kill has many moments to land on
    #: and a restarted router catches up in a few batches.
    max_offsets_per_trigger: int = 1000
    #: Seconds between the refresh job's runs (``--every``).
    refresh_every_s: int = 2
    #: A fault comes this many seconds (uniform) after the router's query started (or the previous fault).
    fault_delay_s: tuple[float, float] = (0.0, 6.0)
    #: Seconds (uniform) the broker stays down before its restart.
    broker_downtime_s: tuple[float, float] = (1.0, 8.0)
    #: Share of the router kills aimed inside a batch: the router is started with the crash hook
    #: (``routing.streaming.CRASH_AFTER_WRITES_ENV``) armed at one of :data:`AIMED_POINTS` of a batch a few
    #: batches ahead, and SIGKILLs itself there. The rest come from outside at a random moment.
    aimed_share: float = 0.75
    #: The router's last stretch. False: restarted after every kill, it catches up by itself and stops on SIGTERM.
    #: True (``make test``): the last fault is a router kill not followed by a restart, and what is left is drained
    #: in this process on the caller's session (``router_support.run_available_now``), which spares a JVM start.
    drain_in_process: bool = False

    def fault_order(self, rng: random.Random) -> list[str]:
        """The faults in a seeded random order; with :attr:`drain_in_process`, a router kill comes last (the one
        drained in process), so that no router restart is spent on a stretch the drain covers anyway."""
        faults = [ROUTER_KILL] * self.router_kills + [BROKER_KILL] * self.broker_kills
        faults += [REFRESH_KILL] * self.refresh_kills
        rng.shuffle(faults)
        if self.drain_in_process and ROUTER_KILL in faults:
            faults.remove(ROUTER_KILL)
            faults.append(ROUTER_KILL)
        return faults


@dataclasses.dataclass(frozen=True)
class Event:
    """One line of the run's record: a fault injected, or what a job did about one."""

    at_s: float
    what: str
    detail: str


class ChaosFailure(Exception):
    """The run could not go on (a job exited with an unexpected status, or hung); the message says why."""


def next_batch_id(checkpoint: str) -> int:
    """The id after the last batch a streaming checkpoint has planned (its ``offsets/`` entries); 0 if none."""
    offsets = Path(checkpoint) / "offsets"
    planned = [int(entry.name) for entry in offsets.iterdir() if entry.name.isdigit()] if offsets.is_dir() else []
    return max(planned, default=-1) + 1


@dataclasses.dataclass
class Job:
    """One of the two jobs as a child process group, restarted as often as the run needs; one log per run."""

    name: str
    module: str
    args: list[str]
    work: Path
    #: In the log once per batch (router) or per successful run (refresh job).
    progress_marker: bytes
    #: In the log once the job's query runs (the router's; faults wait for it).
    ready_marker: bytes | None = None
    #: In the log when a run failed but the job went on (the refresh job's ``--every`` loop).
    failure_marker: bytes | None = None
    runs: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = Path()
    #: Killed for good (not restarted): its exit is no news.
    retired: bool = False

    def start(self, env: dict[str, str] | None = None) -> None:
        self.runs += 1
        self.log_path = self.work / f"{self.name.replace(' ', '-')}-{self.runs}.log"
        with self.log_path.open("wb") as log:
            self.process = start_job(self.module, self.args, log, env=env)

    def kill(self) -> None:
        assert self.process is not None
        kill_group(self.process)

    def kill_if_running(self) -> None:
        if self.process is not None and self.exit_code() is None:
            self.kill()

    def terminate(self) -> int:
        """SIGTERM to the job's driver only (a router then stops its query after the batch in flight); waits for
        it to exit, retires it, and returns its exit status."""
        assert self.process is not None
        self.retired = True
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=WAIT_TIMEOUT_S)

    def exit_code(self) -> int | None:
        assert self.process is not None
        return self.process.poll()

    def count(self, marker: bytes | None) -> int:
        """Occurrences of ``marker`` in the current process's log."""
        return 0 if marker is None else self.log_path.read_bytes().count(marker)

    def logged(self, marker: bytes) -> int:
        """Occurrences of ``marker`` in the logs of every process of this job so far."""
        return sum(path.read_bytes().count(marker) for path in self.work.glob(f"{self.name.replace(' ', '-')}-*.log"))

    def last_error(self) -> str:
        """The log's last line naming an error (or its last line), for the record."""
        lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if "rror" in line or "xception" in line]
        return (errors or lines or ["(no output)"])[-1][:300]


class Traffic:
    """The producer thread: rounds of subscription events, then messages, until :meth:`stop`; the acked records."""

    def __init__(self, settings: Settings, plan: ChaosPlan, rng: random.Random) -> None:
        self.settings = settings
        self.plan = plan
        self.rng = rng
        self.messages: list[Record] = []
        self.events: list[Record] = []
        self.failed: list[BaseException] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-traffic", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish the round in flight and stop (an acked round is complete: produce flushes it)."""
        self._stopping.set()
        if self._thread.ident is None:
            return  # never started
        self._thread.join(timeout=WAIT_TIMEOUT_S)
        if self._thread.is_alive():
            raise ChaosFailure(f"the producer did not finish its round within {WAIT_TIMEOUT_S:g} s")
        if self.failed:
            raise ChaosFailure(f"producing failed: {self.failed[0]!r}")

    def _events(self) -> list[bytes]:
        events = []
        for _ in range(self.plan.events_per_round):
            if self.rng.random() < 0.05:
                events.append(b'{"op": "subscribe", "subscriber": "broken"')  # a reject: malformed_json
                continue
            pattern, subscriber = self.rng.choice(SUBSCRIPTION_POOL)
            op = "subscribe" if self.rng.random() < 0.6 else "unsubscribe"
            events.append(subscription_event(op, pattern, subscriber))
        return events

    def _run(self) -> None:
        try:
            events = [
                subscription_event("subscribe", pattern, subscriber) for pattern, subscriber in INITIAL_SUBSCRIPTIONS
            ]
            while True:
                self.events += produce(self.settings, EVENTS_TOPIC, [(None, event, []) for event in events])
                keys = message_keys(self.rng, len(self.messages), self.plan.messages_per_round)
                chunk: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
                    (key, f"payload {len(self.messages) + index}".encode(), []) for index, key in enumerate(keys)
                ]
                self.messages += produce(self.settings, MESSAGES_TOPIC, chunk, partitions=MESSAGE_PARTITIONS)
                if self._stopping.wait(self.plan.round_interval_s):
                    return
                events = self._events()
        except BaseException as error:  # reported by stop()
            self.failed.append(error)


def end_offsets(records: Sequence[Record]) -> dict[int, int]:
    """Per partition, the offset after the last acked record."""
    ends: dict[int, int] = {}
    for record in records:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return ends


def committed_offsets(checkpoint: Path) -> dict[int, int]:
    """Per partition, the end offset of the last batch a query committed, from its checkpoint's ``commits/``
    and ``offsets/`` logs (one Kafka source: the offsets file's last line); {} before its first commit."""
    commits = [int(path.name) for path in (checkpoint / "commits").glob("[0-9]*") if path.name.isdigit()]
    if not commits:
        return {}
    source = json.loads((checkpoint / "offsets" / str(max(commits))).read_text().splitlines()[-1])
    (offsets,) = source.values()
    return {int(partition): int(offset) for partition, offset in offsets.items()}


@dataclasses.dataclass
class ChaosResult:
    plan: ChaosPlan
    events: list[Event]
    counts: dict[str, str]
    problems: list[str]
    seconds: float
    load: tuple[tuple[float, float, float], tuple[float, float, float]]
    #: The subscription table versions the router's batches routed with (more than one: it changed under them).
    routed_versions: list[int]

    @property
    def passed(self) -> bool:
        return not self.problems

    def injected(self, what: str) -> int:
        return sum(event.what == what for event in self.events)

    def router_kills_inside(self, point: str = "") -> int:
        """Router kills that landed inside a batch (at ``point``, or at any)."""
        inside = [
            event.detail for event in self.events if event.what == ROUTER_KILL and "aimed: inside" in event.detail
        ]
        return sum(detail.endswith(f"at {point}; restarted") for detail in inside) if point else len(inside)

    def markdown(self, command: str) -> str:
        verdict = "**PASS**: every check held" if self.passed else "**FAIL**"
        (before, after) = self.load
        started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=self.seconds)
        lines = [
            "# Chaos run",
            "",
            f"{RunRecord(command, started, before).line(after)} {self.seconds:.0f} s (not a timing benchmark: others "
            "may share the machine). What runs and what is checked: the docstring of `bench/chaos.py`.",
            "",
            f"Seed **{self.plan.seed}** (`--seed {self.plan.seed}` repeats the fault order, the random moments and "
            "the traffic; the machine's timing does not repeat).",
            "",
            f"Verdict: {verdict}.",
            *(f"- {problem}" for problem in self.problems),
            "",
            "## Counts",
            "",
            "| what | count |",
            "|---|---|",
            *(f"| {name} | {value} |" for name, value in self.counts.items()),
            f"| router kills: aimed inside a batch / from outside | {self.router_kills_inside()} / "
            f"{self.injected(ROUTER_KILL) - self.router_kills_inside()} |",
            *(
                f"| router kills inside a batch at {point} | {self.router_kills_inside(point)} |"
                for point in AIMED_POINTS
            ),
            "",
            "## Faults and what the jobs did",
            "",
            "Seconds since the run started.",
            "",
            "| at (s) | what | detail |",
            "|---:|---|---|",
            *(f"| {event.at_s:.1f} | {event.what} | {event.detail.replace('|', '/')} |" for event in self.events),
            "",
        ]
        return "\n".join(lines)


class ChaosRun:
    """One run (:meth:`run`): the broker, the two jobs, the traffic and the faults, then the checks."""

    def __init__(
        self, spark: SparkSession, base: Settings, plan: ChaosPlan, work: Path, *, say: Callable[[str], None]
    ) -> None:
        self.spark = spark
        self.plan = plan
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.say = say
        self.rng = random.Random(plan.seed)
        settings = router_settings(
            base,
            work,
            [MESSAGES_TOPIC],
            trigger="processing_time",
            trigger_interval="1 second",
            max_offsets_per_trigger=plan.max_offsets_per_trigger,
            refresh_interval_s=1.0,
            # The checks hold every routed record to the ledger entry of its batch: keep them all.
            retain_batches=0,
        )
        self.settings = settings.replace(
            subscriptions=dataclasses.replace(settings.subscriptions, events_topic=EVENTS_TOPIC)
        )
        flags = job_flags(self.settings)
        self.router = Job(
            "router",
            "jobs.route",
            [*flags, "--topics", MESSAGES_TOPIC],
            work,
            progress_marker=b'"event": "router_batch"',
            ready_marker=b"router query started",
        )
        self.refresh = Job(
            "refresh job",
            "jobs.refresh_subscriptions",
            ["--every", str(plan.refresh_every_s), "--json", *flags],
            work,
            progress_marker=b'{"applied": ',
            failure_marker=b"refresh failed; the next run resumes",
        )
        self.traffic = Traffic(self.settings, plan, random.Random(self.rng.getrandbits(64)))
        self.faults = plan.fault_order(self.rng)
        #: Per router kill, in order: the point it is aimed at, or None (from outside, at a random moment).
        self.aims: list[str | None] = [
            self.rng.choice(AIMED_POINTS) if self.rng.random() < plan.aimed_share else None
            for _ in range(plan.router_kills)
        ]
        if plan.drain_in_process and self.aims:
            self.aims[-1] = None  # the kill before the drain comes last of all: from outside, at its turn
        #: The aimed kill the running router is armed with: (batch id, point), or None.
        self.armed: tuple[int, str] | None = None
        #: Router kills recorded so far (an aimed one may land while an earlier fault is handled).
        self.router_kills_done = 0
        self.events: list[Event] = []
        self.problems: list[str] = []
        self.broker_starts = 0
        self.routed_versions: list[int] = []
        self.started_at = time.monotonic()
        self._watchdog: Any = None
        #: True from a broker kill until both jobs have come through it.
        self._broker_fault = False

    # -- the record -----------------------------------------------------------------------------------------

    def record(self, what: str, detail: str) -> None:
        event = Event(time.monotonic() - self.started_at, what, detail)
        self.events.append(event)
        self.say(f"{event.at_s:7.1f} s  {what}: {detail}")

    # -- the broker -----------------------------------------------------------------------------------------

    def start_broker(self) -> None:
        from jobs import local_kafka

        if self._watchdog is not None:
            self._watchdog.close()  # it watched the killed JVM
        broker = local_kafka.start(self.settings)
        self._watchdog = local_kafka.stop_with_this_process(broker, self.settings)
        self.broker_starts += 1

    def stop_broker(self) -> None:
        from jobs import local_kafka

        local_kafka.stop(self.settings)
        if self._watchdog is not None:
            self._watchdog.close()

    # -- the jobs -------------------------------------------------------------------------------------------

    def reap(self, job: Job) -> bool:
        """If ``job`` exited on its own: record it, restart it if it exited 1 (else fail); whether it had."""
        code = None if job.retired else job.exit_code()
        if code is None:
            return False
        if job is self.router and code == KILLED and self.armed is not None:
            self.landed()
            return True
        detail = f"run {job.runs}: {job.last_error()}"
        self.record(f"{job.name} exited {code}", detail + ("" if code != 1 else "; restarted"))
        if code != 1:
            raise ChaosFailure(f"the {job.name} exited {code} (only 1, a failed query, may end a job): {detail}")
        if not self._broker_fault:
            self.problems.append(f"the {job.name} exited 1 outside any broker fault ({detail})")
        if job is self.router:
            self.start_router()
        else:
            job.start()
        return True

    def start_router(self) -> None:
        """(Re)start the router, armed with the crash hook if the next router kill is aimed (:attr:`aims`): at its
        point of a batch one or two batches past the ones its checkpoint has planned, so that the kill comes
        after the run's first batch, never while the JVM starts."""
        self.armed, env = None, None
        if self.aims and self.aims[0] is not None:
            batch_id = next_batch_id(self.settings.router.checkpoint_path) + self.rng.randint(1, 2)
            self.armed = (batch_id, self.aims[0])
            env = {CRASH_AFTER_WRITES_ENV: f"{batch_id}:{self.aims[0]}"}
        self.router.start(env)

    def landed(self) -> None:
        """The armed router killed itself at its aim: record where, then restart it (unless it was the last fault
        and the rest is drained in process)."""
        assert self.armed is not None
        batch_id, point = self.armed
        self.aims.pop(0)
        self.router_kills_done += 1
        self.record(ROUTER_KILL, f"run {self.router.runs}, aimed: inside batch {batch_id}, at {point}; restarted")
        self.start_router()

    def wait_until(
        self, condition: Callable[[], bool], what: str, *, progress: Callable[[], object] | None = None
    ) -> None:
        """Poll ``condition`` while reaping both jobs. A hang guard, not a timing check: it gives up after
        :data:`WAIT_TIMEOUT_S` without ``condition``, or without a change of ``progress()`` if given."""
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        seen = progress() if progress is not None else None
        while not condition():
            self.reap(self.router)
            self.reap(self.refresh)
            if self.traffic.failed:
                raise ChaosFailure(f"producing failed: {self.traffic.failed[0]!r}")
            if progress is not None and (now := progress()) != seen:
                seen, deadline = now, time.monotonic() + WAIT_TIMEOUT_S
            if time.monotonic() > deadline:
                raise ChaosFailure(f"gave up waiting for {what}: nothing changed for {WAIT_TIMEOUT_S:g} s")
            time.sleep(0.2)

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` while reaping both jobs."""
        until = time.monotonic() + seconds
        self.wait_until(lambda: time.monotonic() >= until, "a pause")

    # -- the faults -----------------------------------------------------------------------------------------

    def kill_router(self, *, restart: bool = True) -> None:
        """A router kill: wait for an aimed one to land (:meth:`landed`, through :meth:`reap`; it may have
        already), or SIGKILL the router from outside now."""
        if self.aims and self.aims[0] is not None:
            done = self.router_kills_done
            self.wait_until(lambda: self.router_kills_done > done, "the router to reach its aimed kill")
            return
        if self.aims:
            self.aims.pop(0)
        self.router_kills_done += 1
        batches = self.router.count(self.router.progress_marker)
        self.router.kill()
        then = "restarted" if restart else "not restarted: the rest is drained in process"
        self.record(ROUTER_KILL, f"run {self.router.runs}, from outside, after {batches} batch(es) of that run; {then}")
        if restart:
            self.start_router()
        else:
            self.router.retired = True

    def kill_refresh(self) -> None:
        runs = self.refresh.count(self.refresh.progress_marker)
        self.refresh.kill()
        self.record(REFRESH_KILL, f"process {self.refresh.runs}, after {runs} completed run(s) of it; restarted")
        self.refresh.start()

    def kill_broker(self) -> None:
        from jobs import local_kafka

        self._broker_fault = True
        processes = {job.name: job.runs for job in (self.router, self.refresh)}
        pid = local_kafka.kill(self.settings)
        downtime = self.rng.uniform(*self.plan.broker_downtime_s)
        self.record(BROKER_KILL, f"pid {pid}; restart in {downtime:.1f} s on the same data directory and ports")
        self.pause(downtime)
        self.start_broker()
        self.record("broker restarted", f"start {self.broker_starts}")
        self.through_broker_fault(processes)
        self._broker_fault = False

    def through_broker_fault(self, processes: dict[str, int]) -> None:
        """Wait until each job rides through the restarted broker (a batch, a refresh run) or has exited 1 since the
        kill (``processes``: each job's process count then; :meth:`reap` records the exit and restarts it)."""
        restarted = time.monotonic()
        pending = {job.name: job for job in (self.router, self.refresh)}
        marks = {name: (job.count(job.progress_marker), job.count(job.failure_marker)) for name, job in pending.items()}

        def came_through() -> bool:
            for name, job in list(pending.items()):
                progress, failures = marks[name]
                if job.runs != processes[name]:
                    del pending[name]
                elif job.count(job.progress_marker) > progress:
                    seconds = time.monotonic() - restarted
                    failed = job.count(job.failure_marker) - failures
                    how = f"{failed} run(s) failed and the loop went on, then " if failed else ""
                    self.record(f"{job.name} rode through", f"{how}progress {seconds:.1f} s after the broker restart")
                    del pending[name]
            return not pending

        self.wait_until(came_through, "both jobs to ride through the broker restart or exit")

    # -- the run --------------------------------------------------------------------------------------------

    def run(self) -> ChaosResult:
        from jobs.demo import create_topics
        from jobs.refresh_subscriptions import prepare_tables

        load_before = os.getloadavg()
        self.started_at = time.monotonic()
        self.start_broker()
        self.record(
            "broker started", f"{self.settings.kafka.bootstrap_servers}, data in {self.settings.kafka.data_dir}"
        )
        completed = False
        try:
            create_topics(self.settings, [MESSAGES_TOPIC], MESSAGE_PARTITIONS)
            create_topics(self.settings, [EVENTS_TOPIC], 1)
            # The tables exist before either job starts, so the two never race to create them.
            prepare_tables(self.spark, self.settings)
            self.traffic.start()
            self.refresh.start()
            self.start_router()
            self.inject_faults()
            self.finish()
            completed = True
        except ChaosFailure as error:
            self.problems.append(f"the run stopped: {error}")
        finally:
            for job in (self.router, self.refresh):
                job.kill_if_running()
            with contextlib.suppress(ChaosFailure):
                self.traffic.stop()
            self.stop_broker()
        # An aborted run's outputs are partial by construction: the problem above is the verdict.
        counts = self.check() if completed else {}
        return ChaosResult(
            self.plan,
            self.events,
            counts,
            self.problems,
            time.monotonic() - self.started_at,
            (load_before, os.getloadavg()),
            self.routed_versions,
        )

    def inject_faults(self) -> None:
        router = self.router
        self.wait_until(lambda: router.count(router.progress_marker) >= 1, "the router's first batch")
        faults = self.faults
        router_faults = 0
        for index, fault in enumerate(faults):
            if fault == ROUTER_KILL:
                router_faults += 1
                if self.router_kills_done >= router_faults:
                    continue  # this aimed kill landed while an earlier fault was handled
            self.wait_until(lambda: router.count(router.ready_marker) >= 1, "the router's query to start")
            self.pause(self.rng.uniform(*self.plan.fault_delay_s))
            if fault == ROUTER_KILL:
                self.kill_router(restart=not (self.plan.drain_in_process and index == len(faults) - 1))
            else:
                {REFRESH_KILL: self.kill_refresh, BROKER_KILL: self.kill_broker}[fault]()

    def finish(self) -> None:
        """Stop producing; let both jobs catch up by themselves (or drain the router's rest in process, see
        :attr:`ChaosPlan.drain_in_process`); stop the router with SIGTERM (exit 0)."""
        self.traffic.stop()
        self.record("production stopped", f"{len(self.traffic.messages)} messages, {len(self.traffic.events)} events")
        catching_up = [(self.refresh, self.settings.subscriptions.checkpoint_path, self.traffic.events)]
        if self.plan.drain_in_process:
            if not self.router.retired:
                self.stop_router()
        else:
            catching_up.insert(0, (self.router, self.settings.router.checkpoint_path, self.traffic.messages))
        for job, checkpoint, records in catching_up:
            ends = end_offsets(records)

            def committed(checkpoint: Path = Path(checkpoint)) -> dict[int, int]:
                return committed_offsets(checkpoint)

            def caught_up(committed: Callable[[], dict[int, int]] = committed, ends: dict[int, int] = ends) -> bool:
                return committed() == ends

            self.wait_until(caught_up, f"the {job.name} to catch up", progress=committed)
            self.record(f"{job.name} caught up", f"its checkpoint is at the topic's end {ends}")
        if self.plan.drain_in_process:
            drained = run_available_now(self.spark, self.settings)
            self.record("router drained in process", f"{len(drained.reports)} batch(es), available-now")
        else:
            self.stop_router()

    def stop_router(self) -> None:
        """SIGTERM to the router's driver (only: it stops the query after the batch in flight); it must exit 0."""
        code = self.router.terminate()
        self.record("router stopped", f"SIGTERM: exit {code}")
        if code != 0:
            self.problems.append(f"the router exited {code} on SIGTERM, not 0 ({self.router.last_error()})")

    # -- the checks -----------------------------------------------------------------------------------------

    def check(self) -> dict[str, str]:
        """Every check of the module docstring; failures go to ``problems``; the counts for the record."""
        counts: dict[str, str] = {}
        if not self.traffic.messages:
            self.problems.append("nothing was produced")
            return counts
        try:
            counts.update(self.check_routing())
        except AssertionError as error:
            self.problems.append(f"routing: {error}")
        try:
            counts.update(check_subscriptions(self.spark, self.settings, self.traffic.events))
        except AssertionError as error:
            self.problems.append(f"subscriptions: {error}")
        counts["router processes / refresh processes / broker starts"] = (
            f"{self.router.runs} / {self.refresh.runs} / {self.broker_starts}"
        )
        return counts

    def check_routing(self) -> dict[str, str]:
        settings, produced = self.settings, self.traffic.messages
        routed = read_routed(self.spark, settings)
        assert_ids_exact(routed)
        ledger = ledger_versions(self.spark, settings)
        batch_ids = [batch for batch, _ in ledger]
        assert len(batch_ids) == len(set(batch_ids)), "a batch id twice in the ledger"
        recorded = dict(ledger)
        pinned = routed.versions()  # (partition, offset) -> (batch id, version); asserts one batch per record
        outcomes = routed.outcomes()  # asserts one table per record
        by_coordinates = {record.coordinates: record for record in produced}
        lost = sorted(by_coordinates.keys() - outcomes.keys())
        phantom = sorted(outcomes.keys() - by_coordinates.keys())
        assert not lost, f"{len(lost)} message(s) lost, e.g. {lost[:5]}"
        assert not phantom, f"{len(phantom)} routed record(s) never produced, e.g. {phantom[:5]}"
        unpinned = sorted(c for c, (batch, version) in pinned.items() if recorded.get(batch) != version)
        assert not unpinned, (
            f"{len(unpinned)} record(s) routed with a version their batch did not record: {unpinned[:5]}"
        )
        versions = self.routed_versions = sorted({version for _, version in pinned.values()})
        expected: dict[tuple[int, int], Any] = {}
        validator = settings.validator()
        for version in versions:
            records = [by_coordinates[c] for c, (_, pinned_version) in pinned.items() if pinned_version == version]
            table = active_subscriptions(self.spark, settings, version)
            expected.update(expected_outcomes(records, settings.router, validator, table))
        wrong = sorted(c for c in expected if outcomes[c] != expected[c])
        assert not wrong, f"{len(wrong)} message(s) routed unlike the oracle, e.g. " + "; ".join(
            f"{c}: {outcomes[c]} expected {expected[c]}" for c in wrong[:3]
        )
        kinds = collections.Counter(kind for kind, _ in outcomes.values())
        dead = {kind: n for kind, n in sorted(kinds.items()) if kind not in (DELIVERED, UNROUTED)}
        delivery_rows = sum(len(subscribers) for kind, subscribers in expected.values() if kind == DELIVERED)
        assert len(routed.deliveries) == delivery_rows, (
            f"{len(routed.deliveries)} delivery rows, expected {delivery_rows}"
        )
        accounted = kinds[DELIVERED] + kinds[UNROUTED] + sum(dead.values())
        assert accounted == len(produced)
        return {
            "messages produced (acked)": f"{len(produced):,}",
            "delivered messages / delivery rows": f"{kinds[DELIVERED]:,} / {len(routed.deliveries):,}",
            "unmatched": f"{kinds[UNROUTED]:,}",
            "dead-lettered": f"{sum(dead.values()):,} ({', '.join(f'{k} {n}' for k, n in dead.items())})",
            "in = delivered + unmatched + dead-lettered": f"{len(produced):,} = {accounted:,}",
            "lost / never produced / duplicate ids / routed unlike the oracle": "0 / 0 / 0 / 0",
            "router batches (ledger entries, each batch id once)": f"{len(ledger):,}",
            "batches re-executed after a kill (with their recorded version)": f"{self.router.logged(REPLAYED)}",
            "subscription table versions the batches routed with": f"{len(versions)} ({versions[0]}..{versions[-1]})",
        }


def check_subscriptions(spark: SparkSession, settings: Settings, events: Sequence[Record]) -> dict[str, str]:
    """The subscription table and its rejects equal the plain-Python model fed every acked event (``events``, in
    order); AssertionError if not, else the counts for the record."""
    from routing.subscriptions.events import kafka_received
    from routing.subscriptions.model import apply_events_model
    from routing.subscriptions.table import latest_version, read_rows

    subscriptions = settings.subscriptions
    received = [kafka_received(r.topic, r.partition, r.offset, r.value) for r in events]
    model = apply_events_model([received], settings.validator(), max_event_bytes=subscriptions.max_event_bytes)
    table = read_rows(spark, subscriptions.table_path)
    assert table == {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}, (
        "the subscription table differs from the model of every acked event"
    )
    rejects = spark.read.format("delta").load(subscriptions.rejects_path).select("change_id", "reason")
    in_table = sorted((row["change_id"], row["reason"]) for row in rejects.collect())
    assert in_table == sorted(model.rejects.items()), "the rejects table differs from the model's rejects"
    active = sum(row.active for row in model.rows.values())
    return {
        "subscription events produced (acked) / rejected": f"{len(received):,} / {len(in_table)}",
        "subscription table at the end: version / active rows": (
            f"{latest_version(spark, subscriptions.table_path)} / {active}"
        ),
    }


def run_chaos(
    spark: SparkSession, base: Settings, plan: ChaosPlan, work: Path, *, say: Callable[[str], None] | None = None
) -> ChaosResult:
    """One chaos run on a broker of its own (``base``'s Kafka ports and data directory, which must be free)."""
    return ChaosRun(spark, base, plan, work, say=say or (lambda line: print(line, file=sys.stderr, flush=True))).run()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/chaos.py",
        description="Kill the router, the refresh job and the broker at random while traffic and subscription "
        "changes flow; check every message against an independent oracle and write bench/results/chaos.md. "
        "Exit 0 when every check held, 1 when one failed.",
    )

    def count(text: str) -> int:
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
        return value

    parser.add_argument("--seed", type=int, help="the fault order, moments and traffic (default: a random seed)")
    parser.add_argument("--router-kills", type=count, default=20, help="router SIGKILLs (default 20)")
    parser.add_argument("--broker-kills", type=count, default=3, help="broker SIGKILLs and restarts (default 3)")
    parser.add_argument("--refresh-kills", type=count, default=3, help="refresh job SIGKILLs (default 3)")
    parser.add_argument("--output", type=Path, default=RESULTS_PATH, help=f"the results file (default {RESULTS_PATH})")
    parser.add_argument(
        "--work", type=Path, default=WORK_DIR, help=f"the run's state, wiped first (default {WORK_DIR})"
    )
    parser.add_argument("--keep", action="store_true", help="keep --work (the jobs' logs) after a passing run too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    from conftest import make_test_settings

    from jobs.cluster import free_ports
    from routing.spark import get_spark

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    plan = ChaosPlan(seed, args.router_kills, args.broker_kills, args.refresh_kills)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    client_port, controller_port = free_ports(2)
    base = make_test_settings(args.work / "var", client_port=client_port, controller_port=controller_port)
    spark = get_spark(base, app_name="chaos-check")
    try:
        result = run_chaos(spark, base, plan, args.work / "run")
    finally:
        spark.stop()
    command = (
        f"python bench/chaos.py --seed {seed} --router-kills {plan.router_kills} --broker-kills {plan.broker_kills} "
        f"--refresh-kills {plan.refresh_kills}"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(result.markdown(command), encoding="utf-8")
    print(result.markdown(command))
    if result.passed:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
        return 0
    print(f"chaos: FAIL; the logs are kept in {args.work}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

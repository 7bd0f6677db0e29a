"""A quiet, clean command line: real processes, real Spark, the real broker.

At default verbosity a command's stderr holds only its own lines: the one-line answers and summaries the
command prints (``<prog>: ...``) and the project's own log records; everything else (Spark's and log4j's
output, the JDK's warnings, py4j's log lines) is chatter, and goes to the driver JVM's log file
(:mod:`routing.console`), which the test reads to see it was moved, not lost. ``--verbose`` puts it back on
the terminal. A normal stop (available-now done, SIGTERM, Ctrl-C to the whole process group) exits 0
without a traceback. ``tail --limit N`` prints at most N rows: the oracle is the deliveries table read in
full, and consecutive limited runs on one checkpoint print it exactly once, in order.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    WAIT_TIMEOUT_S,
    apply_subscriptions,
    job_flags,
    kill_group,
    produce,
    route_flags,
    router_settings,
    with_router,
)

from integration.test_refresh_job import job_settings, set_flags, with_topic
from integration.test_tail import SUBSCRIBER, append_batch, coordinates, table_rows
from jobs.route import APP_NAME
from routing.console import JVM_LOG_DIRECTORY, jvm_log_path
from routing.router.tables import DELIVERIES_DDL, PARTITION_COLUMN
from routing.settings import REPO_ROOT, Settings
from routing.spark import scratch_dir, spark_conf
from routing.streaming import create_delta_table_if_absent

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["job_settings"]  # the fixture, used by name

pytestmark = pytest.mark.slow

#: A line of the project's own logging (routing.console.LOG_FORMAT) from one of its packages.
OWN_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) (routing|jobs|udfs)[.\w]*: "
)
#: What Spark's own output looks like: log4j's default pattern, its profile banner, the JDK's module warning.
SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|ERROR) |log4j|Using incubator modules")


def chatter(stderr: str, prog: str) -> list[str]:
    """The lines of ``stderr`` that are neither ``prog``'s own (a ``prog: `` line, a JSON summary) nor the
    project's log records."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip()
        and not line.startswith(f"{prog}: ")
        and not line.startswith("{")
        and not OWN_LOG_LINE.match(line)
    ]


def assert_quiet(completed: subprocess.CompletedProcess[str], prog: str) -> None:
    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert chatter(completed.stderr, prog) == [], completed.stderr[-3000:]
    assert not re.search(r"py4j|Received command", completed.stderr, re.IGNORECASE), completed.stderr[-3000:]


class JvmLog:
    """What the driver JVMs of ``app_name`` wrote to their log file (:func:`jvm_log_path`) since this was made."""

    def __init__(self, settings: Settings, app_name: str) -> None:
        self.path = jvm_log_path(scratch_dir(spark_conf(settings, app_name=app_name)), app_name)
        self._start = self.path.stat().st_size if self.path.exists() else 0

    def text(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self._start)
            return log.read().decode(errors="replace")

    def assert_no_stack_trace(self) -> None:
        """A normal stop leaves no Java or Python stack trace, even in the log file."""
        text = self.text()
        assert not re.search(r"^\s+at [\w.$]+\(|Traceback|Py4J\w*Exception", text, re.MULTILINE), text[-5000:]


def run_cli(module: str, *args: str, timeout: float = WAIT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Started:
    """A command in a process group of its own, as a terminal runs it (Ctrl-C reaches the whole group), its
    stdout and stderr in files the test reads while it runs."""

    def __init__(self, directory: Path, module: str, *args: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = directory / "stdout", directory / "stderr"
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, *args], cwd=REPO_ROOT, stdout=out, stderr=err, start_new_session=True
            )

    def wait_for(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while not condition(self.out_path.read_text(errors="replace"), self.err_path.read_text(errors="replace")):
            assert self.process.poll() is None, f"exited {self.process.returncode}: {self.err_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.5)

    def stop(self, stop_signal: signal.Signals, *, group: bool) -> subprocess.CompletedProcess[str]:
        """Send ``stop_signal`` to the process (or its whole group); its exit status and output."""
        try:
            if group:
                os.killpg(self.process.pid, stop_signal)
            else:
                self.process.send_signal(stop_signal)
            self.process.wait(timeout=WAIT_TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                kill_group(self.process)
        out, err = self.out_path.read_text(errors="replace"), self.err_path.read_text(errors="replace")
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)


def test_subscribe_apply_prints_only_its_answer_and_verbose_shows_spark(
    spark: SparkSession, job_settings: Settings, topic_factory: Any
) -> None:
    settings = with_topic(job_settings, topic_factory(partitions=1), starting_offsets="earliest")
    flags = set_flags(settings)
    log = JvmLog(settings, "routing-cli")
    quiet = run_cli("routing", "subscribe", "fx-desk", "forex.#", "--apply", *flags)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert_quiet(quiet, "subscribe")
    assert "subscribe forex.#: applied (active)" in quiet.stdout
    # Spark's output went to the log file: moved, not lost.
    assert log.path.parent.name == JVM_LOG_DIRECTORY
    assert SPARK_LINE.search(log.text()), log.text()[-3000:]
    log.assert_no_stack_trace()

    verbose = run_cli("routing", "list", "--subscriber", "fx-desk", "--verbose", *flags)
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert verbose.stdout.split()[:2] == ["fx-desk", "forex.#"]
    assert any(SPARK_LINE.search(line) for line in chatter(verbose.stderr, "list")), verbose.stderr[-3000:]
    assert "Traceback" not in verbose.stderr


SUBSCRIPTIONS = [("orders.#", "orders-desk"), ("#.eu", "eu-desk")]
KEYS = [b"orders.eu", b"orders.us", b"other.eu"]


def test_route_stops_cleanly_after_available_now_sigterm_and_ctrl_c(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(partitions=1)
    job = router_settings(settings, tmp_path, [topic])
    apply_subscriptions(spark, job, tmp_path / "subscriptions.jsonl", SUBSCRIPTIONS)
    produce(job, topic, [(KEYS[index % 3], b"m", []) for index in range(30)])

    # The shutdown race that printed a py4j traceback struck one run in two: each run of this test is a draw.
    log = JvmLog(job, APP_NAME)
    drained = run_cli("jobs.route", "--available-now", *route_flags(job))
    assert drained.returncode == 0, drained.stderr[-3000:]
    assert_quiet(drained, "route")
    assert "router query started" in drained.stderr  # the project's own INFO lines stay
    assert SPARK_LINE.search(log.text())  # Spark's output went to the log file: moved, not lost
    log.assert_no_stack_trace()
    routed = spark.read.format("delta").load(job.router.deliveries_path).count()
    assert routed == 10 * 2 + 10 * 1 + 10 * 1  # orders.eu: both desks; orders.us, other.eu: one each

    # A following router: SIGTERM to the process, then Ctrl-C to the whole group (what a terminal sends).
    following = with_router(job, trigger="processing_time", trigger_interval="1 second")
    for stop_signal, group in ((signal.SIGTERM, False), (signal.SIGINT, True)):
        started = Started(tmp_path / stop_signal.name, "jobs.route", *route_flags(following))
        started.wait_for(lambda _out, err: "router query started" in err, "the following router's query")
        done = started.stop(stop_signal, group=group)
        assert done.returncode == 0, done.stderr[-3000:]
        assert_quiet(done, "route")
        assert f"{stop_signal.name} received" in done.stderr
    log.assert_no_stack_trace()


def test_tail_limit_prints_at_most_n_rows_and_never_skips_one(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    job = router_settings(settings, tmp_path, ["orders"])
    create_delta_table_if_absent(spark, job.router.deliveries_path, DELIVERIES_DDL, partition_by=(PARTITION_COLUMN,))
    for batch_id in (0, 1):
        append_batch(spark, job, batch_id)  # 10 rows of SUBSCRIBER each
    expected = sorted(coordinates([row for row in table_rows(spark, job) if row["subscriber_id"] == SUBSCRIBER]))
    assert len(expected) == 20
    flags = ["--subscriber", SUBSCRIBER, "--available-now", "--json", *job_flags(job)]

    printed: list[tuple[str, int, int]] = []
    # 3 inside the stream's first batch, then 9 of the rows that run kept, then what is left (no limit).
    for limit in ("3", "9", None):
        completed = run_cli("routing", "tail", *flags, *(("--limit", limit) if limit else ()))
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert_quiet(completed, "tail")
        rows = [json.loads(line) for line in completed.stdout.splitlines()]
        assert len(rows) == (20 - len(printed) if limit is None else int(limit)), (limit, len(rows))
        summary = json.loads(completed.stderr.splitlines()[-1])["tail"]
        assert summary["rows"] == len(rows)
        printed += coordinates(rows)
    assert summary["unprinted"] == 0
    # Every row exactly once, in order: a limit neither skips nor repeats one.
    assert printed == expected


def test_following_tail_stops_on_ctrl_c_without_a_traceback(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    job = router_settings(settings, tmp_path, ["orders"])
    create_delta_table_if_absent(spark, job.router.deliveries_path, DELIVERIES_DDL, partition_by=(PARTITION_COLUMN,))
    append_batch(spark, job, 0)  # 10 rows of SUBSCRIBER
    started = Started(tmp_path / "tail", "routing", "tail", "--subscriber", SUBSCRIBER, *job_flags(job))
    started.wait_for(lambda out, _err: len(out.splitlines()) == 10, "the table's 10 rows of the subscriber")
    done = started.stop(signal.SIGINT, group=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_quiet(done, "tail")
    assert "printed 10 row(s)" in done.stderr


def test_a_failed_command_names_the_log_that_holds_sparks_output(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    first, second = (router_settings(settings, tmp_path / name, ["orders"]) for name in ("first", "second"))
    for job in (first, second):
        create_delta_table_if_absent(
            spark, job.router.deliveries_path, DELIVERIES_DDL, partition_by=(PARTITION_COLUMN,)
        )
        append_batch(spark, job, 0)
    checkpoint = str(tmp_path / "tail-checkpoint")
    flags = ["--subscriber", SUBSCRIBER, "--available-now", "--checkpoint", checkpoint]
    assert run_cli("routing", "tail", *flags, *job_flags(first)).returncode == 0
    log = JvmLog(settings, "routing-tail")

    # The same checkpoint on another table: Delta refuses the stream (another table id), the command exits 1.
    failed = run_cli("routing", "tail", *flags, *job_flags(second))
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    lines = failed.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("tail: "), failed.stderr[-3000:]
    assert lines[1] == f"python -m routing: Spark's own output is in {log.path}"
    assert "ERROR" in log.text()  # what Spark said about the failure is there

"""The stack against a SASL/SCRAM broker, and a password that shows up nowhere.

One dedicated local broker (own data dir, free ports) listens with SASL_PLAINTEXT + SCRAM-SHA-256
besides its PLAINTEXT listener (``kafka.sasl_port``); every client of the test, the jobs included,
talks to the SCRAM listener only. The password is a distinctive canary read from
``kafka.sasl_password_file``. The refresh job runs as its own process (the command line a user runs,
so its stdout/stderr, the JVM's included, are its own), the router in this process on the shared
session (so its EXPLAIN and progress are reachable; its JVM writes to the session's stderr, which
this test cannot capture), both checked exactly against the oracles of tests/router_support.py.
Then the canary is searched for in everything the runs left: their stdout/stderr, the broker's
logs, every file under the test's state (Delta logs, checkpoints, the refresh job's Spark scratch),
``DESCRIBE HISTORY`` of every table written, the streaming query's EXPLAIN and progress JSON,
Spark's configuration listings, ``repr``/``str`` of every settings object and the errors of
misspelled or malformed secret settings. A wrong password ends the refresh job with exit 1 and
Kafka's authentication error, without echoing it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import make_test_settings
from router_support import (
    WAIT_TIMEOUT_S,
    active_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    produce,
    read_routed,
    router_settings,
    subscription_event,
)

from jobs import local_kafka, refresh_subscriptions, route
from jobs.cluster import free_ports
from routing.settings import LOCAL_HOST, REPO_ROOT, SASL_PASSWORD_ENV, Secret, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow  # a broker of its own and a job process: about a minute; scheduled first

#: The canary: long and odd enough that no log line, id or hash contains it by chance.
PASSWORD = "Scram-Canary-q7Xv2-Lk9pW"
WRONG_PASSWORD = "Wrong-Canary-z3Rt8-Hm1aQ"
USER = "router-app"
MECHANISM = "SCRAM-SHA-256"

SUBSCRIPTIONS = [("stock.*.msft", "msft-desk"), ("forex.#", "fx"), ("#", "audit")]
KEYS: list[bytes | None] = [b"stock.nasdaq.msft", b"forex.eur.usd", b"bond.x", b"", b"a..b", None, b"x" * 300]


@dataclasses.dataclass(frozen=True)
class SaslStack:
    settings: Settings
    root: Path


@pytest.fixture(scope="module")
def sasl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslStack]:
    """A broker of this module's own with a SCRAM listener, and settings whose clients all use it."""
    root = tmp_path_factory.mktemp("sasl")
    password_file = root / "kafka_password"
    password_file.write_text(PASSWORD + "\n")
    password_file.chmod(0o600)
    client_port, controller_port, sasl_port = free_ports(3)
    base = make_test_settings(root, client_port=client_port, controller_port=controller_port)
    kafka = dataclasses.replace(
        base.kafka,
        bootstrap_servers="",  # derived: the SCRAM listener, since the protocol is SASL_PLAINTEXT
        sasl_port=sasl_port,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=MECHANISM,
        sasl_username=USER,
        sasl_password_file=str(password_file),
        sasl_password=Secret(PASSWORD),
    )
    settings = base.replace(kafka=kafka)
    assert settings.kafka.bootstrap_servers == f"{LOCAL_HOST}:{sasl_port}"
    broker = local_kafka.start(settings)
    watchdog = local_kafka.stop_with_this_process(broker, settings)
    try:
        yield SaslStack(settings, root)
    finally:
        local_kafka.stop(settings)
        watchdog.close()


def create_topics(settings: Settings, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported

    admin = AdminClient(settings.kafka_client_config())
    topics = [NewTopic(name, num_partitions=1, replication_factor=1) for name in names]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=30)


def job_flags(settings: Settings) -> list[str]:
    """``--set`` flags for the refresh job in another process: the SCRAM client settings and this test's paths."""
    kafka, spark, subscriptions = settings.kafka, settings.spark, settings.subscriptions
    values = {
        "kafka.bootstrap_servers": kafka.bootstrap_servers,
        "kafka.security_protocol": kafka.security_protocol,
        "kafka.sasl_mechanism": kafka.sasl_mechanism,
        "kafka.sasl_username": kafka.sasl_username,
        "kafka.sasl_password_file": kafka.sasl_password_file,
        "spark.jars_dir": spark.jars_dir,
        "subscriptions.table_path": subscriptions.table_path,
        "subscriptions.rejects_path": subscriptions.rejects_path,
        "subscriptions.checkpoint_path": subscriptions.checkpoint_path,
        "subscriptions.events_topic": subscriptions.events_topic,
    }
    return [part for name, value in values.items() for part in ("--set", f"{name}={value}")]


def files_holding(root: Path, secret: str, *, skip: Path) -> list[str]:
    """Every file under ``root`` (but ``skip``) whose bytes contain ``secret``."""
    needle = secret.encode()
    return [str(path) for path in root.rglob("*") if path.is_file() and path != skip and needle in path.read_bytes()]


def command_lines_holding(secret: str) -> list[int]:
    """Pids of live processes whose command line (what ``ps`` shows) contains ``secret``."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and secret.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_router_and_refresh_job_through_scram_leak_no_password(
    sasl_stack: SaslStack, spark: SparkSession, capfd: pytest.CaptureFixture[str]
) -> None:
    from routing.router.pipeline import Router

    root = sasl_stack.root / "run"
    messages_topic, events_topic = "sasl-messages", "sasl-subscription-events"
    job = router_settings(sasl_stack.settings, root, [messages_topic])
    job = job.replace(subscriptions=dataclasses.replace(job.subscriptions, events_topic=events_topic))
    create_topics(job, messages_topic, events_topic)

    # The refresh job, as its own process, reads the events through SCRAM.
    events = [subscription_event("subscribe", pattern, subscriber) for pattern, subscriber in SUBSCRIPTIONS]
    events.append(b'{"op": "subscribe", "subscriber": "broken"')  # one reject: the rejects table is written too
    produce(job, events_topic, [(None, event, []) for event in events])
    refresh = subprocess.run(
        [sys.executable, "-m", "jobs.refresh_subscriptions", "--json", *job_flags(job)],
        cwd=REPO_ROOT,
        env={key: value for key, value in os.environ.items() if key != SASL_PASSWORD_ENV},
        capture_output=True,
        text=True,
        timeout=WAIT_TIMEOUT_S,
        check=False,
    )
    assert refresh.returncode == 0, refresh.stderr[-3000:]
    summary = json.loads(refresh.stdout.strip().splitlines()[-1])
    assert (summary["applied"]["subscribed"], summary["rejected"]) == (len(SUBSCRIPTIONS), {"malformed_json": 1})
    version = summary["table_version"]
    assert sorted(active_subscriptions(spark, job, version)) == sorted(SUBSCRIPTIONS)

    # The router, in this process on the shared session, routes through SCRAM.
    records = produce(job, messages_topic, [(key, b"payload", []) for key in KEYS])
    router = Router(spark, job)
    try:
        query = router.start()
        query.awaitTermination(int(WAIT_TIMEOUT_S))
        assert not query.isActive and query.exception() is None, query.exception()
        assert query.lastProgress is not None
        progress = "\n".join(update.json for update in [query.lastProgress, *query.recentProgress])
        query.explain(extended=True)
    finally:
        router.close()
    router_output = capfd.readouterr()
    explain = router_output.out
    assert "kafka" in explain.lower() and "Physical Plan" in explain, explain[:2000]
    assert messages_topic in progress

    routed = read_routed(spark, job)
    expected = expected_outcomes(records, job.router, job.validator(), SUBSCRIPTIONS)
    assert routed.outcomes() == expected
    assert {reason for reason, _ in expected.values()} >= {"delivered", "key_too_long", "null_key"}
    assert_ids_exact(routed)

    # Nowhere: the runs' output, EXPLAIN, progress, Delta commit info, Spark's conf listings, files, settings.
    tables = [
        job.subscriptions.table_path,
        job.subscriptions.rejects_path,
        job.router.deliveries_path,
        job.router.dead_letters_path,
        job.router.unrouted_path,
    ]
    history = [
        str(row.asDict()) for table in tables for row in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    ]
    assert len(history) >= len(tables)
    spark_conf = [
        str(spark.sparkContext.getConf().getAll()),
        str(spark.sql("SET -v").collect()),
        str(spark.sql("SET").collect()),
    ]
    settings_texts = [repr(job), str(job), *(repr(getattr(job, field.name)) for field in dataclasses.fields(job))]
    places = {
        "refresh job stdout": refresh.stdout,
        "refresh job stderr": refresh.stderr,
        "router output (this process's fd 1 and 2)": router_output.out + router_output.err,
        "EXPLAIN": explain,
        "progress JSON": progress,
        "DESCRIBE HISTORY": "\n".join(history),
        "Spark conf listings": "\n".join(spark_conf),
        "settings repr/str": "\n".join(settings_texts),
    }
    assert [place for place, text in places.items() if PASSWORD in text] == []
    password_file = Path(str(job.kafka.sasl_password_file))
    assert files_holding(sasl_stack.root, PASSWORD, skip=password_file) == []  # broker logs, Delta, checkpoints
    assert (sasl_stack.root / "kafka" / "logs" / "server.log").stat().st_size > 0
    assert command_lines_holding(PASSWORD) == []  # the broker (still running) and its tools took it from no argv


def test_a_wrong_password_is_a_clear_authentication_error_not_echoed(
    sasl_stack: SaslStack,
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = sasl_stack.settings
    root = sasl_stack.root / "wrong"
    flags = job_flags(job)
    flags += ["--set", f"subscriptions.checkpoint_path={root / 'checkpoint'}"]
    monkeypatch.setenv(SASL_PASSWORD_ENV, WRONG_PASSWORD)  # the environment wins over the file

    code = refresh_subscriptions.main(flags, spark_factory=lambda *_args, **_kwargs: spark)
    captured = capfd.readouterr()
    # In this process the job's log goes to pytest's handler; in its own process it is stderr.
    output = captured.out + captured.err + caplog.text
    assert code == 1
    assert "SaslAuthenticationException: Authentication failed" in output and MECHANISM in output, output[-3000:]
    assert WRONG_PASSWORD not in output
    assert PASSWORD not in output


def test_misspelled_and_malformed_secret_settings_end_in_exit_2_without_the_password(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The jobs' own error paths (no Spark starts): a misspelled section and a password file with a bad byte."""
    bad_file = tmp_path / "password"
    bad_file.write_bytes(PASSWORD.encode() + b"\xff\n")
    sasl = ["--set", "kafka.security_protocol=SASL_PLAINTEXT", "--set", f"kafka.sasl_mechanism={MECHANISM}"]
    sasl += ["--set", f"kafka.sasl_username={USER}"]
    attempts: list[tuple[Any, list[str]]] = [
        (route.main, ["--set", f"kafak.sasl_password={PASSWORD}"]),
        (route.main, [*sasl, "--set", f"kafka.sasl_password_file={bad_file}"]),
        (refresh_subscriptions.main, ["--set", f"kafak.sasl_password={PASSWORD}"]),
        (refresh_subscriptions.main, [*sasl, "--set", f"kafka.sasl_password_file={bad_file}"]),
        (local_kafka.main, ["status", *sasl, "--set", f"kafka.sasl_password_file={bad_file}"]),
    ]
    for main, argv in attempts:
        assert main(argv) == 2, argv
        output = capfd.readouterr()
        assert "kafak" in output.err or "not UTF-8" in output.err, output.err
        assert PASSWORD not in output.out + output.err
        assert "xff" not in output.err and "position" not in output.err


def test_a_scram_listener_without_a_password_is_exit_2_before_any_jvm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(SASL_PASSWORD_ENV, raising=False)
    client_port, controller_port, sasl_port = free_ports(3)
    flags = {
        "kafka.data_dir": tmp_path / "kafka",
        "kafka.client_port": client_port,
        "kafka.controller_port": controller_port,
        "kafka.sasl_port": sasl_port,
        "kafka.sasl_mechanism": MECHANISM,
        "kafka.sasl_username": USER,
    }
    argv = ["start", *(part for name, value in flags.items() for part in ("--set", f"{name}={value}"))]
    assert local_kafka.main(argv) == 2
    assert "kafka.sasl_port needs the SCRAM user's password" in capfd.readouterr().err
    assert not (tmp_path / "kafka" / "broker.pid").exists()

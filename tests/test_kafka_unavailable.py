"""Jobs facing a Kafka cluster that is down at start: one clear line and exit 1 within ``kafka.start_timeout_s``,
before any JVM starts (:func:`routing.streaming.wait_for_kafka`); a malformed bootstrap address is exit 2.

No broker and no Spark: "down" is a free loopback port nothing listens on, and Spark's entry point is replaced
by one that fails the test if it is ever reached.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobs import refresh_subscriptions, route
from jobs.cluster import free_ports
from routing.config import ConfigError
from routing.settings import load_settings
from routing.streaming import bootstrap_addresses, wait_for_kafka


def _no_spark(*args: object, **kwargs: object) -> Any:
    raise AssertionError("Spark must not start")


@pytest.fixture(autouse=True)
def spark_must_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import routing.spark

    monkeypatch.setattr(routing.spark, "get_spark", _no_spark)


def run_job(job: str, argv: list[str]) -> int:
    if job == "route":
        return route.main(argv)
    return refresh_subscriptions.main(argv, spark_factory=_no_spark)


@pytest.mark.parametrize("job", ["route", "refresh_subscriptions"])
def test_a_broker_down_at_start_is_exit_1_with_where_and_how_long(job: str, capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = free_ports(1)  # nothing listens there
    argv = ["--set", f"kafka.bootstrap_servers=127.0.0.1:{port}", "--set", "kafka.start_timeout_s=1.5"]
    assert run_job(job, argv) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(
        f"{job}: no Kafka broker accepted a connection at 127.0.0.1:{port} (kafka.bootstrap_servers) within 1.5 s "
        f"(kafka.start_timeout_s): 127.0.0.1:{port}: Connection refused; start the broker"
    ), last
    assert "Traceback" not in last


@pytest.mark.parametrize("job", ["route", "refresh_subscriptions"])
def test_a_malformed_bootstrap_address_is_exit_2(job: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_job(job, ["--set", "kafka.bootstrap_servers=localhost"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"{job}: setting kafka.bootstrap_servers: 'localhost' is not host:port"
    )


def test_an_import_needs_no_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--import`` reads files, not Kafka: it goes straight to Spark, whatever the broker's state."""
    waited: list[object] = []
    monkeypatch.setattr(refresh_subscriptions, "kafka_exit_status", lambda *args: waited.append(args))
    path = tmp_path / "events.csv"
    path.write_text("op,subscriber,pattern,ts\nsubscribe,s1,a.*,1000\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="Spark must not start"):
        refresh_subscriptions.main(["--import", str(path)], spark_factory=_no_spark)
    assert waited == []


def test_a_broker_that_starts_while_the_job_waits_is_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    (port,) = free_ports(1)
    settings = load_settings(
        env={}, overrides={"kafka": {"bootstrap_servers": f"127.0.0.1:{port}", "start_timeout_s": 60.0}}
    )
    accepted: list[object] = []

    def broker_coming_up() -> None:
        time.sleep(1.5)  # after the first probe, which must find nothing
        with socket.create_server(("127.0.0.1", port)) as server:
            connection, _ = server.accept()
            accepted.append(connection)
            connection.close()

    thread = threading.Thread(target=broker_coming_up, daemon=True)
    thread.start()
    with caplog.at_level(logging.WARNING, logger="routing.streaming"):
        wait_for_kafka(settings)
    thread.join(timeout=10)
    assert len(accepted) == 1
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        f"no Kafka broker accepts connections at 127.0.0.1:{port} yet"
    ]


@pytest.mark.parametrize(
    ("servers", "addresses"),
    [
        ("h1:1", [("h1", 1)]),
        ("h1:9092, [::1]:9093,SASL_SSL://b.example:65535", [("h1", 9092), ("::1", 9093), ("b.example", 65535)]),
    ],
)
def test_bootstrap_addresses(servers: str, addresses: list[tuple[str, int]]) -> None:
    assert bootstrap_addresses(servers) == addresses


@pytest.mark.parametrize("servers", ["h1", "h1:", ":9092", "h1:0", "h1:65536", "h1:９０９２", "h1:1,,h2:2"])
def test_malformed_bootstrap_addresses(servers: str) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap_servers: .* is not host:port"):
        bootstrap_addresses(servers)

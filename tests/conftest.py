"""Shared fixtures: test settings, the real Kafka broker, the one SparkSession, Kafka topics.

Everything heavy is lazy: a unit test that requests none of ``kafka_broker``, ``kafka_admin``,
``topic_factory`` or ``spark`` starts neither a JVM nor a broker. Tests under ``tests/integration/``
are marked ``integration`` by folder (:func:`pytest_collection_modifyitems`); ``slow`` is set by hand.

* ``settings`` puts every var/ path (broker data, Delta tables, checkpoints, Spark scratch, Ivy
  home) under the session's pytest tmp dir; only the jars come from the real ``var/jars``.
  Its Kafka ports are the configured ones if something already listens there (a broker from
  ``make kafka-start``, reused), otherwise two free ports, so concurrent test sessions on one
  machine each get their own broker instead of stopping each other's. The broker binds them when
  the first test needs it, minutes later, so they come from outside the kernel's ephemeral range
  (an outgoing connection cannot take them meanwhile), searched from a band of their own for each
  pytest-xdist worker (:func:`worker_port_start`).
* ``kafka_broker`` reuses a broker answering at those ports or starts one, and stops it at the
  end of the session only if it started it (a watchdog stops it even if the run is killed). Every broker a test
  starts compiles with C1 only (``$KAFKA_JVM_PERFORMANCE_OPTS``, unless set outside).
* ``spark`` is the one local SparkSession (``routing.spark.get_spark``) for the whole session.
* Every driver JVM the tests start runs with the development tooling's Spark properties (``dev.local_spark``:
  a properties file in ``$PYSPARK_SUBMIT_ARGS``, inherited by every job a test starts as a process of its own;
  the same entries in the session's own ``[spark.conf]``, which the Connect server gets too): the class-data
  archive, the spawn-free local file system, the session's scratch paths, and JIT flags.
  Every job a test starts as a process of its own runs a minute or two, so its JVM compiles with C1 only
  (``dev.local_spark.JIT_QUICK``): about half the JVM CPU each, on a machine whose two cores both workers
  share (pytest 44 to 38 minutes in a clean-clone run). The session's JVM and the Connect server's live as
  long as the session and run hundreds of short queries: ``JIT_LAZY`` (with quick too the run took 40
  minutes, the 9M-row batch test twice as long), in the session's own ``spark.driver.defaultJavaOptions``.
  Every JVM here collects with the parallel collector of conf/router.toml's ``spark.driver.extraJavaOptions``.
* ``connect_server`` is a Spark Connect server (``jobs.connect_server``) on a free port, started the
  first time a test asks for it and stopped at the end of the session.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dev import local_spark
from jobs import local_kafka
from jobs.cluster import ephemeral_port_range, free_port_candidates, free_ports
from routing.settings import LOCAL_HOST, REPO_ROOT, Settings, load_settings

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from pyspark.sql import SparkSession

    from jobs.connect_server import ConnectServer
    from jobs.local_kafka import Broker

#: Seconds an AdminClient operation in a fixture may take.
ADMIN_TIMEOUT_S = 30.0
# Before any test starts a JVM (the ``settings`` fixture then points it at the session's own file).
local_spark.use(path=local_spark.VAR / "spark-conf" / "tests.conf", java_options=local_spark.JIT_QUICK)
# The brokers the tests start carry a few thousand messages each: C1 is enough (C2 was 5 of a start's 12 CPU s).
os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", f"{local_kafka.DEFAULT_PERFORMANCE_OPTS} -XX:TieredStopAtLevel=1")
#: Ports between the starts of two pytest-xdist workers' searches for free ports.
WORKER_PORT_BAND = 1000
#: Every test under this folder is marked ``integration`` (real Kafka, Spark or Delta), so no file has to say so.
INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"


#: The files whose tests use the ``connect_server`` fixture: :func:`pytest_xdist_make_scheduler` hands them to
#: one worker, so a run starts one Spark Connect server, not one per worker (``tests/test_markers.py`` keeps
#: the list whole).
CONNECT_SERVER_FILES = (
    "tests/integration/test_class_archive.py",
    "tests/integration/test_notebook.py",
    "tests/integration/test_spark_connect.py",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with the :data:`CONNECT_SERVER_FILES` one work unit instead of three."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]  # xdist ships no hints

    class OneConnectServer(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no type hints
        def _split_scope(self, nodeid: str) -> str:
            path = str(super()._split_scope(nodeid))
            return CONNECT_SERVER_FILES[0] if path in CONNECT_SERVER_FILES else path

    return OneConnectServer(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark by folder, then put the files with slow tests first.

    ``tests/integration/*`` is ``integration`` (``make test-fast`` skips it). The order (files that hold
    ``slow`` tests, then the other integration files, then the unit tests; within a file, kept) is the order
    of a run in one process, and of ``make test``'s pytest-xdist workers (``--no-loadscope-reorder``: xdist's
    own order, by number of tests, left the long single-test files to the end, run by one worker alone).
    """
    for item in items:
        if item.path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)
    rank: dict[Path, int] = {}
    for item in items:
        weight = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("integration") else 2
        rank[item.path] = min(rank.get(item.path, weight), weight)
    items.sort(key=lambda item: rank[item.path])  # stable: files stay together, in their own order


def make_test_settings(root: Path, *, client_port: int, controller_port: int) -> Settings:
    """Settings with every var/ path under ``root`` (jars from the real var/jars), Spark's among them."""
    settings = load_settings(
        overrides={
            "kafka": {
                "data_dir": str(root / "kafka"),
                "client_port": client_port,
                "controller_port": controller_port,
                # An explicit bootstrap address would point the tests at another broker.
                "bootstrap_servers": f"{LOCAL_HOST}:{client_port}",
            },
            "spark": {"jars_dir": str(REPO_ROOT / "var" / "jars" / "spark")},
            "subscriptions": {
                "table_path": str(root / "delta" / "subscriptions"),
                "rejects_path": str(root / "delta" / "subscription_rejects"),
                "checkpoint_path": str(root / "checkpoints" / "refresh_subscriptions"),
            },
        }
    )
    defaults = local_spark.local_conf(settings, var=root, archive_dir=None)
    return with_session_jvm_options(
        settings.replace(spark=dataclasses.replace(settings.spark, conf={**settings.spark.conf, **defaults}))
    )


def with_session_jvm_options(settings: Settings) -> Settings:
    """``settings`` whose driver JVM maps the class-data archive as it is now (built before this session, or by
    tests/integration/test_class_archive.py during it) and compiles as a long-lived one: both tiers, C2 late
    (the session's own JVM and the Connect server's; module docstring)."""
    options = local_spark.join_options(local_spark.archive_options(settings, {}), local_spark.JIT_LAZY)
    conf = {**settings.spark.conf, local_spark.DEFAULT_JAVA_OPTIONS: options}
    return settings.replace(spark=dataclasses.replace(settings.spark, conf=conf))


def worker_port_start(worker: str, offset: int) -> int | None:
    """Where pytest-xdist worker ``worker`` (``gw<N>``) starts its search for free ports, or None (random).

    Workers choose their ports at the same moment, and a port stays free until its broker binds it,
    so each worker searches a band of its own: ``offset`` (random, < :data:`WORKER_PORT_BAND`) into
    the N-th band. The offset keeps two test runs side by side apart too.
    """
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    candidates = free_port_candidates(ephemeral_port_range())
    return candidates[(int(worker[2:]) * WORKER_PORT_BAND + offset) % len(candidates)]


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    from jobs.local_kafka import port_in_use

    configured = load_settings().kafka
    if port_in_use(LOCAL_HOST, configured.client_port):
        client_port, controller_port = configured.client_port, configured.controller_port
    else:
        start = worker_port_start(os.environ.get("PYTEST_XDIST_WORKER", ""), random.randrange(WORKER_PORT_BAND))
        client_port, controller_port = free_ports(2, LOCAL_HOST, start=start)
    root = tmp_path_factory.mktemp("var")
    settings = make_test_settings(root, client_port=client_port, controller_port=controller_port)
    # The jobs tests start as processes of their own: the same, with C1 only (module docstring).
    local_spark.use(settings, path=root / "spark.conf", var=root, java_options=local_spark.JIT_QUICK)
    return settings


@pytest.fixture(scope="session")
def kafka_broker(settings: Settings) -> Iterator[Broker]:
    from jobs.local_kafka import ensure_running, stop, stop_with_this_process

    broker = ensure_running(settings)
    if not broker.started:
        yield broker
        return
    # Even if this test run is killed outright, the broker it started does not outlive it.
    watchdog = stop_with_this_process(broker, settings)
    try:
        yield broker
    finally:
        stop(settings)
        watchdog.close()


@pytest.fixture(scope="session")
def kafka_admin(settings: Settings, kafka_broker: Broker) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return AdminClient(settings.kafka_client_config())


@pytest.fixture
def topic_factory(kafka_admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """``topic_factory(partitions=1, **topic_config) -> name``: a new topic, deleted after the test."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

    created: list[str] = []
    counter = itertools.count()
    test_name = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:80]

    def create(partitions: int = 1, **config: Any) -> str:
        name = f"test-{test_name}-{next(counter)}-{uuid.uuid4().hex[:8]}"
        settings = {key: str(value) for key, value in config.items()}
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=settings)
        kafka_admin.create_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[name].result(timeout=ADMIN_TIMEOUT_S)
        created.append(name)
        return name

    yield create
    if created:
        for future in kafka_admin.delete_topics(created, operation_timeout=ADMIN_TIMEOUT_S).values():
            future.result(timeout=ADMIN_TIMEOUT_S)


@pytest.fixture(scope="session")
def spark(settings: Settings) -> Iterator[SparkSession]:
    from routing.spark import get_spark

    session = get_spark(settings, app_name="spark-topic-router-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_server(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    from jobs.connect_server import ConnectServer

    log = tmp_path_factory.mktemp("connect") / "connect-server.log"
    with ConnectServer(with_session_jvm_options(settings), port=free_ports(1)[0], log_path=log) as server:
        yield server

"""The local stack: the KRaft broker job, the jars and the SparkSession factory.

Broker and Spark tests run the real thing (a JVM broker on free loopback ports, a Spark session
in a subprocess with an empty Ivy home) and compare with independent oracles: what the test
itself produced, what /proc says is running. The settings' unit tests are in tests/test_settings.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from jobs import local_kafka
from jobs.cluster import free_ports
from jobs.local_kafka import BrokerError
from routing.settings import (
    REPO_ROOT,
    Settings,
    load_settings,
)
from routing.spark import FORBIDDEN_CONF, SparkJarsMissingError, spark_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# -- jars and the Spark configuration (no JVM) ----------------------------------


def _artifact(jar: Path) -> str:
    """``jackson-databind-2.21.2.jar`` -> ``jackson-databind``."""
    words = jar.stem.split("-")
    while len(words) > 1 and words[-1][:1].isdigit():
        words.pop()
    return "-".join(words)


def test_resolved_spark_jars_do_not_duplicate_pyspark_jars() -> None:
    import pyspark

    ours = sorted((REPO_ROOT / "var" / "jars" / "spark").glob("*.jar"))
    assert ours, "var/jars/spark is empty: run `make jars`"
    pyspark_jars = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert {"spark-core_2.13", "scala-library", "jackson-databind"} <= pyspark_jars  # the oracle itself is sane
    duplicated = sorted(jar.name for jar in ours if _artifact(jar) in pyspark_jars)
    assert duplicated == []
    assert any(jar.name.startswith("delta-spark_") for jar in ours)
    assert any(jar.name.startswith("spark-sql-kafka-0-10_") for jar in ours)


def test_spark_conf_uses_only_local_jars(settings: Settings) -> None:
    conf = spark_conf(settings)
    jars = conf["spark.jars"].split(",")
    assert jars and all(Path(jar).is_file() and Path(jar).parent == Path(settings.spark.jars_dir) for jar in jars)
    assert not any(key in conf for key in FORBIDDEN_CONF)
    assert conf["spark.ui.enabled"] == "false"
    # Delta's log replay runs with its own partitions ([spark.conf]), not the shuffle's.
    assert conf["spark.databricks.delta.snapshotPartitions"] == "1"
    replay = settings.replace(
        spark=dataclasses.replace(settings.spark, conf={"spark.databricks.delta.snapshotPartitions": "3"})
    )
    assert spark_conf(replay)["spark.databricks.delta.snapshotPartitions"] == "3"
    for key in FORBIDDEN_CONF:
        with pytest.raises(ValueError, match="make jars"):
            spark_conf(settings, extra_conf={key: "io.delta:delta-spark_4.2_2.13:4.4.1"})


def test_jars_provided_by_the_runtime_are_neither_checked_nor_added(settings: Settings, tmp_path: Path) -> None:
    provided = load_settings(env={}, overrides={"spark": {"jars_dir": ""}})
    assert "spark.jars" not in spark_conf(provided)
    # Under spark-submit too: whatever --jars the submitter chose passes unchecked and unchanged.
    submitted = {"spark.master": "spark://127.0.0.1:7077", "spark.jars": "/opt/extra/udf-helpers.jar"}
    assert spark_conf(provided, submitted=submitted)["spark.jars"] == "/opt/extra/udf-helpers.jar"
    # A directory named but absent stops at the jar check.
    absent = load_settings(env={}, overrides={"spark": {"jars_dir": str(tmp_path / "absent")}})
    with pytest.raises(SparkJarsMissingError, match="run `make jars`"):
        spark_conf(absent)


def test_missing_spark_jars_say_run_make_jars(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "unrelated.jar").write_bytes(b"")
    for jars_dir in (tmp_path, tmp_path / "absent"):
        broken = load_settings(env={}, overrides={"spark": {"jars_dir": str(jars_dir)}})
        with pytest.raises(SparkJarsMissingError, match="run `make jars`"):
            spark_conf(broken)


# -- the broker ------------------------------------------------------------------


def broker_jvms(data_dir: Path) -> list[int]:
    """Pids of every live broker JVM running this data directory's config."""
    marker = str(data_dir / "server.properties").encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        arguments = cmdline.split(b"\0")
        if b"kafka.Kafka" in arguments and marker in arguments and state not in {"Z", "X"}:
            pids.append(int(entry.name))
    return pids


def broker_settings(data_dir: Path, **kafka: object) -> Settings:
    client_port, controller_port = free_ports(2)
    overrides = {"data_dir": str(data_dir), "client_port": client_port, "controller_port": controller_port, **kafka}
    return load_settings(env={}, overrides={"kafka": overrides})


@pytest.fixture
def fresh_settings(tmp_path: Path) -> Iterator[Settings]:
    """Settings for a broker of this test's own (fresh data dir, free ports), stopped afterwards."""
    settings = broker_settings(tmp_path / "kafka")
    yield settings
    local_kafka.stop(settings)
    assert broker_jvms(tmp_path / "kafka") == []


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    kafka = settings.kafka
    flags = [
        f"kafka.data_dir={kafka.data_dir}",
        f"kafka.client_port={kafka.client_port}",
        f"kafka.controller_port={kafka.controller_port}",
    ]
    return subprocess.run(
        [sys.executable, "-m", "jobs.local_kafka", *args, *(part for flag in flags for part in ("--set", flag))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def produce(settings: Settings, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    producer = Producer(settings.kafka_client_config())
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def consume(
    settings: Settings, topic: str, count: int, *, timeout_s: float = 60
) -> list[tuple[bytes | None, bytes | None]]:
    """The first ``count`` messages of ``topic`` (one partition: in order), read by a new group."""
    consumer = Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            received.append((message.key(), message.value()))
    finally:
        consumer.close()
    return received


@pytest.mark.slow
def test_broker_starts_from_nothing_round_trips_and_stops_without_orphans(fresh_settings: Settings) -> None:
    settings = fresh_settings
    data_dir = Path(settings.kafka.data_dir)
    assert not data_dir.exists()
    assert local_kafka.status(settings).state == "stopped"

    broker = local_kafka.start(settings)
    assert broker.started and broker.pid is not None
    assert broker_jvms(data_dir) == [broker.pid]
    assert (data_dir / "data" / "meta.properties").is_file()
    cluster_id = (data_dir / "cluster.id").read_text().strip()
    assert cluster_id in (data_dir / "data" / "meta.properties").read_text()
    assert local_kafka.status(settings).state == "running"
    with pytest.raises(BrokerError, match="already running"):
        local_kafka.start(settings)
    again = local_kafka.ensure_running(settings)
    assert (again.started, again.pid) == (False, broker.pid)
    # Another data dir, same ports: the broker already answering is reused, not managed.
    elsewhere = broker_settings(
        data_dir.parent / "elsewhere",
        client_port=settings.kafka.client_port,
        controller_port=settings.kafka.controller_port,
    )
    assert local_kafka.status(elsewhere).state == "external"
    reused = local_kafka.ensure_running(elsewhere)
    assert (reused.started, reused.pid) == (False, None)
    assert local_kafka.stop(elsewhere) is False
    assert not (data_dir.parent / "elsewhere").exists()

    admin = AdminClient(settings.kafka_client_config())
    admin.create_topics([NewTopic("round-trip", num_partitions=1, replication_factor=1)])["round-trip"].result(30)
    # CreateTopics answers once the controller has the topic; the broker's metadata cache follows it a moment later.
    deadline = time.monotonic() + 30
    while "round-trip" not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the created topic never reached the broker's metadata"
        time.sleep(0.1)
    messages = [(f"stock.nasdaq.{i}".encode(), f"payload-{i}-é".encode()) for i in range(20)]
    produce(settings, "round-trip", messages)
    assert consume(settings, "round-trip", len(messages)) == messages

    assert local_kafka.stop(settings) is True
    assert broker_jvms(data_dir) == []
    assert local_kafka.status(settings).state == "stopped"
    assert not (data_dir / "broker.pid").exists()
    assert local_kafka.stop(settings) is False

    # The command line, on the same data: a restart keeps the cluster id and the data.
    help_text = subprocess.run(
        [sys.executable, "-m", "jobs.local_kafka", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert all(word in help_text for word in ("start", "stop", "status", "--conf", "--set"))
    stopped = run_cli(settings, "status")
    assert (stopped.returncode, stopped.stdout.startswith("kafka stopped")) == (3, True), stopped
    started = run_cli(settings, "start")
    assert started.returncode == 0, started.stderr
    pids = broker_jvms(data_dir)
    assert len(pids) == 1 and pids != [broker.pid] and f"pid {pids[0]}" in started.stdout
    assert (data_dir / "cluster.id").read_text().strip() == cluster_id
    assert consume(settings, "round-trip", len(messages)) == messages
    running = run_cli(settings, "status")
    assert (running.returncode, "running" in running.stdout) == (0, True), running
    assert run_cli(settings, "start").stdout.startswith("kafka already running")

    # A near-zero grace period takes the SIGKILL path; still nothing may be left behind.
    assert local_kafka.stop(settings, timeout_s=0.001) is True
    assert broker_jvms(data_dir) == []
    assert run_cli(settings, "stop").stdout.strip() == "kafka was not running"


KILLED_STARTER = """
import json, sys, time
from jobs import local_kafka
from routing.settings import load_settings

settings = load_settings(env={}, overrides={"kafka": json.loads(sys.argv[1])})
broker = local_kafka.start(settings)
local_kafka.stop_with_this_process(broker, settings)
print(broker.pid, flush=True)
time.sleep(3600)
"""


@pytest.mark.slow
def test_a_broker_tied_to_its_starter_dies_with_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka"
    kafka = broker_settings(data_dir).kafka
    overrides = {"data_dir": kafka.data_dir, "client_port": kafka.client_port, "controller_port": kafka.controller_port}
    starter = subprocess.Popen(
        [sys.executable, "-c", KILLED_STARTER, json.dumps(overrides)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        assert broker_jvms(data_dir) == [pid]
    finally:
        starter.kill()  # SIGKILL: no cleanup code runs in the starter
        starter.wait()
    deadline = time.monotonic() + 120
    while broker_jvms(data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert broker_jvms(data_dir) == []


def test_deleted_topics_leave_no_files_once_waited_for(settings: Settings, kafka_broker: local_kafka.Broker) -> None:
    """What the benchmarks rely on before they stop their broker (gigabytes of topics per run)."""
    from jobs.demo import create_topics, delete_topics, topics_with_prefix

    prefix = f"leftover-{time.monotonic_ns()}."
    topics = [f"{prefix}a", f"{prefix}b"]
    create_topics(settings, topics, partitions=2)
    for topic in topics:
        produce(settings, topic, [(b"k", b"v" * 1000)] * 50)
    assert topics_with_prefix(settings, prefix) == topics
    assert topics_with_prefix(settings, f"{prefix}a") == [f"{prefix}a"]
    data = Path(settings.kafka.data_dir) / "data"
    expected = [data / f"{topic}-{partition}" for topic in topics for partition in (0, 1)]
    assert local_kafka.topic_files(settings, topics) == expected
    assert local_kafka.topic_files(settings, [f"{prefix}"]) == []  # a prefix is not a topic

    delete_topics(settings, topics)
    assert local_kafka.wait_for_topic_files_gone(settings, topics, timeout_s=30) == []
    assert [path.name for path in data.iterdir() if path.name.startswith(prefix)] == []
    assert topics_with_prefix(settings, prefix) == []


def test_start_refuses_a_port_in_use(fresh_settings: Settings) -> None:
    for port_name in ("client_port", "controller_port"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", getattr(fresh_settings.kafka, port_name)))
            holder.listen()
            with pytest.raises(BrokerError, match=rf"port {holder.getsockname()[1]} .*kafka\.{port_name}.*in use"):
                local_kafka.start(fresh_settings)
    assert broker_jvms(Path(fresh_settings.kafka.data_dir)) == []
    assert not (Path(fresh_settings.kafka.data_dir) / "broker.pid").exists()


def test_start_without_java_or_jars_says_so(fresh_settings: Settings, tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match=r"Java not found.*JAVA_HOME"):
        local_kafka.start(fresh_settings, env={"PATH": str(tmp_path)})
    with pytest.raises(BrokerError, match=r"Java not found.*JAVA_HOME"):
        local_kafka.start(fresh_settings, env={"PATH": os.environ["PATH"], "JAVA_HOME": str(tmp_path)})
    with pytest.raises(BrokerError, match="run `make jars`"):
        local_kafka.start(fresh_settings, jars_dir=tmp_path / "no-jars")
    assert broker_jvms(tmp_path / "kafka") == []


def test_generated_cluster_ids_never_start_with_a_dash() -> None:
    # About 1.6% of raw base64url UUIDs start with "-": 20,000 draws would hit one ~300 times.
    ids = [local_kafka.new_cluster_id() for _ in range(20_000)]
    assert not [cluster_id for cluster_id in ids if cluster_id.startswith("-")]
    assert all(len(cluster_id) == 22 for cluster_id in ids)
    assert len(set(ids)) == len(ids)


def test_a_stored_cluster_id_starting_with_a_dash_formats_and_starts(fresh_settings: Settings) -> None:
    data_dir = Path(fresh_settings.kafka.data_dir)
    data_dir.mkdir(parents=True)
    dashed = "-" + local_kafka.new_cluster_id()[1:]
    (data_dir / "cluster.id").write_text(dashed + "\n")
    broker = local_kafka.start(fresh_settings)
    assert broker.started
    assert f"cluster.id={dashed}" in (data_dir / "data" / "meta.properties").read_text()
    assert local_kafka.status(fresh_settings).state == "running"


def test_start_timeout_kills_the_broker_and_shows_its_log(tmp_path: Path) -> None:
    settings = broker_settings(tmp_path / "kafka", start_timeout_s=0.2)
    with pytest.raises(BrokerError, match=r"did not answer .* within 0\.2 s \(kafka\.start_timeout_s\)") as timed_out:
        local_kafka.start(settings)
    assert "last" in str(timed_out.value) or "wrote no log" in str(timed_out.value)
    assert broker_jvms(tmp_path / "kafka") == []
    assert local_kafka.status(settings).state == "stopped"


def test_a_broker_that_dies_during_start_up_is_reported_with_its_log(tmp_path: Path) -> None:
    settings = broker_settings(tmp_path / "kafka")
    data = tmp_path / "kafka" / "data"
    data.mkdir(parents=True)
    # Formatted storage of another node: the broker refuses it and exits.
    (data / "meta.properties").write_text("version=1\nnode.id=7\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    with pytest.raises(BrokerError, match="exited with code") as died:
        local_kafka.start(settings)
    assert "Stored node id 7" in str(died.value)  # the log tail says why
    assert broker_jvms(tmp_path / "kafka") == []
    assert not (tmp_path / "kafka" / "broker.pid").exists()


# -- Spark -----------------------------------------------------------------------

EMPTY_IVY_JOB = """
import json, sys
from pathlib import Path
from typing import TYPE_CHECKING
from routing.settings import DEFAULT_SPARK_CONF, load_settings
from routing.spark import get_spark

args = json.loads(sys.argv[1])
settings = load_settings(env={}, overrides={
    "kafka": {"bootstrap_servers": args["bootstrap"]},
    "spark": {**args["spark"], "conf": {
        **DEFAULT_SPARK_CONF, "spark.jars.ivy": args["ivy"], "spark.local.dir": args["scratch"],
        "spark.sql.warehouse.dir": args["scratch"], "spark.sql.shuffle.partitions": "1",
        **args["spark"].get("conf", {}),
    }},
})
spark = get_spark(settings, app_name="empty-ivy")
conf = spark.sparkContext.getConf()
assert not conf.contains("spark.jars.packages") and not conf.contains("spark.jars.repositories")
assert conf.get("spark.jars.ivy") == args["ivy"]
frame = (spark.read.format("kafka").options(**settings.spark_kafka_options())
         .option("subscribe", args["topic"]).option("startingOffsets", "earliest").load())
frame.selectExpr("key", "value", "partition", "offset").write.format("delta").save(args["delta"])
rows = sorted(spark.read.format("delta").load(args["delta"]).collect(), key=lambda row: row.offset)
print(json.dumps({
    "rows": [[row.key.hex(), row.value.hex(), row.partition, row.offset] for row in rows],
    "jars": [jar for jar in conf.get("spark.jars", "").split(",") if jar],
}))
spark.stop()
"""


@pytest.mark.slow
@pytest.mark.parametrize("jars", ["from jars_dir", "provided by the runtime"])
def test_spark_reads_kafka_and_writes_delta_with_only_local_jars(
    settings: Settings, kafka_broker: local_kafka.Broker, topic_factory: Callable[..., str], tmp_path: Path, jars: str
) -> None:
    """The session reads Kafka and writes Delta with the jars of ``make jars`` and nothing resolved.

    "provided by the runtime" is a managed Spark's case: the runtime's own classpath holds Delta and the
    Kafka source (here ``spark.driver.extraClassPath``, as ``$SPARK_HOME/jars`` would), ``jars_dir``
    is empty, and so the session checks and adds no jar.
    """
    topic = topic_factory(partitions=1)
    messages = [(f"forex.eur.{i}".encode(), bytes([i, 0, 255]) + "é".encode()) for i in range(12)]
    produce(settings, topic, messages)

    home, ivy, scratch = tmp_path / "home", tmp_path / "ivy", tmp_path / "scratch"
    for directory in (home, ivy):
        directory.mkdir()
    # No HOME with Maven/Ivy settings or caches, no Spark install, no extra options: only project files.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_", "ROUTER"))}
    env["HOME"] = str(home)
    args = {
        "bootstrap": settings.kafka.bootstrap_servers,
        "topic": topic,
        "ivy": str(ivy),
        "scratch": str(scratch),
        "delta": str(tmp_path / "delta"),
        "spark": {},
    }
    if jars == "provided by the runtime":
        runtime_classpath = f"{settings.spark.jars_dir}/*"
        args["spark"] = {
            "jars_dir": "",
            "conf": {
                "spark.driver.extraClassPath": runtime_classpath,
                "spark.executor.extraClassPath": runtime_classpath,
            },
        }
    result = subprocess.run(
        [sys.executable, "-c", EMPTY_IVY_JOB, json.dumps(args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert output["rows"] == [[key.hex(), value.hex(), 0, offset] for offset, (key, value) in enumerate(messages)]
    if jars == "provided by the runtime":
        assert output["jars"] == []  # nothing added: the runtime's classpath served Delta and Kafka
    else:
        # Resolved: a checkout whose var/jars is a symlink hands Spark the real directory.
        assert {Path(jar).resolve().parent for jar in output["jars"]} == {Path(settings.spark.jars_dir).resolve()}
    assert list(ivy.iterdir()) == []  # nothing was resolved
    assert sorted(path.name for path in home.iterdir()) in ([], [".cache"])  # no ~/.ivy2, no ~/.m2


def test_the_shared_session_is_local_quiet_and_unique(spark: SparkSession, settings: Settings) -> None:
    from routing.spark import get_spark

    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == settings.spark.master
    assert conf.get("spark.ui.enabled") == "false" and spark.sparkContext.uiWebUrl is None
    assert spark.conf.get("spark.sql.shuffle.partitions") == settings.spark.conf["spark.sql.shuffle.partitions"]
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == "2000"  # static: it reached the JVM at start
    assert not conf.contains("spark.jars.packages")
    assert get_spark(settings) is spark

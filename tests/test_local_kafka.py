"""The local broker's own knobs (``jobs.local_kafka``): Kafka's ``KAFKA_HEAP_OPTS`` for its heap and
``KAFKA_JVM_PERFORMANCE_OPTS`` for its collector and JIT, its listeners' host.
Its start, stop and status against a real broker are in ``tests/integration/test_stack.py``."""

from __future__ import annotations

from pathlib import Path

from jobs import local_kafka
from routing.settings import load_settings


def test_the_broker_heap_is_kafka_s_own_variable(tmp_path: Path) -> None:
    paths = local_kafka.BrokerPaths(tmp_path)
    default = local_kafka._jvm_options(paths, {})
    assert default[:2] == ["-Xmx512m", "-Xms64m"] == local_kafka.DEFAULT_HEAP_OPTS.split()
    own = local_kafka._jvm_options(paths, {"KAFKA_HEAP_OPTS": "-Xmx2g -Xms1g"})
    assert own[:2] == ["-Xmx2g", "-Xms1g"] and "-Xmx512m" not in own
    assert default[2:] == own[2:]  # the rest does not depend on it


def test_the_broker_collector_and_jit_are_kafka_s_own_variable(tmp_path: Path) -> None:
    paths = local_kafka.BrokerPaths(tmp_path)
    default = local_kafka._jvm_options(paths, {})
    assert default[2:4] == ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"] == local_kafka.DEFAULT_PERFORMANCE_OPTS.split()
    own = local_kafka._jvm_options(paths, {"KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"})
    assert own[2:4] == ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] and "-XX:+UseG1GC" not in own
    assert default[:2] + default[4:] == own[:2] + own[4:]  # replaced, as Kafka's scripts replace their defaults


def test_the_jobs_default_to_the_local_broker_s_address() -> None:
    kafka = load_settings(env={}).kafka
    assert (
        kafka.bootstrap_servers
        == f"{local_kafka.HOST}:{kafka.client_port}"
        == local_kafka.local_address(load_settings(env={}))
    )
    assert local_kafka.HOST == "127.0.0.1"  # loopback only

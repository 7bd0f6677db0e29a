"""Tests of the benchmark code, beside it.

``bench/``'s scripts import their neighbours as top-level modules (``harness``, ``stream``), so this folder's
tests do too: bench/ goes on ``sys.path``. This folder is a package (``bench.tests``), so pytest does not take
this file for ``conftest``, the name ``tests/``'s files import their own by.

The benchmarks' tiny end-to-end runs need a broker: ``settings`` and ``kafka_broker`` here are the suite's
(``tests/conftest.py``: every var/ path under the session's tmp dir, ports from the worker's own band), but per
test module, so the broker these few tests start does not outlive them beside the suite's own. The suite's
conftest is loaded from its path under a name of its own (``tests.conftest`` is this file to mypy, whose roots
include bench/).
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from jobs.local_kafka import Broker
    from routing.settings import Settings

BENCH = Path(__file__).resolve().parents[1]
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))


def _suite_conftest(name: str = "suite_conftest") -> ModuleType:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH.parent / "tests" / "conftest.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    from jobs.cluster import free_ports

    suite = _suite_conftest()
    offset = random.randrange(suite.WORKER_PORT_BAND)
    start = suite.worker_port_start(os.environ.get("PYTEST_XDIST_WORKER", ""), offset)
    client_port, controller_port = free_ports(2, start=start)
    settings: Settings = suite.make_test_settings(
        tmp_path_factory.mktemp("bench-var"), client_port=client_port, controller_port=controller_port
    )
    return settings


@pytest.fixture(scope="module")
def kafka_broker(settings: Settings) -> Iterator[Broker]:
    from jobs.local_kafka import ensure_running, stop, stop_with_this_process

    broker = ensure_running(settings)
    if not broker.started:  # one already answered at these ports: not ours to stop
        yield broker
        return
    watchdog = stop_with_this_process(broker, settings)  # even if the run is killed outright
    try:
        yield broker
    finally:
        stop(settings)
        watchdog.close()

"""The chaos harness of ``bench/chaos.py`` in ``make test``, on a broker of the test's own.

One broker SIGKILL with a restart on the same data directory and ports and one refresh job SIGKILL, in a
seeded random order, then a router SIGKILL, while messages and subscription events keep arriving (``make
chaos`` runs the same harness with 20 router kills, 3 and 3). What is left after the router kill is drained
on the shared session, as the recovery test this one replaced did: each router restart is a JVM start, the
suite's time budget (``tests/integration/test_router_recovery.py`` restarts a killed router as a process). Through
the broker fault each job must ride through or exit 1 and resume from its checkpoint when restarted; no
job may exit any other way or hang. The broker stays down for :data:`LONG_OUTAGE_S`, with Kafka client timeouts
of a few seconds (docs/operations.md: an outage that outlasts every client timeout many times over): Spark's
Kafka source retries its offset requests, so the router rides through; had the query failed, the job exits 1
and the harness restarts it from its checkpoint. (One run of the harness for both: each run starts a broker
and two job JVMs, the suite's time budget.)
Then every message is checked against the regex oracle over the subscription table at the version its
batch recorded, with no delivery lost or duplicated, and the subscription table and its rejects against
the plain-Python model of every acked event (the checks are the harness's; see its docstring).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import make_test_settings

from jobs.cluster import free_ports

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: Kafka client timeouts of the run (``kafka.spark_options``): a call gives up on a broker that is down after a
#: few seconds, not a minute, so an outage of :data:`LONG_OUTAGE_S` outlasts every retry Spark makes.
SHORT_CLIENT_TIMEOUTS = {"default.api.timeout.ms": "4000", "request.timeout.ms": "3000"}
LONG_OUTAGE_S = 35.0


def test_killed_router_broker_and_refresh_job_lose_and_duplicate_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import chaos

    client_port, controller_port = free_ports(2)
    base = make_test_settings(tmp_path / "var", client_port=client_port, controller_port=controller_port)
    base = base.replace(kafka=dataclasses.replace(base.kafka, spark_options=SHORT_CLIENT_TIMEOUTS))
    plan = chaos.ChaosPlan(
        seed=20261124,
        router_kills=1,  # the last fault, drained in process (see the module doc)
        broker_kills=1,
        refresh_kills=1,
        messages_per_round=30,
        fault_delay_s=(2.0, 4.0),
        broker_downtime_s=(LONG_OUTAGE_S, LONG_OUTAGE_S),
        drain_in_process=True,  # no JVM start for the last stretch: the shared session drains what is left
    )
    result = chaos.run_chaos(spark, base, plan, tmp_path / "run")

    assert result.problems == [], result.markdown("tests/integration/test_chaos.py")
    injected = [result.injected(kind) for kind in (chaos.ROUTER_KILL, chaos.BROKER_KILL, chaos.REFRESH_KILL)]
    assert injected == [1, 1, 1]
    # Each job answered the broker fault one of the two allowed ways (the harness fails a hang or another exit).
    for job in ("router", "refresh job"):
        assert {f"{job} rode through", f"{job} exited 1"} & {event.what for event in result.events}, job
    downtime = next(event for event in result.events if event.what == chaos.BROKER_KILL)
    assert f"restart in {LONG_OUTAGE_S:.1f} s" in downtime.detail, downtime  # down 9x the longest client timeout
    # The table changed under the router while it ran: its batches pinned more than one version.
    assert len(result.routed_versions) > 1

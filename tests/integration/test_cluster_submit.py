"""spark-submit the router to a real Spark standalone cluster with the packed environment.

The cluster is one master and two 1-core workers started from pyspark's own classes
(:mod:`jobs.cluster`); the artefacts are the ones ``make package`` builds (:mod:`jobs.package`,
the environment cached under ``build/``). The job is a copy of ``jobs/route.py`` outside the
repository, submitted in client mode with ``PYTHONPATH`` unset, whose driver runs the packed
environment unpacked into a temp directory and whose executors run ``./environment/bin/python``
from ``--archives``: nothing can import the dev checkout. The submitted file runs ``route.py``'s
``main()`` unchanged, then one probe job on the same executors, whose tasks report which
interpreter and which ``routing._native`` ran. (A second application for the probe cost three more
JVMs, its driver and two executors, on a 2-core machine.)

The router's output must equal, record by record, the regex oracle
(:func:`router_support.expected_outcomes`, which every local-mode test is held to as well), with
every delivery and dead-letter id the SHA-256 of its coordinates: so the broadcast snapshot, the
native module on executors and the per-worker matcher cache behave across processes as they do in
one. (No local-mode run of the same topic beside it: equal to the same oracle and the same id
function, it could only agree, and on two cores it would slow the cluster it runs beside.)

Time is spent where it cannot overlap: the cluster's JVMs start while the package builds.

The first two tests are plain unit tests of how the spark-submit command line overrides the
settings (:func:`routing.spark.spark_conf`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    active_subscriptions,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    produce,
    read_routed,
    route_flags,
    router_settings,
    with_router,
)

from dev.local_spark import JIT_QUICK, join_options
from routing.settings import DEFAULT_SPARK_CONF, REPO_ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

#: Seconds one spark-submit may take before the test kills it (generous: the test machine is shared).
SUBMIT_TIMEOUT_S = 480.0
EXECUTOR_PYTHON = "./environment/bin/python"
#: The test's JVM options for the applications' drivers and executors: quick JIT, the parallel collector.
JOB_JVM_OPTIONS = join_options(JIT_QUICK, DEFAULT_SPARK_CONF["spark.driver.extraJavaOptions"])
REQUIRED_JAR_NAMES = (
    "delta-spark_2.13-4.4.0.jar",
    "delta-storage-4.4.0.jar",
    "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    "kafka-clients-3.9.2.jar",
)

SUBSCRIPTIONS = [
    ("stock.*.msft", "msft-desk"),
    ("stock.#", "all-stocks"),
    ("#.eur", "euro-desk"),
    ("forex.*.*", "fx"),
    ("*.nasdaq.#", "nasdaq"),
    ("audit.#", "audit"),
    ("#", "firehose-partial"),  # unsubscribed below: the snapshot must not keep it
]
UNSUBSCRIBE = [("#", "firehose-partial")]
KEY_WORDS = ["stock", "forex", "nasdaq", "nyse", "msft", "aapl", "eur", "usd", "audit", ""]
#: Two micro-batches: executors reuse their cached matcher in the second; more only cost time.
MAX_OFFSETS_PER_TRIGGER = 400

# ---------------------------------------------------------------------------------------------
# spark_conf under spark-submit (no JVM)


def test_spark_submit_master_jars_and_python_override_the_settings(settings: Settings, tmp_path: Path) -> None:
    from routing.spark import spark_conf

    spark_settings = dataclasses.replace(settings.spark, jars_dir=str(tmp_path / "no-jars"), master="local[2]")
    submitted = {
        "spark.master": "spark://127.0.0.1:7077",
        "spark.jars": ",".join(f"/opt/router/jars/{name}" for name in REQUIRED_JAR_NAMES),
        "spark.pyspark.python": EXECUTOR_PYTHON,
        "spark.sql.shuffle.partitions": "16",
    }
    conf = spark_conf(settings.replace(spark=spark_settings), submitted=submitted)
    for key, value in submitted.items():
        assert conf[key] == value, key
    # The driver's interpreter path means nothing on other nodes: the submitter chooses.
    assert "spark.pyspark.driver.python" not in conf
    # Nor does a loopback driver address: executors elsewhere must reach the driver.
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    # Outside spark-submit the settings (and this interpreter) apply, and the jars directory must exist.
    local = spark_conf(settings)
    assert local["spark.master"] == settings.spark.master
    assert local["spark.pyspark.python"] == sys.executable
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.jars"].split(",") == [str(path) for path in sorted(Path(settings.spark.jars_dir).glob("*.jar"))]


def test_spark_submit_jars_must_include_delta_and_the_kafka_source(settings: Settings) -> None:
    from routing.spark import SparkJarsMissingError, spark_conf

    without_kafka = [name for name in REQUIRED_JAR_NAMES if not name.startswith("kafka-clients")]
    with pytest.raises(SparkJarsMissingError, match=r"spark-submit --jars \(kafka-clients\)"):
        spark_conf(settings, submitted={"spark.jars": ",".join(f"/jars/{name}" for name in without_kafka)})
    with pytest.raises(ValueError, match=r"spark\.jars\.packages"):
        spark_conf(
            settings,
            submitted={
                "spark.jars": ",".join(REQUIRED_JAR_NAMES),
                "spark.jars.packages": "io.delta:delta-spark_2.13:4.4.0",
            },
        )


# ---------------------------------------------------------------------------------------------
# The cluster

#: The submitted file: the router job (``route.py`` beside it, unchanged), then a probe job on the same
#: session's executors: where executor tasks found Python and the native module.
PROBE_THEN_ROUTE = """
import json, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import route

from routing.settings import load_settings
from routing.spark import get_spark

# Before the route, in the session it will use (its main stops the session it ran in, as an entry point does).
spark = get_spark(load_settings(sys.argv[sys.argv.index("--conf") + 1]))

def where(_rows):
    import os, sys
    import routing._native
    yield (sys.executable, sys.prefix, routing._native.__file__, os.environ.get("PYTHONPATH", ""))

rows = spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).collect()
print("PROBE " + json.dumps(sorted(set(json.dumps(row) for row in rows))), flush=True)
sys.exit(route.main(sys.argv[1:]))
"""


def submit_environment(tmp_path: Path, spark_home: Path) -> dict[str, str]:
    """The submitting shell: no PYTHONPATH, no inherited Spark or PySpark variables."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "PYTHONPATH" and not key.startswith(("PYSPARK_", "SPARK_", "ROUTER"))
    }
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir(exist_ok=True)
    env.update({"SPARK_HOME": str(spark_home), "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOCAL_IP": "127.0.0.1"})
    return env


class Submission:
    """One spark-submit running in the background; :meth:`wait` collects it (killing its group on timeout)."""

    def __init__(self, command: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        # Output goes to a file, not a pipe nobody reads while the test does other work.
        with log.open("w") as output:
            self.process = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT, text=True, start_new_session=True
            )
        self.started = time.monotonic()

    def wait(self) -> str:
        """The job's output (stdout and stderr) once it exited 0."""
        try:
            self.process.wait(timeout=max(1.0, SUBMIT_TIMEOUT_S - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"spark-submit did not finish in {SUBMIT_TIMEOUT_S:.0f} s; output in {self.log}")
        output = self.log.read_text()
        assert self.process.returncode == 0, (
            f"spark-submit exited {self.process.returncode}; output in {self.log}:\n{output[-4000:]}"
        )
        return output

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def keys_and_messages() -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    import random

    rng = random.Random(20261122)
    keys: list[bytes | None] = [
        ".".join(rng.choice(KEY_WORDS) for _ in range(rng.randrange(0, 5))).encode() for _ in range(700)
    ]
    keys += [b"stock.nasdaq.msft", b"forex.usd.eur", b"", None, b"\xff\xfe", b"w." * 40]  # dead letters too
    return [(key, f"payload {index}".encode(), []) for index, key in enumerate(keys)]


@pytest.mark.integration
@pytest.mark.slow
def test_spark_submit_to_a_standalone_cluster_routes_exactly_as_the_oracle_says(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    from jobs.cluster import StandaloneCluster, spark_home
    from jobs.package import build_package

    # The cluster's JVMs boot while this process packages and loads the data (the slow steps overlap).
    cluster = StandaloneCluster(tmp_path / "spark-cluster", workers=2, cores_per_worker=1)
    starting = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    cluster_started = starting.submit(cluster.start)
    submissions: list[Submission] = []
    try:
        package = build_package(tmp_path / "dist", REPO_ROOT / "build")
        driver_env = tmp_path / "driver-env"
        with tarfile.open(package.env_archive) as archive:
            archive.extractall(driver_env, filter="fully_trusted")  # venv-pack archives hold symlinks
        assert (driver_env / "bin" / "python").exists()

        # The job file and the settings file, copied out of the repository; the job runs from there.
        submit_dir = tmp_path / "submit"
        submit_dir.mkdir()
        job = submit_dir / "route.py"
        shutil.copyfile(REPO_ROOT / "jobs" / "route.py", job)
        conf_file = submit_dir / "router.toml"
        shutil.copyfile(REPO_ROOT / "conf" / "router.toml", conf_file)
        submitted = submit_dir / "probe_then_route.py"
        submitted.write_text(PROBE_THEN_ROUTE)
        home = spark_home()
        env = submit_environment(tmp_path, home)

        # While the cluster's JVMs start: subscriptions in Delta (one unsubscribed again), messages in Kafka,
        # the oracle's verdicts.
        topic = topic_factory(partitions=2)
        local = router_settings(settings, tmp_path / "local", [topic], max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER)
        apply_subscriptions(spark, local, tmp_path / "subscribe.jsonl", SUBSCRIPTIONS)
        version = apply_subscriptions(spark, local, tmp_path / "unsubscribe.jsonl", unsubscribe=UNSUBSCRIBE)
        subscriptions = active_subscriptions(spark, local, version)
        assert sorted(subscriptions) == sorted(set(SUBSCRIPTIONS) - set(UNSUBSCRIBE))
        records = produce(local, topic, keys_and_messages(), partitions=2)
        expected = expected_outcomes(records, local.router, local.validator(), subscriptions)

        cluster_started.result()
        common = [
            str(home / "bin" / "spark-submit"),
            "--master",
            cluster.master_url,
            "--deploy-mode",
            "client",
            "--executor-cores",
            "1",
            "--executor-memory",
            "1g",
            "--archives",
            f"{package.env_archive}#environment",
            "--jars",
            ",".join(str(jar) for jar in package.jars),
            "--conf",
            f"spark.pyspark.driver.python={driver_env / 'bin' / 'python'}",
            "--conf",
            f"spark.pyspark.python={EXECUTOR_PYTHON}",
            "--conf",
            "spark.python.worker.reuse=true",
            # Applications of a minute or two: C1 only and the parallel collector, as the tests give a job's own
            # JVM (less CPU, on a machine where the other test worker competes for both cores).
            "--driver-java-options",
            JOB_JVM_OPTIONS,
            "--conf",
            f"spark.executor.extraJavaOptions={JOB_JVM_OPTIONS}",
        ]
        cluster_out = tmp_path / "cluster"
        on_cluster = with_router(
            local,
            checkpoint_path=str(cluster_out / "router_checkpoint"),
            deliveries_path=str(cluster_out / "deliveries"),
            dead_letters_path=str(cluster_out / "dead_letters"),
            unrouted_path=str(cluster_out / "unrouted"),
            app_id=f"{local.router.app_id}-cluster",
        )
        submissions.append(
            Submission(
                [
                    *common,
                    "--name",
                    "router-cluster-test",
                    str(submitted),
                    "--conf",
                    str(conf_file),
                    "--available-now",
                    "--json",
                    *route_flags(on_cluster),
                ],
                cwd=submit_dir,
                env=env,
                log=tmp_path / "route-submit.log",
            )
        )
        route_output = submissions[0].wait()
        applications = cluster.status()["completedapps"]
    finally:
        for submission in submissions:
            submission.kill()
        with contextlib.suppress(Exception):
            cluster_started.result()  # its failure, if any, is reported above; stop whatever did start
        starting.shutdown()
        cluster.stop()

    # The application ran on the cluster, with an executor on each worker that unpacked the env.
    assert [app["name"] for app in applications] == ["router-cluster-test"]
    for worker in ("worker-1", "worker-2"):
        unpacked = sorted((tmp_path / "spark-cluster" / "work" / worker).glob("app-*/*/environment/bin/python"))
        assert len(unpacked) == 1, f"{worker} ran {len(unpacked)} executors with the packed environment"

    # Executor tasks ran the shipped interpreter and native module, never the repository's.
    probed = [json.loads(row) for row in json.loads(route_output.split("PROBE ", 1)[1].splitlines()[0])]
    assert probed
    work = (tmp_path / "spark-cluster" / "work").resolve()
    for executable, prefix, native_file, pythonpath in probed:
        # ./environment in an executor's directory under a worker's work dir: the unpacked archive.
        assert Path(executable).parent.parent.name == "environment", executable
        assert Path(prefix).resolve().is_relative_to(work), prefix
        assert Path(native_file).is_relative_to(prefix), (native_file, prefix)
        # Spark puts only its own pyspark.zip and py4j (the cluster's Spark install) on the path.
        assert all(Path(entry).is_relative_to(home) for entry in pythonpath.split(os.pathsep) if entry), pythonpath

    # The cluster's run equals the oracle, record by record, and every id is the SHA-256 of its coordinates.
    routed = read_routed(spark, on_cluster)
    assert routed.outcomes() == expected
    assert_ids_exact(routed)
    assert routed.deliveries and routed.dead_letters
    summary = json.loads(next(line for line in reversed(route_output.splitlines()) if line.startswith("{")))
    assert summary["input_rows"] == len(records)
    assert summary["deliveries"] == len(routed.deliveries)
    assert summary["dead_letters"] == len(routed.dead_letters)
    assert summary["batches"] > 1, summary
    assert summary["snapshot_versions"] == [version]

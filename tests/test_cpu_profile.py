"""dev/cpu_profile.py: each process's CPU goes to its kind, judged by its own and its parent's arguments."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dev.cpu_profile import XDIST_WORKER, kind_of, main, thread_group

JAVA = "/usr/lib/jvm/java-17/bin/java"
SUBMIT = [JAVA, "-cp", "x", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"]
WORKER = ["/repo/.venv/bin/python", "-u", "-c", XDIST_WORKER]  # as execnet starts it


@pytest.mark.parametrize(
    ("argv", "parent", "kind"),
    [
        (SUBMIT, WORKER, "tests' own driver JVMs"),
        # A job a test starts: its settings live under pytest's tmp dir, which does not make it the test's JVM.
        (
            SUBMIT,
            ["/repo/.venv/bin/python", "-m", "routing", "list", "--settings", "/tmp/pytest-of-root/1/s.toml"],
            "job driver JVMs",
        ),
        ([JAVA, "-cp", "x", "kafka.Kafka", "server.properties"], WORKER, "kafka broker"),
        (
            [
                JAVA,
                "org.apache.spark.deploy.SparkSubmit",
                "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
            ],
            WORKER,
            "Spark Connect server JVM",
        ),
        (["/repo/.venv/bin/python", "-m", "pyspark.daemon"], SUBMIT, "Spark Python workers"),
        (WORKER, ["/repo/.venv/bin/python", "-m", "pytest", "-n", "3"], "pytest workers"),
        (["/root/.cargo/bin/cargo", "test"], ["make"], "cargo and Rust tests"),
        ([], [], "other"),
    ],
)
def test_kinds(argv: list[str], parent: list[str], kind: str) -> None:
    assert kind_of(argv, parent) == kind


def test_a_busy_command_is_counted_and_its_exit_status_kept(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    # Fixed work, then a pause: the process outlives a few samples.
    busy = "import sys, time\nn = 0\nfor i in range(20_000_000): n += i\ntime.sleep(1.5)\nsys.exit(3)"
    assert main([str(out), "--", sys.executable, "-c", busy]) == 3
    result = json.loads(out.read_text())
    assert result["exit_status"] == 3
    assert result["cpu_s"]["other Python"] > 0.2
    assert result["processes"]["other Python"] >= 1
    assert result["per_minute"], "the last, partial minute is kept"


def test_no_command_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([str(tmp_path / "profile.json")])
    assert exited.value.code == 2
    assert "give the command after --" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("C2 CompilerThre\n", "C2 compiler"),
        ("C1 CompilerThre", "C1 compiler"),
        ("GC Thread#3", "collector and VM"),
        ("VM Thread", "collector and VM"),
        ("VM Periodic Tas", "VM periodic task"),
        ("Executor task l", "Spark tasks"),
        ("dag-scheduler-e", "dag-scheduler-e"),
        ("Thread-12", "Thread"),
        ("", "unnamed"),
    ],
)
def test_thread_groups(name: str, group: str) -> None:
    assert thread_group(name) == group

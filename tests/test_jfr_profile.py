"""dev/jfr_profile.py: samples summed by thread group and frame, and a real recording of the test session's JVM."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dev.jfr_profile import TASK_THREADS, events_of, main, report, summarize, thread_group

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def sample(thread: str, *frames: str) -> dict[str, Any]:
    """One event as ``jfr print --json`` writes it (the fields the summary reads)."""
    return {
        "type": "jdk.ExecutionSample",
        "values": {
            "sampledThread": {"javaName": thread, "osName": thread},
            "stackTrace": {
                "frames": [
                    # JFR writes a class's internal name: a/Leaf
                    {
                        "method": {
                            "type": {"name": frame.rsplit(".", 1)[0].replace(".", "/")},
                            "name": frame.rsplit(".", 1)[1],
                        }
                    }
                    for frame in frames
                ]
            },
        },
    }


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("Executor task launch worker for task 3.0 in stage 7.0 (TID 21)", TASK_THREADS),
        ("Executor task idle worker 12", TASK_THREADS),  # the name JFR keeps: the thread's when first seen
        ("C2 CompilerThread0", "C# CompilerThread#"),
        ("stream execution thread for router [id = 1f0c, runId = 9a2e]", "stream execution thread for router"),
        ("", "?"),
    ],
)
def test_threads_group_without_their_numbers(name: str, group: str) -> None:
    assert thread_group(name) == group


def test_self_and_total_count_each_sample_once_per_frame() -> None:
    task = "Executor task launch worker for task 1.0 in stage 2.0 (TID 3)"
    recording = {
        "recording": {
            "events": [
                sample(task, "a.Leaf.run", "a.Mid.call", "a.Root.main"),
                sample(task, "a.Other.run", "a.Mid.call", "a.Mid.call", "a.Root.main"),  # recursion: Mid once
                sample(task, "jdk.internal.misc.Unsafe.park", "a.Root.main"),  # idle: left out
                sample("main", "b.Main.main"),
            ]
        }
    }
    groups = summarize(events_of(recording))
    worker = groups[TASK_THREADS]
    assert worker.samples == 2
    assert worker.self_frames == {"a.Leaf.run": 1, "a.Other.run": 1}
    assert worker.total_frames == {"a.Leaf.run": 1, "a.Other.run": 1, "a.Mid.call": 2, "a.Root.main": 2}
    assert groups["main"].samples == 1
    assert summarize(events_of(recording), keep_idle=True)[TASK_THREADS].samples == 3
    text = report(groups, top=5, groups_shown=1)
    assert "3 samples" in text and f"== {TASK_THREADS}: 2 samples, 66.7% of all" in text
    assert "100.0%  a.Mid.call" in text and "== main" not in text


def test_a_recording_of_the_session_jvm_shows_its_task_threads(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jvm: Any = spark._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    stop = threading.Event()

    def query() -> None:
        spark.range(0, 5_000_000, numPartitions=2).selectExpr("sum(hash(id))").collect()

    def busy() -> None:  # task threads running Java for the whole recording
        while not stop.is_set():
            query()

    # Planned once first: in a fresh session the first planning alone outlasts the recording.
    query()
    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    try:
        assert main(["--pid", str(pid), "--seconds", "3", "--keep", str(tmp_path / "x.jfr")]) == 0
    finally:
        stop.set()
        worker.join(timeout=120)
    out = capsys.readouterr().out
    assert f"== {TASK_THREADS}" in out, out
    assert main(["--read", str(tmp_path / "x.jfr"), "--groups", "1"]) == 0  # the kept file reads again
    assert capsys.readouterr().out.count("== ") == 1


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--read", str(tmp_path / "missing.jfr")]) == 2
    assert capsys.readouterr().err == f"jfr_profile: no recording at {tmp_path / 'missing.jfr'}\n"
    with pytest.raises(SystemExit):
        main(["--seconds", "0"])

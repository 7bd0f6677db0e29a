"""The harness every benchmark shares (``bench/harness.py``): the run's record, tables, the /proc CPU reading."""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

import harness
import pytest


def test_the_run_record_names_the_command_the_date_and_the_load_before_and_after() -> None:
    record = harness.RunRecord.start(str(harness.REPO_ROOT / "bench" / "stream.py"), ["--sizes", "10000", "a b"])
    assert record.command == "python bench/stream.py --sizes 10000 'a b'"
    assert len(record.load_before) == 3 and all(load >= 0 for load in record.load_before)
    fixed = harness.RunRecord("python bench/x.py", datetime.datetime(2026, 12, 2, 5, 7, tzinfo=datetime.UTC), (1, 2, 3))
    line = fixed.line(load_after=(0.5, 0.25, 0.125))
    assert line.startswith("`python bench/x.py` on 2026-12-02 05:07 UTC; Python ")
    assert line.endswith("; load average (1/5/15 min) 1.00/2.00/3.00 before, 0.50/0.25/0.12 after.")
    assert f"{os.cpu_count()} CPUs" in line
    # Without a load given, the line reads the load at the time it is written.
    assert re.search(r"before, \d+\.\d\d/\d+\.\d\d/\d+\.\d\d after\.$", fixed.line())


def test_a_report_is_printed_and_written_and_names_its_chart(tmp_path: Path, capsys: object) -> None:
    table = harness.markdown_table(["a", "b"], [["1", "2"], ["3", "4"]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
    # Read back: the cells under a heading, the header row left out.
    report = f"# t\n\n## Figures (ms)\n\nnote\n\n{table}\n\n## Next\n\n| x |\n|---|\n| y |\n"
    assert harness.section_rows(report, "Figures") == [["1", "2"], ["3", "4"]]
    assert harness.section_rows(report, "Next") == [["y"]]
    with pytest.raises(ValueError, match="no section 'Other'"):
        harness.section_rows(report, "Other")
    chart = harness.write_report(f"# t\n\n{table}\n", tmp_path / "results" / "t.md")
    assert chart == tmp_path / "results" / "t.png"
    assert (tmp_path / "results" / "t.md").read_text(encoding="utf-8") == f"# t\n\n{table}\n"


def test_each_bench_broker_has_its_own_ports_and_data() -> None:
    kafka = harness.bench_kafka("kafka", 19192)
    assert kafka == {
        "client_port": "19192",
        "controller_port": "19193",
        "data_dir": str(harness.REPO_ROOT / "var" / "bench" / "kafka"),
    }


def test_process_cpu_sums_the_jvm_and_the_python_workers_from_proc(
    tmp_path: Path,
) -> None:
    """The JVM counts its own time; the daemon and its live workers theirs, the daemon also its reaped workers'."""
    tick = os.sysconf("SC_CLK_TCK")

    def process(pid: str, comm: str, cmdline: bytes, utime: int, stime: int, cutime: int, cstime: int) -> None:
        entry = tmp_path / pid
        entry.mkdir()
        # Fields 3-13 (state .. cmajflt), then utime stime cutime cstime, then the rest.
        fields = ["S", *["0"] * 10, str(utime), str(stime), str(cutime), str(cstime), "20", "0", "1"]
        (entry / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
        (entry / "cmdline").write_bytes(cmdline)

    python = b"/venv/bin/python\0-m\0pyspark.daemon\0pyspark.worker\0"
    process("100", "java", b"/usr/bin/java\0-cp\0x\0", 50 * tick, 10 * tick, 7 * tick, 7 * tick)
    process("200", "python", python, 1 * tick, 1 * tick, 30 * tick, 2 * tick)  # the daemon, workers reaped
    process("201", "python", python, 5 * tick, 3 * tick, 0, 0)  # a live worker
    process("300", "weird) name (x", b"/usr/bin/kafka\0", 99 * tick, 0, 0, 0)  # neither: a broker
    (tmp_path / "self").mkdir()  # not a pid
    (tmp_path / "400").mkdir()  # exited between the listing and the read: skipped

    # The JVM's threads: its JIT compiler threads, its collector's threads and its executor task threads count
    # as such; the others (and a name that only looks like one) do not.
    threads = tmp_path / "100" / "task"
    for tid, comm, ticks in [
        ("100", "java", 3),
        ("101", "C2 CompilerThre", 4),
        ("102", "C1 CompilerThre", 2),
        ("103", "Executor task l", 9),
        ("104", "x) C2 CompilerThre", 8),
        ("105", "GC Thread#0", 5),
        ("106", "G1 Conc#0", 1),
        ("107", "VM Thread", 2),
        ("108", "Executor task i", 4),
        ("109", "stream executio", 7),
        ("110", "x) GC Thread#1", 11),
    ]:
        (threads / tid).mkdir(parents=True)
        fields = ["S", *["0"] * 10, str(ticks * tick), "0", "0", "0", "20", "0", "1"]
        (threads / tid / "stat").write_text(f"{tid} ({comm}) {' '.join(fields)}\n")

    cpu = harness.process_cpu(100, proc=tmp_path)
    assert cpu == harness.ProcessCpu(jvm_s=60.0, python_s=42.0, jit_s=6.0, gc_s=8.0, tasks_s=13.0)
    assert cpu.rest_s == 60.0 - 6.0 - 8.0 - 13.0
    earlier = harness.ProcessCpu(jvm_s=10.0, python_s=2.0, jit_s=1.0, gc_s=3.0, tasks_s=4.0)
    assert cpu - earlier == harness.ProcessCpu(jvm_s=50.0, python_s=40.0, jit_s=5.0, gc_s=5.0, tasks_s=9.0)

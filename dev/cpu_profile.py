"""CPU seconds by process kind while a command runs: where a run of the suite (or a demo) spends its cores.

    python -m dev.cpu_profile OUT.json -- make test

Every second it reads ``/proc/<pid>/stat`` of every process and adds each one's new CPU time to its kind
(:func:`kind_of`: the tests' own Spark driver JVMs apart from the JVMs of the jobs a test starts, the brokers,
the Spark Connect server, Python workers, pytest, cargo). A process that lives less than a second is missed,
and one that exits loses its last second. It prints the totals, and writes them with a per-minute timeline and,
for the JVMs, CPU seconds by thread (:func:`thread_group`: the JIT compilers, the collector, Spark's task threads),
which says whether a JVM's CPU is the work it was given or its own upkeep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from routing.processes import stat_fields

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
#: How a pytest-xdist worker is started: ``python -u -c <this>`` (execnet's bootstrap).
XDIST_WORKER = "import sys;exec(eval(sys.stdin.readline()))"


def is_xdist_worker(argv: list[str]) -> bool:
    return XDIST_WORKER in argv[1:4]


def is_pytest(argv: list[str]) -> bool:
    return is_xdist_worker(argv) or argv[1:3] == ["-m", "pytest"]


def is_java(argv: list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name == "java"


def cpu_seconds(fields: list[str]) -> float:
    """User + system CPU seconds of a ``stat_fields`` split (field n of stat(5) at index n - 3: 14 and 15)."""
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def kind_of(argv: list[str], parent: list[str]) -> str:
    """The kind of a process from its arguments and its parent's (both as ``/proc/<pid>/cmdline`` splits)."""
    if not argv:
        return "other"
    program, line = Path(argv[0]).name, " ".join(argv)
    if is_java(argv):
        if "kafka.Kafka" in argv:
            return "kafka broker"
        if "org.apache.spark.sql.connect.service.SparkConnectServer" in argv:
            return "Spark Connect server JVM"
        if any(name in line for name in ("deploy.master.Master", "deploy.worker.Worker", "CoarseGrainedExecutor")):
            return "standalone cluster JVM"
        if "org.apache.spark.deploy.SparkSubmit" in argv:
            return "tests' own driver JVMs" if is_pytest(parent) else "job driver JVMs"
        return "other JVM"
    if program.startswith("python"):
        if "pyspark.daemon" in argv or "pyspark.worker" in argv or (parent and Path(parent[0]).name == "java"):
            return "Spark Python workers"
        if is_xdist_worker(argv):
            return "pytest workers"
        if argv[1:3] == ["-m", "pytest"]:
            return "pytest"
        if "ipykernel_launcher" in line:
            return "notebook kernel"
        return "other Python"
    if program in ("cargo", "rustc", "clippy-driver", "cargo-clippy", "rustfmt", "cc", "ld") or "/target/" in argv[0]:
        return "cargo and Rust tests"
    return "other"


#: Digits and ``#`` that number threads of one pool (``GC Thread#1``, ``C2 CompilerThre``'s siblings).
THREAD_NUMBER = re.compile(r"[#\-]?\d+$")


def thread_group(name: str) -> str:
    """The pool a JVM thread belongs to, from its name as ``/proc`` gives it (15 characters, numbered)."""
    name = THREAD_NUMBER.sub("", name.strip()).strip(" -#")
    if name.startswith(("C1 Compiler", "C2 Compiler")):
        return name[:2] + " compiler"
    if name.startswith("VM Periodic"):
        return "VM periodic task"
    if name.startswith(("GC Thread", "G1 ", "VM Thread")):
        return "collector and VM"
    if name.startswith("Executor task"):
        return "Spark tasks"
    return name or "unnamed"


def read_threads(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of ``pid``'s threads by :func:`thread_group`; empty once it is gone."""
    groups: dict[str, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return groups
    for tid in tasks:
        try:
            fields = stat_fields(Path(f"/proc/{pid}/task/{tid}/stat").read_text())
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text()
        except OSError:
            continue
        group = thread_group(name)
        groups[group] = groups.get(group, 0.0) + cpu_seconds(fields)
    return groups


def read_process(pid: int) -> tuple[int, list[str], float] | None:
    """Parent pid, arguments and CPU seconds (user + system) of ``pid``; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat_fields(stat)  # field n of stat(5) at index n - 3: ppid 4
    return int(fields[1]), [arg.decode(errors="replace") for arg in argv if arg], cpu_seconds(fields)


def scan() -> dict[int, tuple[int, list[str], float]]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (process := read_process(int(name))) is not None:
            found[int(name)] = process
    return found


def profile(command: list[str], interval_s: float = 1.0) -> dict[str, object]:
    """Run ``command``; its exit status, wall time, CPU seconds per kind and per minute, processes per kind, and the
    JVMs' CPU seconds by thread pool."""
    before = scan()
    seen = {pid: process[2] for pid, process in before.items()}  # what ran before counts nothing
    seen_threads = {pid: read_threads(pid) for pid, process in before.items() if is_java(process[1])}
    threads: dict[str, dict[str, float]] = {}
    totals: dict[str, float] = {}
    pids_by_kind: dict[str, set[int]] = {}  # pids seen using CPU: how many processes of each kind ran
    minute: dict[str, float] = {}
    timeline: list[dict[str, float]] = []
    started = time.monotonic()
    child = subprocess.Popen(command)
    while True:
        done = child.poll() is not None
        processes = scan()
        for pid, (ppid, argv, cpu) in processes.items():
            delta, seen[pid] = cpu - seen.get(pid, 0.0), cpu
            if delta > 0 and pid != os.getpid():
                kind = kind_of(argv, processes.get(ppid, (0, [], 0.0))[1])
                totals[kind] = totals.get(kind, 0.0) + delta
                pids_by_kind.setdefault(kind, set()).add(pid)
                minute[kind] = minute.get(kind, 0.0) + delta
                if is_java(argv):
                    by_group = threads.setdefault(kind, {})
                    last = seen_threads.setdefault(pid, {})
                    for group, group_cpu in read_threads(pid).items():
                        # A thread that exits lowers its group's sum: count only growth.
                        by_group[group] = by_group.get(group, 0.0) + max(0.0, group_cpu - last.get(group, 0.0))
                        last[group] = group_cpu
        if done or time.monotonic() - started >= 60 * (len(timeline) + 1):
            timeline.append({"load_1min": round(os.getloadavg()[0], 1), **{k: round(v, 1) for k, v in minute.items()}})
            minute = {}
        if done:
            break
        time.sleep(interval_s)
    ordered = dict(sorted(((kind, round(cpu, 1)) for kind, cpu in totals.items()), key=lambda item: -item[1]))
    return {
        "command": command,
        "exit_status": child.returncode,
        "wall_s": round(time.monotonic() - started, 1),
        "cpu_s": ordered,
        "processes": {kind: len(pids_by_kind[kind]) for kind in ordered},
        "per_minute": timeline,
        "jvm_threads": {
            kind: dict(
                sorted(((group, round(cpu, 1)) for group, cpu in groups.items() if cpu >= 0.1), key=lambda i: -i[1])
            )
            for kind, groups in threads.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev.cpu_profile", description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="where the JSON goes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    result = profile(command)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    cpu_s, status = result["cpu_s"], result["exit_status"]
    assert isinstance(cpu_s, dict) and isinstance(status, int)
    processes = result["processes"]
    assert isinstance(processes, dict)
    for kind, cpu in cpu_s.items():
        print(f"{cpu:>9,.1f} CPU s  {kind} ({processes[kind]} processes)")
    threads = result["jvm_threads"]
    assert isinstance(threads, dict)
    for kind, groups in threads.items():
        top = ", ".join(f"{group} {cpu:,.0f}" for group, cpu in list(groups.items())[:6])
        print(f"  {kind} by thread: {top}")
    print(f"{result['wall_s']:>9,.1f} s wall, exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())

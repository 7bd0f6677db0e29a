"""A Spark standalone cluster on this machine, from pyspark's own classes: one master, N workers.

    python -m jobs.cluster start [--workers 2] [--dir var/spark-cluster]   # prints the master URL
    python -m jobs.cluster status | stop [--dir var/spark-cluster]

For trying spark-submit (``conf/spark-submit/standalone.sh``) and for the cluster test
(``tests/integration/test_cluster_submit.py``); a real cluster runs Spark's own distribution.

Each daemon is ``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` (or
``...worker.Worker``) with ``SPARK_HOME`` = pyspark's install directory, on loopback
(``SPARK_LOCAL_IP=127.0.0.1``) and free ports chosen at start. ``spark-class`` execs the JVM, so
each daemon is one process; it leads its own process group, which its executors and their
Python workers join, so ``stop`` signals the whole group (SIGTERM, then SIGKILL after
``stop_timeout_s``) and leaves no JVM behind. Start-up waits until the master's JSON status
page lists every worker ALIVE. State lives in the cluster directory: ``conf/`` (an empty
``SPARK_CONF_DIR``, so nothing from the machine leaks in), ``logs/<daemon>.log``,
``work/<worker>/`` (each worker's application directories: the shipped archives and the
executors' stdout/stderr) and ``cluster.json`` (pids and ports, for ``stop`` from another process).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from routing.processes import group_alive
from routing.settings import resolve_path

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STATE_FILE = "cluster.json"
DEFAULT_DIR = "var/spark-cluster"  # relative to the current directory, like any path flag


class ClusterError(RuntimeError):
    """The cluster did not start (the message names the daemon and its log) or is not running."""


def spark_home() -> Path:
    """pyspark's install directory: it has ``bin/spark-class`` and ``jars/``."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"{home}/bin/spark-class not found: pyspark is not a full install")
    return home


#: The kernel hands these out for outgoing connections and ``bind(port 0)``.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default ephemeral range, if the file above cannot be read.
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
#: Ports below this are left alone (well-known and commonly configured services).
LOWEST_FREE_PORT = 10000


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's ephemeral port range, inclusive (Linux's default where it cannot be read)."""
    try:
        low, high = (int(word) for word in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def free_port_candidates(ephemeral: tuple[int, int]) -> range:
    """Ports :func:`free_ports` chooses from: the larger span outside ``ephemeral`` (and >= 10000)."""
    low, high = ephemeral
    below = range(LOWEST_FREE_PORT, max(LOWEST_FREE_PORT, low))
    above = range(max(LOWEST_FREE_PORT, high + 1), 65536)
    return below if len(below) >= len(above) else above


def free_ports(count: int, host: str = HOST, *, start: int | None = None) -> list[int]:
    """``count`` distinct TCP ports nothing listens on right now, outside the ephemeral range.

    A port is often bound well after it is chosen (a test session's broker starts when its first
    test needs it). A port from the ephemeral range can be taken in between by any outgoing
    connection, so these come from outside it, where only an explicit bind can take them. The
    search starts at ``start`` (callers running side by side pass disjoint starts, such as one per
    pytest-xdist worker) or at a random port, and probes each candidate by binding it.
    """
    candidates = free_port_candidates(ephemeral_port_range())
    if start is None:
        start = random.SystemRandom().randrange(candidates.start, candidates.stop)
    elif start not in candidates:
        raise ValueError(f"start port {start} is outside {candidates.start}-{candidates.stop - 1}")
    found: list[int] = []
    offset = start - candidates.start
    for step in range(len(candidates)):
        port = candidates[(offset + step) % len(candidates)]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise OSError(f"fewer than {count} free TCP ports on {host} in {candidates.start}-{candidates.stop - 1}")


@dataclasses.dataclass
class Daemon:
    name: str
    pid: int
    port: int
    webui_port: int
    log: str


@dataclasses.dataclass
class StandaloneCluster:
    """One master and ``workers`` workers (``cores_per_worker`` cores, ``memory_per_worker`` each)."""

    root: Path
    workers: int = 2
    cores_per_worker: int = 1
    #: Executors of one application share it; spark-submit's ``spark.executor.memory`` must fit.
    memory_per_worker: str = "1536m"
    #: Heap of the master and worker daemons themselves (not of executors).
    daemon_memory: str = "256m"
    start_timeout_s: float = 90.0
    stop_timeout_s: float = 20.0
    daemons: list[Daemon] = dataclasses.field(default_factory=list)

    @property
    def master(self) -> Daemon:
        if not self.daemons:
            raise ClusterError("the cluster is not running")
        return self.daemons[0]

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    def environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PYSPARK_", "SPARK_"))}
        # Executors must find Python code only where spark-submit put it, never the caller's path.
        env.pop("PYTHONPATH", None)
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_CONF_DIR": str(self.root / "conf"),
                "SPARK_LOCAL_IP": HOST,
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
            }
        )
        return env

    def _spawn(self, name: str, arguments: list[str]) -> Daemon:
        port, webui_port = free_ports(2)
        log = self.root / "logs" / f"{name}.log"
        command = [
            str(spark_home() / "bin" / "spark-class"),
            *arguments,
            "--host",
            HOST,
            "--port",
            str(port),
            "--webui-port",
            str(webui_port),
        ]
        with log.open("ab") as output:
            process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
            )
        daemon = Daemon(name=name, pid=process.pid, port=port, webui_port=webui_port, log=str(log))
        self.daemons.append(daemon)
        self._save()
        return daemon

    def start(self) -> StandaloneCluster:
        """Start the master and the workers; returns once every worker is ALIVE at the master."""
        if self.daemons:
            raise ClusterError(f"already running at {self.master_url}")
        for directory in ("conf", "logs", "work"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", [MASTER_CLASS])
            self._wait(lambda: _listening(self.master.port), "the master to listen")
            for index in range(1, self.workers + 1):
                name = f"worker-{index}"
                self._spawn(
                    name,
                    [
                        WORKER_CLASS,
                        "--cores",
                        str(self.cores_per_worker),
                        "--memory",
                        self.memory_per_worker,
                        "--work-dir",
                        str(self.work_dir / name),
                        self.master_url,
                    ],
                )
            self._wait(lambda: len(self.alive_workers()) == self.workers, f"{self.workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        url = f"http://{HOST}:{self.master.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            document: dict[str, Any] = json.load(response)
        return document

    def alive_workers(self) -> list[dict[str, Any]]:
        try:
            workers: list[dict[str, Any]] = self.status().get("workers", [])
        except (OSError, ValueError, urllib.error.URLError):
            return []
        return [worker for worker in workers if worker.get("state") == "ALIVE"]

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not ready():
            for daemon in self.daemons:
                if not group_alive(daemon.pid):
                    raise ClusterError(f"{daemon.name} exited while waiting for {what}; see {daemon.log}")
            if time.monotonic() > deadline:
                logs = ", ".join(daemon.log for daemon in self.daemons)
                raise ClusterError(f"timed out after {self.start_timeout_s:.0f} s waiting for {what}; see {logs}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM every daemon's process group (workers first), SIGKILL what is left after the timeout."""
        for daemon in reversed(self.daemons):
            _signal_group(daemon.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while any(group_alive(daemon.pid) for daemon in self.daemons) and time.monotonic() < deadline:
            time.sleep(0.2)
        for daemon in self.daemons:
            _signal_group(daemon.pid, signal.SIGKILL)
        for daemon in self.daemons:
            _reap(daemon.pid)
        leftover = [daemon.name for daemon in self.daemons if group_alive(daemon.pid)]
        if leftover:
            raise ClusterError(f"still running after SIGKILL: {', '.join(leftover)}")
        self.daemons.clear()
        (self.root / STATE_FILE).unlink(missing_ok=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _save(self) -> None:
        state = {"daemons": [dataclasses.asdict(daemon) for daemon in self.daemons]}
        (self.root / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, root: Path) -> StandaloneCluster:
        """The cluster ``start`` recorded in ``root`` (to stop it from another process)."""
        path = root / STATE_FILE
        if not path.is_file():
            raise ClusterError(f"no cluster recorded in {root}")
        state = json.loads(path.read_text())
        return cls(root=root, daemons=[Daemon(**daemon) for daemon in state["daemons"]])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex((HOST, port)) == 0


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _reap(pid: int) -> None:
    """Collect the exit status of a daemon this process started (no zombie left)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "status", "stop"])
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster state directory (default {DEFAULT_DIR})")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    root = resolve_path(args.dir)
    try:
        if args.command == "start":
            if (root / STATE_FILE).is_file():
                raise ClusterError(f"a cluster is recorded in {root}: stop it first")
            cluster = StandaloneCluster(root=root, workers=args.workers).start()
            print(cluster.master_url, flush=True)
        elif args.command == "status":
            cluster = StandaloneCluster.load(root)
            print(json.dumps({"master": cluster.master_url, "alive_workers": len(cluster.alive_workers())}))
        else:
            StandaloneCluster.load(root).stop()
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 3 if args.command == "status" else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A Spark Connect server on this machine with the project's jars and settings, for ``spark.remote``.

    python -m jobs.connect_server [--conf FILE] [--set spark.KEY=VALUE ...] [--port 15002]

runs ``org.apache.spark.sql.connect.service.SparkConnectServer`` (the ``spark-connect`` jar pyspark
ships) in the foreground, through pyspark's own ``spark-submit``, until SIGTERM or Ctrl-C. It prints
``sc://127.0.0.1:<port>`` once the server accepts connections; a job then runs against it with
``--set spark.remote=sc://127.0.0.1:<port>`` (docs/deployment.md, "Spark Connect").

The server is the Spark application: it gets everything :func:`routing.spark.spark_conf` gives a
classic session (the Delta and Kafka jars of ``make jars``, Delta's extension and catalog, the
warehouse, the master, driver memory, and this virtualenv's Python for the ``foreachBatch`` and UDF
workers), so a job's Connect session sets only runtime SQL settings. It listens on loopback only.

:class:`ConnectServer` is the same server as an object (the tests start one on a free port and stop
it at the end): the server leads its own process group, so stopping it (SIGTERM, then SIGKILL after
``stop_timeout_s``) leaves no JVM or Python worker behind. Its output goes to ``log_path``.

Exit status: 0 stopped by a signal; 1 the server did not start or died (the log's tail says why);
2 bad flags or settings.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from jobs.cluster import HOST, ClusterError, spark_home
from routing.config import ConfigError
from routing.processes import group_alive
from routing.settings import Settings, add_settings_arguments, parse_overrides, resolve_path, settings_from_args

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
DEFAULT_LOG = "var/log/connect-server.log"
#: Seconds to wait for the server to accept connections (a JVM start plus Delta's catalog: ~15 s here).
START_TIMEOUT_S = 180.0


class ConnectServer:
    """One Spark Connect server process (see the module doc); a context manager."""

    def __init__(
        self, settings: Settings, *, port: int = DEFAULT_PORT, log_path: str | os.PathLike[str] = DEFAULT_LOG
    ) -> None:
        self.settings = settings
        self.port = port
        self.log_path = resolve_path(log_path)
        self.stop_timeout_s = 30.0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def command(self) -> list[str]:
        """The ``spark-submit`` command line: the classic session's configuration plus the server's port."""
        from routing.spark import spark_conf

        conf = spark_conf(self.settings, app_name="spark-topic-router connect server")
        jars = conf.pop("spark.jars", "")
        conf["spark.connect.grpc.binding.address"] = HOST
        conf["spark.connect.grpc.binding.port"] = str(self.port)
        command = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
        if jars:
            command += ["--jars", jars]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, "spark-internal"]

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            # The foreachBatch and UDF workers import routing and its native matcher: this interpreter has them.
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }

    def start(self) -> ConnectServer:
        """Start the server and wait until it accepts connections; :class:`ClusterError` if it does not."""
        from jobs.cluster import _listening

        if _listening(self.port):
            raise ClusterError(f"port {self.port} on {HOST} is in use: pick another with --port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() reaches the JVM and its Python workers
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(self.port):
            if self.process.poll() is not None:
                raise ClusterError(f"the Spark Connect server exited ({self.process.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"the Spark Connect server did not listen within {START_TIMEOUT_S:g} s")
            time.sleep(0.5)
        return self

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return f"(no log at {self.log_path})"

    def stop(self) -> None:
        """SIGTERM the server's process group, then SIGKILL what is left after ``stop_timeout_s``."""
        process, self.process = self.process, None
        if process is None:
            return
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signum)
            deadline = time.monotonic() + self.stop_timeout_s
            while time.monotonic() < deadline and group_alive(process.pid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.2)
            if not group_alive(process.pid):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.connect_server", description=__doc__.split("\n\n")[0])
    add_settings_arguments(parser)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"gRPC port on {HOST} (default {DEFAULT_PORT})")
    parser.add_argument("--log", default=DEFAULT_LOG, help=f"the server's log file (default {DEFAULT_LOG})")
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error(f"--port must be 1-65535, got {args.port}")
    try:
        parse_overrides(args.settings_overrides)
        settings = settings_from_args(args)
    except ConfigError as error:
        print(f"connect_server: {error}", file=sys.stderr)
        return 2
    server = ConnectServer(settings, port=args.port, log_path=args.log)
    stopping: list[int] = []

    def request_stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        server.start()
    except ClusterError as error:
        print(f"connect_server: {error}", file=sys.stderr)
        return 1
    print(server.url, flush=True)
    print(f"connect_server: log in {server.log_path}; Ctrl-C stops it", file=sys.stderr, flush=True)
    try:
        while not stopping:
            if server.process is None or server.process.poll() is not None:
                print(f"connect_server: the server died:\n{server.log_tail()}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

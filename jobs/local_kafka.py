"""A real single-node Kafka broker (KRaft, no ZooKeeper) on loopback, for development and tests.

``python -m jobs.local_kafka start|stop|status`` (``--help`` for flags); the same operations are
importable (:func:`start`, :func:`stop`, :func:`status`, :func:`ensure_running`; :func:`kill` crashes it on
purpose) for fixtures, jobs and fault injection. Everything lives under ``kafka.data_dir`` (default
``var/kafka/``)::

    server.properties   rendered from conf/kafka/server.properties with the [kafka] settings
    cluster.id          generated once; storage is formatted with it on the first start
    data/               the broker's log dirs (topics and the KRaft metadata log)
    logs/server.log     broker log (log4j2, conf/kafka/log4j2.properties)
    logs/broker.out     the JVM's stdout/stderr
    broker.pid          pid of the running broker's JVM (the leader of its own process group)

Start-up checks come first so failures are clear: Java present, jars resolved (``make jars``),
both ports free. ``start`` returns once the broker answers a metadata request; if it exits or
does not answer within ``kafka.start_timeout_s`` its process group is killed and the error
carries the tail of its logs. ``stop`` sends SIGTERM to the process group (a clean shutdown),
then SIGKILL after :data:`STOP_TIMEOUT_S`, and returns only when no process of the group is
left, so nothing is orphaned. The pid file is trusted only if that pid's command line is a
broker started with this data directory's configuration (pids get reused).

With ``kafka.sasl_port`` set, the broker also listens there with SASL_PLAINTEXT, offering
``kafka.sasl_mechanism`` (SCRAM-SHA-256 or -512) for the user ``kafka.sasl_username`` with the
configured password (``ROUTER_KAFKA_SASL_PASSWORD`` or ``kafka.sasl_password_file``). The PLAINTEXT
listener on ``client_port`` stays (loopback only): inter-broker traffic and this module's probes use
it, which is what lets ``start`` create the SCRAM credential once the broker answers, through the
Admin API (``AlterUserScramCredentials``, an upsert: a changed password applies at the next start)
instead of ``kafka-storage format --add-scram``. So the password is on no command line (``ps``) and
in no file this module writes; the broker stores only its salted SCRAM hash. ``start`` returns once
that user can authenticate on the SASL listener.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from routing.config import ConfigError
from routing.processes import group_alive, process_alive
from routing.settings import (
    LOCAL_HOST,
    REPO_ROOT,
    Settings,
    add_settings_arguments,
    load_settings,
    settings_from_args,
)

SERVER_PROPERTIES_TEMPLATE = REPO_ROOT / "conf" / "kafka" / "server.properties"
#: The broker's jars (``make jars``).
JARS_DIR = REPO_ROOT / "var" / "jars" / "kafka"
#: Loopback only: the local broker is a development and test tool (``kafka.client_port``'s host).
HOST = LOCAL_HOST
#: The broker JVM's heap options unless ``$KAFKA_HEAP_OPTS`` (Kafka's own variable, as its start scripts read it)
#: gives others.
DEFAULT_HEAP_OPTS = "-Xmx512m -Xms64m"
#: The broker JVM's collector and JIT options unless ``$KAFKA_JVM_PERFORMANCE_OPTS`` (Kafka's own variable, which
#: replaces its scripts' G1 defaults the same way) gives others.
DEFAULT_PERFORMANCE_OPTS = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20"
#: Partitions of an auto-created topic (``num.partitions`` in conf/kafka/server.properties).
NUM_PARTITIONS = 2
#: Seconds ``stop`` waits after SIGTERM before killing the broker's process group.
STOP_TIMEOUT_S = 30.0
LOG4J2_CONFIG = REPO_ROOT / "conf" / "kafka" / "log4j2.properties"
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
#: Lines of the broker's logs an error message carries.
LOG_TAIL_LINES = 30
#: Seconds one metadata request may take while waiting for start-up.
PROBE_TIMEOUT_S = 2.0
#: Seconds to wait for the process group to vanish after SIGKILL.
KILL_WAIT_S = 10.0
#: PBKDF2 iterations of the SCRAM credential (Kafka's minimum and kafka-configs' default).
SCRAM_ITERATIONS = 4096

# Brokers started by this process: kept referenced so they are reaped and never garbage-collected.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class BrokerError(RuntimeError):
    """The local broker could not be started, stopped or reached; the message says why."""


@dataclasses.dataclass(frozen=True)
class BrokerPaths:
    """Where one broker keeps its state (all under ``kafka.data_dir``)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def cluster_id(self) -> Path:
        return self.root / "cluster.id"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs / "server.log"

    @property
    def console_log(self) -> Path:
        return self.logs / "broker.out"

    @property
    def pid_file(self) -> Path:
        return self.root / "broker.pid"


@dataclasses.dataclass(frozen=True)
class Broker:
    """A broker that answers at ``bootstrap_servers``."""

    bootstrap_servers: str
    #: The JVM's pid; None for a broker this module does not manage (found already answering).
    pid: int | None
    data_dir: Path
    #: Whether this call started it (so the caller is the one to stop it).
    started: bool


@dataclasses.dataclass(frozen=True)
class BrokerStatus:
    #: ``running`` (managed, answers), ``unresponsive`` (managed JVM alive, does not answer),
    #: ``external`` (something not managed here answers at the bootstrap address) or ``stopped``.
    state: str
    pid: int | None
    bootstrap_servers: str
    data_dir: Path

    def describe(self) -> str:
        where = f"{self.bootstrap_servers}, data in {self.data_dir}"
        if self.state == "running":
            return f"running (pid {self.pid}) at {where}"
        if self.state == "unresponsive":
            return f"unresponsive: pid {self.pid} is alive but {self.bootstrap_servers} does not answer ({where})"
        if self.state == "external":
            return f"a broker not started by this tool answers at {self.bootstrap_servers}"
        return f"stopped ({where})"


# -- checks -------------------------------------------------------------------


def find_java(env: Mapping[str, str] | None = None) -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else ``java`` on ``$PATH``."""
    environment = os.environ if env is None else env
    java_home = environment.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
        raise BrokerError(f"Java not found: JAVA_HOME={java_home} has no bin/java; install a JDK 17+ or fix JAVA_HOME")
    found = shutil.which("java", path=environment.get("PATH", ""))
    if found is None:
        raise BrokerError("Java not found: no java on PATH and JAVA_HOME unset; install a JDK 17+ or set JAVA_HOME")
    return found


def broker_classpath(jars_dir: Path = JARS_DIR) -> str:
    if not any(jars_dir.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"Kafka broker jars missing from {jars_dir}: run `make jars`")
    return str(jars_dir / "*")


def port_in_use(host: str, port: int) -> bool:
    """Whether a listening socket holds ``host:port`` (reuse allowed, as the broker's JVM does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _check_ports_free(settings: Settings) -> None:
    kafka = settings.kafka
    ports = [("client_port", kafka.client_port), ("controller_port", kafka.controller_port)]
    if kafka.sasl_port is not None:
        ports.append(("sasl_port", kafka.sasl_port))
    for name, port in ports:
        if port_in_use(HOST, port):
            raise BrokerError(
                f"port {port} on {HOST} (kafka.{name}) is already in use; stop whatever holds it or "
                f"choose another port, e.g. --set kafka.{name}=<port> or ROUTER__KAFKA__{name.upper()}=<port>"
            )


def local_address(settings: Settings) -> str:
    """Where the local broker's PLAINTEXT listener is (its SCRAM listener, if any: :func:`sasl_address`)."""
    return f"{HOST}:{settings.kafka.client_port}"


def sasl_address(settings: Settings) -> str:
    """Where the local broker's SCRAM listener is (``kafka.sasl_port``; :class:`BrokerError` if unset)."""
    if settings.kafka.sasl_port is None:
        raise BrokerError("the local broker has no SASL listener: set kafka.sasl_port")
    return f"{HOST}:{settings.kafka.sasl_port}"


def sasl_client_config(settings: Settings) -> dict[str, str | int | float | bool]:
    """librdkafka configuration for the local SCRAM listener as ``kafka.sasl_username`` (holds the password)."""
    kafka = settings.kafka
    local = dataclasses.replace(kafka, bootstrap_servers=sasl_address(settings), security_protocol="SASL_PLAINTEXT")
    return settings.replace(kafka=local).kafka_client_config()


def _scram_password(settings: Settings) -> bytes:
    """The SCRAM user's password, checked before any JVM starts (:class:`ConfigError` without one)."""
    kafka = settings.kafka
    if kafka.sasl_password is None:
        raise ConfigError(
            "kafka.sasl_port needs the SCRAM user's password: set the environment variable "
            "ROUTER_KAFKA_SASL_PASSWORD or kafka.sasl_password_file"
        )
    return kafka.sasl_password.reveal().encode()


def _upsert_scram_user(settings: Settings, timeout_s: float) -> None:
    """Create or update the SCRAM credential of ``kafka.sasl_username`` over the PLAINTEXT listener."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    kafka = settings.kafka
    mechanism = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
    upsert = UserScramCredentialUpsertion(
        str(kafka.sasl_username),
        ScramCredentialInfo(mechanism[str(kafka.sasl_mechanism)], SCRAM_ITERATIONS),
        _scram_password(settings),
    )
    admin = AdminClient({"bootstrap.servers": local_address(settings), "security.protocol": "PLAINTEXT"})
    try:
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=timeout_s).values():
            future.result(timeout=timeout_s)
    except KafkaException as error:
        # The error is the broker's (it never holds the password: the request carries only a salted hash).
        raise BrokerError(f"creating the SCRAM user {kafka.sasl_username!r} failed: {error}") from None


def answers(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S, *, local: bool = False) -> bool:
    """Whether a broker answers a metadata request: the local one (``local``), else the configured
    cluster (``kafka.bootstrap_servers``, with its security settings)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if local:
        config: dict[str, str | int | float | bool] = {
            "bootstrap.servers": local_address(settings),
            "security.protocol": "PLAINTEXT",
        }
    else:
        config = settings.kafka_client_config()
    # log_level 0: connection-refused noise while a broker is starting is expected, not news.
    admin = AdminClient({**config, "log_level": 0, "socket.connection.setup.timeout.ms": 1000})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


# -- process bookkeeping ------------------------------------------------------


def _process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (zombies count as dead; our own children are reaped)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    return process_alive(pid)


def _is_our_broker(pid: int, paths: BrokerPaths) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return BROKER_MAIN.encode() in cmdline and str(paths.config).encode() in cmdline


def _managed_pid(paths: BrokerPaths) -> int | None:
    """The pid in the pid file if it is alive and is this data directory's broker; else None."""
    try:
        record = json.loads(paths.pid_file.read_text())
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if _process_alive(pid) and _is_our_broker(pid, paths):
        return pid
    return None


def log_tail(paths: BrokerPaths, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of the broker's logs, for error messages."""
    parts = []
    for log in (paths.console_log, paths.server_log):
        if log.exists():
            text = log.read_text(errors="replace").splitlines()[-lines:]
            if text:
                parts.append(f"--- {log} (last {len(text)} lines) ---\n" + "\n".join(text))
    return "\n".join(parts) if parts else "(the broker wrote no log)"


# -- start / stop / status ----------------------------------------------------


def _jvm_options(paths: BrokerPaths, env: Mapping[str, str]) -> list[str]:
    return [
        *(env.get("KAFKA_HEAP_OPTS") or DEFAULT_HEAP_OPTS).split(),
        *(env.get("KAFKA_JVM_PERFORMANCE_OPTS") or DEFAULT_PERFORMANCE_OPTS).split(),
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        f"-Dkafka.logs.dir={paths.logs}",
    ]


def _render_config(settings: Settings, paths: BrokerPaths) -> None:
    kafka = settings.kafka
    template = string.Template(SERVER_PROPERTIES_TEMPLATE.read_text())
    sasl = {"sasl_listener": "", "sasl_protocol": "", "sasl_properties": ""}
    if kafka.sasl_port is not None:
        mechanism = str(kafka.sasl_mechanism)
        sasl = {
            "sasl_listener": f",SASL_PLAINTEXT://{HOST}:{kafka.sasl_port}",
            "sasl_protocol": ",SASL_PLAINTEXT:SASL_PLAINTEXT",
            # The server side of SCRAM needs a login module but no options: credentials live in the metadata log.
            "sasl_properties": (
                f"sasl.enabled.mechanisms={mechanism}\n"
                f"listener.name.sasl_plaintext.{mechanism.lower()}.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            ),
        }
    paths.config.write_text(
        template.substitute(
            host=HOST,
            client_port=kafka.client_port,
            controller_port=kafka.controller_port,
            log_dirs=paths.data,
            **sasl,
        )
    )


def _cluster_id(paths: BrokerPaths) -> str:
    """The persisted cluster id, generated on first use (Kafka's format: base64url of a UUID)."""
    if paths.cluster_id.exists():
        return paths.cluster_id.read_text().strip()
    cluster_id = new_cluster_id()
    paths.cluster_id.write_text(cluster_id + "\n")
    return cluster_id


def new_cluster_id() -> str:
    """A random cluster id that never starts with ``-``, like Kafka's own ``Uuid.randomUuid``.

    About 1.6% of base64url UUIDs start with ``-``, which command-line parsers read as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_storage(java: str, paths: BrokerPaths, env: Mapping[str, str], jars_dir: Path) -> None:
    if (paths.data / "meta.properties").exists():
        return
    command = [
        java,
        *_jvm_options(paths, env),
        "-cp",
        broker_classpath(jars_dir),
        STORAGE_TOOL_MAIN,
        "format",
        f"--cluster-id={_cluster_id(paths)}",  # one token: a stored id may start with "-"
        "--config",
        str(paths.config),
        "--ignore-formatted",
    ]
    result = subprocess.run(command, env=dict(env), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BrokerError(
            f"formatting Kafka storage in {paths.data} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )


def _kill_group(pid: int, deadline_s: float) -> None:
    """SIGKILL the process group led by ``pid`` and wait until none of it is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    _wait_gone(pid, deadline_s)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _process_alive(pid) and not group_alive(pid):
            return True
        time.sleep(0.1)
    return not _process_alive(pid) and not group_alive(pid)


def start(
    settings: Settings | None = None, *, env: Mapping[str, str] | None = None, jars_dir: Path = JARS_DIR
) -> Broker:
    """Start the broker and wait until it answers; :class:`BrokerError` if it is already running."""
    settings = settings or load_settings()
    environment = dict(os.environ if env is None else env)
    paths = BrokerPaths(Path(settings.kafka.data_dir))
    running = _managed_pid(paths)
    if running is not None:
        raise BrokerError(f"the broker in {paths.root} is already running (pid {running})")
    java = find_java(environment)
    classpath = broker_classpath(jars_dir)
    if settings.kafka.sasl_port is not None:
        _scram_password(settings)
    _check_ports_free(settings)
    for directory in (paths.root, paths.data, paths.logs):
        directory.mkdir(parents=True, exist_ok=True)
    _render_config(settings, paths)
    _format_storage(java, paths, environment, jars_dir)

    command = [java, *_jvm_options(paths, environment), "-cp", classpath, BROKER_MAIN, str(paths.config)]
    with paths.console_log.open("ab") as console:
        process = subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() signals the whole group
        )
    _CHILDREN[process.pid] = process
    address = local_address(settings)
    paths.pid_file.write_text(json.dumps({"pid": process.pid, "bootstrap_servers": address}))
    try:
        _wait_until_it_answers(process, settings, paths)
    except BaseException:
        # Whatever went wrong (including Ctrl-C while waiting), no half-started JVM stays behind.
        _kill_group(process.pid, KILL_WAIT_S)
        _CHILDREN.pop(process.pid, None)
        paths.pid_file.unlink(missing_ok=True)
        raise
    return Broker(address, process.pid, paths.root, started=True)


def _wait_until_it_answers(process: subprocess.Popen[bytes], settings: Settings, paths: BrokerPaths) -> None:
    deadline = time.monotonic() + settings.kafka.start_timeout_s
    while True:
        code = process.poll()
        if code is not None:
            raise BrokerError(f"the Kafka broker exited with code {code} during start-up\n{log_tail(paths)}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerError(
                f"the Kafka broker did not answer at {local_address(settings)} within "
                f"{settings.kafka.start_timeout_s:g} s (kafka.start_timeout_s); it was killed\n{log_tail(paths)}"
            )
        if answers(settings, timeout_s=min(PROBE_TIMEOUT_S, max(remaining, 0.1)), local=True):
            break
        time.sleep(min(0.25, max(deadline - time.monotonic(), 0)))
    if settings.kafka.sasl_port is None:
        return
    _upsert_scram_user(settings, timeout_s=max(deadline - time.monotonic(), PROBE_TIMEOUT_S))
    # The credential reaches the listener through the metadata log: wait until the user can log in.
    while not _scram_login_works(settings):
        if process.poll() is not None or time.monotonic() >= deadline:
            raise BrokerError(
                f"the SCRAM user {settings.kafka.sasl_username!r} could not authenticate at {sasl_address(settings)} "
                f"within {settings.kafka.start_timeout_s:g} s (kafka.start_timeout_s); the broker was killed\n"
                f"{log_tail(paths)}"
            )
        time.sleep(0.25)


def _scram_login_works(settings: Settings) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**sasl_client_config(settings), "log_level": 0, "socket.connection.setup.timeout.ms": 1000})
    try:
        admin.list_topics(timeout=PROBE_TIMEOUT_S)
    except KafkaException:
        return False
    return True


def stop(settings: Settings | None = None, *, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stop the managed broker (SIGTERM, then SIGKILL after ``timeout_s``); True if one was running."""
    settings = settings or load_settings()
    paths = BrokerPaths(Path(settings.kafka.data_dir))
    pid = _managed_pid(paths)
    if pid is None:
        paths.pid_file.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout_s):
        _kill_group(pid, KILL_WAIT_S)
    if _process_alive(pid) or group_alive(pid):
        raise BrokerError(f"the Kafka broker (pid {pid}) survived SIGKILL")
    _CHILDREN.pop(pid, None)
    paths.pid_file.unlink(missing_ok=True)
    return True


#: A partition's log directory, after ``<topic>-``: live, or renamed for deletion.
_PARTITION_DIR = re.compile(r"[0-9]+(\.[0-9a-f]+-delete)?")


def topic_files(settings: Settings, topics: Sequence[str]) -> list[Path]:
    """The managed broker's log directories of ``topics`` (``<topic>-<partition>``, or ``...<id>-delete``)."""
    data = BrokerPaths(Path(settings.kafka.data_dir)).data
    if not data.is_dir():
        return []
    return sorted(
        path
        for path in data.iterdir()
        for topic in topics
        if path.name.startswith(f"{topic}-") and _PARTITION_DIR.fullmatch(path.name[len(topic) + 1 :])
    )


def wait_for_topic_files_gone(settings: Settings, topics: Sequence[str], timeout_s: float = 30.0) -> list[Path]:
    """Wait until the running broker has removed every file of the deleted ``topics``; those still left.

    Kafka renames a deleted topic's partitions and removes them ``log.segment.delete.delay.ms`` (1 s here,
    ``conf/kafka/server.properties``) later, on a running broker only: stopped sooner, they stay on disk
    until its next start. A benchmark that deletes gigabytes of topics calls this before it stops the broker.
    """
    deadline = time.monotonic() + timeout_s
    left = topic_files(settings, topics)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = topic_files(settings, topics)
    return left


def kill(settings: Settings | None = None) -> int | None:
    """SIGKILL the managed broker's process group, as a crash would (no clean shutdown); the pid, or None.

    For fault injection (``bench/chaos.py`` and its test): the data directory, ports and the now stale pid
    file stay as a crash leaves them, so a later :func:`start` recovers the same broker and its logs.
    """
    settings = settings or load_settings()
    paths = BrokerPaths(Path(settings.kafka.data_dir))
    pid = _managed_pid(paths)
    if pid is None:
        return None
    _kill_group(pid, KILL_WAIT_S)
    if _process_alive(pid) or group_alive(pid):
        raise BrokerError(f"the Kafka broker (pid {pid}) survived SIGKILL")
    _CHILDREN.pop(pid, None)
    return pid


def status(settings: Settings | None = None) -> BrokerStatus:
    """The broker's state (see :class:`BrokerStatus`)."""
    settings = settings or load_settings()
    paths = BrokerPaths(Path(settings.kafka.data_dir))
    pid = _managed_pid(paths)
    bootstrap = local_address(settings) if pid is not None else settings.kafka.bootstrap_servers
    local = settings.kafka.bootstrap_servers == local_address(settings)
    if pid is not None:
        state = "running" if answers(settings, local=True) else "unresponsive"
    elif local and not port_in_use(HOST, settings.kafka.client_port):
        state = "stopped"  # nothing listens: no need to wait for a metadata request to time out
    else:
        state = "external" if answers(settings, timeout_s=1.0) else "stopped"
    return BrokerStatus(state, pid, bootstrap, paths.root)


def ensure_running(settings: Settings | None = None, *, env: Mapping[str, str] | None = None) -> Broker:
    """A broker that answers: the managed one, one already answering at the bootstrap address, or a
    newly started one (``started=True``)."""
    settings = settings or load_settings()
    current = status(settings)
    if current.state in {"running", "external"}:
        return Broker(current.bootstrap_servers, current.pid, current.data_dir, started=False)
    if current.state == "unresponsive":
        raise BrokerError(f"the local broker is {current.describe()}; run `python -m jobs.local_kafka stop` first")
    return start(settings, env=env)


# Run by the watchdog process: block until the parent's end of the pipe closes (it exited, however
# it died), then stop the broker's process group if that pid is still this data dir's broker.
_WATCHDOG_SCRIPT = """
import os, signal, sys, time
pid, config, grace = int(sys.argv[1]), sys.argv[2].encode(), float(sys.argv[3])
sys.stdin.buffer.read()
def ours():
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return config in cmdline and state not in ("Z", "X")
for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
    if not ours():
        break
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        break
    deadline = time.monotonic() + wait
    while ours() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


@dataclasses.dataclass
class Watchdog:
    """A process that stops a broker once the process that started the watchdog exits, however it
    exits (even SIGKILL, which runs no cleanup code): it waits for end-of-file on a pipe only the
    starter holds."""

    process: subprocess.Popen[bytes]

    def close(self) -> None:
        """Stop watching; a broker still running is stopped by the watchdog on its way out."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def stop_with_this_process(broker: Broker, settings: Settings) -> Watchdog:
    """Tie ``broker``'s lifetime to this process (test sessions: no JVM outlives a killed run)."""
    if broker.pid is None:
        raise BrokerError("only a broker started by this module can be tied to this process")
    paths = BrokerPaths(Path(settings.kafka.data_dir))
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _WATCHDOG_SCRIPT,
            str(broker.pid),
            str(paths.config),
            str(STOP_TIMEOUT_S),
        ],
        stdin=subprocess.PIPE,
        start_new_session=True,  # a Ctrl-C aimed at the test run must not kill the watchdog first
    )
    return Watchdog(process)


# -- command line --------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.local_kafka",
        description="Start, stop or inspect the local single-node KRaft Kafka broker (data under kafka.data_dir).",
    )
    parser.add_argument(
        "command",
        choices=("start", "stop", "status"),
        help="start: start and wait until it answers (no-op if running); stop: stop gracefully, then kill; "
        "status: print the state (exit 0 if running, 3 if not; any command exits 2 for bad flags or settings)",
    )
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ConfigError as error:  # a user's mistake, like a bad flag: exit 2 as every job does
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        if args.command == "start":
            broker = ensure_running(settings)
            verb = "started" if broker.started else "already running"
            print(f"kafka {verb}: {status(settings).describe()}")
            return 0
        if args.command == "stop":
            print("kafka stopped" if stop(settings) else "kafka was not running")
            return 0
        current = status(settings)
        print(f"kafka {current.describe()}")
        return 0 if current.state in {"running", "external"} else 3
    except ConfigError as error:  # e.g. kafka.sasl_port without a password
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (BrokerError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

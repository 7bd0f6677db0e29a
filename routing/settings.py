"""One ``Settings`` object for every job and test: limits, validation, Kafka, Spark, subscriptions, ACLs.

Each section is a frozen dataclass loaded by :func:`routing.config.load_section` from
``conf/router.toml`` (or ``$ROUTER_CONF``), then environment variables
``ROUTER__<SECTION>__<KEY>``, then explicit overrides (a job's ``--set section.key=value``
flags). Every section validates itself in ``__post_init__`` and errors name the bad key.

Design points:

* Paths (each section's ``PATHS``) are stored resolved (absolute strings), except URIs such as
  ``s3a://bucket/deliveries``, kept as written where Spark opens the path (``URI_PATHS``: tables,
  checkpoints, the warehouse) and refused where this process does. A table setting (``TABLES``)
  may instead name a catalog table, ``schema.table`` or ``catalog.schema.table``, kept as written
  (:mod:`routing.delta_tables`). A relative path
  written in a settings file is relative to that file's directory, so a job with a settings
  file behaves the same wherever it is started and wherever the package is installed
  (``conf/router.toml`` spells out every path, as ``../var/...``). A relative path from the
  environment, a ``--set`` flag or a built-in default (no file) is relative to the current
  directory, as on any command line.
* The Kafka SASL password is a :class:`Secret`. It comes only from the environment variable
  ``ROUTER_KAFKA_SASL_PASSWORD`` or from the file named by ``kafka.sasl_password_file``; a
  password in the settings file, a ``ROUTER__KAFKA__SASL_PASSWORD`` variable or a ``--set`` flag
  is rejected (those places end up in version control, shell history and process listings).
  ``repr`` masks it; only :meth:`Settings.kafka_client_config` and
  :meth:`Settings.spark_kafka_options` reveal it, to hand it to a client.
* Table-valued fields (``spark.conf``) merge: overrides add to or replace single entries of the
  file's table instead of replacing the whole table.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from routing.acl import AclSettings
from routing.config import (
    ENV_PREFIX,
    NUMBER_TEXT,
    SECRET_KEY,
    ConfigError,
    conf_path,
    load_section,
    read_bounded,
    read_conf,
    shown,
)
from routing.config import REPO_ROOT as REPO_ROOT  # computed in routing.config only; re-exported for the tools
from routing.kafka_sink import SUBSCRIBER_PLACEHOLDER, check_topic_setting
from routing.limits import Limits
from routing.table_names import is_table_name
from routing.validation import Policy, ValidationSettings, Validator

SASL_PASSWORD_ENV = "ROUTER_KAFKA_SASL_PASSWORD"
#: A password file larger than this is a mistake (a device, a wrong path), read no further.
MAX_PASSWORD_FILE_BYTES = 64 * 1024

#: The local broker's address (``jobs.local_kafka``: loopback only, a development and test tool).
LOCAL_HOST = "127.0.0.1"
SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
SASL_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: The mechanisms the local broker's SASL listener offers (credentials it stores itself, no external store).
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
STARTING_OFFSETS = frozenset({"earliest", "latest"})


#: ``scheme:`` then ``/``: a Hadoop FileSystem URI (``s3a://bucket/x``, ``abfss://...``, ``hdfs://...``,
#: ``file:/tmp/x``), which Spark resolves itself. One-letter schemes are left out (a Windows drive).
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]+:/")


def is_uri(path: str) -> bool:
    """Whether ``path`` is a URI with a scheme (kept as written) rather than a local path (made absolute)."""
    return _URI.match(path) is not None


def resolve_path(path: str | os.PathLike[str], base: str | os.PathLike[str] | None = None) -> Path:
    """``path`` made absolute: a relative one is relative to ``base`` (default: the current directory).

    Local paths only: a URI would lose its ``//`` (see :func:`stored_path`).
    """
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    return Path(os.path.normpath(Path(base or Path.cwd()).absolute() / candidate))  # "conf/../var" -> "var"


class Secret:
    """A string that never shows itself in ``repr``/``str``/logs; ``reveal()`` hands it to a client."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def stored_path(section: type | object, name: str, value: str, base: str | os.PathLike[str] | None = None) -> str:
    """How path setting ``name`` is stored: a local path made absolute, a URI or a table name as written.

    Only the section's ``URI_PATHS`` (tables, checkpoints: what Spark reads and writes through Hadoop's
    FileSystem) may be URIs such as ``s3a://bucket/deliveries``; the others are opened by this process
    (the broker's data, jars, a password file) and must be local. The section's ``TABLES`` may also be
    catalog table names (``schema.table``, ``catalog.schema.table``: :mod:`routing.delta_tables`).
    """
    if name in getattr(section, "TABLES", ()) and is_table_name(value):
        return value
    if not is_uri(value):
        return str(resolve_path(value, base))
    if name not in getattr(section, "URI_PATHS", ()):
        raise ConfigError(f"setting {_section_name(section)}.{name} must be a local path, got the URI {value!r}")
    return value


def _resolve_paths(section: object) -> None:
    """Store the section's ``PATHS`` resolved (absolute); ``None`` and empty ``OPTIONAL_PATHS`` stay as they are."""
    optional = getattr(section, "OPTIONAL_PATHS", ())
    for name in getattr(section, "PATHS", ()):
        value = getattr(section, name)
        if value is None or (value == "" and name in optional):
            continue
        if not isinstance(value, str) or not value:
            raise ConfigError(f"setting {_section_name(section)}.{name} must be a non-empty path, got {value!r}")
        object.__setattr__(section, name, stored_path(section, name, value))


def _section_name(section: object) -> str:
    return str(getattr(section, "SECTION", type(section).__name__))


#: The largest integer setting (unless a section's ``INT_RANGES`` says less): what a Spark ``int``
#: (``maxRecordsPerBatch``, partitions), an Arrow 32-bit offset and the native side's ``u32``/``usize`` hold.
MAX_INT_SETTING = 2**31 - 1


def integer_range(section: type[Any], name: str) -> tuple[int, int, str]:
    """(low, high, what it is) of integer setting ``name`` of a section class: its ``INT_RANGES`` entry, else 1..MAX."""
    ranges: Mapping[str, tuple[int, int, str]] = getattr(section, "INT_RANGES", {})
    return ranges.get(name, (1, MAX_INT_SETTING, ""))


def _check_integers(section: object) -> None:
    """Every ``int`` field of ``section`` is an integer within its :func:`integer_range`."""
    for name in _integer_fields(type(section)):
        value = getattr(section, name)
        low, high, what = integer_range(type(section), name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"setting {_section_name(section)}.{name} must be an integer, got {value!r}")
        if not low <= value <= high:
            raise ConfigError(
                f"setting {_section_name(section)}.{name} must be{what} between {low} and {high}, got {value}"
            )


def _integer_fields(cls: type[Any]) -> tuple[str, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(field.name for field in dataclasses.fields(cls) if hints[field.name] is int)


#: The longest duration setting (seconds): a week. Longer is a typo, and past ``threading.TIMEOUT_MAX`` a wait fails.
MAX_SECONDS = 7 * 24 * 3600.0


def _check_seconds(section: str, name: str, value: float) -> None:
    """A duration in seconds: a finite number above 0 and at most :data:`MAX_SECONDS` (``inf`` and ``nan`` are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"setting {section}.{name} must be a finite number of seconds, got {value!r}")
    if not 0 < value <= MAX_SECONDS:
        raise ConfigError(f"setting {section}.{name} must be above 0 and at most {MAX_SECONDS:g} s, got {value!r}")


def ascii_number(text: str) -> float:
    """An ``argparse`` type: a finite number in ASCII digits (``float`` also takes nan, inf and other digits)."""
    if not NUMBER_TEXT.fullmatch(text) or not math.isfinite(number := float(text)):
        raise argparse.ArgumentTypeError(f"not a finite number in ASCII digits: {text!r}")
    return number


@dataclasses.dataclass(frozen=True)
class KafkaSettings:
    """The Kafka cluster the jobs talk to (by default the local single-node broker, ``jobs.local_kafka``)."""

    SECTION: ClassVar[str] = "kafka"
    PATHS: ClassVar[tuple[str, ...]] = ("data_dir", "sasl_password_file")
    INT_RANGES: ClassVar[Mapping[str, tuple[int, int, str]]] = {
        "client_port": (1, 65535, " a TCP port"),
        "controller_port": (1, 65535, " a TCP port"),
    }

    bootstrap_servers: str = ""
    """The Kafka cluster's bootstrap servers (``host:port,...``) the jobs read from and write to; empty means the
    local broker, ``127.0.0.1:<client_port>``. Filled in on construction, so a ``dataclasses.replace`` with new
    ports must also pass ``bootstrap_servers=""``."""
    client_port: int = 19092
    """Local broker's client listener; must differ from ``controller_port``."""
    controller_port: int = 19093
    """Local broker's KRaft controller listener."""
    data_dir: str = "var/kafka"
    """Local broker's data (``data/``), logs (``logs/``), pid file and cluster id."""
    start_timeout_s: float = 90.0
    """Seconds the local broker's ``start`` waits for it to answer a metadata request, and the jobs wait at start for a
    bootstrap server to accept a connection before they exit 1 (:func:`routing.streaming.wait_for_kafka`)."""
    sasl_port: int | None = None
    """Local broker's extra SASL_PLAINTEXT listener (SCRAM, user ``sasl_username`` with the configured password); None:
    none. With ``security_protocol = "SASL_PLAINTEXT"`` and no ``bootstrap_servers``, clients connect here."""
    security_protocol: str = "PLAINTEXT"
    """One of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (the local broker's client_port speaks PLAINTEXT)."""
    sasl_mechanism: str | None = None
    """PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; required with a SASL protocol."""
    sasl_username: str | None = None
    """The SASL user the jobs log in as; required with a SASL protocol."""
    sasl_password_file: str | None = None
    """A file holding the SASL password (alternative to env ROUTER_KAFKA_SASL_PASSWORD)."""
    sasl_password: Secret | None = None
    """Only from env ROUTER_KAFKA_SASL_PASSWORD or ``sasl_password_file`` (see module docstring)."""
    spark_options: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)
    """More Kafka client configs for Spark's Kafka source and sink, without the ``kafka.`` prefix Spark wants (for
    example ``default.api.timeout.ms``, how long a client call waits for a broker that is down). The connection
    and SASL configs are the settings above, not these."""

    def __post_init__(self) -> None:
        section = self.SECTION
        options: dict[str, str] = {}
        for key, value in self.spark_options.items():
            name = str(key)
            if isinstance(value, (dict, list, tuple)) or value is None:
                raise ConfigError(f"setting {section}.spark_options.{name} must be a scalar, got {shown(name, value)}")
            if name.removeprefix("kafka.") in OWN_KAFKA_CONFIGS:
                raise ConfigError(
                    f"setting {section}.spark_options.{name[:80]} is set by the [kafka] settings themselves "
                    "(bootstrap_servers, security_protocol, sasl_*), not here"
                )
            if SECRET_KEY.search(name):  # never echo the value
                raise ConfigError(f"setting {section}.spark_options.{name[:80]} looks like a secret: not a setting")
            options[name.removeprefix("kafka.")] = str(value).lower() if isinstance(value, bool) else str(value)
        object.__setattr__(self, "spark_options", options)
        if self.sasl_password is not None and not isinstance(self.sasl_password, Secret):
            # Never echo the value: it is a password.
            raise ConfigError(
                f"setting {section}.sasl_password may not be set in the settings file, a ROUTER__ variable or a "
                f"flag; put it in the environment variable {SASL_PASSWORD_ENV} or a file named by "
                f"{section}.sasl_password_file"
            )
        _check_integers(self)
        if self.client_port == self.controller_port:
            raise ConfigError(f"settings {section}.client_port and {section}.controller_port must differ")
        _check_seconds(section, "start_timeout_s", self.start_timeout_s)
        if self.security_protocol not in SECURITY_PROTOCOLS:
            known = ", ".join(sorted(SECURITY_PROTOCOLS))
            raise ConfigError(
                f"setting {section}.security_protocol must be one of {known}, got {self.security_protocol!r}"
            )
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_LOGIN_MODULES:
                known = ", ".join(SASL_LOGIN_MODULES)
                raise ConfigError(
                    f"setting {section}.sasl_mechanism must be one of {known}, got {self.sasl_mechanism!r}"
                )
            if not self.sasl_username:
                raise ConfigError(f"setting {section}.sasl_username is required with {self.security_protocol}")
        if self.sasl_port is not None:
            self._check_sasl_listener()
        if not self.bootstrap_servers:
            local_port = self.client_port
            if self.sasl_port is not None and self.security_protocol == "SASL_PLAINTEXT":
                local_port = self.sasl_port
            object.__setattr__(self, "bootstrap_servers", f"{LOCAL_HOST}:{local_port}")
        _resolve_paths(self)

    def _check_sasl_listener(self) -> None:
        """The local broker's SCRAM listener needs a free port of its own, a SCRAM mechanism and a user."""
        section = self.SECTION
        port = self.sasl_port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError(f"setting {section}.sasl_port must be a TCP port between 1 and 65535, got {port!r}")
        if port in (self.client_port, self.controller_port):
            raise ConfigError(f"setting {section}.sasl_port must differ from client_port and controller_port")
        if self.sasl_mechanism not in SCRAM_MECHANISMS:
            raise ConfigError(
                f"setting {section}.sasl_port (the local broker's SCRAM listener) needs {section}.sasl_mechanism "
                f"{' or '.join(SCRAM_MECHANISMS)}, got {self.sasl_mechanism!r}"
            )
        if not self.sasl_username:
            raise ConfigError(f"setting {section}.sasl_port needs {section}.sasl_username (the SCRAM user)")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


#: Spark's own settings with this project's defaults (``[spark.conf]``, which conf/router.toml spells out): the
#: settings file's ``[spark.conf]`` table replaces them as a whole, a ``--set spark.conf.KEY=VALUE`` one by one.
#: Spark's rows per Arrow batch a Python UDF gets: the keys of one native matcher call, so at most
#: ``limits.max_batch_rows``.
ARROW_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: Spark's bytes per Arrow batch a Python UDF returns: the routing UDF cuts its subscriber lists by it too
#: (below 2 GiB: Arrow's 32-bit offsets).
ARROW_OUTPUT_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerOutputBatch"

DEFAULT_SPARK_CONF: Mapping[str, str] = {
    # The web UI (port 4040+): off for tests and small machines.
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    # The parallel collector: the least CPU per byte collected (a stream routes more messages a second on the
    # same cores), with full collections of 0.3-0.7 s every few minutes under load; drop it for G1.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
    # Spark's 200 is far too many for micro-batches on 2 cores.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Partitions of Delta's log replay, which every idempotent append needs for each new table version:
    # Delta's 50 assume a cluster; on 2 cores 1 replayed fastest (tables of 1 to 8,000 files).
    "spark.databricks.delta.snapshotPartitions": "1",
    # Keys per native matcher call: enough to amortise the call, small enough to keep a task's memory low.
    ARROW_BATCH_ROWS: "10000",
    # A UDF output batch of subscriber lists: many rows per round trip, far below Arrow's 2 GiB.
    ARROW_OUTPUT_BATCH_BYTES: str(64 * 1024 * 1024),
    # The Kafka sink's cached batch lives for one batch: compressing it only costs the sink's CPU.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}


@dataclasses.dataclass(frozen=True)
class SparkSettings:
    """The one SparkSession (:func:`routing.spark.get_spark`)."""

    SECTION: ClassVar[str] = "spark"
    PATHS: ClassVar[tuple[str, ...]] = ("jars_dir",)
    OPTIONAL_PATHS: ClassVar[tuple[str, ...]] = ("jars_dir",)
    #: Settings of earlier releases, and where each went (the loader's error says so).
    MOVED: ClassVar[Mapping[str, str]] = {"jars_provided": 'set jars_dir = "" where the runtime provides the jars'}

    master: str = "local[2]"
    """Where the session runs: ``local[N]`` runs it in this process's JVM on N cores; under spark-submit the
    submitter's ``--master`` wins."""
    remote: str = ""
    """A Spark Connect server (``sc://host:port``) to run on instead of a JVM in this process; empty: classic
    Spark. The server brings its own jars and static configuration (``python -m jobs.connect_server``)."""
    jars_dir: str = "var/jars/spark"
    """The Kafka source and Delta jars ``make jars`` resolved: the only jars a session loads (nothing is
    resolved at run time). Empty where the runtime already has them on its class path (a managed Spark, an image
    with them in ``$SPARK_HOME/jars``): then no jar check, and nothing is added to ``spark.jars``."""
    conf: dict[str, str] = dataclasses.field(default_factory=lambda: dict(DEFAULT_SPARK_CONF), hash=False)
    """Spark's (and Delta's) own configuration keys for the session, applied over what the project must set;
    JVM flags go in ``spark.driver.extraJavaOptions``. Default: :data:`DEFAULT_SPARK_CONF`, which a settings
    file's ``[spark.conf]`` replaces as a whole (conf/router.toml spells it out) and ``--set
    spark.conf.KEY=VALUE`` entry by entry."""

    def __post_init__(self) -> None:
        section = self.SECTION
        if not self.master:
            raise ConfigError(f"setting {section}.master must not be empty")
        if self.remote and not self.remote.startswith("sc://"):
            raise ConfigError(
                f"setting {section}.remote must be a Spark Connect URL sc://host:port, got {self.remote!r}"
            )
        conf: dict[str, str] = {}
        for key, value in self.conf.items():
            if isinstance(value, (dict, list, tuple)) or value is None:
                raise ConfigError(f"setting {section}.conf.{key} must be a scalar, got {shown(str(key), value)}")
            conf[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
        object.__setattr__(self, "conf", conf)
        for key in (ARROW_BATCH_ROWS, ARROW_OUTPUT_BATCH_BYTES):
            number = self._conf_int(key)
            if not 1 <= number <= MAX_INT_SETTING:
                raise ConfigError(f"setting {section}.conf.{key} must be between 1 and {MAX_INT_SETTING}, got {number}")
        _resolve_paths(self)

    def _conf_int(self, key: str) -> int:
        text = self.conf.get(key, DEFAULT_SPARK_CONF[key])
        if not (text.isascii() and text.lstrip("-").isdigit() and len(text) <= 20):
            raise ConfigError(f"setting {self.SECTION}.conf.{key} must be an integer, got {text!r}")
        return int(text)

    @property
    def arrow_batch_rows(self) -> int:
        """Rows per Arrow batch the routing UDF gets (:data:`ARROW_BATCH_ROWS`; its default if unset)."""
        return self._conf_int(ARROW_BATCH_ROWS)

    @property
    def arrow_output_batch_bytes(self) -> int:
        """Bytes per Arrow batch the routing UDF returns (:data:`ARROW_OUTPUT_BATCH_BYTES`; its default if unset)."""
        return self._conf_int(ARROW_OUTPUT_BATCH_BYTES)


@dataclasses.dataclass(frozen=True)
class SubscriptionSettings:
    """The Delta subscription table and the job that refreshes it from the events topic."""

    SECTION: ClassVar[str] = "subscriptions"
    PATHS: ClassVar[tuple[str, ...]] = ("table_path", "rejects_path", "checkpoint_path")
    URI_PATHS: ClassVar[tuple[str, ...]] = PATHS
    #: Delta tables: each a path or a catalog table name (``routing.delta_tables``).
    TABLES: ClassVar[tuple[str, ...]] = ("table_path", "rejects_path")

    table_path: str = "var/delta/subscriptions"
    """The subscription table (Delta) the router matches against and the refresh job maintains."""
    rejects_path: str = "var/delta/subscription_rejects"
    """Subscription events that failed validation, with their reason codes."""
    events_topic: str = "subscriptions"
    """The Kafka topic of subscribe and unsubscribe events the refresh job applies."""
    checkpoint_path: str = "var/checkpoints/refresh_subscriptions"
    """The refresh job's checkpoint (the events it has applied)."""
    starting_offsets: str = "earliest"
    """Where a refresh job with no checkpoint starts reading: earliest or latest."""
    max_offsets_per_trigger: int = 100_000
    """Upper bound on events one micro-batch reads (``maxOffsetsPerTrigger``)."""
    max_event_bytes: int = 65_536
    """Bytes of one subscription event (Kafka value or import line); larger ones are rejected."""
    max_import_bytes: int = 64 * 1024 * 1024
    """Bytes of one import file (``--import``, ``python -m routing match``): it is read whole, so a larger one is
    refused with one line before any of it is applied."""

    def __post_init__(self) -> None:
        section = self.SECTION
        if not self.events_topic:
            raise ConfigError(f"setting {section}.events_topic must not be empty")
        if self.starting_offsets not in STARTING_OFFSETS:
            raise ConfigError(
                f"setting {section}.starting_offsets must be earliest or latest, got {self.starting_offsets!r}"
            )
        _check_integers(self)
        _resolve_paths(self)


KEY_SOURCES = frozenset({"key", "header", "json"})
TRIGGERS = frozenset({"processing_time", "available_now", "real_time"})
SNAPSHOT_TRANSPORTS = frozenset({"file", "broadcast"})


@dataclasses.dataclass(frozen=True)
class RouterSettings:
    """The streaming router (``jobs/route.py``): what it reads, how it batches, where it writes."""

    SECTION: ClassVar[str] = "router"
    PATHS: ClassVar[tuple[str, ...]] = (
        "checkpoint_path",
        "deliveries_path",
        "dead_letters_path",
        "unrouted_path",
        "metrics_path",
        "snapshot_files_path",
    )
    URI_PATHS: ClassVar[tuple[str, ...]] = PATHS
    #: Delta tables: each a path or a catalog table name (``routing.delta_tables``).
    TABLES: ClassVar[tuple[str, ...]] = ("deliveries_path", "dead_letters_path", "unrouted_path", "metrics_path")
    #: Empty means the default place (``snapshot_files_path``) or off (``unrouted_path``, ``metrics_path``), and
    #: stays empty.
    OPTIONAL_PATHS: ClassVar[tuple[str, ...]] = ("unrouted_path", "metrics_path", "snapshot_files_path")
    #: Settings of earlier releases, and where each went (the loader's error says so): Spark's own keys.
    MOVED: ClassVar[Mapping[str, str]] = {
        "arrow_batch_rows": f'set [spark.conf] "{ARROW_BATCH_ROWS}", Spark\'s own key',
        "max_output_batch_bytes": f'set [spark.conf] "{ARROW_OUTPUT_BATCH_BYTES}", Spark\'s own key',
    }
    INT_RANGES: ClassVar[Mapping[str, tuple[int, int, str]]] = {
        "retain_batches": (0, MAX_INT_SETTING, " 0 (keep everything) or a number of batches"),
        "snapshot_deltas_from_pairs": (0, MAX_INT_SETTING, " 0 (always) or a number of pairs"),
    }

    topics: tuple[str, ...] = ("messages",)
    """Kafka topics to route (ignored when ``subscribe_pattern`` is set)."""
    subscribe_pattern: str = ""
    """A Java regex of topics to route, instead of ``topics``."""
    starting_offsets: str = "earliest"
    """Where a router with no checkpoint starts: earliest or latest."""
    max_offsets_per_trigger: int = 50_000
    """Upper bound on records per micro-batch, so every batch is bounded."""
    trigger: str = "processing_time"
    """``processing_time`` (a stream: a batch every ``trigger_interval``), ``available_now`` (drain what is
    there, then stop: backfills and scheduled runs) or ``real_time`` (the real-time lane, Kafka to Kafka in
    Spark's Real-Time Mode: ``routing.realtime``)."""
    trigger_interval: str = "5 seconds"
    """How often a processing-time trigger starts a batch (Spark's interval text): the floor of a message's
    latency when traffic is light, and the batch size's when it is heavy."""
    real_time_interval: str = "1 minute"
    """The real-time lane's checkpoint interval (Real-Time Mode's batch duration, Spark's interval text): how much
    a restart routes again, and how often the streaming tasks pause at a batch boundary (each pause sets the
    lane's tail latency)."""
    checkpoint_path: str = "var/checkpoints/route"
    """The router's checkpoint: Spark's offsets and commits, and the replay ledger beside them. Keep it as long as
    the router's output: a new one starts a new query, whose batches from 0 are written again."""
    fail_on_data_loss: bool = True
    """Fail the query when Kafka data is lost (deleted topics, expired offsets)."""
    key_source: str = "key"
    """Where the routing key is: ``key`` (the Kafka message key), ``header:NAME`` (the Kafka header NAME) or
    ``json:FIELD`` (the top-level FIELD of a JSON value), for producers that cannot set the key."""
    refresh_interval_s: float = 30.0
    """Seconds between checks of the subscription table for a new version: at most this long until a subscribe
    the refresh job applied reaches the router. The real-time lane also checks its snapshot files this often in
    each executor: 1 is what its page recommends (docs/realtime.md)."""
    app_id: str = "spark-topic-router"
    """Stable identity of this router: joined with the query id (``app_id:query id``, kept in the checkpoint) it is the
    Delta ``txnAppId`` of every idempotent write (``routing.streaming.txn_app_id``)."""
    deliveries_path: str = "var/delta/deliveries"
    """The deliveries table, one row per (message, subscriber) matched: what subscribers read (a path or a
    catalog table name)."""
    dead_letters_path: str = "var/delta/dead_letters"
    """The dead letters table: each message the router could not route, with its reason code."""
    unrouted_path: str = ""
    """A table to also write each message no subscription matched to (to audit or replay them later); empty: not
    written (they are always counted)."""
    retain_batches: int = 100
    """Batches whose ledger entries and reports (in the driver's memory) are kept: the last this many, older ones pruned
    every this many batches, as Spark keeps its offset log (``minBatchesToRetain``, 100). Only the batch in flight is
    ever replayed; the rest is for audits. 0 keeps everything. A run's totals are summed as it goes, so they cover
    every batch either way."""
    kafka_sink_topic: str = ""
    """Also publish every delivery to Kafka, keyed by its delivery id, for consumers that read Kafka rather than
    Delta: empty, none; a topic name; or a template with ``{subscriber}``, one topic per subscriber. No two
    subscribers share a topic: an id Kafka's names cannot hold as it is becomes a readable prefix and a hash
    (``routing.kafka_sink``)."""
    dead_letter_topic: str = ""
    """The real-time lane's topic of dead letters, each with its reason in a header (required by
    ``trigger = real_time``; the micro-batch lane writes them to ``dead_letters_path``)."""
    unrouted_topic: str = ""
    """The real-time lane's topic of messages no subscription matched; empty: they are only counted."""
    metrics_path: str = ""
    """Delta table of one metrics row per batch (the BatchReport); empty = not written."""
    snapshot_files_path: str = ""
    """Directory of the snapshot files: every published snapshot is also kept as a content-addressed file
    (``routing.router.snapshot_files``), so that a router starting on a version that has one loads it instead of
    rebuilding it from the table (and replays read it). Empty: ``_snapshots`` inside the subscription table (Delta
    ignores it)."""
    snapshot_files_keep: int = 3
    """Versions whose files are kept; older ones are deleted as new ones are written."""
    snapshot_transport: str = "file"
    """How a snapshot reaches the UDF: ``file`` (its snapshot file, read once per version by each Python worker;
    measured faster than a broadcast, ``bench/results/snapshot_transport.md``, and the only way on Spark Connect) or
    ``broadcast`` (classic sessions; for executors that cannot open the snapshot directory with pyarrow; the files
    are still kept for restarts where the driver can write them)."""
    snapshot_deltas_from_pairs: int = 100_000
    """With the ``file`` transport, a table of at least this many pairs publishes each new version as a delta over
    its last whole snapshot (a base), which costs what changed instead of the whole table, on the driver and on
    every worker (``routing.router.snapshots``); a smaller one publishes whole snapshots, which freeze in
    milliseconds. 0: deltas at every size."""
    snapshot_merge_pairs: int = 100_000
    """Pairs changed since the base after which a new base is frozen, on a background thread, while deltas keep
    being published: larger deltas cost every publish and lookup a little more, merges cost a whole freeze and
    every worker's load of the new base."""

    @property
    def key_kind(self) -> str:
        """``key``, ``header`` or ``json``: the part of ``key_source`` before its colon."""
        return self.key_source.partition(":")[0]

    @property
    def key_name(self) -> str:
        """The header's name or the JSON field of ``key_source`` (after its colon); "" for ``key``."""
        return self.key_source.partition(":")[2]

    def __post_init__(self) -> None:
        section = self.SECTION
        for name, value, allowed in (
            ("starting_offsets", self.starting_offsets, STARTING_OFFSETS),
            ("trigger", self.trigger, TRIGGERS),
            ("snapshot_transport", self.snapshot_transport, SNAPSHOT_TRANSPORTS),
        ):
            if value not in allowed:
                choices = ", ".join(sorted(allowed))
                raise ConfigError(f"setting {section}.{name} must be one of {choices}, got {value!r}")
        if self.key_kind not in KEY_SOURCES or (self.key_kind == "key") != (self.key_name == ""):
            raise ConfigError(
                f"setting {section}.key_source must be key, header:NAME or json:FIELD, got {self.key_source!r}"
            )
        if not self.topics and not self.subscribe_pattern:
            raise ConfigError(f"setting {section}.topics is empty and {section}.subscribe_pattern is not set")
        _check_integers(self)
        _check_seconds(section, "refresh_interval_s", self.refresh_interval_s)
        if not self.app_id:
            raise ConfigError(f"setting {section}.app_id must not be empty")
        problem = check_topic_setting(self.kafka_sink_topic)
        if problem is not None:
            raise ConfigError(f"setting {section}.kafka_sink_topic {problem}, got {self.kafka_sink_topic!r}")
        for name in ("dead_letter_topic", "unrouted_topic"):
            value = getattr(self, name)
            problem = check_topic_setting(value) or (
                "must be one topic, not a template" if SUBSCRIBER_PLACEHOLDER in value else None
            )
            if problem is not None:
                raise ConfigError(f"setting {section}.{name} {problem}, got {value!r}")
        if self.trigger == "real_time" and not (self.kafka_sink_topic and self.dead_letter_topic):
            raise ConfigError(
                f"setting {section}.trigger = real_time writes to Kafka only: set {section}.kafka_sink_topic "
                f"and {section}.dead_letter_topic"
            )
        _resolve_paths(self)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every section, loaded and validated together (:func:`load_settings`)."""

    limits: Limits = dataclasses.field(default_factory=Limits)
    validation: ValidationSettings = dataclasses.field(default_factory=ValidationSettings)
    kafka: KafkaSettings = dataclasses.field(default_factory=KafkaSettings)
    spark: SparkSettings = dataclasses.field(default_factory=SparkSettings)
    subscriptions: SubscriptionSettings = dataclasses.field(default_factory=SubscriptionSettings)
    router: RouterSettings = dataclasses.field(default_factory=RouterSettings)
    acl: AclSettings = dataclasses.field(default_factory=AclSettings)

    def __post_init__(self) -> None:
        # Settings of different sections that must agree; each section checked its own fields already.
        if self.spark.arrow_batch_rows > self.limits.max_batch_rows:
            raise ConfigError(
                f"settings spark.conf.{ARROW_BATCH_ROWS}={self.spark.arrow_batch_rows} and "
                f"limits.max_batch_rows={self.limits.max_batch_rows} disagree: every Arrow batch of keys is one "
                f"matcher call, which refuses more than limits.max_batch_rows rows; lower {ARROW_BATCH_ROWS} "
                f"or raise limits.max_batch_rows"
            )
        if self.spark.remote and self.router.snapshot_transport != "file":
            raise ConfigError(
                f"settings spark.remote={self.spark.remote!r} and "
                f"router.snapshot_transport={self.router.snapshot_transport!r} disagree: Spark Connect has no "
                "broadcasts, so snapshots reach the UDF as snapshot files; set router.snapshot_transport = file"
            )

    def validator(self) -> Validator:
        """The validation layer configured by ``[limits]``, ``[validation]`` and ``[acl]``."""
        return Validator(limits=self.limits, policy=Policy.parse(self.validation.policy), acl=self.acl.policy)

    def replace(self, **sections: Any) -> Settings:
        """A copy with whole sections replaced."""
        return dataclasses.replace(self, **sections)

    def kafka_client_config(self) -> dict[str, str | int | float | bool]:
        """confluent-kafka (librdkafka) configuration for the cluster, SASL credentials included.

        The result holds the password in clear text: hand it to a client, never log it.
        """
        kafka = self.kafka
        config: dict[str, str | int | float | bool] = {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": kafka.security_protocol,
        }
        if kafka.uses_sasl:
            config["sasl.mechanism"] = str(kafka.sasl_mechanism)
            config["sasl.username"] = str(kafka.sasl_username)
            config["sasl.password"] = _require_password(kafka).reveal()
        return config

    def spark_kafka_options(self) -> dict[str, str]:
        """Options for Spark's Kafka source and sink (``kafka.``-prefixed consumer/producer configs).

        The result holds the password in clear text (in the JAAS line): never log it.
        """
        kafka = self.kafka
        options = {f"kafka.{name}": value for name, value in kafka.spark_options.items()}
        options["kafka.bootstrap.servers"] = kafka.bootstrap_servers
        options["kafka.security.protocol"] = kafka.security_protocol
        if kafka.uses_sasl:
            module = SASL_LOGIN_MODULES[str(kafka.sasl_mechanism)]
            username = _jaas_quote(str(kafka.sasl_username))
            password = _jaas_quote(_require_password(kafka).reveal())
            options["kafka.sasl.mechanism"] = str(kafka.sasl_mechanism)
            options["kafka.sasl.jaas.config"] = f'{module} required username="{username}" password="{password}";'
        return options


#: Kafka client configs the ``[kafka]`` settings set themselves (so ``kafka.spark_options`` may not).
OWN_KAFKA_CONFIGS = frozenset({"bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.jaas.config"})


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _require_password(kafka: KafkaSettings) -> Secret:
    if kafka.sasl_password is None:
        raise ConfigError(
            f"{kafka.security_protocol} needs a password: set the environment variable {SASL_PASSWORD_ENV} "
            f"or kafka.sasl_password_file"
        )
    return kafka.sasl_password


SECTIONS: dict[str, type[Any]] = {
    field.name: typing.get_type_hints(Settings)[field.name] for field in dataclasses.fields(Settings)
}


def _table_fields(cls: type[Any]) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {
        field.name
        for field in dataclasses.fields(cls)
        if typing.get_origin(hints[field.name]) is dict or hints[field.name] is dict
    }


def _read_password(kafka: KafkaSettings, env: Mapping[str, str]) -> Secret | None:
    from_env = env.get(SASL_PASSWORD_ENV)
    if from_env:
        return Secret(from_env)
    if kafka.sasl_password_file is None:
        return None
    # Bounded: any kind of file (a pipe, /dev/zero) is read at most MAX_PASSWORD_FILE_BYTES + 1 bytes.
    content = read_bounded(
        Path(kafka.sasl_password_file),
        MAX_PASSWORD_FILE_BYTES,
        what=f"setting kafka.sasl_password_file: {kafka.sasl_password_file}",
        limit_text="64 KiB",
    )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        # Never say which byte or where: both are the password's.
        raise ConfigError(f"setting kafka.sasl_password_file: {kafka.sasl_password_file} is not UTF-8 text") from None
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"setting kafka.sasl_password_file: {kafka.sasl_password_file} is empty")
    return Secret(password)


def _paths_from_file_dir(conf: dict[str, Any], base: Path) -> dict[str, Any]:
    """``conf`` with each section's relative ``PATHS`` made absolute against ``base``, the file's directory."""
    resolved = dict(conf)
    for name, cls in SECTIONS.items():
        table = conf.get(name)
        if not isinstance(table, Mapping):
            continue  # load_section names the problem
        paths = {
            field: stored_path(cls, field, table[field], base)
            for field in getattr(cls, "PATHS", ())
            if isinstance(table.get(field), str) and table[field]
        }
        resolved[name] = {**table, **paths}
    return resolved


def _unknown_section(section: str) -> str:
    """The complaint about section ``section``, with the known section it is most likely a typo of."""
    known = ", ".join(SECTIONS)
    close = difflib.get_close_matches(section.lower(), SECTIONS, n=1, cutoff=0.6)
    hint = f": did you mean [{close[0]}]?" if close else ""
    return f"unknown settings section [{section}]{hint} (known: {known})"


def _check_sections(conf: Mapping[str, Any], path: Path, env: Mapping[str, str]) -> None:
    """Refuse a file's or an environment variable's section this loader does not know (a typo would be ignored)."""
    for name, value in conf.items():
        if name in SECTIONS:
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"settings file {path}: setting {name!r} is outside any section (put it under its [section])"
            )
        raise ConfigError(f"settings file {path}: {_unknown_section(name)}")
    for variable in env:
        if not variable.startswith(ENV_PREFIX):
            continue
        section, separator, key = variable[len(ENV_PREFIX) :].partition("__")
        if not separator or not section or not key:
            raise ConfigError(f"environment variable {variable}: expected {ENV_PREFIX}<SECTION>__<KEY>")
        if section.lower() not in SECTIONS:
            raise ConfigError(f"environment variable {variable}: {_unknown_section(section.lower())}")


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, object]] | None = None,
) -> Settings:
    """Every section from the settings file (``path``, else ``$ROUTER_CONF``, else conf/router.toml),
    the environment (``env``, default ``os.environ``) and ``overrides`` ({section: {key: value}}).

    A section this object does not know, in the file, a ``ROUTER__`` variable or ``overrides``, is an
    error (with the known section it most likely misspells), as an unknown key is.
    """
    environment = os.environ if env is None else env
    raw_conf = read_conf(path)
    _check_sections(raw_conf, conf_path(path), environment)
    conf = _paths_from_file_dir(raw_conf, conf_path(path).absolute().parent)
    overrides = overrides or {}
    for section in overrides:
        if section not in SECTIONS:
            raise ConfigError(_unknown_section(section))
    loaded: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        section_overrides = dict(overrides.get(name, {}))
        table = conf.get(name, {})
        for field in _table_fields(cls):
            if field in section_overrides and isinstance(table, Mapping) and isinstance(table.get(field), Mapping):
                extra = section_overrides[field]
                if not isinstance(extra, Mapping):
                    raise ConfigError(f"setting {name}.{field} must be a table, got {extra!r}")
                section_overrides[field] = {**table[field], **extra}
        loaded[name] = load_section(cls, name, conf=conf, env=environment, overrides=section_overrides)
    kafka: KafkaSettings = loaded["kafka"]
    password = _read_password(kafka, environment)
    if password is not None:
        loaded["kafka"] = dataclasses.replace(kafka, sasl_password=password)
    if kafka.uses_sasl and password is None:
        _require_password(kafka)
    return Settings(**loaded)


# -- command-line flags shared by every job --------------------------------


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the standard ``--conf FILE`` and ``--set SECTION.KEY=VALUE`` flags to a job's parser."""
    group = parser.add_argument_group("settings")
    group.add_argument(
        "--conf",
        metavar="FILE",
        help="settings file (default: $ROUTER_CONF, else conf/router.toml)",
    )
    group.add_argument(
        "--set",
        dest="settings_overrides",
        metavar="SECTION.KEY=VALUE",
        action="append",
        default=[],
        help="override one setting, e.g. --set kafka.client_port=29092 or --set spark.conf.spark.sql.ansi.enabled=true"
        " (repeatable)",
    )


def parse_overrides(assignments: Sequence[str]) -> dict[str, dict[str, object]]:
    """``["kafka.client_port=1"]`` -> ``{"kafka": {"client_port": "1"}}``.

    Values stay text (the loader converts them as it does environment variables). For a table
    field the rest of the name is the entry: ``spark.conf.spark.sql.ansi.enabled=true``.
    """
    overrides: dict[str, dict[str, object]] = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        section, dot, key = name.strip().partition(".")
        # Echo the value only when the name does not look secret: "--set kafak.sasl_password=..." must not show it.
        echo = name if not equals else f"{name}=<hidden>" if SECRET_KEY.search(name) else assignment
        if not equals or not dot or not section or not key:
            raise ConfigError(f"--set expects SECTION.KEY=VALUE, got {echo!r}")
        if section not in SECTIONS:
            raise ConfigError(f"--set {echo!r}: {_unknown_section(section)}")
        field, dot, entry = key.partition(".")
        if dot and field in _table_fields(SECTIONS[section]):
            table = overrides.setdefault(section, {}).setdefault(field, {})
            assert isinstance(table, dict)
            table[entry] = value
        else:
            overrides.setdefault(section, {})[key] = value
    return overrides


def settings_from_args(args: argparse.Namespace, *, env: Mapping[str, str] | None = None) -> Settings:
    """The settings a job runs with, from the flags added by :func:`add_settings_arguments`."""
    return load_settings(args.conf, env=env, overrides=parse_overrides(args.settings_overrides))

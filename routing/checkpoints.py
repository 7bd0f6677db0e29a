"""The checkpoint directory's layout: every file the jobs keep beside Spark's own, and how each is written.

Both jobs keep their progress in a checkpoint directory that may be local, HDFS, S3 or ABFS. Spark owns
its offset and commit logs there; the jobs add a few files of their own, and this module is the one place
that names them (:data:`LAYOUT`) and reads, writes and prunes them. Other modules keep their logic (the
ledger's pinning rules, the tail's printing) and get every checkpoint-relative path and file from here.

The layout
----------

Relative to the checkpoint (``<q>``: the streaming query's id, ``<b>``: a batch id, ``<g>``: a lease
generation). Every write is atomic (a temporary ``.<name>.<random>.tmp`` renamed into place); every file
is one JSON object but the tail's rows (JSON lines) and ``.done`` (the bytes ``printed``). Each row's
writer goes through the function or class named in it::

    =================================  =====================================  =====================================
    Name, writer and format            What it is                             When it is pruned
    =================================  =====================================  =====================================
    ``metadata``, ``commits/<b>``      the query's id; its committed batches  by Spark: read here, never written
    (Spark's own)                      (:func:`checkpoint_query_id`,
                                       :func:`first_batch_of_run`)
    ``lease/<g>``                      who holds the checkpoint, heartbeat    on acquire: all but the previous
    (every job; write-once, then       (:class:`CheckpointLease`)             generation
    replaced by the heartbeat)
    ``router_ledger/<q>/<b>``          the snapshot version the batch routed  every ``retain_batches`` batches,
    (the router; write-once)           with (:mod:`routing.router.ledger`,    those ``retain_batches`` back
                                       :func:`ledger_directory`)
    ``router_reports/<q>/<b>``         the batch's report and the run's       as the ledger, by the same worker
    (the router's worker on Spark      totals, for the client
    Connect; replaced on a replay)     (:func:`router_reports`)
    ``refresh_summaries/<q>/<b>``      the batch's summary, for the client    by the client, once it read them
    (the refresh job's worker on       (:func:`refresh_summaries`)
    Spark Connect; replaced)
    ``handoff/<b>.rows``               the batch's rows, in print order       by the worker, once the tail
    (the tail's worker on Spark        (:class:`HandoffFiles`)                printed them
    Connect; replaced)
    ``handoff/<b>.done``               the tail printed and flushed them      with ``<b>.rows``
    (the tail; write-once)
    ``unprinted/rows``                 the rows a ``--limit`` left            when printed (the next run), or
    (the tail; replaced)               unprinted (:class:`UnprintedRows`)     replaced by a later limit's
    =================================  =====================================  =====================================

Not in a checkpoint: the frozen snapshot files live beside the subscription table
(:mod:`routing.router.snapshot_files`), and a tail's own checkpoint defaults to a sibling of the router's
(:func:`tail_checkpoint`), never inside it.

Files go through a filesystem client that reaches every filesystem a checkpoint may be on, never Python's
``open``: :class:`CheckpointFiles` is Spark's own ``CheckpointFileManager`` (via the JVM gateway)
for one directory, the API Spark writes its offset and commit logs with; pyarrow's filesystems
(:class:`ArrowFiles`) in a Spark Connect session, which has no JVM, and for a directory on the
local disk, where Hadoop's local filesystem took ~40 ms a file.

The lease: one job per checkpoint
---------------------------------

Spark refuses a second query on a checkpoint only within one SparkSession (its active query ids);
two ``python -m jobs.route`` processes share nothing but the filesystem, and would race each other
through the offset log, the ledger and the Delta writes. So a job holds a lease on its checkpoint
for as long as it runs (:class:`CheckpointLease`), kept in the checkpoint itself::

    <checkpoint>/lease/<generation>      one JSON file per holder, generations 1, 2, 3, ...

* **Acquire.** The newest generation says who holds the checkpoint. If that holder is *live*, the job
  stops before its query starts with :class:`CheckpointBusy`: one line naming the checkpoint, the
  holder (job, name, host, pid, query id when known) and its last heartbeat; the jobs exit with
  :data:`EXIT_CHECKPOINT_BUSY`. Otherwise the job creates the next generation *write-once* (a
  temporary file renamed into place without overwriting, like Spark's offset log and the ledger):
  of two jobs starting at once exactly one creates it, and the other finds it live.
* **Live** means not released and, for a holder on this very machine (same Linux boot id and pid
  namespace: not another container), its process still running (the same pid with the same start
  time); for any other holder, a heartbeat younger than ``timeout_s`` by this host's clock. So a job
  SIGKILLed and restarted on the same machine takes the checkpoint over at once; a holder on another
  machine that died is taken over once its heartbeat is ``timeout_s`` old (:data:`LEASE_TIMEOUT_S`, a
  minute): a restart is delayed, never blocked for good.
* **Heartbeat.** A daemon thread rewrites the holder's file every ``timeout_s / 6``. It also notices
  when the lease is lost: a newer generation appeared (another job judged this one dead: a pause
  longer than ``timeout_s``), or the file could not be renewed for ``timeout_s``. The jobs call
  :meth:`CheckpointLease.check` at the start of every batch, so a job that lost its lease fails its
  next batch before writing anything (:class:`LeaseLost`, exit status 1).
* **Release.** A job that stops cleanly marks its generation released, and the next one takes over at
  once. Generations older than the previous one are deleted as a new one is acquired.

Limits, on purpose:

* Mutual exclusion rests on an atomic create-without-overwrite. HDFS and ABFS (hierarchical
  namespace) rename without overwrite atomically, and a local disk goes through :class:`ArrowFiles`'
  hard link, which is atomic too. S3 through S3A does not (its rename is a copy), so two jobs starting
  within the same instant could both win there, the very hole Spark's own checkpoint has on S3. Nor
  does Hadoop's *local* filesystem: its rename checks for the destination and then renames, so two
  racers can both pass the check (one more reason local directories skip it). Keep checkpoints on a
  filesystem with atomic rename.
* Liveness across machines trusts the clocks: they must agree to well within ``timeout_s`` (NTP).
* A holder that stalls longer than ``timeout_s`` (a long GC pause, a frozen VM) is taken over while it
  still runs; until its next heartbeat notices (at most ``timeout_s / 6`` later) it may finish a batch
  it had started. Its writes are those of the same query (the checkpoint holds the query id), so
  Delta's ``txnAppId`` skips a batch written twice and the ledger keeps the first snapshot version;
  Spark's offset log then fails one of the two (``Concurrent update to the log``).

Spark is imported only inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import posixpath
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any

from routing.jvm import HadoopFiles, SparkJvm, spark_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("routing.checkpoints")

#: Seconds after its last heartbeat a holder on another machine counts as dead.
LEASE_TIMEOUT_S = 60.0
#: Exit status of a job that found its checkpoint held by a live job (nothing was done; run it again later).
EXIT_CHECKPOINT_BUSY = 3

# The names inside a checkpoint (see the layout in the module doc, and :data:`LAYOUT`).
#: Spark's: the query's metadata (its id, on the first line) and its commit log.
SPARK_METADATA = "metadata"
SPARK_COMMITS = "commits"
#: The lease's generations.
LEASE_DIRECTORY = "lease"
#: The router's replay ledger (:mod:`routing.router.ledger`).
LEDGER_DIRECTORY = "router_ledger"
#: The router's batch reports on Spark Connect (:func:`router_reports`).
ROUTER_REPORTS_DIRECTORY = "router_reports"
#: The refresh job's batch summaries on Spark Connect (:func:`refresh_summaries`).
REFRESH_SUMMARIES_DIRECTORY = "refresh_summaries"
#: A tail's handoff directory on Spark Connect (:class:`HandoffFiles`).
HANDOFF_DIRECTORY = "handoff"
#: The rows a tail's ``--limit`` left unprinted: ``<this>/rows`` (:class:`UnprintedRows`).
UNPRINTED_DIRECTORY = "unprinted"
UNPRINTED_FILE = "rows"
#: The directory beside the router's checkpoint that holds the tails' default checkpoints (:func:`tail_checkpoint`).
TAIL_CHECKPOINTS_DIRECTORY = "tail"


@dataclasses.dataclass(frozen=True)
class KeptFile:
    """One kind of file the jobs keep in a checkpoint: a row of the layout table in the module doc."""

    #: The path relative to the checkpoint: ``<q>`` a query id, ``<b>`` a batch id, ``<g>`` a lease generation.
    pattern: str
    what: str
    written_by: str
    #: ``json``, ``json lines`` or ``text``; ``write-once`` or ``replaced`` (atomically, either way).
    format: str
    pruned: str


#: Every kind of file the jobs keep beside Spark's own in a checkpoint (tests/test_checkpoint_layout.py writes
#: through every writer and checks that they write exactly these).
LAYOUT: tuple[KeptFile, ...] = (
    KeptFile(
        f"{LEASE_DIRECTORY}/<g>",
        "who holds the checkpoint (CheckpointLease)",
        "every job",
        "json, write-once, then replaced by the heartbeat",
        "on acquire: all but the previous generation",
    ),
    KeptFile(
        f"{LEDGER_DIRECTORY}/<q>/<b>",
        "the snapshot version the batch routed with (routing.router.ledger)",
        "the router",
        "json, write-once",
        "every retain_batches batches, those retain_batches back",
    ),
    KeptFile(
        f"{ROUTER_REPORTS_DIRECTORY}/<q>/<b>",
        "the batch's report and the run's totals, for the client (router_reports)",
        "the router's worker on Spark Connect",
        "json, replaced",
        "as the ledger, by the same worker",
    ),
    KeptFile(
        f"{REFRESH_SUMMARIES_DIRECTORY}/<q>/<b>",
        "the batch's summary, for the client (refresh_summaries)",
        "the refresh job's worker on Spark Connect",
        "json, replaced",
        "by the client, once it read them",
    ),
    KeptFile(
        f"{HANDOFF_DIRECTORY}/<b>.rows",
        "the batch's rows, in print order (HandoffFiles)",
        "the tail's worker on Spark Connect",
        "json lines, replaced",
        "by the worker, once the tail printed them",
    ),
    KeptFile(
        f"{HANDOFF_DIRECTORY}/<b>.done",
        "the tail printed and flushed the batch's rows (HandoffFiles)",
        "the tail",
        "text, write-once",
        "with <b>.rows",
    ),
    KeptFile(
        f"{UNPRINTED_DIRECTORY}/{UNPRINTED_FILE}",
        "the rows a --limit left unprinted (UnprintedRows)",
        "the tail",
        "json lines, replaced",
        "when printed (the next run), or replaced by a later limit's",
    ),
)


def in_checkpoint(checkpoint: str, *names: str) -> str:
    """The path (or URI) of ``names`` inside ``checkpoint``."""
    return "/".join([checkpoint.rstrip("/"), *names])


class CheckpointFiles:
    """Write-once and replaceable files in one directory, on the checkpoint's filesystem.

    Hadoop's FileSystem through Spark's ``CheckpointFileManager`` (:class:`routing.jvm.HadoopFiles`) in a
    classic session on a tested Spark; pyarrow's filesystems (:class:`ArrowFiles`) where
    :func:`routing.jvm.spark_jvm` is None (Spark Connect, an untested Spark) and for a directory on the
    local disk. Both give the same atomic write-once files on local
    disks (ArrowFiles' hard link) and HDFS (Hadoop's rename); not Hadoop's own local filesystem, whose
    rename is a check then a rename (see "Limits" above).

    Why local directories skip Hadoop: its local filesystem made each write-once file cost about 40 ms
    of the driver's time (measured per ledger entry: creating the temporary file 10 ms, closing and
    renaming it 29 ms, each path 12 gateway calls), where the same file written in-process takes well
    under a millisecond, and the router writes one per batch. Most of those 40 ms were Hadoop forking
    ``chmod`` and ``readlink``, which the spawn-free local file system (``dev.local_spark``, development tooling)
    removes; local directories still skip Hadoop for the atomic create-without-overwrite ("Limits") and the
    gateway calls. ``backend`` forces one (tests of each).
    """

    def __init__(self, spark: SparkSession, directory: str, *, backend: str | None = None) -> None:
        internals = spark_jvm(spark)
        if backend is None:
            backend = "arrow" if internals is None or _on_local_disk(spark, directory, internals) else "hadoop"
        if backend not in ("arrow", "hadoop"):
            raise ValueError(f"backend must be 'arrow' or 'hadoop', got {backend!r}")
        if backend == "hadoop" and internals is None:
            raise ValueError("backend 'hadoop' needs a classic session on a tested Spark (routing.jvm.spark_jvm)")
        self._backend: HadoopFiles | ArrowFiles = (
            ArrowFiles(directory) if internals is None or backend == "arrow" else HadoopFiles(internals, directory)
        )

    @property
    def backend(self) -> str:
        """``arrow`` or ``hadoop``: which filesystem client writes the files."""
        return "arrow" if isinstance(self._backend, ArrowFiles) else "hadoop"

    def path(self, *names: str) -> str:
        return self._backend.path(*names)

    def read(self, *names: str) -> str | None:
        """The file's text, or None when it does not exist."""
        return self._backend.read(*names)

    def create_once(self, data: bytes, *names: str) -> bool:
        """Write ``data`` unless the file exists (atomically: temp file, rename without overwrite)."""
        return self._backend.create_once(data, *names)

    def replace(self, data: bytes, *names: str) -> None:
        """Write ``data`` over the file (atomically where the FS can: readers see the old or the new bytes)."""
        self._backend.replace(data, *names)

    def delete(self, *names: str) -> None:
        self._backend.delete(*names)

    def list_names(self, *names: str) -> list[str]:
        return self._backend.list_names(*names)


def _on_local_disk(spark: SparkSession, directory: str, internals: SparkJvm | None) -> bool:
    """Whether Hadoop would resolve ``directory`` on the driver's local filesystem."""
    from routing.filesystems import on_local_filesystem

    if internals is not None:
        default_fs = internals.default_fs()
    else:
        default_fs = str(spark.conf.get("spark.hadoop.fs.defaultFS", "file:///"))
    return on_local_filesystem(directory, default_fs)


class ArrowFiles:
    """The same files through ``pyarrow.fs`` (:func:`routing.filesystems.arrow_filesystem`), for Spark Connect.

    Write-once is a temporary file then a hard link to the final name on a local disk (``link`` fails if
    the name exists: atomic, like HDFS's rename), and a temporary file then an exists-check and a move
    elsewhere: on object stores two writers within the same instant could both win, the hole S3's
    rename has for Hadoop's FileSystem too (see "Limits" above).
    """

    def __init__(self, directory: str) -> None:
        import pyarrow.fs as pafs

        from routing.filesystems import arrow_filesystem

        self._fs, self._root = arrow_filesystem(directory)
        self._local = isinstance(self._fs, pafs.LocalFileSystem)

    def path(self, *names: str) -> str:
        return "/".join([self._root.rstrip("/"), *names])

    def _exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self._fs.get_file_info(path).type != pafs.FileType.NotFound)

    def read(self, *names: str) -> str | None:
        try:
            with self._fs.open_input_stream(self.path(*names)) as stream:
                return bytes(stream.read()).decode("utf-8")
        except FileNotFoundError:
            return None

    def _write_temporary(self, data: bytes, final: str) -> str:
        parent, _, name = final.rpartition("/")
        self._fs.create_dir(parent, recursive=True)
        temporary = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
        with self._fs.open_output_stream(temporary) as stream:
            stream.write(data)
        return temporary

    def create_once(self, data: bytes, *names: str) -> bool:
        final = self.path(*names)
        if self._exists(final):
            return False
        temporary = self._write_temporary(data, final)
        try:
            if self._local:
                try:
                    os.link(temporary, final)
                except FileExistsError:
                    return False
                return True
            if self._exists(final):
                return False
            self._fs.move(temporary, final)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                self._fs.delete_file(temporary)

    def replace(self, data: bytes, *names: str) -> None:
        final = self.path(*names)
        temporary = self._write_temporary(data, final)
        try:
            self._fs.move(temporary, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                self._fs.delete_file(temporary)
            raise

    def delete(self, *names: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(self.path(*names))

    def list_names(self, *names: str) -> list[str]:
        import pyarrow.fs as pafs

        infos = self._fs.get_file_info(pafs.FileSelector(self.path(*names), allow_not_found=True))
        return sorted(info.base_name for info in infos)


def delete_batch_files(files: CheckpointFiles | ArrowFiles, directory: str, through: int) -> int:
    """Delete the files of ``directory`` named by a batch id up to ``through`` (inclusive); how many were deleted.

    Other names (a temporary file of a write in flight) are left alone. The ledger's and the batch records'
    pruning.
    """
    doomed = [name for name in files.list_names(directory) if name.isdigit() and int(name) <= through]
    for name in doomed:
        files.delete(directory, name)
    return len(doomed)


# -- Spark's own files (read only) ------------------------------------------------------


def checkpoint_query_id(spark: SparkSession, checkpoint: str) -> str:
    """The id of the query whose checkpoint this is (Spark writes ``<checkpoint>/metadata`` before the first batch).

    What a ``foreachBatch`` function running in a Spark Connect server's worker binds instead of
    :meth:`routing.streaming.QueryIdentity.bind`: the client's ``start()`` returns the same id, but the worker
    cannot be told.
    """
    metadata = CheckpointFiles(spark, checkpoint).read(SPARK_METADATA)
    if metadata is None:
        raise RuntimeError(f"no query metadata in checkpoint {checkpoint}: cannot tell which query this is")
    return str(json.loads(metadata.splitlines()[0])["id"])


def first_batch_of_run(spark: SparkSession, checkpoint: str) -> int:
    """The first batch id a query started now on ``checkpoint`` processes: the one after its last commit.

    What a job on Spark Connect counts its own batches from, among the records its earlier runs left.
    """
    names = CheckpointFiles(spark, checkpoint).list_names(SPARK_COMMITS)
    commits = [int(name) for name in names if name.isdigit()]
    return max(commits) + 1 if commits else 0


# -- one JSON file per batch of a query: the ledger, the batch reports and summaries ----------


class QueryBatchFiles:
    """``<directory>/<query id>/<batch id>``: one JSON object per batch of a query (sorted keys).

    The query id level keeps a query apart from an earlier one of the same checkpoint (a new checkpoint
    numbers its batches from 0 again). Names that are not batch ids (a write's temporary file) are ignored.
    """

    def __init__(self, files: CheckpointFiles | ArrowFiles) -> None:
        self.files = files

    def create_once(self, query_id: str, batch_id: int, record: dict[str, Any]) -> bool:
        """Write ``record`` unless the batch has one; whether this call wrote it."""
        return self.files.create_once(json.dumps(record, sort_keys=True).encode(), query_id, str(batch_id))

    def replace(self, query_id: str, batch_id: int, record: dict[str, Any]) -> None:
        self.files.replace(json.dumps(record, sort_keys=True).encode(), query_id, str(batch_id))

    def read(self, query_id: str, batch_id: int) -> Any:
        """The batch's record, or None when it has none."""
        text = self.files.read(query_id, str(batch_id))
        return None if text is None else json.loads(text)

    def query_ids(self) -> list[str]:
        return self.files.list_names()

    def batch_ids(self, query_id: str) -> list[int]:
        """The query's batch ids that have a record, in order."""
        return sorted(int(name) for name in self.files.list_names(query_id) if name.isdigit())

    def prune(self, query_id: str, through: int) -> int:
        """Delete the query's records of batches up to ``through`` (inclusive); how many were deleted."""
        return delete_batch_files(self.files, query_id, through)


def ledger_directory(checkpoint: str) -> str:
    """The router's replay ledger: inside its checkpoint, so that it goes (and is copied) with it."""
    return in_checkpoint(checkpoint, LEDGER_DIRECTORY)


@dataclasses.dataclass(frozen=True)
class BatchRecords:
    """One JSON record per batch, left beside a checkpoint by a job's ``foreachBatch`` for the job's client.

    On Spark Connect ``foreachBatch`` runs in the server's Python worker, so the process that started the
    query learns what each batch did only from files: ``<checkpoint>/<directory>/<query id>/<batch id>``
    (:class:`QueryBatchFiles` through :class:`CheckpointFiles`, so any filesystem the checkpoint is on). A batch
    Spark re-executes replaces its record: it belongs to the run that re-executed it. The router's batch
    reports (:func:`router_reports`) and the refresh job's batch summaries (:func:`refresh_summaries`) are
    both kept here; whoever writes them prunes them (:meth:`prune`), so that a job that runs for weeks
    leaves a bounded number of files.
    """

    spark: SparkSession
    checkpoint: str
    directory: str

    def _files(self) -> QueryBatchFiles:
        return QueryBatchFiles(CheckpointFiles(self.spark, in_checkpoint(self.checkpoint, self.directory)))

    def write(self, query_id: str, batch_id: int, record: dict[str, Any]) -> None:
        self._files().replace(query_id, batch_id, record)

    def prune(self, query_id: str, through: int) -> int:
        """Delete the query's records of batches up to ``through`` (inclusive); how many were deleted."""
        return self._files().prune(query_id, through)

    def read(self, query_id: str, *, from_batch: int = 0) -> dict[int, dict[str, Any]]:
        """The query's records by batch id, in batch order, from batch ``from_batch`` on (a run's own batches
        start after the checkpoint's last commit: :func:`first_batch_of_run`)."""
        files = self._files()
        records = {}
        for batch_id in (batch_id for batch_id in files.batch_ids(query_id) if batch_id >= from_batch):
            record = files.read(query_id, batch_id)
            if record is not None:
                records[batch_id] = record
        return records


def router_reports(spark: SparkSession, checkpoint: str) -> BatchRecords:
    """Where a router on Spark Connect leaves each batch's report for its client (``router_reports/<q>/<b>``)."""
    return BatchRecords(spark, checkpoint, ROUTER_REPORTS_DIRECTORY)


def refresh_summaries(spark: SparkSession, checkpoint: str) -> BatchRecords:
    """Where a refresh run on Spark Connect leaves each batch's summary (``refresh_summaries/<q>/<b>``)."""
    return BatchRecords(spark, checkpoint, REFRESH_SUMMARIES_DIRECTORY)


# -- a tail's files ---------------------------------------------------------------------


def tail_checkpoint(router_checkpoint: str, name: str) -> str:
    """``<parent of the router's checkpoint>/tail/<name>``: a tail's default checkpoint, beside the router's."""
    return posixpath.join(posixpath.dirname(router_checkpoint.rstrip("/")), TAIL_CHECKPOINTS_DIRECTORY, name)


def handoff_directory(checkpoint: str) -> str:
    """A tail's handoff directory on Spark Connect (:class:`HandoffFiles`)."""
    return in_checkpoint(checkpoint, HANDOFF_DIRECTORY)


class HandoffFiles:
    """A tail's handoff on Spark Connect: ``<b>.rows`` (the server's worker hands a batch's rows over, replaced
    atomically) and ``<b>.done`` (the tail printed them, write-once), both deleted by the worker once printed."""

    def __init__(self, spark: SparkSession, directory: str) -> None:
        self._files = CheckpointFiles(spark, directory)

    def hand_over(self, batch_id: int, rows: bytes) -> None:
        self._files.replace(rows, f"{batch_id}.rows")

    def printed(self, batch_id: int) -> bool:
        return self._files.read(f"{batch_id}.done") is not None

    def clear(self, batch_id: int) -> None:
        self._files.delete(f"{batch_id}.rows")
        self._files.delete(f"{batch_id}.done")

    def waiting(self) -> list[int]:
        """The batches handed over and not yet printed, in batch order."""
        names = set(self._files.list_names())
        return sorted(
            int(name.removesuffix(".rows"))
            for name in names
            if name.endswith(".rows") and name.removesuffix(".rows").isdigit() and f"{name[:-5]}.done" not in names
        )

    def rows(self, batch_id: int) -> str | None:
        return self._files.read(f"{batch_id}.rows")

    def acknowledge(self, batch_id: int) -> None:
        self._files.create_once(b"printed", f"{batch_id}.done")


class UnprintedRows:
    """``<checkpoint>/unprinted/rows``: the rows a tail's ``--limit`` left unprinted (replaced atomically)."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        self._files = CheckpointFiles(spark, in_checkpoint(checkpoint, UNPRINTED_DIRECTORY))

    def read(self) -> str | None:
        return self._files.read(UNPRINTED_FILE)

    def replace(self, rows: bytes) -> None:
        self._files.replace(rows, UNPRINTED_FILE)

    def delete(self) -> None:
        self._files.delete(UNPRINTED_FILE)


# -- the lease ----------------------------------------------------------------------------


class CheckpointBusy(RuntimeError):
    """A live job holds the checkpoint; the message names it (one line, for the job's stderr)."""


class LeaseLost(RuntimeError):
    """This job's lease was taken over or could not be renewed: it must stop before writing more."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def pid_space() -> str:
    """Where this process's pid means something: the Linux boot id and pid namespace ('' if unknown).

    Two processes with the same value see each other's pids (same machine, same boot, same container
    or none); containers on one machine share the boot id but not the namespace.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            boot_id = file.read().strip()
        return f"{boot_id}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or held) a checkpoint: one generation's file."""

    generation: int
    owner: str
    job: str
    name: str
    host: str
    pid_space: str
    pid: int
    pid_started: int | None
    acquired_at: str
    heartbeat_at: str
    timeout_s: float
    query_id: str = ""
    released: bool = False

    @classmethod
    def parse(cls, generation: int, text: str) -> Holder:
        fields = json.loads(text)
        names = {field.name for field in dataclasses.fields(cls)} - {"generation"}
        return cls(generation=generation, **{name: fields[name] for name in names if name in fields})

    def to_json(self) -> bytes:
        entry = dataclasses.asdict(self)
        del entry["generation"]  # the file's name
        return json.dumps(entry, sort_keys=True).encode()

    def heartbeat_age_s(self, now: dt.datetime) -> float:
        return (now - dt.datetime.fromisoformat(self.heartbeat_at)).total_seconds()

    def dead_reason(self, now: dt.datetime) -> str | None:
        """Why this holder no longer holds the checkpoint, or None while it is live."""
        from routing.processes import process_alive, process_started

        if self.released:
            return "released"
        if self.pid_space and self.pid_space == pid_space():
            # Same machine and pid namespace: its process tells, no need to wait for the heartbeat to age.
            if not process_alive(self.pid) or process_started(self.pid) != self.pid_started:
                return f"process {self.pid} on this machine is gone"
            return None
        if self.heartbeat_age_s(now) > self.timeout_s:
            return f"no heartbeat for {self.heartbeat_age_s(now):.0f} s (timeout {self.timeout_s:g} s)"
        return None

    def describe(self, now: dt.datetime) -> str:
        query = f", query {self.query_id}" if self.query_id else ""
        return (
            f"{self.job} {self.name!r} (host {self.host}, pid {self.pid}{query}, since {self.acquired_at}, "
            f"last heartbeat {self.heartbeat_age_s(now):.0f} s ago)"
        )


def read_holders(files: CheckpointFiles) -> list[Holder]:
    """Every generation's holder, oldest first (unreadable files are skipped with a warning)."""
    holders = []
    for name in files.list_names(LEASE_DIRECTORY):
        if not name.isdigit():
            continue  # a temporary file of a write in flight
        text = files.read(LEASE_DIRECTORY, name)
        if text is None:
            continue
        try:
            holders.append(Holder.parse(int(name), text))
        except (ValueError, TypeError, KeyError) as error:
            log.warning("ignoring the unreadable lease file %s: %s", files.path(LEASE_DIRECTORY, name), error)
    return sorted(holders, key=lambda holder: holder.generation)


class CheckpointLease:
    """This job's hold on a checkpoint directory; see the module doc. Use :meth:`acquire`."""

    def __init__(self, files: CheckpointFiles, checkpoint: str, holder: Holder) -> None:
        self._files = files
        self.checkpoint = checkpoint
        self.holder = holder
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._lost: str | None = None
        self._renewed_at = _now()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{holder.generation}", daemon=True)

    @classmethod
    def acquire(
        cls, spark: SparkSession, checkpoint: str, *, job: str, name: str, timeout_s: float = LEASE_TIMEOUT_S
    ) -> CheckpointLease:
        """Hold ``checkpoint`` (a path or URI) for this process; :class:`CheckpointBusy` if a live job holds it."""
        files = CheckpointFiles(spark, checkpoint)
        for _ in range(3):  # a lost race is retried: the winner is then live and named
            holders = read_holders(files)
            now = _now()
            previous = holders[-1] if holders else None
            if previous is not None:
                reason = previous.dead_reason(now)
                if reason is None:
                    raise CheckpointBusy(
                        f"checkpoint {checkpoint} is in use by {previous.describe(now)}; a second {job} on it would "
                        f"race that one. Stop it first, or give this one its own checkpoint (a holder that died "
                        f"on another machine is taken over {timeout_s:g} s after its last heartbeat)"
                    )
                log.info("taking over checkpoint %s from %s: %s", checkpoint, previous.describe(now), reason)
            stamp = now.isoformat()
            from routing.processes import process_started

            holder = Holder(
                generation=(previous.generation + 1) if previous else 1,
                owner=uuid.uuid4().hex,
                job=job,
                name=name,
                host=socket.gethostname(),
                pid_space=pid_space(),
                pid=os.getpid(),
                pid_started=process_started(os.getpid()),
                acquired_at=stamp,
                heartbeat_at=stamp,
                timeout_s=timeout_s,
            )
            if files.create_once(holder.to_json(), LEASE_DIRECTORY, str(holder.generation)):
                for old in holders[:-1]:  # keep the previous holder's file, for the record
                    files.delete(LEASE_DIRECTORY, str(old.generation))
                lease = cls(files, checkpoint, holder)
                lease._thread.start()
                log.info("holding checkpoint %s (lease generation %d)", checkpoint, holder.generation)
                return lease
        raise CheckpointBusy(f"checkpoint {checkpoint}: lost the race for its lease three times; try again")

    @property
    def lost(self) -> str | None:
        """Why the lease was lost, or None while it is held."""
        return self._lost

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was lost (cheap: no I/O; jobs call it before each batch)."""
        if self._lost is not None:
            raise LeaseLost(f"lost the lease on checkpoint {self.checkpoint}: {self._lost}; stopping before writing")

    def bind(self, query_id: str) -> None:
        """Name the streaming query in the lease (a second job's error then says which query holds it)."""
        with self._lock:
            self.holder = dataclasses.replace(self.holder, query_id=query_id)
        try:
            self._renew()
        except Exception:  # only the name is missing then; the next heartbeat writes it
            log.warning("could not record query %s in the lease on %s", query_id, self.checkpoint, exc_info=True)

    def release(self) -> None:
        """Stop the heartbeat and, if still held, mark the lease released (the next job takes over at once)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._lost is None:
            with self._lock:
                self.holder = dataclasses.replace(self.holder, released=True)
            try:
                self._write()
            except Exception:  # the lease then ages out like a dead holder's
                log.warning("could not release the lease on checkpoint %s", self.checkpoint, exc_info=True)
            log.info("released checkpoint %s (lease generation %d)", self.checkpoint, self.holder.generation)

    def _write(self) -> None:
        self._files.replace(self.holder.to_json(), LEASE_DIRECTORY, str(self.holder.generation))

    def _renew(self) -> None:
        """One heartbeat: give up the lease if a newer generation exists, else rewrite ours with the time."""
        newer = [holder for holder in read_holders(self._files) if holder.generation > self.holder.generation]
        if newer:
            self._lost = f"taken over by {newer[-1].describe(_now())}"
            log.error("lost checkpoint %s: %s", self.checkpoint, self._lost)
            return
        now = _now()
        with self._lock:
            self.holder = dataclasses.replace(self.holder, heartbeat_at=now.isoformat())
        self._write()
        self._renewed_at = now

    def _beat(self) -> None:
        interval = self.holder.timeout_s / 6
        while not self._stopped.wait(interval) and self._lost is None:
            try:
                self._renew()
            except Exception as error:  # a storage hiccup: retried on the next beat, until it is too late
                silent_s = (_now() - self._renewed_at).total_seconds()
                log.warning("could not renew the lease on checkpoint %s: %s", self.checkpoint, error)
                if silent_s > self.holder.timeout_s:
                    self._lost = f"could not renew it for {silent_s:.0f} s"
                    log.error("lost checkpoint %s: %s", self.checkpoint, self._lost)

"""Frozen snapshots kept as files beside the subscription table, so a restart need not rebuild them.

A router's first batch has nothing to route with until the first snapshot is published, and building
one from the table takes seconds at a million subscriptions (read every active row, bulk-load the
trie, freeze, serialize). Every snapshot the driver publishes is therefore also written here, and a
router that starts (or restarts, or replays a batch) on a version that has a file loads it instead:
one read, the digest and ``FrozenMatcher.header`` (the driver only ships the bytes; each Python worker
decodes them with the validating ``FrozenMatcher.from_bytes``).

Layout, one directory per subscription table (its Delta table id) under ``router.snapshot_files_path``
(empty: ``_snapshots`` inside the subscription table, which Delta ignores like every ``_``-prefixed
directory, VACUUM included), so tables that share the setting never list, read or prune each other's::

    <table id>/<version>-<sha256 of the file, 64 hex>.frozen   one sealed snapshot (below)
    <table id>/.<final name>.<random>.tmp                      a write in progress (renamed into place)

A file is the frozen matcher sealed with what it claims to be (:func:`seal`; decoding trusts nothing)::

    offset  bytes  field
    0       8      magic b"STRSNAP1"
    8       2      n, the claim's length (u16, little-endian), at most MAX_CLAIM_BYTES
    10      n      the claim: UTF-8 JSON {"table_id": <Delta table id>, "version": <table version>}
    10 + n  rest   the serialized FrozenMatcher (``to_bytes``)

* **Content-addressed, bound to its table and version, trusting nothing.** A file is used only if its
  bytes hash to the digest in its name, its claim names the table and the version it was asked for
  (:func:`unseal`), and its matcher's header is of a format this build reads; the workers' decode then
  validates the layout itself. A torn, truncated, renamed (another version's bytes under this version's
  name), swapped (another table's file) or tampered file is refused with a log line naming what it holds,
  the next candidate is tried, and with none left the router builds from the table as if there were no
  file. Only bytes re-sealed with a recomputed digest reach the workers, whose decode rejects anything
  malformed (an error, never a crash). Whoever may write here may write the table too: the files add no
  new trust.
* **Same version, same routing.** A file holds exactly the active pairs of its table version (bad
  rows skipped as every build skips them), so routing a version from its file or from a fresh build
  gives the same deliveries; two routers writing one version at once both write valid files.
* **Retention.** After a write, only the newest ``keep`` versions stay; stale temporary files older
  than :data:`STALE_TEMP_S` go too. A router reading a file another one just pruned falls back to a
  build.
* **Filesystems.** Through ``pyarrow.fs``: local paths, ``file:``, ``s3://`` / ``s3a://``,
  ``gs://``, ``hdfs://`` and ``abfs[s]://`` (what pyarrow was built with). A 20 MB snapshot reads in
  milliseconds there, where Hadoop's FileSystem through the JVM gateway took a second. A scheme
  pyarrow cannot open disables the files with one warning (:class:`SnapshotFilesUnavailable`).
* **Never fatal.** Every failure to read, write or prune is logged; routing never depends on a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import struct
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from routing.filesystems import FilesystemUnavailable, arrow_filesystem

if TYPE_CHECKING:
    from routing.settings import RouterSettings

log = logging.getLogger(__name__)

#: The directory's name inside the subscription table when ``router.snapshot_files_path`` is empty.
DEFAULT_DIRECTORY = "_snapshots"
#: Seconds after which a temporary file is a crashed writer's leftover, deleted when pruning.
STALE_TEMP_S = 3600.0
#: Files larger than this are not read (no snapshot within the table limits comes close).
MAX_FILE_BYTES = 1 << 34

_NAME = re.compile(r"^(\d{1,19})-([0-9a-f]{64})\.frozen$")
#: What a Delta table id may be to name a directory: Delta writes a UUID.
_TABLE_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
#: The first bytes of every snapshot file (format 1 of the seal).
MAGIC = b"STRSNAP1"
#: The longest claim a file may carry (a table id and a version need under 100).
MAX_CLAIM_BYTES = 1024
_CLAIM_LENGTH = struct.Struct("<H")


class SnapshotFilesUnavailable(RuntimeError):
    """pyarrow cannot open the directory's filesystem (the message says which URI)."""


class SnapshotFileRefused(ValueError):
    """A snapshot file that is not what its name and its reader say: the message says what it holds instead."""


def _seal_head(table_id: str, version: int) -> bytes:
    """What precedes the matcher bytes in the file of ``table_id`` at ``version``: magic, claim length, claim."""
    claim = json.dumps({"table_id": table_id, "version": version}, sort_keys=True).encode()
    assert len(claim) <= MAX_CLAIM_BYTES
    return MAGIC + _CLAIM_LENGTH.pack(len(claim)) + claim


def seal(table_id: str, version: int, data: bytes) -> bytes:
    """``data`` (a serialized matcher) as the snapshot file of ``table_id`` at ``version`` (see the module docs)."""
    return _seal_head(table_id, version) + data


def unseal(sealed: bytes, table_id: str, version: int) -> bytes:
    """The matcher bytes of a file that claims ``table_id`` at ``version``; else :class:`SnapshotFileRefused`."""
    head = len(MAGIC) + _CLAIM_LENGTH.size
    if len(sealed) < head or not sealed.startswith(MAGIC):
        raise SnapshotFileRefused("not a sealed snapshot file (no STRSNAP1 magic)")
    (length,) = _CLAIM_LENGTH.unpack_from(sealed, len(MAGIC))
    if length > MAX_CLAIM_BYTES or head + length > len(sealed):
        raise SnapshotFileRefused(f"its claim length {length} is over {MAX_CLAIM_BYTES} or past the file's end")
    try:
        claim = json.loads(sealed[head : head + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SnapshotFileRefused("its claim is not JSON") from None
    if not isinstance(claim, dict) or set(claim) != {"table_id", "version"}:
        raise SnapshotFileRefused("its claim is not {table_id, version}")
    claimed_table, claimed_version = claim["table_id"], claim["version"]
    if type(claimed_version) is not int or type(claimed_table) is not str:  # not True, 9.0 or a list
        raise SnapshotFileRefused("its claim's table id is not text or its version not an integer")
    if claimed_table != table_id or claimed_version != version:
        raise SnapshotFileRefused(
            f"it holds table {str(claimed_table)[:80]!r} version {str(claimed_version)[:20]}, "
            f"not table {table_id!r} version {version}"
        )
    return sealed[head + length :]


def snapshot_files_directory(snapshot_files_path: str, table_path: str) -> str:
    """``snapshot_files_path``, or ``_snapshots`` inside the subscription table when it is empty.

    ``table_path`` is where the table's files are: its path, or the location the catalog gives a table
    name (``routing.delta_tables.location``).
    """
    if snapshot_files_path:
        return snapshot_files_path
    return f"{table_path.rstrip('/')}/{DEFAULT_DIRECTORY}"


def open_snapshot_files(router: RouterSettings, table_path: str, table_id: str) -> SnapshotFiles | None:
    """The router's snapshot files of the table ``table_id``, or None when their directory is unavailable
    (logged once, here)."""
    directory = snapshot_files_directory(router.snapshot_files_path, table_path)
    try:
        return SnapshotFiles(directory, keep=router.snapshot_files_keep, table_id=table_id)
    except SnapshotFilesUnavailable as why:
        log.warning("snapshot files are off: %s", why)
        return None


@dataclass(frozen=True)
class SnapshotFile:
    """One valid-looking file name: the version it holds and the digest its bytes must have."""

    version: int
    digest: str
    name: str


def file_name(version: int, sealed: bytes) -> str:
    """The name of the file of ``version`` whose bytes are ``sealed``."""
    return f"{version}-{hashlib.sha256(sealed).hexdigest()}.frozen"


def _filesystem(directory: str) -> tuple[Any, str]:
    try:
        return arrow_filesystem(directory)
    except FilesystemUnavailable as error:
        raise SnapshotFilesUnavailable(f"snapshot files: {error}") from error


class SnapshotFiles:
    """The snapshot files of one subscription table (``table_id``), in its directory under ``directory``.

    Thread-safe as far as the filesystem is: methods keep no state between calls.
    """

    def __init__(self, directory: str, *, keep: int, table_id: str) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        if not _TABLE_ID.match(table_id):
            raise ValueError(f"not a Delta table id: {table_id[:80]!r}")
        self.table_id = table_id
        #: This table's own directory: every file of it, and nothing else.
        self.directory = f"{directory.rstrip('/')}/{table_id}"
        self.keep = keep
        self._fs, self._root = _filesystem(self.directory)

    def name_of(self, version: int, data: bytes) -> str:
        """The file name :meth:`write` gives the matcher bytes ``data`` of ``version``."""
        return self._name(version, _seal_head(self.table_id, version), data)

    @staticmethod
    def _name(version: int, head: bytes, data: bytes) -> str:
        """:func:`file_name` of ``head + data``, hashed in two parts (a large snapshot is not copied to name it)."""
        digest = hashlib.sha256(head)
        digest.update(data)
        return f"{version}-{digest.hexdigest()}.frozen"

    def ref(self, version: int, name: str) -> SnapshotFileRef:
        """The UDF's carrier of this table's file ``name`` of ``version``."""
        return SnapshotFileRef(self.directory, name, self.table_id, version)

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    def files(self) -> list[SnapshotFile]:
        """Every well-named file, newest version first (no contents read)."""
        import pyarrow.fs as pafs

        infos = self._fs.get_file_info(pafs.FileSelector(self._root, allow_not_found=True))
        found = []
        for info in infos:
            match = _NAME.match(info.base_name)
            if match is not None and info.type == pafs.FileType.File:
                found.append(SnapshotFile(int(match.group(1)), match.group(2), info.base_name))
        return sorted(found, key=lambda file: (-file.version, file.name))

    def read(self, version: int) -> bytes | None:
        """The bytes of a valid file of ``version``, or None when there is none (each bad file is logged)."""
        try:
            candidates = [file for file in self.files() if file.version == version]
        except Exception:
            log.warning("cannot list the snapshot files in %s; building from the table", self.directory, exc_info=True)
            return None
        for file in candidates:
            path = self._path(file.name)
            try:
                size = self._fs.get_file_info(path).size
                if size is None or size > MAX_FILE_BYTES:
                    log.warning("ignoring snapshot file %s: size %s is over %d bytes", path, size, MAX_FILE_BYTES)
                    continue
                with self._fs.open_input_stream(path) as stream:
                    data = bytes(stream.read())
            except Exception as error:
                log.warning("cannot read snapshot file %s (%s); trying the next one", path, error)
                continue
            if hashlib.sha256(data).hexdigest() != file.digest:
                log.warning("ignoring snapshot file %s: its contents do not match the digest in its name", path)
                continue
            try:
                return unseal(data, self.table_id, version)
            except SnapshotFileRefused as why:
                log.warning("refusing snapshot file %s: %s", path, why)
        return None

    def write(self, version: int, data: bytes, *, protect: Collection[int] = (), verify: bool = False) -> str | None:
        """Store ``data`` as the snapshot of ``version`` (unless that exact file exists), then prune.

        Returns the file's name, or None when it could not be written (logged; nothing else happens).
        Pruning keeps the files of the versions in ``protect`` too (snapshots batches still read).
        ``verify``: a file of that name and size is rewritten unless its bytes are ``data`` (for a file the
        UDF will read, which a damaged one would fail).
        """
        head = _seal_head(self.table_id, version)
        name = self._name(version, head, data)
        final = self._path(name)
        temporary = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        try:
            size = len(head) + len(data)
            if self._fs.get_file_info(final).size != size or (verify and not self._holds(final, head, data)):
                self._fs.create_dir(self._root, recursive=True)
                with self._fs.open_output_stream(temporary) as stream:
                    stream.write(head)  # the seal, then the matcher: never joined into one copy
                    stream.write(data)
                self._fs.move(temporary, final)
        except Exception as error:
            log.warning("cannot write snapshot file %s (%s); routing is unaffected", final, error)
            self._delete_quietly(temporary)
            return None
        self.prune(protect=protect)
        return name

    def _holds(self, path: str, head: bytes, data: bytes) -> bool:
        """Whether the file at ``path`` is exactly ``head`` then ``data``."""
        try:
            with self._fs.open_input_stream(path) as stream:
                content = memoryview(bytes(stream.read()))
        except OSError:
            return False
        return len(content) == len(head) + len(data) and content[: len(head)] == head and content[len(head) :] == data

    def prune(self, *, protect: Collection[int] = ()) -> list[str]:
        """Delete all but the newest ``keep`` versions' files (and those of ``protect``), and stale temporary
        files; the names deleted."""
        import pyarrow.fs as pafs

        try:
            files = self.files()
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, allow_not_found=True))
        except Exception:
            log.warning("cannot list the snapshot files in %s to prune them", self.directory, exc_info=True)
            return []
        kept_versions = sorted({file.version for file in files}, reverse=True)[: self.keep]
        doomed = [file.name for file in files if file.version not in kept_versions and file.version not in protect]
        now = time.time()
        for info in infos:
            modified = info.mtime.timestamp() if info.mtime is not None else now
            if info.base_name.endswith(".tmp") and info.base_name.startswith(".") and now - modified > STALE_TEMP_S:
                doomed.append(info.base_name)
        for name in doomed:
            self._delete_quietly(self._path(name))
        return doomed

    def _delete_quietly(self, path: str) -> None:
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            pass
        except Exception as error:
            log.warning("cannot delete %s (%s)", path, error)


class SnapshotFileMissing(RuntimeError):
    """A snapshot file a batch routes with is gone or damaged (the message names it)."""


@dataclass(frozen=True)
class SnapshotFileRef:
    """One snapshot file as the UDF's matcher source where there is no broadcast (Spark Connect).

    Pickled into the UDF in place of a broadcast: ``value`` reads the file on the Python worker (the
    worker's matcher cache, ``udfs.route.WORKER_CACHE``, calls it once per version) and returns its
    matcher bytes only if the file hashes to the digest in its name and claims ``table_id`` at
    ``version`` (:func:`unseal`). ``destroy`` does nothing: the file's retention is
    :meth:`SnapshotFiles.prune`'s, which keeps the versions batches still use.
    """

    directory: str
    name: str
    table_id: str
    version: int

    @property
    def value(self) -> bytes:
        match = _NAME.match(self.name)
        if match is None:
            raise SnapshotFileMissing(f"not a snapshot file name: {self.name!r}")
        filesystem, root = _filesystem(self.directory)
        path = f"{root.rstrip('/')}/{self.name}"
        try:
            size = filesystem.get_file_info(path).size
            if size is None:
                raise SnapshotFileMissing(f"cannot read snapshot file {path}: it does not exist")
            if size > MAX_FILE_BYTES:
                raise SnapshotFileMissing(f"snapshot file {path}: size {size} (limit {MAX_FILE_BYTES} bytes)")
            with filesystem.open_input_stream(path) as stream:
                data = bytes(stream.read())
        except OSError as error:
            raise SnapshotFileMissing(
                f"cannot read snapshot file {path}: {error} (executors that cannot open the snapshot directory with "
                "pyarrow need router.snapshot_transport = broadcast, in classic sessions)"
            ) from error
        if hashlib.sha256(data).hexdigest() != match.group(2):
            raise SnapshotFileMissing(f"snapshot file {path} does not match the digest in its name")
        try:
            return unseal(data, self.table_id, self.version)
        except SnapshotFileRefused as why:
            raise SnapshotFileMissing(f"refusing snapshot file {path}: {why}") from None

    def destroy(self) -> None:
        pass

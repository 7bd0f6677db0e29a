"""Frozen snapshots kept as files beside the subscription table: how snapshots reach the workers, and why a
restart need not rebuild them.

Every snapshot the driver publishes is written here first. A Python worker maps the file of the version a
batch routes with (``FrozenMatcher.open``): the format is the matcher's memory, so loading costs one
validation pass, and every worker of a machine reads the same page-cache pages. A router that starts (or
restarts, or replays a batch) on a version that has a file publishes that file instead of rebuilding it.

**Bases and deltas.** A file is either a *base*, a whole snapshot, or a *delta*: the pairs added since a
base and the base's pairs removed since (``native/core/src/layered.rs``), which a worker matches together
with its base. The driver publishes deltas while a table is large (``router.snapshot_deltas_from_pairs``)
and freezes a new base in the background once enough pairs changed (``router.snapshot_merge_pairs``), so a
change of ten thousand rows costs what ten thousand rows cost, on the driver and on every worker: a worker
that holds the base maps only the new delta.

Layout, one directory per subscription table (its Delta table id) under ``router.snapshot_files_path``
(empty: ``_snapshots`` inside the subscription table, which Delta ignores like every ``_``-prefixed
directory, VACUUM included), so tables that share the setting never list, read or prune each other's::

    <table id>/<version>-<sha256 of the file, 64 hex>.frozen                  a base (below)
    <table id>/<version>-from-<base version>-<sha256, 64 hex>.delta           a delta over that base
    <table id>/.<final name>.<random>.tmp                                     a write in progress (renamed)

A file is the frozen matcher sealed with what it claims to be (:func:`seal`; decoding trusts nothing)::

    offset  bytes  field
    0       8      magic b"STRSNAP2"
    8       2      n, the claim's length (u16, little-endian), at most MAX_CLAIM_BYTES
    10      n      the claim: UTF-8 JSON {"table_id": <Delta table id>, "version": <table version>}, and for a
                   delta also "base": <its base's file name>
    10 + n  p      zeros, so that the matcher starts at a multiple of 8 (p < 8)
    h       rest   the FrozenMatcher (``to_bytes``), h = 10 + n + p: it is read in place where it lies

* **Content-addressed, bound to its table and version, trusting nothing.** A file is used only if its claim
  names the table, the version (and a delta's base) it was asked for (:func:`unseal`) and its matcher
  validates. A local file is mapped (:meth:`SnapshotFileRef.open_matcher` on a worker,
  :meth:`SnapshotFiles.open_snapshot` on the driver) after checking its claim, and the native validation
  then checks the matcher's CRC-32 and layout, and that a delta was built for the base it is matched with:
  reading the whole file once more for its SHA-256 would double the cost of loading a large base (at a
  million subscriptions, 150 MB: 0.08 s mapped and validated, 0.48 s read, hashed and named), and the claim
  already refuses a renamed or swapped file. A file on another filesystem, and one read for its bytes
  (a broadcast, :meth:`SnapshotFiles.read`), is read whole, so its digest is checked there too.
  A torn, truncated, renamed, swapped or tampered file is refused with a line naming what it holds, never
  half-used. Whoever may write here may write the table too: the files add no
  new trust.
* **Same version, same routing.** A file holds exactly the active pairs of its table version (a delta with
  its base; bad rows skipped as every build skips them), so routing a version from its file or from a fresh
  build gives the same deliveries; two routers writing one version at once both write valid files.
* **Retention.** After a write, only the files of the newest ``keep`` versions stay, with the bases their
  deltas need, and those of the versions batches still use; stale temporary files older than
  :data:`STALE_TEMP_S` go too. A router reading a file another one just pruned falls back to a build.
* **Filesystems.** Through ``pyarrow.fs``: local paths, ``file:``, ``s3://`` / ``s3a://``, ``gs://``,
  ``hdfs://`` and ``abfs[s]://`` (what pyarrow was built with). Only a local file is mapped; elsewhere each
  worker reads its own copy. A scheme pyarrow cannot open disables the files with one warning
  (:class:`SnapshotFilesUnavailable`).
* **Never fatal on the driver.** Every failure to read, write or prune is logged; a router without its
  files builds from the table.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from routing import _native
from routing.filesystems import FilesystemUnavailable, arrow_filesystem
from routing.matchers.native import FrozenMatcher, LayeredMatcher

if TYPE_CHECKING:
    from routing.settings import RouterSettings

log = logging.getLogger(__name__)

#: The directory's name inside the subscription table when ``router.snapshot_files_path`` is empty.
DEFAULT_DIRECTORY = "_snapshots"
#: Seconds after which a temporary file is a crashed writer's leftover, deleted when pruning.
STALE_TEMP_S = 3600.0
#: Files larger than this are not read (no snapshot within the table limits comes close).
MAX_FILE_BYTES = 1 << 34

_BASE_NAME = re.compile(r"^(\d{1,19})-([0-9a-f]{64})\.frozen$")
_DELTA_NAME = re.compile(r"^(\d{1,19})-from-(\d{1,19})-([0-9a-f]{64})\.delta$")
#: What a Delta table id may be to name a directory: Delta writes a UUID.
_TABLE_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
#: The first bytes of every snapshot file (format 2 of the seal, which aligns the matcher to 8 bytes).
MAGIC = b"STRSNAP2"
#: The seal of earlier builds, whose matchers (format 1) this build does not read.
OLD_MAGIC = b"STRSNAP1"
#: The longest claim a file may carry (a table id, a version and a base's name need under 200).
MAX_CLAIM_BYTES = 1024
_CLAIM_LENGTH = struct.Struct("<H")
#: Bytes that hold any seal's head (magic, length, the longest claim, padding).
MAX_HEAD_BYTES = len(MAGIC) + _CLAIM_LENGTH.size + MAX_CLAIM_BYTES + 7
#: Bases a Python worker keeps mapped (the one its deltas use, and the next while a merge lands).
WORKER_BASES = 2


class SnapshotFilesUnavailable(RuntimeError):
    """pyarrow cannot open the directory's filesystem (the message says which URI)."""


class SnapshotFileRefused(ValueError):
    """A snapshot file that is not what its name and its reader say: the message says what it holds instead."""


class SnapshotFileMissing(RuntimeError):
    """A snapshot file a batch routes with is gone or damaged (the message names it)."""


# -- the seal ------------------------------------------------------------------------------------------------


def _seal_head(table_id: str, version: int, base: str | None = None) -> bytes:
    """What precedes the matcher bytes in the file of ``table_id`` at ``version`` (a delta: over the base file
    ``base``): magic, claim length, claim, padding to a multiple of 8."""
    fields: dict[str, object] = {"table_id": table_id, "version": version}
    if base is not None:
        fields["base"] = base
    claim = json.dumps(fields, sort_keys=True).encode()
    assert len(claim) <= MAX_CLAIM_BYTES
    head = MAGIC + _CLAIM_LENGTH.pack(len(claim)) + claim
    return head + bytes(-len(head) % 8)


def seal(table_id: str, version: int, data: bytes, base: str | None = None) -> bytes:
    """``data`` (a serialized matcher) as the snapshot file of ``table_id`` at ``version`` (see the module docs)."""
    return _seal_head(table_id, version, base) + data


def unseal(sealed: bytes, table_id: str, version: int, base: str | None = None) -> bytes:
    """The matcher bytes of a file that claims ``table_id`` at ``version`` (and, for a delta, the base file
    ``base``); else :class:`SnapshotFileRefused`."""
    return sealed[head_length(sealed, table_id, version, base) :]


def head_length(sealed: bytes, table_id: str, version: int, base: str | None = None) -> int:
    """Where the matcher starts in a file whose first bytes are ``sealed`` (at least its whole head), if it
    claims ``table_id`` at ``version`` and the base ``base`` (None: a base itself); else
    :class:`SnapshotFileRefused`."""
    claim, padded = _read_claim(sealed)
    claimed_table, claimed_version, claimed_base = claim["table_id"], claim["version"], claim.get("base")
    if claimed_table != table_id or claimed_version != version:
        raise SnapshotFileRefused(
            f"it holds table {str(claimed_table)[:80]!r} version {str(claimed_version)[:20]}, "
            f"not table {table_id!r} version {version}"
        )
    if claimed_base != base:
        held = "a base" if claimed_base is None else f"a delta over {str(claimed_base)[:100]!r}"
        wanted = "a base" if base is None else f"a delta over {base!r}"
        raise SnapshotFileRefused(f"it holds {held}, not {wanted}")
    return padded


def _read_claim(sealed: bytes) -> tuple[dict[str, Any], int]:
    """The claim of a file whose first bytes are ``sealed``, with its fields' types checked, and where the
    matcher starts; else :class:`SnapshotFileRefused`."""
    head = len(MAGIC) + _CLAIM_LENGTH.size
    if sealed.startswith(OLD_MAGIC):
        raise SnapshotFileRefused("it is sealed in format 1, written by an earlier build (its matcher is format 1)")
    if len(sealed) < head or not sealed.startswith(MAGIC):
        raise SnapshotFileRefused("not a sealed snapshot file (no STRSNAP2 magic)")
    (length,) = _CLAIM_LENGTH.unpack_from(sealed, len(MAGIC))
    padded: int = head + length + (-(head + length) % 8)
    if length > MAX_CLAIM_BYTES or padded > len(sealed):
        raise SnapshotFileRefused(f"its claim length {length} is over {MAX_CLAIM_BYTES} or past the file's end")
    if any(sealed[head + length : padded]):
        raise SnapshotFileRefused("the padding after its claim is not zero")
    try:
        claim = json.loads(sealed[head : head + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SnapshotFileRefused("its claim is not JSON") from None
    if not isinstance(claim, dict) or set(claim) - {"base"} != {"table_id", "version"}:
        raise SnapshotFileRefused("its claim is not {table_id, version} or {table_id, version, base}")
    if type(claim["version"]) is not int or type(claim["table_id"]) is not str:  # not True, 9.0 or a list
        raise SnapshotFileRefused("its claim's table id is not text or its version not an integer")
    if "base" in claim and type(claim["base"]) is not str:
        raise SnapshotFileRefused("its claim's base is not a file name")
    return claim, padded


def _read_sealed(
    filesystem: Any, path: str, file: SnapshotFile, table_id: str, version: int, base: str | None
) -> bytes:
    """The matcher bytes of the file ``file`` at ``path``, read whole, if it is within MAX_FILE_BYTES, hashes
    to the digest in its name and claims ``table_id`` at ``version`` over ``base``; else
    :class:`SnapshotFileMissing` (the message names the file and what is wrong)."""
    try:
        size = filesystem.get_file_info(path).size
        if size is None:
            raise SnapshotFileMissing(f"cannot read snapshot file {path}: it does not exist")
        if size > MAX_FILE_BYTES:
            raise SnapshotFileMissing(f"snapshot file {path}: size {size} (limit {MAX_FILE_BYTES} bytes)")
        with filesystem.open_input_stream(path) as stream:
            data = bytes(stream.read())
    except OSError as error:
        raise SnapshotFileMissing(f"cannot read snapshot file {path}: {error}") from error
    if hashlib.sha256(data).hexdigest() != file.digest:
        raise SnapshotFileMissing(f"snapshot file {path} does not match the digest in its name")
    try:
        return unseal(data, table_id, version, base)
    except SnapshotFileRefused as why:
        raise SnapshotFileMissing(f"refusing snapshot file {path}: {why}") from None


# -- names ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotFile:
    """One valid-looking file name: the version it holds, the digest its bytes must have, and for a delta the
    version of its base."""

    version: int
    digest: str
    name: str
    base_version: int | None = None

    @property
    def is_delta(self) -> bool:
        return self.base_version is not None


def parse_name(name: str) -> SnapshotFile | None:
    """The file a name denotes, or None for any other name."""
    match = _BASE_NAME.match(name)
    if match is not None:
        return SnapshotFile(int(match.group(1)), match.group(2), name)
    match = _DELTA_NAME.match(name)
    if match is not None:
        return SnapshotFile(int(match.group(1)), match.group(3), name, int(match.group(2)))
    return None


def file_name(version: int, sealed: bytes, base: str | None = None) -> str:
    """The name of the file of ``version`` whose bytes are ``sealed`` (a delta: over the base file ``base``)."""
    return _name(version, hashlib.sha256(sealed).hexdigest(), base)


def _name(version: int, digest: str, base: str | None) -> str:
    if base is None:
        return f"{version}-{digest}.frozen"
    base_file = parse_name(base)
    if base_file is None or base_file.is_delta:
        raise ValueError(f"not a base snapshot file name: {base[:100]!r}")
    return f"{version}-from-{base_file.version}-{digest}.delta"


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


def _filesystem(directory: str) -> tuple[Any, str]:
    try:
        return arrow_filesystem(directory)
    except FilesystemUnavailable as error:
        raise SnapshotFilesUnavailable(f"snapshot files: {error}") from error


@dataclass(frozen=True)
class Opened:
    """A snapshot file opened on the driver as the workers open it (:meth:`SnapshotFiles.open_snapshot`)."""

    #: A base's matcher, or a delta's layered over its base.
    matcher: FrozenMatcher | LayeredMatcher
    name: str
    #: A delta's base file (None: a base).
    base: str | None
    #: The matcher's bytes (the file less its seal): what a broadcast of it would ship.
    matcher_bytes: int


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

    def name_of(self, version: int, data: bytes, base: str | None = None) -> str:
        """The file name :meth:`write` gives the matcher bytes ``data`` of ``version`` (a delta: over ``base``)."""
        return self._name_of(version, _seal_head(self.table_id, version, base), data, base)

    @staticmethod
    def _name_of(version: int, head: bytes, data: bytes, base: str | None) -> str:
        """The name of ``head + data``, hashed in two parts (a large snapshot is not copied to name it)."""
        digest = hashlib.sha256(head)
        digest.update(data)
        return _name(version, digest.hexdigest(), base)

    def ref(self, version: int, name: str, base: str | None = None) -> SnapshotFileRef:
        """The UDF's carrier of this table's file ``name`` of ``version`` (a delta: over the base file ``base``)."""
        return SnapshotFileRef(self.directory, name, self.table_id, version, base)

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    def files(self) -> list[SnapshotFile]:
        """Every well-named file, newest version first, bases before deltas (no contents read)."""
        import pyarrow.fs as pafs

        infos = self._fs.get_file_info(pafs.FileSelector(self._root, allow_not_found=True))
        found = []
        for info in infos:
            file = parse_name(info.base_name)
            if file is not None and info.type == pafs.FileType.File:
                found.append(file)
        return sorted(found, key=lambda file: (-file.version, file.is_delta, file.name))

    def _listed(self) -> list[SnapshotFile] | None:
        """:meth:`files`, or None when the directory cannot be listed (logged: the caller builds from the table)."""
        try:
            return self.files()
        except Exception:
            log.warning("cannot list the snapshot files in %s; building from the table", self.directory, exc_info=True)
            return None

    def _read_whole(self, file: SnapshotFile, base: str | None) -> bytes | None:
        """The matcher bytes of ``file`` if its size, digest and claim hold (each refusal logged), else None."""
        try:
            return _read_sealed(self._fs, self._path(file.name), file, self.table_id, file.version, base)
        except SnapshotFileMissing as why:
            log.warning("%s; trying the next one", why)
        except Exception as error:  # a filesystem's own error type: the next file may do
            log.warning("cannot read snapshot file %s (%s); trying the next one", file.name, error)
        return None

    def read(self, version: int) -> bytes | None:
        """The matcher bytes of a valid base of ``version``, read whole and checked against the digest in its
        name, or None when there is none (each bad file is logged)."""
        files = self._listed()
        if files is None:
            return None
        for file in (file for file in files if file.version == version and not file.is_delta):
            data = self._read_whole(file, None)
            if data is not None:
                return data
        return None

    def open_snapshot(self, version: int) -> Opened | None:
        """A valid file of ``version`` (a base, else a delta over a base that is listed and claims its version),
        opened as a worker opens it: mapped and validated when local, never read into Python. None when there
        is none; each bad file is logged."""
        files = self._listed()
        if files is None:
            return None
        bases = {file.name: file for file in files if not file.is_delta}
        for file in (file for file in files if file.version == version):
            base = self._base_of(file, bases) if file.is_delta else None
            if file.is_delta and base is None:
                continue
            try:
                opened, size = _open_sized(self.directory, file.name, self.table_id, version, base)
                if base is None:
                    return Opened(FrozenMatcher._wrap(opened), file.name, None, size)
                base_matcher = self.open_base(base, bases[base].version)
                try:
                    layered = LayeredMatcher(base_matcher, FrozenMatcher._wrap(opened))
                except _native.FrozenFormatError as why:
                    raise SnapshotFileMissing(f"refusing snapshot delta {file.name} over {base}: {why}") from None
                return Opened(layered, file.name, base, size)
            except SnapshotFileMissing as why:
                log.warning("%s; trying the next one", why)
        return None

    def _base_of(self, delta: SnapshotFile, bases: dict[str, SnapshotFile]) -> str | None:
        """The name of the base file ``delta`` claims, if that file is listed and its head claims its version."""
        path = self._path(delta.name)
        try:
            with self._fs.open_input_stream(path) as stream:
                prefix = bytes(stream.read(MAX_HEAD_BYTES))
            claimed = _read_claim(prefix)[0].get("base")
        except Exception as error:  # refused, or a filesystem's own error type: the next file may do
            log.warning("cannot read the claim of snapshot file %s (%s)", path, error)
            return None
        base = bases.get(claimed) if isinstance(claimed, str) else None
        if base is None or base.version != delta.base_version:
            log.warning("ignoring snapshot delta %s: its base %r is not here", path, claimed)
            return None
        return base.name

    def write(
        self,
        version: int,
        data: bytes,
        *,
        base: str | None = None,
        protect: Collection[int] = (),
        verify: bool = False,
    ) -> str | None:
        """Store ``data`` as the snapshot of ``version`` (a delta: over the base file ``base``) unless that exact
        file exists, then prune.

        Returns the file's name, or None when it could not be written (logged; nothing else happens).
        Pruning keeps the files of the versions in ``protect`` too (snapshots batches still read), with their
        bases. ``verify``: a file of that name and size is rewritten unless its bytes are ``data`` (for a file
        the UDF will read, which a damaged one would fail).
        """
        head = _seal_head(self.table_id, version, base)
        name = self._name_of(version, head, data, base)
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
        """Delete all but the files of the newest ``keep`` versions and of ``protect``, with the bases their
        deltas need, and stale temporary files; the names deleted."""
        import pyarrow.fs as pafs

        try:
            files = self.files()
            infos = self._fs.get_file_info(pafs.FileSelector(self._root, allow_not_found=True))
        except Exception:
            log.warning("cannot list the snapshot files in %s to prune them", self.directory, exc_info=True)
            return []
        kept_versions = set(sorted({file.version for file in files}, reverse=True)[: self.keep]) | set(protect)
        kept = [file for file in files if file.version in kept_versions]
        # A delta's base may be older than every kept version: it stays while the delta does.
        needed_bases = {file.base_version for file in kept if file.is_delta}
        doomed = [
            file.name
            for file in files
            if file.version not in kept_versions and (file.is_delta or file.version not in needed_bases)
        ]
        now = time.time()
        for info in infos:
            modified = info.mtime.timestamp() if info.mtime is not None else now
            if info.base_name.endswith(".tmp") and info.base_name.startswith(".") and now - modified > STALE_TEMP_S:
                doomed.append(info.base_name)
        for name in doomed:
            self._delete_quietly(self._path(name))
        return doomed

    def open_base(self, name: str, version: int) -> FrozenMatcher:
        """The base file ``name`` of ``version`` as a matcher for the driver (mapped when local, as the
        workers map it); :class:`SnapshotFileMissing` when it is gone or refused."""
        return FrozenMatcher._wrap(_open_file(self.directory, name, self.table_id, version, None))

    def _delete_quietly(self, path: str) -> None:
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            pass
        except Exception as error:
            log.warning("cannot delete %s (%s)", path, error)


# -- the workers' side ---------------------------------------------------------------------------------------

#: Bases this worker process has mapped, by path, newest last (at most WORKER_BASES).
_WORKER_BASES: OrderedDict[str, _native.FrozenMatcher] = OrderedDict()
_WORKER_BASES_LOCK = threading.Lock()


def _open_file(directory: str, name: str, table_id: str, version: int, base: str | None) -> _native.FrozenMatcher:
    """The matcher of one snapshot file: mapped in place when the file is local (after its claim is checked;
    the native validation checks the rest), else read whole and checked against the digest in its name."""
    return _open_sized(directory, name, table_id, version, base)[0]


def _open_sized(
    directory: str, name: str, table_id: str, version: int, base: str | None
) -> tuple[_native.FrozenMatcher, int]:
    """:func:`_open_file`, and the matcher's size in bytes."""
    import pyarrow.fs as pafs

    file = parse_name(name)
    if file is None or file.version != version or file.is_delta != (base is not None):
        raise SnapshotFileMissing(f"not a snapshot file name of version {version}: {name[:100]!r}")
    filesystem, root = _filesystem(directory)
    path = f"{root.rstrip('/')}/{name}"
    try:
        if isinstance(filesystem, pafs.LocalFileSystem):
            with open(path, "rb") as opened:
                prefix = opened.read(MAX_HEAD_BYTES)
                size = os.fstat(opened.fileno()).st_size
            head = head_length(prefix, table_id, version, base)
            return _native.FrozenMatcher.open(path, head), size - head
        data = _read_sealed(filesystem, path, file, table_id, version, base)
        return _native.FrozenMatcher.from_bytes(data), len(data)
    except OSError as error:
        raise SnapshotFileMissing(
            f"cannot read snapshot file {path}: {error} (executors that cannot open the snapshot directory with "
            "pyarrow need router.snapshot_transport = broadcast, in classic sessions)"
        ) from error
    except (SnapshotFileRefused, _native.FrozenFormatError) as why:
        raise SnapshotFileMissing(f"refusing snapshot file {path}: {why}") from None


def _worker_base(directory: str, name: str, table_id: str) -> _native.FrozenMatcher:
    """The base file ``name``, mapped once per worker process and kept for the deltas that follow."""
    file = parse_name(name)
    if file is None or file.is_delta:
        raise SnapshotFileMissing(f"not a base snapshot file name: {name[:100]!r}")
    key = f"{directory}/{name}"
    with _WORKER_BASES_LOCK:
        cached = _WORKER_BASES.get(key)
        if cached is not None:
            _WORKER_BASES.move_to_end(key)
            return cached
    matcher = _open_file(directory, name, table_id, file.version, None)
    with _WORKER_BASES_LOCK:
        _WORKER_BASES[key] = matcher
        while len(_WORKER_BASES) > WORKER_BASES:
            _WORKER_BASES.popitem(last=False)
    return matcher


@dataclass(frozen=True)
class SnapshotFileRef:
    """One snapshot file as the UDF's matcher source (``router.snapshot_transport = file``, and Spark Connect).

    Pickled into the UDF in place of a broadcast. :meth:`open_matcher` gives the worker its matcher (the
    worker's matcher cache, ``udfs.route.WORKER_CACHE``, calls it once per version): for a delta (``base``
    set), the base (mapped once per worker and kept) layered with the delta. :attr:`value` reads a base's
    matcher bytes for a consumer that wants bytes. ``destroy`` does nothing: the file's retention is
    :meth:`SnapshotFiles.prune`'s, which keeps the versions batches still use.
    """

    directory: str
    name: str
    table_id: str
    version: int
    base: str | None = None

    @property
    def value(self) -> bytes:
        """A base's matcher bytes, if the file hashes to the digest in its name and claims its table and version."""
        file = parse_name(self.name)
        if file is None:
            raise SnapshotFileMissing(f"not a snapshot file name: {self.name[:100]!r}")
        if self.base is not None:
            raise SnapshotFileMissing(f"{self.name} is a delta: its matcher needs its base (open_matcher)")
        filesystem, root = _filesystem(self.directory)
        return _read_sealed(filesystem, f"{root.rstrip('/')}/{self.name}", file, self.table_id, self.version, None)

    def open_matcher(self) -> _native.FrozenMatcher | _native.LayeredMatcher:
        """The file's matcher for the UDF: a base mapped in place (shared by the machine's workers through the
        page cache), or a delta layered over its base, which the worker maps once and keeps for the next
        deltas; :class:`SnapshotFileMissing` when a file is gone or refused."""
        if self.base is None:
            # Kept: the deltas that follow this version are over it, and map only themselves.
            return _worker_base(self.directory, self.name, self.table_id)
        base = _worker_base(self.directory, self.base, self.table_id)
        delta = _open_file(self.directory, self.name, self.table_id, self.version, self.base)
        try:
            return _native.LayeredMatcher.of(base, delta)
        except _native.FrozenFormatError as why:
            raise SnapshotFileMissing(f"refusing snapshot delta {self.name} over {self.base}: {why}") from None

    def destroy(self) -> None:
        pass

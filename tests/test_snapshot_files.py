"""Snapshot files (``routing.router.snapshot_files``): content-addressed, bound to their table and version, pruned,
and never trusted blindly.

Real files on the local filesystem through pyarrow.fs; the router's use of them (a restart that loads
its first snapshot from a file) is in ``tests/integration/test_snapshot_refresh.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import pickle
import re
import time
from pathlib import Path

import pyarrow as pa
import pytest

from routing.config import ConfigError
from routing.matchers import FrozenMatcher
from routing.matchers.native import DeltaBuilder
from routing.router.snapshot_files import (
    DEFAULT_DIRECTORY,
    STALE_TEMP_S,
    SnapshotFileMissing,
    SnapshotFileRef,
    SnapshotFileRefused,
    SnapshotFiles,
    SnapshotFilesUnavailable,
    file_name,
    open_snapshot_files,
    seal,
    snapshot_files_directory,
    unseal,
)
from routing.settings import RouterSettings

#: Two Delta table ids (UUIDs, as Delta writes them).
TABLE = "0b6e7a52-91c4-4a3e-9d5e-2f1a3c4b5d6e"
OTHER = "7f3d2c1b-0a9e-4f8d-8c7b-6a5e4d3c2b1a"


def frozen_bytes(*pairs: tuple[str, str]) -> bytes:
    return FrozenMatcher(list(pairs)).to_bytes()


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def open_files(directory: Path, keep: int, table: str = TABLE) -> tuple[SnapshotFiles, Path]:
    """The files of ``table`` under ``directory``, and that table's own directory."""
    return SnapshotFiles(str(directory), keep=keep, table_id=table), directory / table


def test_a_written_snapshot_reads_back_by_version_under_its_digest(tmp_path: Path) -> None:
    files, own = open_files(tmp_path / "snaps", 3)
    assert files.read(7) is None  # no directory yet
    data = frozen_bytes(("a.*", "s1"), ("#", "s2"))
    name = files.write(7, data)
    sealed = seal(TABLE, 7, data)
    assert name == f"7-{hashlib.sha256(sealed).hexdigest()}.frozen" == file_name(7, sealed) == files.name_of(7, data)
    assert (own / str(name)).read_bytes() == sealed
    assert files.read(7) == data
    assert files.read(8) is None
    assert FrozenMatcher.from_bytes(files.read(7) or b"").lookup("a.b") == {"s1", "s2"}
    # The same bytes again: the same name, still one file.
    assert files.write(7, data) == name
    assert names(own) == [name]


def test_only_the_newest_versions_are_kept(tmp_path: Path) -> None:
    files, own = open_files(tmp_path, 2)
    written = {version: str(files.write(version, frozen_bytes((f"v{version}", "s")))) for version in (3, 1, 4, 2)}
    # After the last write (version 2) the two newest versions are 4 and 3; 1 and 2 are gone.
    assert names(own) == sorted([written[3], written[4]])
    assert [file.version for file in files.files()] == [4, 3]
    assert files.read(2) is None and files.read(4) is not None


def test_a_file_whose_bytes_do_not_match_its_name_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files, own = open_files(tmp_path, 3)
    good = frozen_bytes(("a", "s1"))
    bad_name = files.write(5, frozen_bytes(("b", "s2")))
    assert bad_name is not None
    (own / bad_name).write_bytes(seal(TABLE, 5, good))  # tampered: the bytes of another snapshot
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert files.read(5) is None
    assert "does not match the digest" in caplog.text
    # A valid file of the same version beside it is used.
    files.write(5, good)
    assert files.read(5) == good
    # Truncated: same outcome as tampered.
    (own / files.name_of(5, good)).write_bytes(seal(TABLE, 5, good)[:10])
    assert files.read(5) is None


def test_a_renamed_file_of_another_version_is_refused_and_the_genuine_one_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 5's bytes under a version-7 name (with their true digest) once won over the genuine version 7."""
    files, own = open_files(tmp_path, 5)
    five, seven = frozen_bytes(("five", "s")), frozen_bytes(("seven", "s"))
    files.write(5, five)
    files.write(7, seven)
    sealed_five = (own / files.name_of(5, five)).read_bytes()
    renamed = file_name(7, sealed_five)
    (own / renamed).write_bytes(sealed_five)
    assert next(file.name for file in files.files() if file.version == 7) == min(renamed, files.name_of(7, seven))
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert files.read(7) == seven
    if renamed < files.name_of(7, seven):  # listed first: it was tried and refused
        assert f"refusing snapshot file {own / renamed}: it holds table {TABLE!r} version 5" in caplog.text
    (own / files.name_of(7, seven)).unlink()
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert files.read(7) is None  # only the renamed one is left: refused, so the router builds
    assert f"it holds table {TABLE!r} version 5, not table {TABLE!r} version 7" in caplog.text
    with pytest.raises(SnapshotFileMissing, match="version 5, not table"):
        _ = files.ref(7, renamed).value


def test_tables_sharing_a_directory_never_read_or_prune_each_others_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mine, my_dir = open_files(tmp_path, 1)
    theirs, their_dir = open_files(tmp_path, 1, OTHER)
    their_data = frozen_bytes(("theirs", "s"))
    theirs.write(3, their_data)
    for version in (1, 2, 3, 4):
        mine.write(version, frozen_bytes(("mine", f"s{version}")))
    assert [file.version for file in theirs.files()] == [3]  # my pruning left theirs alone
    assert mine.read(3) is None and theirs.read(3) == their_data
    # Their file copied into my directory, under the name its bytes give it: swapped, and refused.
    sealed = (their_dir / theirs.name_of(3, their_data)).read_bytes()
    (my_dir / file_name(3, sealed)).write_bytes(sealed)
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert mine.read(3) is None
    assert f"it holds table {OTHER!r} version 3, not table {TABLE!r} version 3" in caplog.text
    with pytest.raises(ValueError, match="not a Delta table id"):
        SnapshotFiles(str(tmp_path), keep=1, table_id="../elsewhere")


def claimed(claim: bytes, data: bytes) -> bytes:
    """A file whose claim is ``claim`` as it is (padded so that the matcher starts at a multiple of 8)."""
    head = b"STRSNAP2" + len(claim).to_bytes(2, "little") + claim
    return head + bytes(-len(head) % 8) + data


def test_unsealing_refuses_every_malformed_or_mismatched_file() -> None:
    data = frozen_bytes(("a", "s"))
    sealed = seal(TABLE, 9, data)
    assert claimed(b'{"table_id": "%s", "version": 9}' % TABLE.encode(), data) == sealed
    assert unseal(sealed, TABLE, 9) == data
    head = len(sealed) - len(data)
    assert head % 8 == 0 and sealed[head - 1] == 0, "the matcher starts at a multiple of 8, after zero padding"
    cases = [
        b"",
        b"STRSNAP",
        data,  # a bare matcher, as files were before the seal
        b"STRSNAP1" + sealed[8:],  # the seal of earlier builds (format 1 matchers)
        sealed[: -len(data) - 1] + b"\x01" + data,  # a non-zero byte of the padding after the claim
        sealed[:8] + b"\xff\xff" + sealed[10:],  # a claim longer than allowed
        sealed[:8] + b"\x10\x00" + b"{",  # past the end
        sealed[:8] + b"\x02\x00" + b"[]" + data,
        sealed[:8] + b"\x02\x00" + b"\xff\xfe" + data,
        claimed(b'{"table_id": "%s", "version": true}' % TABLE.encode(), data),  # True == 1 in Python
        claimed(b'{"table_id": "%s", "version": 9.0}' % TABLE.encode(), data),
        claimed(b'{"table_id": "%s", "version": 9, "x": 1}' % TABLE.encode(), data),
        seal(OTHER, 9, data),
        seal(TABLE, 8, data),
    ]
    for case in cases:
        with pytest.raises(SnapshotFileRefused):
            unseal(case, TABLE, 9)
    # Every single-byte change of the seal's head is refused or yields exactly the matcher bytes (never a crash).
    for position in range(head):
        for flip in (1, 0x80):
            changed = bytearray(sealed)
            changed[position] ^= flip
            with contextlib.suppress(SnapshotFileRefused):
                assert unseal(bytes(changed), TABLE, 9) == data


def test_foreign_and_temporary_names_are_ignored_and_stale_temporaries_pruned(tmp_path: Path) -> None:
    files, own = open_files(tmp_path, 1)
    own.mkdir()
    data = frozen_bytes(("a", "s"))
    for foreign in ("notes.txt", "7-abc.frozen", f"x-{hashlib.sha256(data).hexdigest()}.frozen"):
        (own / foreign).write_bytes(data)
    fresh = own / f".{files.name_of(9, data)}.1.tmp"
    stale = own / f".{files.name_of(9, data)}.2.tmp"
    fresh.write_bytes(data[:5])
    stale.write_bytes(data[:5])
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    assert files.files() == []
    assert files.read(9) is None and files.read(7) is None
    name = files.write(9, data)
    assert files.read(9) == data
    # The stale temporary went with the prune; a fresh one (a write in progress) and foreign files stay.
    assert names(own) == sorted(
        ["notes.txt", "7-abc.frozen", f"x-{hashlib.sha256(data).hexdigest()}.frozen", fresh.name, str(name)]
    )


def test_an_unwritable_directory_logs_and_routing_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    files = SnapshotFiles(str(blocker / "snaps"), keep=3, table_id=TABLE)
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert files.write(1, b"bytes") is None
        assert files.read(1) is None
    assert "cannot write snapshot file" in caplog.text


def test_the_directory_defaults_beside_the_table_and_can_be_turned_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = str(tmp_path / "subscriptions")
    assert snapshot_files_directory("", table) == f"{table}/{DEFAULT_DIRECTORY}"
    assert snapshot_files_directory("s3a://bucket/snaps", table) == "s3a://bucket/snaps"
    router = RouterSettings(snapshot_files_keep=2)
    files = open_snapshot_files(router, table, TABLE)
    assert files is not None and files.keep == 2 and files.directory == f"{table}/{DEFAULT_DIRECTORY}/{TABLE}"
    # A scheme pyarrow cannot open: one warning, no files, and the router still starts.
    with pytest.raises(SnapshotFilesUnavailable, match="nosuchfs://x/y"):
        SnapshotFiles("nosuchfs://x/y", keep=1, table_id=TABLE)
    elsewhere = dataclasses.replace(router, snapshot_files_path="nosuchfs://x/y")
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert open_snapshot_files(elsewhere, table, TABLE) is None
    assert "snapshot files are off" in caplog.text
    with pytest.raises(ValueError, match="keep"):
        SnapshotFiles(str(tmp_path), keep=0, table_id=TABLE)
    with pytest.raises(ConfigError, match="snapshot_files_keep"):
        RouterSettings(snapshot_files_keep=0)


def test_pruning_keeps_the_versions_batches_still_use(tmp_path: Path) -> None:
    files, _ = open_files(tmp_path, 1)
    for version in range(1, 5):
        files.write(version, frozen_bytes(("a", f"s{version}")), protect={1, 2})
    assert sorted(file.version for file in files.files()) == [1, 2, 4]  # the newest, and the protected
    files.prune()
    assert [file.version for file in files.files()] == [4]


def test_a_snapshot_file_reference_reads_the_bytes_only_if_they_match_their_name(tmp_path: Path) -> None:
    data = frozen_bytes(("stock.#", "all"))
    files, own = open_files(tmp_path, 3)
    name = files.write(7, data)
    assert name is not None
    reference = files.ref(7, name)
    assert reference.value == data
    assert pickle.loads(pickle.dumps(reference)).value == data  # what the UDF's closure carries to the workers
    reference.destroy()  # retention is the directory's: the file stays
    sealed = seal(TABLE, 7, data)
    assert (own / name).read_bytes() == sealed

    (own / name).write_bytes(sealed[:-1] + bytes([sealed[-1] ^ 1]))
    with pytest.raises(SnapshotFileMissing, match="does not match the digest"):
        _ = reference.value
    (own / name).unlink()
    with pytest.raises(SnapshotFileMissing, match="cannot read snapshot file"):
        _ = reference.value
    with pytest.raises(SnapshotFileMissing, match="not a snapshot file name"):
        _ = SnapshotFileRef(str(own), "../etc/passwd", TABLE, 7).value
    # Another table's reader of the same file: refused.
    (own / name).write_bytes(sealed)
    with pytest.raises(SnapshotFileMissing, match=f"not table {OTHER!r} version 7"):
        _ = SnapshotFileRef(str(own), name, OTHER, 7).value


def test_a_delta_file_names_its_base_and_a_worker_layers_it_over_the_base_it_keeps(tmp_path: Path) -> None:
    from routing.router import snapshot_files

    files, own = open_files(tmp_path, 1)
    base = FrozenMatcher([("a.*", "s1"), ("#", "s2")])
    base_name = files.write(1, base.to_bytes())
    assert base_name is not None
    builder = DeltaBuilder(base)
    builder.record(pa.array(["#"]), pa.array(["s2"]), active=False, version=2)
    builder.record(pa.array(["b"]), pa.array(["s3"]), active=True, version=2)
    delta = builder.freeze().to_bytes()
    delta_name = files.write(2, delta, base=base_name)
    assert delta_name is not None and re.fullmatch(r"2-from-1-[0-9a-f]{64}\.delta", delta_name)
    # keep=1 keeps version 2, and the base its delta needs.
    assert names(own) == sorted([base_name, delta_name])
    # The driver opens the version as a worker does: the delta over its base, mapped.
    opened = files.open_snapshot(2)
    assert opened is not None and (opened.name, opened.base, opened.matcher_bytes) == (
        delta_name,
        base_name,
        len(delta),
    )
    assert opened.matcher.lookup("a.x") == {"s1"} and len(opened.matcher) == 2
    assert files.read(2) is None, "a delta is no whole snapshot"

    # A worker that routed the base's own version keeps it mapped for the deltas after it: once the file is
    # gone (only to show no second map happens), the delta still layers over the mapping it holds.
    snapshot_files._WORKER_BASES.clear()
    assert files.ref(1, base_name).open_matcher().lookup("a.x") == {"s1", "s2"}
    moved = own / "moved-away"
    (own / base_name).rename(moved)
    assert files.ref(2, delta_name, base_name).open_matcher().lookup("a.x") == {"s1"}
    moved.rename(own / base_name)

    reference = pickle.loads(pickle.dumps(files.ref(2, delta_name, base_name)))
    snapshot_files._WORKER_BASES.clear()
    matcher = reference.open_matcher()
    assert (matcher.lookup("a.x"), matcher.lookup("b"), matcher.lookup("c")) == ({"s1"}, {"s3"}, frozenset())
    assert len(matcher) == 2
    assert list(snapshot_files._WORKER_BASES) == [f"{files.directory}/{base_name}"]
    reference.open_matcher()
    assert len(snapshot_files._WORKER_BASES) == 1, "the base is mapped once per worker"
    with pytest.raises(SnapshotFileMissing, match="is a delta"):
        _ = reference.value
    # The base a reference names must be the delta's own, and must exist.
    with pytest.raises(SnapshotFileMissing):
        files.ref(2, delta_name, f"1-{'0' * 64}.frozen").open_matcher()
    sealed = (own / delta_name).read_bytes()
    with pytest.raises(SnapshotFileRefused, match="not a base"):
        unseal(sealed, TABLE, 2)
    with pytest.raises(SnapshotFileRefused, match="a delta over"):
        unseal(seal(TABLE, 2, delta), TABLE, 2, base=base_name)
    # A delta whose base is gone is not offered to a restart.
    (own / base_name).unlink()
    assert files.open_snapshot(2) is None


def test_the_driver_opens_a_base_mapped_and_refuses_one_whose_matcher_does_not_validate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files, own = open_files(tmp_path, 2)
    data = frozen_bytes(("a.*", "s1"), ("#", "s2"))
    name = files.write(3, data)
    assert name is not None
    opened = files.open_snapshot(3)
    assert opened is not None and (opened.name, opened.base, opened.matcher_bytes) == (name, None, len(data))
    assert isinstance(opened.matcher, FrozenMatcher) and opened.matcher.is_mapped
    assert opened.matcher.lookup("a.b") == {"s1", "s2"}
    assert files.open_snapshot(4) is None, "no file of that version"
    # One flipped byte in the matcher (not in the seal): its name no longer fits, yet only the native
    # validation reads those bytes here, and it refuses them.
    sealed = bytearray((own / name).read_bytes())
    sealed[-20] ^= 0xFF
    (own / name).write_bytes(bytes(sealed))
    with caplog.at_level(logging.WARNING):
        assert files.open_snapshot(3) is None
    assert "refusing snapshot file" in caplog.text
    # Another table's file under this table's name is refused by its claim.
    (own / name).write_bytes(seal(OTHER, 3, data))
    assert files.open_snapshot(3) is None

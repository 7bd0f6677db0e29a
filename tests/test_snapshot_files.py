"""Snapshot files (``routing.router.snapshot_files``): content-addressed, pruned, and never trusted blindly.

Real files on the local filesystem through pyarrow.fs; the router's use of them (a restart that loads
its first snapshot from a file) is in ``tests/integration/test_snapshot_refresh.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pickle
import time
from pathlib import Path

import pytest

from routing.config import ConfigError
from routing.matchers import FrozenMatcher
from routing.router.snapshot_files import (
    DEFAULT_DIRECTORY,
    STALE_TEMP_S,
    SnapshotFileMissing,
    SnapshotFileRef,
    SnapshotFiles,
    SnapshotFilesUnavailable,
    file_name,
    open_snapshot_files,
    snapshot_files_directory,
)
from routing.settings import RouterSettings


def frozen_bytes(*pairs: tuple[str, str]) -> bytes:
    return FrozenMatcher(list(pairs)).to_bytes()


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_written_snapshot_reads_back_by_version_under_its_digest(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path / "snaps"), keep=3)
    assert files.read(7) is None  # no directory yet
    data = frozen_bytes(("a.*", "s1"), ("#", "s2"))
    name = files.write(7, data)
    assert name == f"7-{hashlib.sha256(data).hexdigest()}.frozen" == file_name(7, data)
    assert files.read(7) == data
    assert files.read(8) is None
    assert FrozenMatcher.from_bytes(files.read(7) or b"").lookup("a.b") == {"s1", "s2"}
    # The same bytes again: the same name, still one file.
    assert files.write(7, data) == name
    assert names(tmp_path / "snaps") == [name]


def test_only_the_newest_versions_are_kept(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path), keep=2)
    written = {version: str(files.write(version, frozen_bytes((f"v{version}", "s")))) for version in (3, 1, 4, 2)}
    # After the last write (version 2) the two newest versions are 4 and 3; 1 and 2 are gone.
    assert names(tmp_path) == sorted([written[3], written[4]])
    assert [file.version for file in files.files()] == [4, 3]
    assert files.read(2) is None and files.read(4) is not None


def test_a_file_whose_bytes_do_not_match_its_name_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = SnapshotFiles(str(tmp_path), keep=3)
    good = frozen_bytes(("a", "s1"))
    bad_name = files.write(5, frozen_bytes(("b", "s2")))
    assert bad_name is not None
    (tmp_path / bad_name).write_bytes(good)  # tampered: the bytes of another snapshot
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert files.read(5) is None
    assert "do not match the digest" in caplog.text
    # A valid file of the same version beside it is used.
    files.write(5, good)
    assert files.read(5) == good
    # Truncated: same outcome as tampered.
    (tmp_path / file_name(5, good)).write_bytes(good[:10])
    assert files.read(5) is None


def test_foreign_and_temporary_names_are_ignored_and_stale_temporaries_pruned(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path), keep=1)
    data = frozen_bytes(("a", "s"))
    for foreign in ("notes.txt", "7-abc.frozen", f"x-{hashlib.sha256(data).hexdigest()}.frozen"):
        (tmp_path / foreign).write_bytes(data)
    fresh = tmp_path / f".{file_name(9, data)}.1.tmp"
    stale = tmp_path / f".{file_name(9, data)}.2.tmp"
    fresh.write_bytes(data[:5])
    stale.write_bytes(data[:5])
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    assert files.files() == []
    assert files.read(9) is None and files.read(7) is None
    name = files.write(9, data)
    assert files.read(9) == data
    # The stale temporary went with the prune; a fresh one (a write in progress) and foreign files stay.
    assert names(tmp_path) == sorted(
        ["notes.txt", "7-abc.frozen", f"x-{hashlib.sha256(data).hexdigest()}.frozen", fresh.name, str(name)]
    )


def test_an_unwritable_directory_logs_and_routing_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    files = SnapshotFiles(str(blocker / "snaps"), keep=3)
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
    files = open_snapshot_files(router, table)
    assert files is not None and files.keep == 2 and files.directory == f"{table}/{DEFAULT_DIRECTORY}"
    # A scheme pyarrow cannot open: one warning, no files, and the router still starts.
    with pytest.raises(SnapshotFilesUnavailable, match="nosuchfs://x/y"):
        SnapshotFiles("nosuchfs://x/y", keep=1)
    with caplog.at_level(logging.WARNING, logger="routing.router.snapshot_files"):
        assert open_snapshot_files(dataclasses.replace(router, snapshot_files_path="nosuchfs://x/y"), table) is None
    assert "snapshot files are off" in caplog.text
    with pytest.raises(ValueError, match="keep"):
        SnapshotFiles(str(tmp_path), keep=0)
    with pytest.raises(ConfigError, match="snapshot_files_keep"):
        RouterSettings(snapshot_files_keep=0)


def test_pruning_keeps_the_versions_batches_still_use(tmp_path: Path) -> None:
    files = SnapshotFiles(str(tmp_path), keep=1)
    for version in range(1, 5):
        files.write(version, frozen_bytes(("a", f"s{version}")), protect={1, 2})
    assert sorted(file.version for file in files.files()) == [1, 2, 4]  # the newest, and the protected
    files.prune()
    assert [file.version for file in files.files()] == [4]


def test_a_snapshot_file_reference_reads_the_bytes_only_if_they_match_their_name(tmp_path: Path) -> None:
    data = frozen_bytes(("stock.#", "all"))
    name = SnapshotFiles(str(tmp_path), keep=3).write(7, data)
    assert name is not None
    reference = SnapshotFileRef(str(tmp_path), name)
    assert reference.value == data
    assert pickle.loads(pickle.dumps(reference)).value == data  # what the UDF's closure carries to the workers
    reference.destroy()  # retention is the directory's: the file stays
    assert (tmp_path / name).read_bytes() == data

    (tmp_path / name).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(SnapshotFileMissing, match="does not match the digest"):
        _ = reference.value
    (tmp_path / name).unlink()
    with pytest.raises(SnapshotFileMissing, match="cannot read snapshot file"):
        _ = reference.value
    with pytest.raises(SnapshotFileMissing, match="not a snapshot file name"):
        _ = SnapshotFileRef(str(tmp_path), "../etc/passwd").value

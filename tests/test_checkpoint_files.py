"""The checkpoint files through pyarrow (:class:`routing.checkpoints.ArrowFiles`), what Spark Connect jobs use.

The same contract as Hadoop's ``CheckpointFileManager`` behind :class:`CheckpointFiles` in a classic
session (``tests/integration/test_checkpoint_lease.py`` holds that one): a write-once file is created
exactly once, even by writers racing each other, and is never half-visible.
"""

from __future__ import annotations

import threading
from pathlib import Path

from routing.checkpoints import ArrowFiles


def test_a_write_once_file_keeps_its_first_contents(tmp_path: Path) -> None:
    files = ArrowFiles(str(tmp_path / "ledger"))
    assert files.read("query", "0") is None
    assert files.list_names("query") == []
    assert files.create_once(b'{"v": 1}', "query", "0") is True
    assert files.create_once(b'{"v": 2}', "query", "0") is False
    assert files.read("query", "0") == '{"v": 1}'
    assert files.list_names() == ["query"]
    assert files.list_names("query") == ["0"]  # no temporary file left behind
    assert files.path("query", "0") == f"{tmp_path}/ledger/query/0"


def test_replace_and_delete(tmp_path: Path) -> None:
    files = ArrowFiles(str(tmp_path))
    files.replace(b"one", "lease", "1")
    files.replace(b"two", "lease", "1")
    assert files.read("lease", "1") == "two"
    assert files.list_names("lease") == ["1"]
    files.delete("lease", "1")
    files.delete("lease", "1")  # already gone: no error
    assert files.read("lease", "1") is None


def race(files: ArrowFiles, name: str, writers: int) -> list[int]:
    """``writers`` threads create the same file at once; the writers whose create_once returned True."""
    start = threading.Barrier(writers)
    won: list[int] = []

    def write(writer: int) -> None:
        start.wait()
        if files.create_once(str(writer).encode(), "race", name):
            won.append(writer)

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won


def test_of_writers_racing_for_one_file_exactly_one_wins(tmp_path: Path) -> None:
    files = ArrowFiles(str(tmp_path))
    for round_number in range(20):
        won = race(files, str(round_number), 8)
        assert len(won) == 1
        assert files.read("race", str(round_number)) == str(won[0])
    assert files.list_names("race") == sorted(str(number) for number in range(20))

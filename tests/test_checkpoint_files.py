"""The checkpoint files' contract, on both backends of :class:`routing.checkpoints.CheckpointFiles`.

pyarrow (:class:`~routing.checkpoints.ArrowFiles`: Spark Connect jobs, and every job's files on a local
disk) and Hadoop's ``CheckpointFileManager`` (:class:`~routing.jvm.HadoopFiles`: a classic
session's files anywhere else, here on a local directory through the JVM): a write-once file is created
exactly once, even by writers racing each other, and is never half-visible.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from routing.checkpoints import ArrowFiles, CheckpointFiles
from routing.filesystems import on_local_filesystem
from routing.jvm import HadoopFiles, spark_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Files = ArrowFiles | HadoopFiles

BACKENDS = ["arrow", pytest.param("hadoop", marks=pytest.mark.integration)]


def open_files(request: pytest.FixtureRequest, backend: str, directory: str) -> Files:
    """``directory``'s files through ``backend`` (the Hadoop one needs the shared session)."""
    if backend == "arrow":
        return ArrowFiles(directory)
    return hadoop_files(request.getfixturevalue("spark"), directory)


def hadoop_files(spark: SparkSession, directory: str) -> HadoopFiles:
    """``directory``'s files through Spark's ``CheckpointFileManager`` (a classic session on a tested Spark)."""
    internals = spark_jvm(spark)
    assert internals is not None
    return HadoopFiles(internals, directory)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_once_file_keeps_its_first_contents(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> None:
    files = open_files(request, backend, str(tmp_path / "ledger"))
    assert files.read("query", "0") is None
    assert files.list_names("query") == []
    assert files.create_once(b'{"v": 1}', "query", "0") is True
    assert files.create_once(b'{"v": 2}', "query", "0") is False
    assert files.read("query", "0") == '{"v": 1}'
    assert files.list_names() == ["query"]
    assert files.list_names("query") == ["0"]  # no temporary file left behind
    assert files.path("query", "0").removeprefix("file:") == f"{tmp_path}/ledger/query/0"


@pytest.mark.parametrize("backend", BACKENDS)
def test_replace_and_delete(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> None:
    files = open_files(request, backend, str(tmp_path))
    files.replace(b"one", "lease", "1")
    files.replace(b"two", "lease", "1")
    assert files.read("lease", "1") == "two"
    assert files.list_names("lease") == ["1"]
    files.delete("lease", "1")
    files.delete("lease", "1")  # already gone: no error
    assert files.read("lease", "1") is None


def race(files: Files, name: str, writers: int) -> list[int]:
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
    """ArrowFiles' hard link is an atomic create-without-overwrite: one winner, and the file is its."""
    files = ArrowFiles(str(tmp_path))
    for round_number in range(20):
        won = race(files, str(round_number), 8)
        assert len(won) == 1
        assert files.read("race", str(round_number)) == str(won[0])
    assert files.list_names("race") == sorted(str(number) for number in range(20))


@pytest.mark.integration
def test_of_writers_racing_on_hadoops_local_filesystem_each_file_is_one_writers_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Hadoop's local filesystem renames by checking for the destination and then renaming, so racers can
    both pass the check and the later rename replaces the file (CI saw a writer told it won while the
    file held another's bytes). What holds there, and on HDFS too: a writer wins, and each file is one
    writer's complete bytes. Exactly one winner is the test above, on the backend local disks use."""
    files = hadoop_files(spark, str(tmp_path))
    writers = 8
    for round_number in range(5):  # a Hadoop write is ~40 ms of gateway calls
        won = race(files, str(round_number), writers)
        assert 1 <= len(won) <= writers
        assert files.read("race", str(round_number)) in {str(writer) for writer in range(writers)}
    # Spark's CheckpointFileManager leaves a losing writer's temporary file (and Hadoop's .crc files)
    # behind; readers and pruning skip names that are not batch ids.
    names = [name for name in files.list_names("race") if name.isdigit()]
    assert names == [str(number) for number in range(5)]


@pytest.mark.parametrize(
    ("directory", "default_fs", "local"),
    [
        ("/var/checkpoints/q", "file:///", True),
        ("relative/q", "file:///", True),
        ("file:///var/checkpoints/q", "hdfs://namenode:8020", True),
        ("FILE:/var/checkpoints/q", "file:///", True),
        ("/var/checkpoints/q", "hdfs://namenode:8020", False),  # a plain path is on the default filesystem
        ("hdfs://namenode:8020/q", "file:///", False),
        ("s3a://bucket/q", "file:///", False),
        ("abfss://container@account.dfs.core.windows.net/q", "file:///", False),
    ],
)
def test_which_directories_are_on_the_local_disk(directory: str, default_fs: str, local: bool) -> None:
    assert on_local_filesystem(directory, default_fs) is local


@pytest.mark.integration
def test_a_classic_session_writes_local_directories_in_process(spark: SparkSession, tmp_path: Path) -> None:
    """Local directories take pyarrow, which reads Hadoop's files and is read by Hadoop (a checkpoint moves
    between versions of the router); a forced Hadoop backend still works on them."""
    assert CheckpointFiles(spark, str(tmp_path)).backend == "arrow"
    assert CheckpointFiles(spark, f"file://{tmp_path}").backend == "arrow"
    hadoop = CheckpointFiles(spark, str(tmp_path), backend="hadoop")
    assert hadoop.backend == "hadoop"
    assert hadoop.create_once(b"written by Hadoop", "q", "0")
    arrow = CheckpointFiles(spark, str(tmp_path))
    assert arrow.read("q", "0") == "written by Hadoop"
    assert arrow.create_once(b"written by pyarrow", "q", "1")
    assert not arrow.create_once(b"again", "q", "0")  # Hadoop's file counts as written once
    assert hadoop.read("q", "1") == "written by pyarrow"
    assert [name for name in arrow.list_names("q") if name.isdigit()] == ["0", "1"]
    with pytest.raises(ValueError, match="backend"):
        CheckpointFiles(spark, str(tmp_path), backend="hdfs")


def test_the_layout_table_in_the_module_doc_lists_every_declared_name() -> None:
    """The design doc of the checkpoint directory (routing.checkpoints' docstring) names every kind of file."""
    import routing.checkpoints as checkpoints

    doc = checkpoints.__doc__ or ""
    assert [kept.pattern for kept in checkpoints.LAYOUT if f"``{kept.pattern}``" not in doc] == []


def test_no_other_module_spells_a_name_kept_in_a_checkpoint() -> None:
    """routing.checkpoints owns the layout: no other module of the library writes one of its names as a literal."""
    import routing.checkpoints as checkpoints

    names = {kept.pattern.split("/")[0] for kept in checkpoints.LAYOUT}
    names |= {checkpoints.SPARK_METADATA, checkpoints.SPARK_COMMITS}  # not "tail": also a command's name
    library = Path(checkpoints.__file__).parent
    spelled = [
        (str(path.relative_to(library)), name)
        for path in sorted(library.rglob("*.py"))
        if path.name != "checkpoints.py"
        for name in sorted(names)
        if f'"{name}"' in path.read_text(encoding="utf-8")
    ]
    assert spelled == []

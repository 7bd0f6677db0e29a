"""The replay ledger's retention, on real files: :class:`routing.checkpoints.ArrowFiles` (no JVM), and
once through Hadoop's FileSystem in the test session (the classic router's backend).

Held to a sequential model: after batches 0..N are recorded, exactly the entries a prune at every
multiple of ``retain_batches`` leaves are on disk, each with its own version; the batch just recorded
is always among them (its replay must find it), and the directory never holds more than twice the
retention.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from routing.checkpoints import ArrowFiles, CheckpointFiles
from routing.config import ConfigError
from routing.router.ledger import Ledger, ledger_entries, read_ledger
from routing.settings import RouterSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QUERY = "query-a"


def open_ledger(directory: Path, retain: int) -> Ledger:
    ledger = Ledger(ArrowFiles(str(directory)), "app", retain_batches=retain)
    ledger.bind(QUERY)
    return ledger


def version_of(batch_id: int) -> int:
    return 1000 + batch_id // 3  # a few batches share a version, as they do between table changes


def model_after(last_batch: int, retain: int) -> set[int]:
    """Batch ids whose entries remain once batches 0..last_batch were recorded in order."""
    kept = set(range(last_batch + 1))
    for batch_id in range(1, last_batch + 1):
        if retain and batch_id % retain == 0:
            kept -= set(range(batch_id - retain + 1))
    return kept


def on_disk(directory: Path) -> dict[int, int]:
    return {batch_id: version for _, batch_id, version in read_ledger(ArrowFiles(str(directory)), QUERY)}


@pytest.mark.parametrize("retain", [1, 3, 10])
def test_entries_older_than_the_retention_are_pruned_and_the_rest_kept(tmp_path: Path, retain: int) -> None:
    ledger = open_ledger(tmp_path, retain)
    for batch_id in range(57):
        assert ledger.record_once(batch_id, version_of(batch_id)) == (version_of(batch_id), True)
        entries = on_disk(tmp_path)
        assert set(entries) == model_after(batch_id, retain), batch_id
        assert batch_id in entries  # the batch in flight can always be replayed
        assert len(entries) <= 2 * retain
        assert all(version == version_of(kept) for kept, version in entries.items())
    # A restarted router (a fresh process) finds the last batch's version and nothing pruned.
    restarted = open_ledger(tmp_path, retain)
    assert restarted.recorded_version(56) == version_of(56)
    assert restarted.recorded_version(min(model_after(56, retain)) - 1) is None
    # Its re-execution keeps the recorded version, whatever the snapshot is now, and did not create the entry
    # (so the router takes the careful path, even with the same version).
    assert restarted.record_once(56, 9999) == (version_of(56), False)
    assert restarted.record_once(56, version_of(56)) == (version_of(56), False)


def test_zero_keeps_every_entry(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path, 0)
    for batch_id in range(250):
        ledger.record(batch_id, version_of(batch_id))
    assert on_disk(tmp_path) == {batch_id: version_of(batch_id) for batch_id in range(250)}


def test_pruning_leaves_other_queries_and_temporary_files_alone(tmp_path: Path) -> None:
    other = Ledger(ArrowFiles(str(tmp_path)), "app", retain_batches=0)
    other.bind("query-b")
    for batch_id in range(5):
        other.record(batch_id, 7)
    in_flight = tmp_path / QUERY / ".12.0123abcd.tmp"  # a writer's temporary file (see ArrowFiles.create_once)
    in_flight.parent.mkdir(parents=True)
    in_flight.write_bytes(b"{}")
    ledger = open_ledger(tmp_path, 4)
    for batch_id in range(13):
        ledger.record(batch_id, version_of(batch_id))
    assert set(on_disk(tmp_path)) == model_after(12, 4) == {9, 10, 11, 12}
    assert in_flight.exists()
    assert {batch_id for _, batch_id, _ in read_ledger(ArrowFiles(str(tmp_path)), "query-b")} == set(range(5))


def test_an_explicit_prune_reports_what_it_deleted(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path, 0)
    for batch_id in range(6):
        ledger.record(batch_id, 1)
    assert ledger.prune(2) == 3
    assert ledger.prune(2) == 0
    assert set(on_disk(tmp_path)) == {3, 4, 5}
    assert ledger.recorded_version(1) is None  # forgotten in memory too, not only on disk


def test_the_retention_setting_is_checked() -> None:
    assert RouterSettings().retain_batches == 100
    assert RouterSettings(retain_batches=0).retain_batches == 0
    with pytest.raises(ConfigError, match="retain_batches"):
        RouterSettings(retain_batches=-1)
    with pytest.raises(ValueError, match="retain_batches"):
        Ledger(ArrowFiles("/nonexistent"), "app", retain_batches=-1)


@pytest.mark.integration
def test_the_router_ledger_prunes_through_hadoops_filesystem(spark: SparkSession, tmp_path: Path) -> None:
    """The same retention through Hadoop's FileSystem (Spark's CheckpointFileManager via the JVM: the classic
    session's backend for directories off the local disk, forced here)."""
    directory = str(tmp_path / "ledger")
    ledger = Ledger(CheckpointFiles(spark, directory, backend="hadoop"), "app", retain_batches=4)
    ledger.bind(QUERY)
    for batch_id in range(13):
        ledger.record(batch_id, version_of(batch_id))
    entries = {batch_id: version for _, batch_id, version in ledger_entries(spark, directory)}
    assert entries == {batch_id: version_of(batch_id) for batch_id in model_after(12, 4)}

"""The checkpoint's layout (:data:`routing.checkpoints.LAYOUT`) is what its writers write.

Every kind of file the jobs keep in a checkpoint is written here through the code the jobs use (the lease,
the ledger, the Connect batch records, the tail's handoff and unprinted rows) into one real checkpoint
directory; the directory's listing must then be exactly the declared names: none missing, none undeclared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from routing import checkpoints
from routing.checkpoints import (
    LAYOUT,
    CheckpointLease,
    HandoffFiles,
    handoff_directory,
    ledger_directory,
    refresh_summaries,
    router_reports,
)
from routing.router.ledger import Ledger
from routing.tail import _Unprinted

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QUERY = "0f6c8f43-query"


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A layout pattern as a regex: ``<q>`` one path segment, ``<b>`` and ``<g>`` a number."""
    parts = re.split(r"(<q>|<b>|<g>)", pattern)
    return re.compile("".join({"<q>": "[^/]+", "<b>": "[0-9]+", "<g>": "[0-9]+"}.get(p, re.escape(p)) for p in parts))


def listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def test_every_writer_writes_exactly_the_declared_names(spark: SparkSession, tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    lease = CheckpointLease.acquire(spark, checkpoint, job="test", name="layout")
    lease.release()
    ledger = Ledger.open(spark, ledger_directory(checkpoint), "app", retain_batches=0)
    ledger.bind(QUERY)
    assert ledger.record(3, 7) == 7
    router_reports(spark, checkpoint).write(QUERY, 3, {"rows": 1})
    refresh_summaries(spark, checkpoint).write(QUERY, 3, {"events": 1})
    handoff = HandoffFiles(spark, handoff_directory(checkpoint))
    handoff.hand_over(4, b'{"a": 1}')
    assert handoff.waiting() == [4]
    handoff.acknowledge(4)
    assert handoff.printed(4) and handoff.waiting() == []
    _Unprinted(spark, checkpoint).keep([{"a": 1}])

    written = listing(Path(checkpoint))
    regexes = {kept.pattern: pattern_regex(kept.pattern) for kept in LAYOUT}
    undeclared = [name for name in written if not any(regex.fullmatch(name) for regex in regexes.values())]
    assert undeclared == []
    unwritten = [pattern for pattern, regex in regexes.items() if not any(regex.fullmatch(n) for n in written)]
    assert unwritten == []
    # The exact names existing checkpoints hold (on-disk compatibility), read back through the readers.
    assert written == [
        "handoff/4.done",
        "handoff/4.rows",
        "lease/1",
        f"refresh_summaries/{QUERY}/3",
        f"router_ledger/{QUERY}/3",
        f"router_reports/{QUERY}/3",
        "unprinted/rows",
    ]
    again = Ledger.open(spark, ledger_directory(checkpoint), "app")
    again.bind(QUERY)
    assert again.versions() == {3: 7}
    assert refresh_summaries(spark, checkpoint).read(QUERY) == {3: {"events": 1}}
    unprinted = _Unprinted(spark, checkpoint)
    assert unprinted.take() == [{"a": 1}]
    # The pruning the layout declares removes what it names.
    handoff.clear(4)
    unprinted.keep([])
    assert router_reports(spark, checkpoint).prune(QUERY, 3) == 1
    assert ledger.prune(3) == 1
    assert listing(Path(checkpoint)) == ["lease/1", f"refresh_summaries/{QUERY}/3"]
    assert checkpoints.in_checkpoint(checkpoint + "/", "lease") == f"{checkpoint}/lease"

"""The router's batch counters from the UDF's accumulator (``udf_counts``) and the dead letters' reasons.

On classic Spark the deliveries write counts the batch in the UDF; the classification reasons of dead
letters, which the UDF cannot tell apart (their keys are null), come from the dead letters' own write.
"""

from __future__ import annotations

import logging

import pytest

from routing.errors import DEAD_LETTER_REASONS
from routing.router.metrics import _take_reasons, udf_counts
from udfs.route import FANOUT_REASON, UdfStats

FANOUT = f"dead_{FANOUT_REASON}"


def test_counts_are_the_differences_of_the_accumulator_around_the_write() -> None:
    before = UdfStats(5, 6, 7, rows=100, null_keys=3, unmatched=10, over_limit=1, deliveries=250)
    after = UdfStats(9, 9, 9, rows=350, null_keys=7, unmatched=30, over_limit=3, deliveries=900)
    counts = udf_counts(before, after)
    assert counts is not None
    assert (counts["input_rows"], counts["unmatched"], counts["deliveries"]) == (250, 20, 650)
    assert counts["dead_letters"] == 4 + 2 and counts[FANOUT] == 2
    assert {name for name in counts if name.startswith("dead_")} == {f"dead_{r}" for r in DEAD_LETTER_REASONS} | {
        "dead_letters"
    }
    assert sum(counts[f"dead_{reason}"] for reason in DEAD_LETTER_REASONS) == 2  # the rest are the write's to fill


def test_a_write_whose_udf_saw_no_record_is_counted_instead() -> None:
    figures = UdfStats(rows=40, deliveries=12)
    assert udf_counts(figures, figures) is None


def reasons(**counts: int) -> dict[str, int]:
    return {f"dead_{reason}": counts.get(reason, 0) for reason in DEAD_LETTER_REASONS}


def test_the_dead_letters_written_fill_the_classification_reasons(caplog: pytest.LogCaptureFixture) -> None:
    metrics = udf_counts(UdfStats(), UdfStats(rows=10, null_keys=3, over_limit=1))
    assert metrics is not None
    with caplog.at_level(logging.ERROR, logger="routing.router"):
        _take_reasons(metrics, reasons(null_key=2, invalid_key=1, fanout_limit=1))
    assert not caplog.records
    assert metrics == {**metrics, **reasons(null_key=2, invalid_key=1, fanout_limit=1)}


def test_dead_letters_that_disagree_with_the_udf_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    metrics = udf_counts(UdfStats(), UdfStats(rows=10, null_keys=3, over_limit=1))
    assert metrics is not None
    with caplog.at_level(logging.ERROR, logger="routing.router"):
        _take_reasons(metrics, reasons(null_key=2, fanout_limit=1))
    assert "disagree" in caplog.text
    assert metrics[FANOUT] == 1 and metrics["dead_null_key"] == 2  # the fan-out count stays the UDF's

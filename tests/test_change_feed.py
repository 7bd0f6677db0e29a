"""The refresh's reduction of a change feed to each row's last change (``routing.subscriptions.table.last_changes``),
against a sequential model: replay the feed commit by commit, deletes before inserts within a commit."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.subscriptions.table import last_changes

rows = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2", "é"]),  # subscriber
        st.sampled_from(["a.*", "#", "a.b"]),  # pattern
        st.booleans(),  # active
        st.booleans(),  # deleted
        st.integers(min_value=1, max_value=4),  # commit version
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(feed=rows)
def test_each_row_keeps_its_last_change(feed: list[tuple[str, str, bool, bool, int]]) -> None:
    # A commit holds at most one delete and one post-image of a row (an overwrite has both).
    feed = list({(row[0], row[1], row[3], row[4]): row for row in feed}.values())
    table = pa.table(
        {
            "subscriber_id": pa.array([row[0] for row in feed], pa.string()),
            "pattern": pa.array([row[1] for row in feed], pa.string()),
            "active": pa.array([row[2] for row in feed], pa.bool_()),
            "deleted": pa.array([row[3] for row in feed], pa.bool_()),
            "_commit_version": pa.array([row[4] for row in feed], pa.int64()),
        }
    )
    model: dict[tuple[str, str], bool] = {}
    # Commit by commit; within one, a delete then an insert (an overwrite) leaves the insert.
    for subscriber, pattern, active, deleted, _ in sorted(feed, key=lambda row: (row[4], not row[3])):
        model[(subscriber, pattern)] = active and not deleted
    got = {(row["subscriber_id"], row["pattern"]): row["active"] for row in last_changes(table).to_pylist()}
    assert got == model
    assert last_changes(table).num_rows == len(model), "each changed row once"

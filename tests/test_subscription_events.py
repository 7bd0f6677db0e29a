"""Subscription events without Spark: parsing, reason codes, change ids, import files, the model.

The model (:func:`routing.subscriptions.apply_events_model`) is the oracle of the Spark
integration tests, so it is pinned here against hand-worked scenarios and against a second,
even simpler formulation (without a subscription limit the final table is just the newest
event per (subscriber, pattern)).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.errors import TooManySubscriptionsError
from routing.limits import Limits
from routing.subscriptions.events import (
    EMPTY_EVENT,
    EVENT_TOO_LARGE,
    INVALID_FIELD_TYPE,
    INVALID_TS,
    MALFORMED_CSV,
    MALFORMED_JSON,
    MAX_TS_MILLIS,
    MISSING_FIELD,
    NOT_AN_OBJECT,
    REFRESHED,
    SOURCE_IMPORT,
    STALE,
    SUBSCRIBED,
    SUPERSEDED,
    TOMBSTONED,
    UNKNOWN_OP,
    UNSUBSCRIBED,
    EventRejected,
    ImportFileError,
    Op,
    Received,
    file_sha256,
    import_change_id,
    judge,
    kafka_change_id,
    parse_event,
    parse_ts,
    read_import_file,
)
from routing.subscriptions.model import ModelRow, apply_events_model
from routing.validation import Policy, Validator

MAX_EVENT_BYTES = 512
VALIDATOR = Validator(
    limits=Limits(
        max_pattern_bytes=40,
        max_pattern_words=5,
        max_hash_words=2,
        max_subscriber_bytes=12,
        max_subscriptions_per_subscriber=3,
    )
)
SAMPLES = Path(__file__).resolve().parent.parent / "conf" / "samples"


def event(op: str = "subscribe", subscriber: str = "s1", pattern: str = "a.*", ts: object = 1000) -> bytes:
    return json.dumps({"op": op, "subscriber": subscriber, "pattern": pattern, "ts": ts}).encode()


def reason_of(raw: bytes | None, validator: Validator = VALIDATOR) -> str | None:
    try:
        parse_event(raw, "kafka:t:000000:00000000000000000000", validator, max_event_bytes=MAX_EVENT_BYTES)
    except EventRejected as rejection:
        return rejection.reason
    return None


# -- parsing and reason codes ------------------------------------------------------

REASONS = [
    (event(), None),
    (event(op="unsubscribe", pattern="#"), None),
    (event(pattern=""), None),  # the empty pattern: zero words, matches only the empty key
    (event(pattern="a..b"), None),  # empty words are real words under amqp
    (None, EMPTY_EVENT),
    (b"", EMPTY_EVENT),
    (b"  \n", EMPTY_EVENT),
    (b"{" + b" " * MAX_EVENT_BYTES + b"}", EVENT_TOO_LARGE),
    (b"\xff\xfe{}", MALFORMED_JSON),
    (b"{not json", MALFORMED_JSON),
    (b'{"op": "subscribe"', MALFORMED_JSON),
    (b"[1, 2]", NOT_AN_OBJECT),
    (b'"subscribe"', NOT_AN_OBJECT),
    (b"null", NOT_AN_OBJECT),
    (b'{"subscriber": "s1", "pattern": "a", "ts": 1}', MISSING_FIELD),
    (b'{"op": "subscribe", "pattern": "a", "ts": 1}', MISSING_FIELD),
    (b'{"op": "subscribe", "subscriber": "s1", "ts": 1}', MISSING_FIELD),
    (b'{"op": "subscribe", "subscriber": "s1", "pattern": "a"}', MISSING_FIELD),
    (b'{"op": "subscribe", "subscriber": "s1", "pattern": null, "ts": 1}', MISSING_FIELD),
    (event(op=1), INVALID_FIELD_TYPE),  # type: ignore[arg-type]
    (event(subscriber=["s1"]), INVALID_FIELD_TYPE),  # type: ignore[arg-type]
    (event(pattern=7), INVALID_FIELD_TYPE),  # type: ignore[arg-type]
    (event(op="Subscribe"), UNKNOWN_OP),
    (event(op="delete"), UNKNOWN_OP),
    (event(subscriber=""), "invalid_subscriber"),
    (event(subscriber="x" * 13), "invalid_subscriber"),
    (b'{"op": "subscribe", "subscriber": "s\\ud800", "pattern": "a", "ts": 1}', "invalid_subscriber"),
    (b'{"op": "subscribe", "subscriber": "s1", "pattern": "a.\\udfff", "ts": 1}', "invalid_pattern"),
    (event(pattern="a" * 41), "pattern_too_long"),
    (event(pattern="a.b.c.d.e.f"), "pattern_too_many_words"),
    (event(pattern="#.a.#.#"), "too_many_hash_words"),
    (event(ts=1.5), INVALID_TS),
    (event(ts=True), INVALID_TS),
    (event(ts=-1), INVALID_TS),
    (event(ts="1000"), INVALID_TS),  # digits are millis only in CSV, where every cell is text
    (event(ts="2026-01-05T09:00:00"), INVALID_TS),  # naive: ambiguous
    (event(ts="yesterday"), INVALID_TS),
    (event(ts=[1]), INVALID_TS),
    (b'{"op": "subscribe", "subscriber": "s1", "pattern": "a", "ts": NaN}', INVALID_TS),
]


@pytest.mark.parametrize(("raw", "reason"), REASONS)
def test_reason_codes(raw: bytes | None, reason: str | None) -> None:
    assert reason_of(raw) == reason


def test_checks_run_in_a_fixed_order() -> None:
    # Everything wrong at once: the first check in the documented order names the reason.
    assert reason_of(event(op="nope", subscriber="", pattern="#.#.#", ts="bad")) == UNKNOWN_OP
    assert reason_of(event(subscriber="", pattern="#.#.#", ts="bad")) == "invalid_subscriber"
    assert reason_of(event(pattern="#.#.#", ts="bad")) == "too_many_hash_words"


def test_event_size_limit_is_inclusive() -> None:
    body = event()
    padded = body[:-1] + b" " * (MAX_EVENT_BYTES - len(body)) + b"}"
    assert len(padded) == MAX_EVENT_BYTES
    assert reason_of(padded) is None
    assert reason_of(padded[:-1] + b" }") == EVENT_TOO_LARGE


def test_strict_policy_rejects_what_amqp_accepts() -> None:
    strict = Validator(limits=VALIDATOR.limits, policy=Policy.STRICT)
    for pattern in ("a..b", ".a", "caf\u00e9.*", "tab\t"):
        assert reason_of(event(pattern=pattern)) is None
        assert reason_of(event(pattern=pattern), strict) == "invalid_pattern"


def test_rejection_detail_names_the_problem() -> None:
    with pytest.raises(EventRejected, match=r"max_hash_words=2") as caught:
        parse_event(event(pattern="#.#.#"), "id", VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    assert caught.value.reason == "too_many_hash_words"


def test_valid_event_fields() -> None:
    parsed = parse_event(
        event(op="unsubscribe", subscriber="s2", pattern="a.*.#", ts="1970-01-01T00:00:01.5+00:00"),
        "cid",
        VALIDATOR,
        max_event_bytes=MAX_EVENT_BYTES,
    )
    assert (parsed.op, parsed.subscriber, parsed.pattern, parsed.ts_millis) == (Op.UNSUBSCRIBE, "s2", "a.*.#", 1500)
    assert (parsed.pattern_word_count, parsed.has_wildcard, parsed.change_id) == (3, True, "cid")
    literal = parse_event(event(pattern="a*.#b"), "cid", VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    assert (literal.pattern_word_count, literal.has_wildcard) == (2, False)


def test_unknown_fields_are_ignored() -> None:
    raw = json.dumps({"op": "subscribe", "subscriber": "s", "pattern": "a", "ts": 5, "note": "hi"}).encode()
    assert reason_of(raw) is None


# -- timestamps ---------------------------------------------------------------------

TIMESTAMPS = [
    (0, 0),
    (1_767_603_600_000, 1_767_603_600_000),
    (MAX_TS_MILLIS, MAX_TS_MILLIS),
    ("1970-01-01T00:00:00Z", 0),
    ("2026-01-05T09:00:00Z", 1_767_603_600_000),
    ("2026-01-05T10:00:00+01:00", 1_767_603_600_000),
    ("2026-01-05T08:30:00-00:30", 1_767_603_600_000),
    ("2026-01-05T09:00:00.123Z", 1_767_603_600_123),
    ("9999-12-31T23:59:59.999Z", MAX_TS_MILLIS),
]


@pytest.mark.parametrize(("value", "millis"), TIMESTAMPS)
def test_timestamps(value: object, millis: int) -> None:
    assert parse_ts(value) == millis


@pytest.mark.parametrize(
    "value",
    [
        -1,
        MAX_TS_MILLIS + 1,
        1.0,
        False,
        None,
        "",
        "2026-01-05",
        "2026-01-05T09:00:00",
        "2026-01-05T09:00:00.000001Z",
        "1969-12-31T23:59:59.999Z",
        "1000",
    ],
)
def test_invalid_timestamps(value: object) -> None:
    with pytest.raises(EventRejected) as caught:
        parse_ts(value)
    assert caught.value.reason == INVALID_TS


def test_csv_digit_strings_are_millis() -> None:
    assert parse_ts("1000", digits_are_millis=True) == 1000
    with pytest.raises(EventRejected):
        parse_ts("-1000", digits_are_millis=True)


# -- change ids -------------------------------------------------------------------------


def test_change_id_formats() -> None:
    assert kafka_change_id("subscriptions", 3, 42) == "kafka:subscriptions:000003:00000000000000000042"
    assert import_change_id("ab" * 32, 7) == "import:" + "ab" * 10 + ":000000000007"
    with pytest.raises(ValueError):
        kafka_change_id("t", 0, -1)
    with pytest.raises(ValueError):
        import_change_id("ab" * 32, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.tuples(st.integers(0, 10_000), st.integers(0, 2**62)), st.tuples(st.integers(0, 10_000), st.integers(0, 2**62))
)
def test_change_id_order_is_coordinate_order(left: tuple[int, int], right: tuple[int, int]) -> None:
    # Ties on ts are broken by change id: string order must be (partition, offset) order.
    assert (kafka_change_id("t", *left) < kafka_change_id("t", *right)) == (left < right)


# -- import files -----------------------------------------------------------------------


def test_csv_import(tmp_path: Path) -> None:
    path = tmp_path / "subs.csv"
    path.write_text(
        "ts,op,subscriber,pattern,comment\n"  # any column order, extra columns ignored
        "1000,subscribe,s1,a.*,ok\n"
        "\n"
        '2000,subscribe,s1,"multi\nline",ok\n'
        "3000,subscribe,s1\n"
        ",subscribe,s1,b,no ts\n"
        "2026-01-05T09:00:00Z,unsubscribe,s1,a.*,iso\n",
        encoding="utf-8",
    )
    digest, outcomes = read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    assert digest == file_sha256(path.read_bytes())
    lines = [2, 3, 4, 6, 7, 8]
    assert [outcome.received.import_line for outcome in outcomes] == lines
    verdicts = [
        outcome.rejection.reason if outcome.rejection else outcome.event and outcome.event.pattern
        for outcome in outcomes
    ]
    assert verdicts == ["a.*", EMPTY_EVENT, "multi\nline", MALFORMED_CSV, MISSING_FIELD, "a.*"]
    assert outcomes[2].received.raw == b'2000,subscribe,s1,"multi\nline",ok'
    assert outcomes[3].received.raw == b"3000,subscribe,s1"
    assert all(
        outcome.received.change_id == import_change_id(digest, line)
        for outcome, line in zip(outcomes, lines, strict=True)
    )
    assert {outcome.received.source for outcome in outcomes} == {SOURCE_IMPORT}


def test_jsonl_import(tmp_path: Path) -> None:
    path = tmp_path / "subs.jsonl"
    path.write_bytes(event() + b"\n\n" + b"{oops\r\n" + event(op="unsubscribe", ts=2000))
    _, outcomes = read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    reasons = [outcome.rejection.reason if outcome.rejection else None for outcome in outcomes]
    assert reasons == [None, EMPTY_EVENT, MALFORMED_JSON, None]
    assert [outcome.received.import_line for outcome in outcomes] == [1, 2, 3, 4]
    assert outcomes[2].received.raw == b"{oops"
    assert outcomes[3].event is not None and outcomes[3].event.op is Op.UNSUBSCRIBE


def test_a_jsonl_import_starting_with_a_byte_order_mark_keeps_line_1(tmp_path: Path) -> None:
    """An editor's BOM was part of line 1's JSON, so line 1 was rejected; it is dropped, as CSV's reader does."""
    for name, content in (
        ("subs.jsonl", b"\xef\xbb\xbf" + event() + b"\n" + event(op="unsubscribe", ts=2000)),
        ("subs.csv", b"\xef\xbb\xbfts,op,subscriber,pattern\n1000,subscribe,s,a.b\n"),
    ):
        path = tmp_path / name
        path.write_bytes(content)
        _, outcomes = read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
        assert [outcome.rejection for outcome in outcomes] == [None] * len(outcomes) and outcomes, name
        assert outcomes[0].received.import_line == (1 if name.endswith("jsonl") else 2)


def test_an_import_file_over_its_byte_limit_is_refused_in_one_line_before_any_of_it(tmp_path: Path) -> None:
    path = tmp_path / "subs.jsonl"
    path.write_bytes(event() + b"\n" + event(ts=2000))
    size = path.stat().st_size
    _, outcomes = read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES, max_import_bytes=size)
    assert len(outcomes) == 2  # exactly at the limit: read
    with pytest.raises(ImportFileError, match=rf"is over subscriptions\.max_import_bytes={size - 1} bytes") as raised:
        read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES, max_import_bytes=size - 1)
    assert "\n" not in str(raised.value)


#: Characters ``str.splitlines`` treats as line breaks but CSV does not: inside a field they are field text.
UNICODE_LINE_BREAKS = ("\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def test_csv_records_split_only_where_csv_says(tmp_path: Path) -> None:
    """A file written by Python's own csv.writer reads back field for field, on csv's own line numbers.

    Unicode line breaks (U+2028, NEL, VT, FF, FS, GS, RS) inside a field are text, not record ends; a quoted
    field with ``\r\n`` or ``\n`` spans physical lines, and the record's line is the first of them.
    """
    rows = [
        [str(1000 + index), "subscribe", f"s{index}", f"a.b{char}c"] for index, char in enumerate(UNICODE_LINE_BREAKS)
    ]
    rows.insert(3, ["5000", "subscribe", "sx", "multi\r\nline"])
    rows.append(["6000", "subscribe", "sy", "x\u2028.y"])
    path = tmp_path / "written.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ts", "op", "subscriber", "pattern"])
        writer.writerows(rows)
    _, outcomes = read_import_file(path, Validator(), max_event_bytes=MAX_EVENT_BYTES)
    assert [outcome.rejection for outcome in outcomes] == [None] * len(rows)
    assert [
        (str(o.event.ts_millis), o.event.op.value, o.event.subscriber, o.event.pattern)
        for o in outcomes
        if o.event is not None
    ] == [tuple(row) for row in rows]
    # Line numbers: one physical line per record, except the one whose field holds \r\n (two lines).
    assert [outcome.received.import_line for outcome in outcomes] == [2, 3, 4, 5, 7, 8, 9, 10, 11, 12]
    with path.open(encoding="utf-8", newline="") as handle:
        expected_raw = [line.rstrip("\r\n").encode() for line in handle]
    expected_raw[4:6] = [expected_raw[4] + b"\r\n" + expected_raw[5]]
    assert [outcome.received.raw for outcome in outcomes] == expected_raw[1:]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("subs.txt", b"", "unknown format"),
        ("subs.csv", b"", "needs a header"),
        ("subs.csv", b"op,subscriber,ts\n", "lacks column"),
        ("subs.csv", b"op,subscriber,pattern,ts\n\xff\n", "not UTF-8"),
        # The last of two pattern columns was used silently; which one the writer meant is not the reader's guess.
        (
            "subs.csv",
            b"op,subscriber,pattern,ts,pattern\nsubscribe,s,a,1,b\n",
            "names column.s. pattern more than once",
        ),
    ],
)
def test_unreadable_import_files(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ImportFileError, match=message):
        read_import_file(path, VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)


def test_sample_files_are_valid() -> None:
    for name in ("subscriptions.csv", "subscriptions.json"):
        _, outcomes = read_import_file(SAMPLES / name, Validator(), max_event_bytes=65_536)
        assert outcomes and all(outcome.event is not None for outcome in outcomes), name


# -- the model --------------------------------------------------------------------------


def kafka(offset: int, raw: bytes | None, partition: int = 0) -> Received:
    return Received(
        kafka_change_id("t", partition, offset),
        "kafka",
        raw,
        kafka_topic="t",
        kafka_partition=partition,
        kafka_offset=offset,
    )


def run_model(*batches: list[Received], validator: Validator = VALIDATOR) -> tuple[dict, dict, list]:  # type: ignore[type-arg]
    model = apply_events_model([], validator, max_event_bytes=MAX_EVENT_BYTES)
    counts = [model.apply_batch(batch) for batch in batches]
    return model.rows, model.rejects, counts


def test_model_soft_delete_blocks_older_subscribe() -> None:
    rows, rejects, counts = run_model(
        [kafka(0, event(ts=10)), kafka(1, event(op="unsubscribe", ts=20))],
        [kafka(2, event(ts=15))],  # older than the unsubscribe: must not resurrect
        [kafka(3, event(ts=30))],  # a genuinely newer subscribe does
    )
    assert rejects == {}
    assert counts[0] == {TOMBSTONED: 1, SUPERSEDED: 1}
    assert counts[1] == {STALE: 1}
    assert counts[2] == {SUBSCRIBED: 1}
    assert rows == {("s1", "a.*"): ModelRow(True, 30, kafka_change_id("t", 0, 3))}


def test_model_transitions() -> None:
    rows, _, counts = run_model(
        [kafka(0, event(ts=10))],
        [kafka(1, event(ts=11))],
        [kafka(2, event(op="unsubscribe", ts=12))],
        [kafka(3, event(op="unsubscribe", ts=13))],
        [kafka(4, event(ts=11))],
    )
    assert [dict(batch) for batch in counts] == [
        {SUBSCRIBED: 1},
        {REFRESHED: 1},
        {UNSUBSCRIBED: 1},
        {TOMBSTONED: 1},
        {STALE: 1},
    ]
    assert rows[("s1", "a.*")] == ModelRow(False, 13, kafka_change_id("t", 0, 3))


def test_model_ts_tie_goes_to_greater_change_id() -> None:
    rows, _, _ = run_model([kafka(5, event(op="unsubscribe", ts=7)), kafka(9, event(ts=7))])
    assert rows[("s1", "a.*")].active
    rows, _, _ = run_model([kafka(9, event(op="unsubscribe", ts=7)), kafka(5, event(ts=7))])
    assert not rows[("s1", "a.*")].active


def test_model_reapplying_a_batch_changes_nothing() -> None:
    batch = [
        kafka(i, event(op=random.Random(i).choice(["subscribe", "unsubscribe"]), pattern=f"p{i % 4}", ts=i))
        for i in range(12)
    ]
    model = apply_events_model([batch], VALIDATOR, max_event_bytes=MAX_EVENT_BYTES)
    before = (dict(model.rows), dict(model.rejects))
    again = model.apply_batch(batch)
    assert (model.rows, model.rejects) == before
    assert set(again) <= {STALE, SUPERSEDED, "too_many_subscriptions"}


def test_model_subscription_limit() -> None:
    # Limit 3. s1 holds p0, p1; the batch frees p0 and adds p2..p5: p2 and p3 fit (earliest ts first).
    first = [kafka(0, event(pattern="p0", ts=1)), kafka(1, event(pattern="p1", ts=1))]
    second = [
        kafka(2, event(pattern="p5", ts=50)),
        kafka(3, event(pattern="p2", ts=20)),
        kafka(4, event(op="unsubscribe", pattern="p0", ts=60)),
        kafka(5, event(pattern="p4", ts=40)),
        kafka(6, event(pattern="p3", ts=30)),
        kafka(7, event(pattern="p1", ts=70)),  # already active: a refresh, not a new slot
        kafka(8, event(subscriber="s2", pattern="p9", ts=1)),  # another subscriber's own budget
    ]
    rows, rejects, counts = run_model(first, second)
    active = sorted(key[1] for key, row in rows.items() if row.active and key[0] == "s1")
    assert active == ["p1", "p2", "p3"]
    assert rejects == {
        kafka_change_id("t", 0, 5): "too_many_subscriptions",
        kafka_change_id("t", 0, 2): "too_many_subscriptions",
    }
    assert counts[1] == {SUBSCRIBED: 3, UNSUBSCRIBED: 1, REFRESHED: 1, "too_many_subscriptions": 2}
    assert ("s1", "p5") not in rows  # a rejected subscribe leaves no row behind
    # The limit is the validator's: same error type as everywhere else.
    with pytest.raises(TooManySubscriptionsError):
        VALIDATOR.check_subscription_count("s1", 4)


OPS = st.tuples(
    st.sampled_from(["subscribe", "unsubscribe"]),
    st.sampled_from(["s1", "s2"]),
    st.sampled_from(["a", "a.*", "#", ""]),
    st.integers(0, 5),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=25), st.randoms(use_true_random=False))
def test_model_without_limit_is_newest_event_per_row(ops: list[tuple[str, str, str, int]], rng: random.Random) -> None:
    """Independent of batching and arrival order: each row is its newest (ts, change id) event."""
    received = [
        kafka(offset, event(op, subscriber, pattern, ts)) for offset, (op, subscriber, pattern, ts) in enumerate(ops)
    ]
    unlimited = Validator()
    shuffled = received[:]
    rng.shuffle(shuffled)
    cuts = sorted(rng.sample(range(len(shuffled) + 1), k=min(3, len(shuffled) + 1)))
    batches = [shuffled[start:end] for start, end in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]
    model = apply_events_model(batches, unlimited, max_event_bytes=MAX_EVENT_BYTES)

    newest: dict[tuple[str, str], ModelRow] = {}
    for item in received:
        outcome = judge(item, unlimited, max_event_bytes=MAX_EVENT_BYTES)
        assert outcome.event is not None
        parsed = outcome.event
        row = ModelRow(parsed.op is Op.SUBSCRIBE, parsed.ts_millis, parsed.change_id)
        held = newest.get((parsed.subscriber, parsed.pattern))
        if held is None or (row.ts_millis, row.change_id) > (held.ts_millis, held.change_id):
            newest[(parsed.subscriber, parsed.pattern)] = row
    assert model.rows == newest
    assert model.rejects == {}


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=25))
def test_model_never_exceeds_the_limit(ops: list[tuple[str, str, str, int]]) -> None:
    limit = 2
    validator = Validator(limits=Limits(max_subscriptions_per_subscriber=limit))
    model = apply_events_model(
        [[kafka(offset, event(*op)) for offset, op in enumerate(ops)][i : i + 5] for i in range(0, len(ops), 5)],
        validator,
        max_event_bytes=MAX_EVENT_BYTES,
    )
    for subscriber in ("s1", "s2"):
        assert sum(row.active for key, row in model.rows.items() if key[0] == subscriber) <= limit
    assert set(model.rejects.values()) <= {"too_many_subscriptions"}


# -- the job's command line (no Spark: these exit before a session starts) -------------------


def test_job_rejects_bad_flags_before_starting_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.refresh_subscriptions import main

    def no_spark(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("Spark must not start")

    assert main(["--import", str(tmp_path / "missing.csv")], spark_factory=no_spark) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--import", str(tmp_path / "subs.xml")], spark_factory=no_spark) == 2
    assert "unknown format" in capsys.readouterr().err
    assert main(["--set", "subscriptions.max_event_bytes=0"], spark_factory=no_spark) == 2
    assert "max_event_bytes" in capsys.readouterr().err
    for argv in (
        ["--every", "0"],
        ["--every", "5", "--import", "x.csv"],
        ["--every", "nan"],
        ["--every", "inf"],
        ["--every", "1e300"],
        ["--every", "٥"],
    ):
        with pytest.raises(SystemExit) as exited:
            main(argv, spark_factory=no_spark)
        assert exited.value.code == 2


def fake_import_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Stand in for Spark and the Delta writes of an import: returns the (txn app id, events) of each applied file."""
    import collections

    from routing.checkpoints import CheckpointLease
    from routing.subscriptions import refresh, table
    from routing.subscriptions.table import BatchSummary

    applied: list[tuple[str, int]] = []

    def apply_validated(spark: object, outcomes: list[object], *, txn_app_id: str, **kwargs: object) -> BatchSummary:
        applied.append((txn_app_id, len(outcomes)))
        return BatchSummary(None, collections.Counter({SUBSCRIBED: len(outcomes)}), len(applied), True)

    class HeldLease:  # the checkpoint lease needs a JVM; its own tests are tests/integration/test_checkpoint_lease.py
        lost = None

        def check(self) -> None: ...

        def bind(self, query_id: str) -> None: ...

        def release(self) -> None: ...

    monkeypatch.setattr(CheckpointLease, "acquire", lambda *args, **kwargs: HeldLease())
    monkeypatch.setattr(refresh, "prepare_tables", lambda spark, settings: None)
    monkeypatch.setattr(table, "validated_frame", lambda spark, outcomes: outcomes)
    monkeypatch.setattr(table, "apply_validated", apply_validated)
    monkeypatch.setattr(table, "latest_version", lambda spark, path: len(applied))
    return applied


def test_a_multi_file_import_reads_every_file_before_committing_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """All or nothing: a file that cannot be read stops the run before Spark starts and before any file commits,
    and the bytes imported are the bytes checked (a file changing while the job starts changes nothing)."""
    from jobs.refresh_subscriptions import main

    first, second = tmp_path / "ok.csv", tmp_path / "also_ok.csv"
    first.write_text("op,subscriber,pattern,ts\nsubscribe,s1,a.*,1000\n", encoding="utf-8")
    second.write_text("op,subscriber,pattern,ts\nsubscribe,s2,b.#,1000\nsubscribe,s3,c,1000\n", encoding="utf-8")
    digests = [file_sha256(path.read_bytes()) for path in (first, second)]
    applied = fake_import_run(monkeypatch)

    def spark_that_sees_the_second_file_change(*args: object, **kwargs: object) -> Any:  # stands in for a session
        second.write_bytes(bytes(range(256)))  # now unreadable: too late, the job read it already
        return object()

    argv = ["--import", str(first), "--import", str(second), "--json"]
    assert main(argv, spark_factory=spark_that_sees_the_second_file_change) == 0
    assert applied == [
        (f"refresh_subscriptions:import:{digests[0]}", 1),
        (f"refresh_subscriptions:import:{digests[1]}", 2),
    ]
    assert json.loads(capsys.readouterr().out)["applied"][SUBSCRIBED] == 3

    def no_spark(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("Spark must not start")

    applied.clear()
    for bad in (bytes(range(256)), b"op,subscriber,ts\n"):
        second.write_bytes(bad)
        assert main(["--import", str(first), "--import", str(second)], spark_factory=no_spark) == 2
        err = capsys.readouterr().err
        assert str(second) in err and "nothing was imported" in err
    assert applied == []


def test_job_summary() -> None:
    import collections

    from jobs.refresh_subscriptions import RunSummary
    from routing.subscriptions.table import BatchSummary

    summary = RunSummary(
        [
            BatchSummary(0, collections.Counter({SUBSCRIBED: 2, "malformed_json": 1, STALE: 1}), 3, True),
            BatchSummary(1, collections.Counter({UNSUBSCRIBED: 1, "malformed_json": 2, "unknown_op": 1}), 4, True),
        ],
        table_version=4,
    )
    assert summary.rejected == {"malformed_json": 3, "unknown_op": 1}
    assert summary.as_dict() == {
        "batches": 2,
        "events": 8,
        "table_version": 4,
        "rejected": {"malformed_json": 3, "unknown_op": 1},
        "applied": {SUBSCRIBED: 2, UNSUBSCRIBED: 1, REFRESHED: 0, TOMBSTONED: 0},
        "noop": {STALE: 1, SUPERSEDED: 0},
        "deactivated": 0,
    }
    assert "rejected=4 (malformed_json=3, unknown_op=1); table version 4" in summary.describe()
    # Held subscriptions the [acl] sweep deactivated at the start of the run (0: not mentioned).
    swept = RunSummary(summary.batches, table_version=5, deactivated=2)
    assert swept.as_dict()["deactivated"] == 2
    assert "; deactivated by [acl] (forbidden_pattern)=2; table version 5" in swept.describe()

"""Fuzzing the subscription-event parser and the import-file reader (Hypothesis, no Spark).

The refresh job must never crash on what arrives: every Kafka value goes through
:func:`~routing.subscriptions.events.judge` and every import file through
:func:`~routing.subscriptions.events.read_import_file`. For any input:

* ``parse_event`` raises nothing but :class:`EventRejected`, and ``judge`` nothing at all;
* ``read_import_file`` raises nothing but :class:`ImportFileError` (a file that cannot be read at all);
* every outcome is exactly one of an event and a rejection, and a rejection carries one of the documented
  reason codes (:data:`PARSE_REASONS`) and a detail;
* an accepted event is one the validator accepts, with ``ts`` in range;
* a file written by Python's own ``csv.writer`` reads back field for field, whatever text the fields hold.

Example counts are moderate, so this runs in seconds; the structured strategies aim at the parser's corners
(every JSON type in every field, huge integers, offsets, surrogates, quotes and line breaks in CSV).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from routing.errors import SUBSCRIPTION_REJECT_ERRORS
from routing.limits import Limits
from routing.subscriptions.events import (
    EVENT_REASONS,
    FIELDS,
    MAX_TS_MILLIS,
    PARSE_REASONS,
    REJECT_REASONS,
    SOURCE_IMPORT,
    EventRejected,
    ImportFileError,
    Outcome,
    judge,
    kafka_received,
    parse_event,
    parse_ts,
    read_import_file,
)
from routing.validation import Policy, Validator

MAX_EVENT_BYTES = 65_536  # the default: room for the 4,301-digit numbers that int() refuses
VALIDATORS = (
    Validator(limits=Limits(max_pattern_bytes=40, max_pattern_words=6, max_hash_words=2, max_subscriber_bytes=16)),
    Validator(policy=Policy.STRICT),
)
REASONS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "concepts.md"

# -- strategies ------------------------------------------------------------------------------------

#: Text with the characters that break parsers: quotes, separators, line breaks of every kind, NUL, controls,
#: a lone surrogate (JSON can carry one as an escape), non-ASCII digits and wildcards.
NASTY = [
    '"',
    ",",
    ".",
    "*",
    "#",
    "\r",
    "\n",
    "\r\n",
    "\x00",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\u2028",
    "\ufeff",
    "\ud800",
    "\\",
    "٣",
    "a",
    "b",
    " ",
]
nasty_text = st.lists(st.sampled_from(NASTY), max_size=12).map("".join) | st.text(max_size=24)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | nasty_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(nasty_text, children, max_size=3),
    max_leaves=6,
)
offsets = st.builds(
    dt.timezone,
    st.timedeltas(min_value=-dt.timedelta(hours=23, minutes=59), max_value=dt.timedelta(hours=23, minutes=59)),
)
iso_timestamps = st.builds(
    lambda moment, zone, spec: moment.replace(tzinfo=zone).isoformat(timespec=spec),
    st.datetimes(),
    offsets | st.none(),
    st.sampled_from(["seconds", "milliseconds", "microseconds"]),
)
timestamps = (
    st.integers(min_value=-1, max_value=MAX_TS_MILLIS + 1)
    | st.integers()
    | iso_timestamps
    | st.integers(min_value=1, max_value=6000).map(lambda digits: "9" * digits)
    | json_values
)
pattern_words = st.sampled_from(["a", "b", "*", "#", "", "a*", "é", "x y", "\x00"])
patterns = st.lists(pattern_words, max_size=8).map(".".join) | nasty_text | json_values
fields = st.fixed_dictionaries(
    {},
    optional={
        "op": st.sampled_from(["subscribe", "unsubscribe", "Subscribe", ""]) | json_values,
        "subscriber": st.sampled_from(["s1", "s2", "x" * 17]) | nasty_text | json_values,
        "pattern": patterns,
        "ts": timestamps,
        "extra": json_values,
    },
)


def as_json(value: object, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True).encode("utf-8", "surrogatepass")


json_events = st.builds(as_json, fields | json_values, st.booleans())


@st.composite
def mutated(draw: st.DrawFn, events: st.SearchStrategy[bytes]) -> bytes:
    """A valid-looking event cut, spliced or with bytes flipped: the almost-right input parsers get wrong."""
    raw = draw(events)
    at = draw(st.integers(min_value=0, max_value=len(raw)))
    how = draw(st.sampled_from(["cut", "insert", "replace"]))
    junk = draw(st.binary(min_size=1, max_size=4))
    if how == "cut":
        return raw[:at]
    if how == "insert":
        return raw[:at] + junk + raw[at:]
    return raw[:at] + junk + raw[at + len(junk) :]


raw_events = st.none() | st.binary(max_size=200) | json_events | mutated(json_events)


def check_outcome(outcome: Outcome, validator: Validator) -> None:
    """Exactly one verdict; a rejection has a documented reason and a detail; an event is valid."""
    assert (outcome.event is None) != (outcome.rejection is None)
    if outcome.rejection is not None:
        assert outcome.rejection.reason in PARSE_REASONS, outcome.rejection
        assert outcome.rejection.detail
        return
    event = outcome.event
    assert event is not None
    validator.validate_subscriber(event.subscriber)
    assert len(validator.validate_pattern(event.pattern)) == event.pattern_word_count
    assert 0 <= event.ts_millis <= MAX_TS_MILLIS
    assert event.change_id == outcome.received.change_id


# -- the event parser --------------------------------------------------------------------------------


def test_the_documented_reasons() -> None:
    """PARSE_REASONS: the event-level codes plus the validator's; REJECT_REASONS adds the per-batch limits.

    The concepts page lists every one of them (its table of reason codes: the rejects table's reason column).
    """
    assert EVENT_REASONS | {error.reason for error in SUBSCRIPTION_REJECT_ERRORS} == PARSE_REASONS
    assert (
        PARSE_REASONS | {"too_many_subscriptions", "match_cost_exceeded", "subscription_table_full"} == REJECT_REASONS
    )
    page = REASONS_PAGE.read_text(encoding="utf-8")
    assert [reason for reason in sorted(REJECT_REASONS) if f"`{reason}`" not in page] == []


@settings(max_examples=400, deadline=None)
@given(raw_events, st.sampled_from(VALIDATORS), st.integers(min_value=0, max_value=2**40))
@example(b'{"op": "subscribe", "subscriber": "s1", "pattern": "a", "ts": ' + b"1" * 5000 + b"}", VALIDATORS[0], 0)
@example(b"[" * 3000 + b"]" * 3000, VALIDATORS[0], 0)
@example(b'{"op": "subscribe", "subscriber": "s1", "pattern": "a", "ts": 1e999}', VALIDATORS[0], 0)
@example(
    b'{"op": "subscribe", "subscriber": "s1", "pattern": "a", "ts": "0001-01-01T00:00:00+23:59"}', VALIDATORS[0], 0
)
@example(b'{"op": "subscribe", "subscriber": "\\ud800", "pattern": "\\udfff", "ts": 1}', VALIDATORS[1], 0)
def test_no_event_crashes_the_parser(raw: bytes | None, validator: Validator, offset: int) -> None:
    try:
        parse_event(raw, "kafka:t:000000:00000000000000000000", validator, max_event_bytes=MAX_EVENT_BYTES)
    except EventRejected as rejection:
        assert rejection.reason in PARSE_REASONS
    outcome = judge(kafka_received("t", 0, offset, raw), validator, max_event_bytes=MAX_EVENT_BYTES)
    check_outcome(outcome, validator)


# -- the import-file reader ------------------------------------------------------------------------

cells = nasty_text | st.sampled_from(
    ["subscribe", "unsubscribe", "s1", "a.*", "1000", "2026-01-05T09:00:00Z", "9" * 5000, ""]
)
headers = st.permutations(FIELDS).map(list) | st.lists(st.sampled_from([*FIELDS, "extra", ""]), max_size=6)


@st.composite
def csv_files(draw: st.DrawFn) -> bytes:
    """CSV text, joined by hand (so quoting can be wrong) or by csv.writer, sometimes with a BOM or bad bytes."""
    header = draw(headers)
    rows = draw(st.lists(st.lists(cells, max_size=6), max_size=6))
    if draw(st.booleans()):
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, lineterminator=draw(st.sampled_from(["\r\n", "\n", "\r"])))
        writer.writerow(header)
        writer.writerows(rows)
        text = buffer.getvalue()
    else:
        separator = draw(st.sampled_from(["\n", "\r\n", "\r", "\u2028"]))
        text = separator.join(",".join(row) for row in [header, *rows])
    content = ("\ufeff" if draw(st.booleans()) else "") + text
    encoded = content.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        encoded += draw(st.binary(max_size=3))
    return encoded


@st.composite
def jsonl_files(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.one_of(json_events, mutated(json_events), st.binary(max_size=30)), max_size=6))
    return draw(st.sampled_from([b"\n", b"\r\n", b"\r"])).join(lines)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    # Module-scoped: Hypothesis runs many examples per test function, and a function-scoped tmp_path is not reset.
    with tempfile.TemporaryDirectory(prefix="subscription-fuzz-") as folder:
        yield Path(folder)


def check_import(path: Path, validator: Validator) -> list[Outcome] | None:
    """The reader's verdict on ``path``: None for a file refused whole, else the checked outcomes."""
    try:
        digest, outcomes = read_import_file(path, validator, max_event_bytes=MAX_EVENT_BYTES)
    except ImportFileError as refused:
        assert str(refused)
        return None
    lines = [outcome.received.import_line or 0 for outcome in outcomes]
    assert lines == sorted(set(lines)) and all(line >= 1 for line in lines)
    assert len({outcome.received.change_id for outcome in outcomes}) == len(outcomes)
    for outcome in outcomes:
        assert outcome.received.source == SOURCE_IMPORT and digest[:20] in outcome.received.change_id
        check_outcome(outcome, validator)
    return outcomes


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(csv_files(), st.binary(max_size=200)), validator=st.sampled_from(VALIDATORS))
@example(content=b"op,subscriber,pattern,ts\nsubscribe,s1,a," + b"9" * 5000 + b"\n", validator=VALIDATORS[0])
@example(content=b'op,subscriber,pattern,ts\nsubscribe,s1,"' + b"a" * 140_000 + b'",1\n', validator=VALIDATORS[0])
@example(content=b"op,subscriber,pattern,ts\nsubscribe,s1,a\rb,1\n", validator=VALIDATORS[0])
@example(content=b"op,subscriber,pattern,ts\n\x00,\x00,\x00,\x00\n", validator=VALIDATORS[0])
def test_no_csv_file_crashes_the_reader(content: bytes, validator: Validator, scratch: Path) -> None:
    path = scratch / "fuzz.csv"
    path.write_bytes(content)
    check_import(path, validator)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(jsonl_files(), st.binary(max_size=200)), validator=st.sampled_from(VALIDATORS))
def test_no_jsonl_file_crashes_the_reader(content: bytes, validator: Validator, scratch: Path) -> None:
    path = scratch / "fuzz.jsonl"
    path.write_bytes(content)
    outcomes = check_import(path, validator)
    assert outcomes is not None  # a JSON-lines file is never refused whole: each line is judged


#: Field text csv.writer can write and the reader must give back unchanged: anything but lone surrogates.
any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.permutations(FIELDS),
    rows=st.lists(
        st.tuples(
            st.sampled_from(["subscribe", "unsubscribe"]),
            any_text.filter(bool),
            any_text,
            st.integers(min_value=0, max_value=MAX_TS_MILLIS),
        ),
        max_size=8,
    ),
)
def test_csv_writer_output_reads_back_field_for_field(
    header: tuple[str, ...], rows: list[tuple[str, str, str, int]], scratch: Path
) -> None:
    """csv.writer's own dialect (its "\r\n" line terminator: with "\n" it leaves a bare "\r" unquoted, which every
    CSV reader, the csv module's included, takes for a line break)."""
    validator = Validator(limits=Limits(max_pattern_words=32, max_hash_words=32, max_pattern_bytes=255))
    path = scratch / "written.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for op, subscriber, pattern, ts in rows:
            row = {"op": op, "subscriber": subscriber, "pattern": pattern, "ts": str(ts)}
            writer.writerow([row[column] for column in header])
    outcomes = check_import(path, validator)
    assert outcomes is not None
    assert [
        (o.event.op.value, o.event.subscriber, o.event.pattern, o.event.ts_millis) if o.event else o.rejection
        for o in outcomes
    ] == rows


def test_overlong_numbers_are_rejects_not_crashes() -> None:
    """What the fuzz found: int() refuses more than 4,300 digits with a ValueError, in JSON and in a CSV ts."""
    huge = b'{"op": "subscribe", "subscriber": "s1", "pattern": "a", "ts": ' + b"1" * 5000 + b"}"
    with pytest.raises(EventRejected) as rejected:
        parse_event(huge, "kafka:t:000000:00000000000000000000", VALIDATORS[0], max_event_bytes=MAX_EVENT_BYTES)
    assert rejected.value.reason == "malformed_json" and "digits" in rejected.value.detail
    assert parse_ts("0" * 5000 + "1000", digits_are_millis=True) == 1000
    with pytest.raises(EventRejected, match="5000 digits") as rejected:
        parse_ts("9" * 5000, digits_are_millis=True)
    assert rejected.value.reason == "invalid_ts"

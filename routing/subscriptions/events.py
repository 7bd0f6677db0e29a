"""Subscription change events: parsing, validation, change ids and import files.

Pure Python (no Spark), so the rules are unit-testable and the Spark job, the
bulk import and the plain-Python model all apply exactly the same ones.

Event format (one Kafka message value, or one JSON-lines line)::

    {"op": "subscribe" | "unsubscribe", "subscriber": "...", "pattern": "...", "ts": ...}

``ts`` is either an integer of epoch milliseconds, or an ISO-8601 string with
an explicit UTC offset (``2026-11-21T23:40:00.125Z``, ``...+01:00``). Both
normalise to epoch milliseconds in ``[0, 9999-12-31T23:59:59.999Z]``. Naive
timestamps (no offset) are ambiguous and sub-millisecond digits would be
silently lost, so both are rejected. Floats and booleans are rejected. In CSV
import files every cell is text, so there a ``ts`` of only ASCII digits is
epoch milliseconds. Unknown extra fields are ignored (forward compatibility).

An event may also carry ``"idempotency_key"``: any non-empty string naming the
change, so that copies of it (a producer's retry) are recognisably one change
(see change ids). ``python -m routing subscribe``/``unsubscribe`` set it
(:mod:`routing.subscriptions.publish`); events without it read as before.

Checks run in a fixed order, so each bad event gets one deterministic reason:
size, emptiness, UTF-8 + JSON, object, ``op``, ``subscriber``, ``pattern``,
``ts``, ``idempotency_key`` (when present), then, for a subscribe, the
``[acl]`` rules the validator carries (``forbidden_pattern``; an unsubscribe is
always allowed). Reason codes are
the :class:`~routing.errors.TopicError` ``reason`` where the foundation's
:class:`~routing.validation.Validator` rejected a field, plus the event-level
codes below.

Change ids are deterministic, so a re-run produces the same ids and re-applying
a change is recognisably a no-op:

* Kafka: ``kafka:<topic>:<partition, 6 digits>:<offset, 20 digits>``;
* import: ``import:<first 20 hex of the file's SHA-256>:<line, 12 digits>``;
* an event with an ``idempotency_key``, wherever it arrived: ``key:<first 40 hex
  of the key's SHA-256>``. Every copy of the change has this id, whatever its
  offset or ``ts``, and an event whose change id equals the row's is a no-op
  (:mod:`routing.subscriptions.model`, step 3): a retried publish changes nothing.

Zero padding makes string order equal numeric order, so when two events carry
the same ``ts`` the later offset of a partition wins the tie.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import enum
import hashlib
import io
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from routing import grammar
from routing.errors import SUBSCRIPTION_REJECT_ERRORS, TopicError
from routing.topic import has_wildcard
from routing.validation import Validator

# -- reason codes (beyond TopicError.reason) ---------------------------------

EMPTY_EVENT = "empty_event"
EVENT_TOO_LARGE = "event_too_large"
MALFORMED_JSON = "malformed_json"
MALFORMED_CSV = "malformed_csv"
NOT_AN_OBJECT = "not_an_object"
MISSING_FIELD = "missing_field"
INVALID_FIELD_TYPE = "invalid_field_type"
UNKNOWN_OP = "unknown_op"
INVALID_TS = "invalid_ts"
#: The limits decided per batch, not per event (:data:`routing.grammar.HOLDING_RULES`): a subscriber past
#: ``max_subscriptions_per_subscriber`` (:class:`routing.errors.TooManySubscriptionsError`), past
#: ``max_match_cost_per_subscriber`` (:class:`routing.errors.MatchCostError`), or a table already holding
#: ``max_subscriptions_per_table`` active pairs.
TOO_MANY_SUBSCRIPTIONS = grammar.TOO_MANY_SUBSCRIPTIONS
MATCH_COST_EXCEEDED = grammar.MATCH_COST_EXCEEDED
SUBSCRIPTION_TABLE_FULL = grammar.SUBSCRIPTION_TABLE_FULL

EVENT_REASONS = frozenset(
    {
        EMPTY_EVENT,
        EVENT_TOO_LARGE,
        MALFORMED_JSON,
        MALFORMED_CSV,
        NOT_AN_OBJECT,
        MISSING_FIELD,
        INVALID_FIELD_TYPE,
        UNKNOWN_OP,
        INVALID_TS,
    }
)
#: Every reason one event can be rejected for on its own (:func:`judge`, :func:`read_import_file`): the event-level
#: codes and the validator's (:data:`routing.errors.SUBSCRIPTION_REJECT_ERRORS`).
PARSE_REASONS = EVENT_REASONS | {error.reason for error in SUBSCRIPTION_REJECT_ERRORS}
#: The reasons only a batch decided against the table can give: an activation a limit refused.
LIMIT_REASONS = (TOO_MANY_SUBSCRIPTIONS, MATCH_COST_EXCEEDED, SUBSCRIPTION_TABLE_FULL)
#: Every reason the rejects table records: those, and the limits decided per batch.
REJECT_REASONS = PARSE_REASONS | set(LIMIT_REASONS)

FIELDS = ("op", "subscriber", "pattern", "ts")
#: Optional field naming one change: copies of it get one change id (:func:`keyed_change_id`).
IDEMPOTENCY_KEY = "idempotency_key"

#: Largest accepted ``ts``: 9999-12-31T23:59:59.999Z, the last instant Spark and Python both represent.
MAX_TS_MILLIS = 253_402_300_799_999

# -- what applying a valid event did (summary counters and the model use the same names) --

SUBSCRIBED = "subscribed"  # a new or inactive row became active
UNSUBSCRIBED = "unsubscribed"  # an active row became inactive (soft delete)
REFRESHED = "refreshed"  # subscribe to an already active row: newer ts/change id recorded
TOMBSTONED = "tombstoned"  # unsubscribe of an absent/inactive row: recorded so older subscribes stay dead
STALE = "stale"  # not newer than the row (includes re-applying the same change): no-op
SUPERSEDED = "superseded"  # a newer event for the same row in the same batch won: no-op
APPLIED_KINDS = (SUBSCRIBED, UNSUBSCRIBED, REFRESHED, TOMBSTONED)
NOOP_KINDS = (STALE, SUPERSEDED)

SOURCE_KAFKA = "kafka"
SOURCE_IMPORT = "import"


class Op(enum.Enum):
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"


class EventRejected(ValueError):
    """An event that cannot be applied; ``reason`` is the code the rejects table records."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{detail} [reason={reason}]")

    @classmethod
    def from_topic_error(cls, error: TopicError) -> EventRejected:
        return cls(error.reason, str(error))


@dataclasses.dataclass(frozen=True)
class ChangeEvent:
    """One valid change. Invariant: fields passed the validator that built it."""

    change_id: str
    op: Op
    subscriber: str
    pattern: str
    ts_millis: int
    #: Words in the pattern and whether any is ``*``/``#``: stored so readers need not re-parse.
    pattern_word_count: int
    has_wildcard: bool

    @property
    def order(self) -> tuple[int, str]:
        """Last writer wins by this key: the event's time, ties broken by change id."""
        return (self.ts_millis, self.change_id)


@dataclasses.dataclass(frozen=True)
class Received:
    """An event as it arrived, with where it came from (for change ids and the rejects table)."""

    change_id: str
    source: str
    raw: bytes | None
    kafka_topic: str | None = None
    kafka_partition: int | None = None
    kafka_offset: int | None = None
    import_file: str | None = None
    import_line: int | None = None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A received event and its verdict: exactly one of ``event`` and ``rejection`` is set."""

    received: Received
    event: ChangeEvent | None = None
    rejection: EventRejected | None = None


# -- change ids ---------------------------------------------------------------


def kafka_change_id(topic: str, partition: int, offset: int) -> str:
    if partition < 0 or offset < 0:
        raise ValueError(f"Kafka coordinates must be non-negative, got partition={partition} offset={offset}")
    return f"kafka:{topic}:{partition:06d}:{offset:020d}"


def import_change_id(content_sha256: str, line: int) -> str:
    if line < 1:
        raise ValueError(f"import line numbers start at 1, got {line}")
    return f"import:{content_sha256[:20]}:{line:012d}"


def keyed_change_id(idempotency_key: str) -> str:
    """The change id of an event carrying ``idempotency_key`` (hashed: bounded, and any text is safe in it)."""
    digest = hashlib.sha256(idempotency_key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"key:{digest[:40]}"


def kafka_received(topic: str, partition: int, offset: int, raw: bytes | None) -> Received:
    return Received(
        change_id=kafka_change_id(topic, partition, offset),
        source=SOURCE_KAFKA,
        raw=raw,
        kafka_topic=topic,
        kafka_partition=partition,
        kafka_offset=offset,
    )


# -- field validation -----------------------------------------------------------


def parse_ts(value: object, *, digits_are_millis: bool = False) -> int:
    """Epoch milliseconds from an int or an ISO-8601 string with an offset (see module doc)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise EventRejected(
            INVALID_TS, f"ts must be epoch milliseconds (integer) or an ISO-8601 string, got {_describe(value)}"
        )
    if isinstance(value, str) and digits_are_millis and value.isascii() and value.isdigit():
        digits = value.lstrip("0")
        if len(digits) > len(str(MAX_TS_MILLIS)):  # never int() it: past 4,300 digits int() raises ValueError
            raise EventRejected(
                INVALID_TS, f"ts of {len(digits)} digits is outside [0, {MAX_TS_MILLIS}] epoch milliseconds"
            )
        value = int(digits or "0")
    if isinstance(value, int):
        millis = value
    else:
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            raise EventRejected(INVALID_TS, f"ts {value[:64]!r} is not an ISO-8601 timestamp") from None
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise EventRejected(INVALID_TS, f"ts {value[:64]!r} has no UTC offset (add 'Z' or '+hh:mm')")
        if moment.microsecond % 1000:
            raise EventRejected(INVALID_TS, f"ts {value[:64]!r} is more precise than a millisecond")
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        delta = moment - epoch
        millis = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if not 0 <= millis <= MAX_TS_MILLIS:
        raise EventRejected(INVALID_TS, f"ts {millis} is outside [0, {MAX_TS_MILLIS}] epoch milliseconds")
    return millis


def _describe(value: object) -> str:
    shown = repr(value)
    if len(shown) > 64:
        shown = shown[:64] + "..."
    return f"{type(value).__name__} {shown}"


def _text_field(fields: Mapping[str, Any], name: str) -> str:
    value = fields.get(name)
    if value is None:
        raise EventRejected(MISSING_FIELD, f"field {name!r} is missing or null")
    if not isinstance(value, str):
        raise EventRejected(INVALID_FIELD_TYPE, f"field {name!r} must be a string, got {_describe(value)}")
    return value


def event_from_fields(
    fields: Mapping[str, Any], change_id: str, validator: Validator, *, digits_are_millis: bool = False
) -> ChangeEvent:
    """Validate decoded fields (JSON object or CSV record) into a :class:`ChangeEvent`."""
    op_text = _text_field(fields, "op")
    try:
        op = Op(op_text)
    except ValueError:
        known = ", ".join(repr(op.value) for op in Op)
        raise EventRejected(UNKNOWN_OP, f"op {op_text[:64]!r} is not one of {known}") from None
    subscriber = _text_field(fields, "subscriber")
    pattern = _text_field(fields, "pattern")
    try:
        validator.validate_subscriber(subscriber)
        words = validator.validate_pattern(pattern)
    except TopicError as error:
        raise EventRejected.from_topic_error(error) from None
    if fields.get("ts") is None:
        raise EventRejected(MISSING_FIELD, "field 'ts' is missing or null")
    ts_millis = parse_ts(fields["ts"], digits_are_millis=digits_are_millis)
    idempotency_key = fields.get(IDEMPOTENCY_KEY)
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise EventRejected(
                INVALID_FIELD_TYPE,
                f"field {IDEMPOTENCY_KEY!r} must be a non-empty string, got {_describe(idempotency_key)}",
            )
        change_id = keyed_change_id(idempotency_key)
    if op is Op.SUBSCRIBE:
        try:
            validator.check_allowed(subscriber, pattern)
        except TopicError as error:
            raise EventRejected.from_topic_error(error) from None
    return ChangeEvent(
        change_id=change_id,
        op=op,
        subscriber=subscriber,
        pattern=pattern,
        ts_millis=ts_millis,
        pattern_word_count=len(words),
        has_wildcard=has_wildcard(words),
    )


def parse_event(raw: bytes | None, change_id: str, validator: Validator, *, max_event_bytes: int) -> ChangeEvent:
    """One JSON event, as bytes off the wire, validated; raises :class:`EventRejected`."""
    if raw is not None and len(raw) > max_event_bytes:
        raise EventRejected(
            EVENT_TOO_LARGE, f"event is {len(raw)} bytes (limit subscriptions.max_event_bytes={max_event_bytes})"
        )
    if raw is None or not raw.strip():
        raise EventRejected(EMPTY_EVENT, "event is empty" if raw is not None else "event has no value (null)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise EventRejected(MALFORMED_JSON, f"event is not UTF-8 ({error.reason} at byte {error.start})") from None
    try:
        fields = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise EventRejected(MALFORMED_JSON, f"event is not valid JSON: {error}") from None
    except ValueError:  # valid JSON, but an integer past int()'s 4,300 digits: no field of an event has one
        raise EventRejected(MALFORMED_JSON, "event holds an integer of more digits than can be read") from None
    if not isinstance(fields, dict):
        raise EventRejected(NOT_AN_OBJECT, f"event must be a JSON object, got {type(fields).__name__}")
    return event_from_fields(fields, change_id, validator)


def judge(received: Received, validator: Validator, *, max_event_bytes: int) -> Outcome:
    """The verdict on one received JSON event; never raises for bad input."""
    try:
        event = parse_event(received.raw, received.change_id, validator, max_event_bytes=max_event_bytes)
    except EventRejected as rejection:
        return Outcome(received, rejection=rejection)
    return Outcome(received, event=event)


# -- import files ---------------------------------------------------------------


class ImportFileError(ValueError):
    """An import file that cannot be read at all (as opposed to bad lines, which are rejected)."""


def file_sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def import_format(path: str | os.PathLike[str]) -> str:
    """``csv`` or ``jsonl``, from the file name."""
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".json", ".jsonl", ".ndjson"):
        return "jsonl"
    raise ImportFileError(f"import file {os.fspath(path)!r}: unknown format {suffix!r} (use .csv, .json, .jsonl)")


#: The byte order mark some editors write first; a JSON-lines import drops it, as CSV does.
UTF8_BOM = b"\xef\xbb\xbf"

#: Bytes of one import file (``subscriptions.max_import_bytes``'s default): read whole, one outcome per line.
DEFAULT_MAX_IMPORT_BYTES = 64 * 1024 * 1024


def _read_bytes(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The file's bytes, refused past ``max_bytes`` without reading more than one byte past it."""
    try:
        with Path(path).open("rb") as file:
            content = file.read(max_bytes + 1)
    except OSError as error:
        raise ImportFileError(f"import file {os.fspath(path)!r} cannot be read: {error}") from None
    if len(content) > max_bytes:
        raise ImportFileError(
            f"import file {os.fspath(path)!r} is over subscriptions.max_import_bytes={max_bytes} bytes; "
            "split it, or raise the limit"
        )
    return content


def read_import_file(
    path: str | os.PathLike[str],
    validator: Validator,
    *,
    max_event_bytes: int,
    max_import_bytes: int = DEFAULT_MAX_IMPORT_BYTES,
    allow_pairs: bool = False,
) -> tuple[str, list[Outcome]]:
    """(content SHA-256, one outcome per event line) of a CSV or JSON-lines import file.

    The one reader of import files: the refresh job's ``--import`` and ``python -m routing match``.
    At most ``max_import_bytes`` (:class:`ImportFileError` past it). JSON lines: every physical line is one
    event (a blank line is an ``empty_event`` reject; a leading byte order mark is dropped). CSV: a header
    naming ``op,subscriber,pattern,ts`` (any order, each once, extra columns ignored), then one record per
    line; a quoted field may span lines and then the record's line number is its first line. Lines end only
    where CSV says (``\r``, ``\n``, ``\r\n``, as the csv module reads a file opened with ``newline=''``):
    Unicode line breaks such as U+2028 are text, and line numbers are physical lines as the csv module
    counts them. With ``allow_pairs`` (the CLI only) a CSV whose header names neither ``op`` nor ``ts`` but
    ``pattern,subscriber`` is a subscription list: every record is a subscribe at ``ts`` 0, older than any
    dated event. A header naming ``op`` or ``ts`` is an import file's and must name all
    four, whoever reads it.
    """
    kind = import_format(path)
    validator = validator.for_batch()  # a file is one batch: one ACL budget
    content = _read_bytes(path, max_import_bytes)
    digest = file_sha256(content)
    name = os.fspath(path)
    if kind == "jsonl":
        content = content.removeprefix(UTF8_BOM)  # as CSV's utf-8-sig does: an editor's mark, not line 1's text
        outcomes = [
            judge(
                Received(
                    import_change_id(digest, number),
                    SOURCE_IMPORT,
                    line.rstrip(b"\r\n"),
                    import_file=name,
                    import_line=number,
                ),
                validator,
                max_event_bytes=max_event_bytes,
            )
            for number, line in enumerate(content.splitlines(keepends=True), start=1)
        ]
        return digest, outcomes
    header, pairs, records = _csv_records(name, content, allow_pairs=allow_pairs)
    return digest, [
        _csv_outcome(name, digest, line, raw, record, header, pairs, validator, max_event_bytes)
        for line, raw, record in records
    ]


#: Header of a subscription list (``allow_pairs``): one subscribe per record.
PAIR_FIELDS = ("pattern", "subscriber")


def _csv_records(
    name: str, content: bytes, *, allow_pairs: bool
) -> tuple[list[str], bool, Iterator[tuple[int, bytes, list[str] | csv.Error]]]:
    """(header, whether it is a subscription list, then lazily per record: first line, raw text, fields or error)."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ImportFileError(f"import file {name!r} is not UTF-8 ({error.reason} at byte {error.start})") from None
    # Lines as the csv module reads a file opened with newline='': they end only at \r, \n or \r\n, never at
    # the other characters str.splitlines breaks on (U+2028, NEL, VT, FF, FS-RS), which are field text to CSV.
    lines = io.StringIO(text, newline="")
    consumed: list[str] = []

    def feed() -> Iterator[str]:
        # Remember the physical lines of the current record, so the reject keeps its raw text.
        for line in lines:
            consumed.append(line)
            yield line

    reader = csv.reader(feed(), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise ImportFileError(f"import file {name!r} is empty (a CSV import needs a header)") from None
    except csv.Error as error:
        raise ImportFileError(f"import file {name!r}: unreadable CSV header: {error}") from None
    named = set(header)
    twice = sorted({field for field in header if header.count(field) > 1})
    if twice:
        raise ImportFileError(f"import file {name!r}: CSV header names column(s) {', '.join(twice)} more than once")
    # A header naming op or ts is an import file's, whoever reads it; only one naming neither can be a list.
    could_be_pairs = allow_pairs and not named & {"op", "ts"}
    pairs = could_be_pairs and set(PAIR_FIELDS) <= named
    missing = [field for field in FIELDS if field not in named]
    if missing and not pairs:
        also = f" (or name {','.join(PAIR_FIELDS)}: a subscription list)" if could_be_pairs else ""
        raise ImportFileError(f"import file {name!r}: CSV header lacks column(s) {', '.join(missing)}{also}")
    consumed.clear()

    def records() -> Iterator[tuple[int, bytes, list[str] | csv.Error]]:
        first_line = reader.line_num + 1
        while True:
            record: list[str] | csv.Error
            try:
                record = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                record = error
            raw = "".join(consumed).rstrip("\r\n").encode("utf-8")
            consumed.clear()
            line, first_line = first_line, reader.line_num + 1
            yield line, raw, record

    return header, pairs, records()


def _csv_outcome(
    name: str,
    digest: str,
    line: int,
    raw: bytes,
    record: list[str] | csv.Error,
    header: list[str],
    pairs: bool,
    validator: Validator,
    max_event_bytes: int,
) -> Outcome:
    received = Received(import_change_id(digest, line), SOURCE_IMPORT, raw, import_file=name, import_line=line)
    try:
        if isinstance(record, csv.Error):
            raise EventRejected(MALFORMED_CSV, f"unreadable CSV record: {record}")
        if len(raw) > max_event_bytes:
            raise EventRejected(
                EVENT_TOO_LARGE,
                f"event is {len(raw)} bytes (limit subscriptions.max_event_bytes={max_event_bytes})",
            )
        if not record or (len(record) == 1 and not record[0].strip()):
            raise EventRejected(EMPTY_EVENT, "CSV record is empty")
        if len(record) != len(header):
            raise EventRejected(MALFORMED_CSV, f"CSV record has {len(record)} fields, the header has {len(header)}")
        fields: dict[str, Any] = {column: value for column, value in zip(header, record, strict=True)}
        if pairs:
            fields.update(op=Op.SUBSCRIBE.value, ts=0)
        for optional in ("ts", IDEMPOTENCY_KEY):  # an empty CSV cell is an absent value
            if fields.get(optional) == "":
                fields[optional] = None
        event = event_from_fields(fields, received.change_id, validator, digits_are_millis=True)
    except EventRejected as rejection:
        return Outcome(received, rejection=rejection)
    return Outcome(received, event=event)

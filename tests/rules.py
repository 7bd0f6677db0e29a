"""The key grammar's one table of rules, ``tests/rules.tsv``: what every projection of :mod:`routing.grammar` must give.

A line with exactly four TABs is a case ``subject TAB text TAB limits TAB amqp TAB strict`` (the file's top says
what each field holds); every other line is a comment. Malformed case lines fail loudly, so a typo can never drop
a case silently.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from routing.limits import DEFAULT_LIMITS, Limits
from routing.validation import Policy

PATH = Path(__file__).with_name("rules.tsv")
SUBJECTS = ("key", "payload", "headers", "pattern", "subscriber")
#: Subjects whose text is bytes (off the wire); the others are text.
BYTE_SUBJECTS = ("key", "payload")
NULL = r"\N"
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[\\tnr])|\\")
_SIMPLE = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


@dataclasses.dataclass(frozen=True)
class Case:
    line: int
    subject: str
    #: Bytes for a key or payload, (key, value) pairs for headers, ``str`` for a pattern or subscriber; ``None`` is
    #: no value.
    value: bytes | str | list[tuple[str, bytes | None]] | None
    limits: Limits
    #: Policy -> ``None`` (accepted) or the reason code of the first rule broken.
    expected: dict[Policy, str | None]

    def __str__(self) -> str:
        return f"rules.tsv:{self.line} {self.subject} {self.value!r}"


def unescape(field: str, *, as_bytes: bool) -> bytes | str:
    """A field's value: ``\\xHH`` is a byte when ``as_bytes`` (a code point otherwise), ``\\uHHHH`` a code point."""
    pieces: list[bytes] = []
    position = 0
    for escape in _ESCAPE.finditer(field):
        pieces.append(field[position : escape.start()].encode("utf-8"))
        code = escape.group(1)
        if code is None:
            raise ValueError(f"unknown escape at column {escape.start() + 1} of {field!r}")
        if code in _SIMPLE:
            pieces.append(_SIMPLE[code].encode("utf-8"))
        elif code[0] == "x" and as_bytes:
            pieces.append(bytes([int(code[1:], 16)]))
        else:
            pieces.append(chr(int(code[1:], 16)).encode("utf-8", "surrogatepass"))
        position = escape.end()
    pieces.append(field[position:].encode("utf-8"))
    raw = b"".join(pieces)
    return raw if as_bytes else raw.decode("utf-8", "surrogatepass")


def parse_headers(field: str) -> list[tuple[str, bytes | None]]:
    """``key=value;key`` as (key, value) pairs: a key alone has no value (null); the empty field is no headers."""
    if field == "":
        return []
    headers: list[tuple[str, bytes | None]] = []
    for item in field.split(";"):
        key, equals, value = item.partition("=")
        text_key = unescape(key, as_bytes=False)
        assert isinstance(text_key, str)
        raw = unescape(value, as_bytes=True) if equals else None
        assert raw is None or isinstance(raw, bytes)
        headers.append((text_key, raw))
    return headers


def parse_limits(field: str) -> Limits:
    if field == "-":
        return DEFAULT_LIMITS
    changes: dict[str, int] = {}
    for item in field.split(","):
        name, equals, value = item.partition("=")
        if not equals or not value.isdigit():
            raise ValueError(f"not name=value: {item!r}")
        changes[name] = int(value)
    return DEFAULT_LIMITS.replace(**changes)


def load(path: Path = PATH) -> list[Case]:
    """Every case of the table, in file order."""
    cases: list[Case] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if "\t" not in line:
            continue
        fields = line.split("\t")
        try:
            if len(fields) != 5:
                raise ValueError("expected 'subject<TAB>text<TAB>limits<TAB>amqp<TAB>strict'")
            subject, text, limits, amqp, strict = fields
            if subject not in SUBJECTS:
                raise ValueError(f"unknown subject {subject!r} (known: {', '.join(SUBJECTS)})")
            value: bytes | str | list[tuple[str, bytes | None]] | None
            if text == NULL:
                value = None
            elif subject == "headers":
                value = parse_headers(text)
            else:
                value = unescape(text, as_bytes=subject in BYTE_SUBJECTS)
            expected = {Policy.AMQP: amqp, Policy.STRICT: strict}
            if any(not outcome for outcome in expected.values()):
                raise ValueError("an outcome is empty")
            cases.append(
                Case(
                    number,
                    subject,
                    value,
                    parse_limits(limits),
                    {policy: None if outcome == "ok" else outcome for policy, outcome in expected.items()},
                )
            )
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}: {line!r}") from None
    if not cases:
        raise ValueError(f"{path}: no cases")
    return cases


RULES = load()

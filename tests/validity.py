"""The topic grammar's one validity table, ``tests/validity.tsv``, which the Rust tests read too.

A line with exactly two TABs is a case ``pattern TAB key TAB true|false`` (an
empty field is the empty text); every other line is a comment. Malformed case
lines fail loudly, so a typo can never drop a case silently.
"""

from __future__ import annotations

from pathlib import Path

PATH = Path(__file__).with_name("validity.tsv")


def load(path: Path = PATH) -> list[tuple[str, str, bool]]:
    """Every ``(pattern, key, matches)`` case of the table, in file order."""
    cases: list[tuple[str, str, bool]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if "\t" not in line:
            continue
        fields = line.split("\t")
        if len(fields) != 3 or fields[2] not in ("true", "false"):
            raise ValueError(f"{path}:{number}: expected 'pattern<TAB>key<TAB>true|false', got {line!r}")
        cases.append((fields[0], fields[1], fields[2] == "true"))
    if not cases:
        raise ValueError(f"{path}: no cases")
    return cases


VALIDITY = load()

"""What the reference-page generators share: write a page, or with ``--check`` say in one line that it is stale.

Documentation tooling (docs/gen_settings.py, docs/gen_cli.py); the library never imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def stale(page: Path, render: Callable[[], str]) -> str | None:
    """The one-line complaint when ``page`` is not what ``render`` writes, else None."""
    current = page.read_text(encoding="utf-8") if page.exists() else ""
    return None if current == render() else f"{page} is stale: run `make docs`"


def main(argv: list[str] | None, *, description: str, page: Path, root: Path, render: Callable[[], str]) -> int:
    """``python docs/gen_<page>.py [--check]``: write ``page`` from ``render``, or exit 1 when it is stale."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is stale; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        complaint = stale(page, render)
        if complaint:
            print(complaint, file=sys.stderr)
            return 1
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(), encoding="utf-8")
    print(f"wrote {page.relative_to(root)}")
    return 0

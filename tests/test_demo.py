"""`python -m routing demo` routes the seed's opening example with every matcher."""

from __future__ import annotations

import subprocess
import sys

from routing.__main__ import run_demo

EXPECTED = {
    "forex.gbp": "2",
    "stock.nyse.ibm": "nobody",
    "forex.eur": "2",
    "forex.usd": "1, 2",
    "stock.nasdaq.msft": "3",
}
MATCHERS = [
    "NaiveMatcher",
    "InvertedBitmapMatcher",
    "OptimizedInvertedBitmapMatcher",
    "TrieMatcher",
    "CSTrieMatcher",
    "FrozenMatcher",
]


def test_demo_prints_who_receives_what_for_every_matcher() -> None:
    lines: list[str] = []
    assert run_demo(lines.append) == 0
    text = "\n".join(lines)
    for name in MATCHERS:
        block = text.split(f"{name}:\n", 1)[1].split("\n\n", 1)[0]
        got = {line.split("->")[0].strip(): line.split("->")[1].strip() for line in block.splitlines()}
        assert got == EXPECTED, name
    assert "MISMATCH" not in text


def test_demo_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "routing", "demo"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "forex.usd            -> 1, 2" in done.stdout

"""Why a routing key does or does not match a pattern: a word-by-word alignment.

Pure Python, no Spark and no native code: ``python -m routing explain`` and the
notebook use it to answer "why did (or didn't) this subscriber get that
message?".

Algorithm. A forward dynamic programme over states ``(i, j)`` = "the first
``i`` pattern words consumed exactly the first ``j`` key words", the same
recurrence as :func:`routing.topic.words_match`, but keeping one back-pointer
per reachable state so an alignment can be read back:

* a literal word at pattern position ``i`` moves ``(i, j) -> (i + 1, j + 1)``
  when it equals key word ``j``;
* ``*`` moves ``(i, j) -> (i + 1, j + 1)`` for any key word;
* ``#`` moves ``(i, j) -> (i + 1, j')`` for every ``j' >= j``. Of the
  predecessors of ``(i + 1, j')`` the one with the *largest* ``j`` is kept, so
  a ``#`` takes as few words as it can given the words before it. Read back
  from the end, that leaves the most words to the earliest ``#`` (greedy,
  leftmost first, like a regex). A running "latest reachable ``j``" makes a ``#`` row
  O(n), so the whole table is O(m * n) for m pattern words and n key words,
  never exponential however many ``#`` there are. The table itself is O(m * n)
  memory (4 bytes a cell), so it is bounded: past ``max_cells`` cells
  (:data:`MAX_CELLS`, ``--max-cells`` of ``python -m routing explain``) the
  explanation is refused with :class:`ExplainTooLarge` before anything is built.
  At the default limits (32 words each) a table is 1,089 cells.

The key matches iff ``(m, n)`` is reachable. If it is, the back-pointers give
the alignment: which key words each pattern word consumed. If not, the
explanation takes the reachable state that got furthest through the pattern
(largest ``i``, then largest ``j``), shows how the pattern got there, and says
for every key position where pattern word ``i`` could have started why it
failed there (literal differs, no key word left, pattern over with key words
left).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Sequence

from routing.topic import HASH, STAR, key_words, pattern_words

#: Wording for the kinds of pattern word (also used in the rendered text).
LITERAL = "literal"
ONE_WORD = "one word"
ANY_WORDS = "zero or more words"


def word_kind(word: str) -> str:
    """``*`` and ``#`` are wildcards only as whole words; anything else (``a*``) is a literal."""
    if word == STAR:
        return ONE_WORD
    if word == HASH:
        return ANY_WORDS
    return LITERAL


@dataclasses.dataclass(frozen=True)
class Step:
    """Pattern word ``pattern_index`` consumed key words ``[key_start, key_end)``.

    Invariant: ``key_end - key_start`` is 1 for a literal or ``*``, any ``>= 0`` for ``#``.
    """

    pattern_index: int
    pattern_word: str
    key_start: int
    key_end: int
    key_slice: tuple[str, ...]

    @property
    def kind(self) -> str:
        return word_kind(self.pattern_word)


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why pattern word ``pattern_index`` (``None``: the pattern had ended) failed at key word ``key_index``."""

    pattern_index: int | None
    key_index: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Explanation:
    pattern: str
    key: str
    pattern_words: tuple[str, ...]
    key_words: tuple[str, ...]
    matched: bool
    #: The whole alignment when ``matched``; else the furthest partial one.
    steps: tuple[Step, ...]
    #: Empty when ``matched``; else one entry per place the stuck pattern word was tried.
    failures: tuple[Failure, ...]

    def render(self) -> str:
        return render(self)


def _show(word: str) -> str:
    return repr(word)


def _failure_at(pattern: Sequence[str], key: Sequence[str], i: int, j: int) -> Failure:
    """Why no transition leaves reachable state ``(i, j)``, which is not the accepting state."""
    if i == len(pattern):
        rest = ".".join(key[j:])
        return Failure(None, j, f"the pattern ended but {len(key) - j} key word(s) are left: {rest!r}")
    word = pattern[i]
    # A '#' always moves on, so a stuck word is a literal or '*'; both need one more key word.
    if j == len(key):
        return Failure(i, j, f"pattern word {i + 1} {_show(word)} ({word_kind(word)}) needs a key word, none is left")
    return Failure(i, j, f"pattern word {i + 1} {_show(word)} differs from key word {j + 1} {_show(key[j])}")


#: Cells of the alignment table (pattern words + 1) x (key words + 1) an explanation may build: 16 MB.
MAX_CELLS = 4_000_000
#: An unreachable state in the table.
_NONE = -1


class ExplainTooLarge(ValueError):
    """The alignment table would have more than ``max_cells`` cells."""


def explain_words(
    pattern: Sequence[str],
    key: Sequence[str],
    *,
    pattern_text: str = "",
    key_text: str = "",
    max_cells: int = MAX_CELLS,
) -> Explanation:
    """The alignment (or the furthest failure) of pattern words against key words."""
    m, n = len(pattern), len(key)
    cells = (m + 1) * (n + 1)
    if cells > max_cells:
        raise ExplainTooLarge(
            f"{m} pattern words x {n} key words need a {cells:,}-cell alignment table, over the {max_cells:,} "
            "an explanation builds (--max-cells)"
        )
    # back[i][j]: the predecessor j of reachable state (i, j) (its i is i - 1); _NONE = unreachable.
    # State (0, 0) is the start and has itself as predecessor.
    back = [array("i", [_NONE]) * (n + 1) for _ in range(m + 1)]
    back[0][0] = 0
    for i, word in enumerate(pattern):
        row, nxt = back[i], back[i + 1]
        if word == HASH:
            latest = _NONE
            for j in range(n + 1):
                if row[j] != _NONE:
                    latest = j
                nxt[j] = latest
        else:
            for j in range(n):
                if row[j] != _NONE and (word == STAR or key[j] == word):
                    nxt[j + 1] = j
    matched = back[m][n] != _NONE
    if matched:
        end_i, end_j = m, n
    else:
        end_i = max(i for i in range(m + 1) if any(cell != _NONE for cell in back[i]))
        end_j = max(j for j in range(n + 1) if back[end_i][j] != _NONE)
    steps: list[Step] = []
    i, j = end_i, end_j
    while i > 0:
        start = back[i][j]
        assert start != _NONE  # every state on the path is reachable by construction
        steps.append(Step(i - 1, pattern[i - 1], start, j, tuple(key[start:j])))
        i, j = i - 1, start
    steps.reverse()
    failures: tuple[Failure, ...] = ()
    if not matched:
        failures = tuple(_failure_at(pattern, key, end_i, j) for j in range(n + 1) if back[end_i][j] != _NONE)
    return Explanation(pattern_text, key_text, tuple(pattern), tuple(key), matched, tuple(steps), failures)


def explain(pattern: str, key: str, *, max_cells: int = MAX_CELLS) -> Explanation:
    """Explain ``pattern`` against routing ``key`` (grammar checked, like every matcher)."""
    return explain_words(
        pattern_words(pattern), key_words(key), pattern_text=pattern, key_text=key, max_cells=max_cells
    )


def _consumed(step: Step) -> str:
    if not step.key_slice:
        return "nothing (zero words)"
    span = (
        f"key word {step.key_start + 1}"
        if len(step.key_slice) == 1
        else (f"key words {step.key_start + 1}-{step.key_end}")
    )
    return f"{span} {'.'.join(step.key_slice)!r}"


def render(explanation: Explanation) -> str:
    """Human-readable text: verdict, word lists, alignment table, and the failure if any."""
    e = explanation
    verdict = "MATCHES" if e.matched else "does NOT match"
    lines = [
        f"pattern {e.pattern!r} {verdict} key {e.key!r}",
        f"  pattern words ({len(e.pattern_words)}): {list(e.pattern_words)}",
        f"  key words ({len(e.key_words)}): {list(e.key_words)}",
    ]
    if e.steps:
        lines.append("  alignment:" if e.matched else "  furthest alignment:")
        for step in e.steps:
            lines.append(
                f"    {step.pattern_index + 1:>2}. {_show(step.pattern_word):<12} ({step.kind}) -> {_consumed(step)}"
            )
    elif e.matched:
        lines.append("  alignment: an empty pattern matches only the empty key")
    if not e.matched:
        lines.append("  fails because:")
        lines.extend(f"    - {failure.reason}" for failure in e.failures)
    return "\n".join(lines)

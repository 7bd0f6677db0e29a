"""Python faces of the Rust core (``routing._native``): the CS-trie, its snapshots and the frozen matcher.

=====================  =================================================================
``CSTrieMatcher``      the live lock-free trie; a :class:`~routing.matchers.base.Matcher`
``Snapshot``           an O(1), read-only, consistent view of a ``CSTrieMatcher``
``FrozenMatcher``      a compact immutable matcher frozen from a snapshot: bytes for a
                       Spark broadcast, ``match_batch`` for ``mapInArrow``
=====================  =================================================================

The wrappers add what the native classes leave out: the grammar checks of
:mod:`routing.topic` with the same exceptions as the pure-Python matchers
(non-``str`` -> ``TypeError``; a lone surrogate, which is not UTF-8 ->
``InvalidKeyError``/``InvalidPatternError``/``InvalidSubscriberError``; an empty
subscriber -> ``InvalidSubscriberError``), ``frozenset`` results, and pickling
of a ``FrozenMatcher`` through its bytes. Lookups call straight into Rust and
only fall back to the Python checks when the native argument conversion
fails, so the checks cost nothing on the hot path.

The native side releases the GIL around every trie operation, freeze,
(de)serialization and batch, so Python threads using these objects run in
parallel.

Bulk paths (:meth:`CSTrieMatcher.subscribe_many`, :meth:`~CSTrieMatcher.unsubscribe_many`,
:meth:`FrozenMatcher.from_arrow`) take (pattern, subscriber) pairs as two
row-aligned pyarrow string columns (``string``, ``large_string`` or
``string_view``; a ``ChunkedArray`` is combined first) and run with no Python
per row. They validate every row before applying any: a null, an empty
subscriber or (when ``limits`` are given) a row over the limits of
:mod:`routing.validation` fails the whole call with :class:`BulkRowError`,
whose ``rows`` lists every bad row as ``(row index, reason code, detail)``,
and nothing is applied. A bulk call on a live trie is **not** one atomic step
for concurrent observers: each row is its own linearizable
subscribe/unsubscribe, applied in row order, so a concurrent lookup or
snapshot may see any prefix of the rows; once the call returns, all are in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeAlias

from routing import _native
from routing._native import FORMAT_VERSION, BatchLimitError, BulkRowError, FrozenFormatError
from routing.topic import check_subscriber, key_words, pattern_words

if TYPE_CHECKING:
    import pyarrow as pa

    from routing.limits import Limits

    #: A pyarrow string column: ``string``, ``large_string`` or ``string_view``.
    StringColumn: TypeAlias = pa.Array | pa.ChunkedArray

__all__ = [
    "FORMAT_VERSION",
    "NATIVE_WRAPPERS",
    "PRIVATE_NATIVE",
    "BatchLimitError",
    "BulkRowError",
    "CSTrieMatcher",
    "DeltaBuilder",
    "FrozenFormatError",
    "FrozenHeader",
    "FrozenMatcher",
    "LayeredMatcher",
    "Snapshot",
]

#: Every public name of ``routing._native`` -> the name that exposes it here
#: (a wrapper class, or the same object re-exported).
NATIVE_WRAPPERS: dict[str, str] = {
    "CsTrie": "CSTrieMatcher",
    "Snapshot": "Snapshot",
    "FrozenMatcher": "FrozenMatcher",
    "LayeredMatcher": "LayeredMatcher",
    "DeltaBuilder": "DeltaBuilder",
    "FrozenFormatError": "FrozenFormatError",
    "BatchLimitError": "BatchLimitError",
    "BulkRowError": "BulkRowError",
    "FORMAT_VERSION": "FORMAT_VERSION",
}
#: Public names of ``routing._native`` deliberately not exposed (none so far).
PRIVATE_NATIVE: frozenset[str] = frozenset()


def _key_error(key: object, error: Exception) -> NoReturn:
    """Re-raise a failed native key conversion as the grammar error :mod:`routing.topic` gives."""
    key_words(key)
    raise error


def _checked_pair(pattern: object, subscriber: object) -> None:
    pattern_words(pattern)
    check_subscriber(subscriber)


#: What the native single-pair calls raise for a pair outside the grammar: a non-``str`` (``TypeError``), a
#: lone surrogate (``UnicodeEncodeError``, a ``ValueError``) or an empty subscriber id (``ValueError``).
_NATIVE_PAIR_ERRORS = (TypeError, ValueError)


def _pair_error(pattern: object, subscriber: object, error: Exception) -> NoReturn:
    """Re-raise a native refusal of a pair as the grammar error :mod:`routing.topic` gives."""
    _checked_pair(pattern, subscriber)
    raise error


def _column(values: StringColumn) -> pa.Array:
    """One contiguous array (chunks combined); the native side checks the type and the buffers."""
    import pyarrow as pa

    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _frozen_bytes(data: object) -> bytes:
    """``data`` as the ``bytes`` the native codec takes (:meth:`FrozenMatcher.from_bytes`, ``header``)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"frozen matcher data must be bytes, not {type(data).__name__}")
    return bytes(data)


def _row_limits(limits: Limits | None) -> tuple[int, int, int, int] | None:
    if limits is None:
        return None
    return (limits.max_pattern_bytes, limits.max_pattern_words, limits.max_hash_words, limits.max_subscriber_bytes)


class Snapshot:
    """A frozen, consistent view of a :class:`CSTrieMatcher` at one instant; taking it is O(1)."""

    __slots__ = ("_snapshot",)

    def __init__(self, snapshot: _native.Snapshot) -> None:
        self._snapshot = snapshot

    def lookup(self, key: str) -> frozenset[str]:
        try:
            return self._snapshot.lookup(key)
        except (TypeError, UnicodeEncodeError) as error:
            _key_error(key, error)

    def subscribers(self, pattern: str) -> frozenset[str]:
        """Subscribers of exactly ``pattern`` (its text, no wildcard matching)."""
        pattern_words(pattern)
        return self._snapshot.subscribers(pattern)

    def topics(self, subscriber: str) -> frozenset[str]:
        """Patterns held by ``subscriber``."""
        check_subscriber(subscriber)
        return self._snapshot.topics(subscriber)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._snapshot.subscriptions())

    def freeze(self) -> FrozenMatcher:
        return FrozenMatcher._wrap(self._snapshot.freeze())

    def __len__(self) -> int:
        return len(self._snapshot)

    def __repr__(self) -> str:
        return f"Snapshot(len={len(self)})"


class CSTrieMatcher:
    """The lock-free concurrent subscription trie (Rust), behind the matcher protocol.

    ``len()`` is exact when no update is in flight; for an atomic view of all
    pairs under concurrent updates use :meth:`snapshot`.
    """

    __slots__ = ("_trie",)

    def __init__(self) -> None:
        self._trie = _native.CsTrie()

    def subscribe(self, pattern: str, subscriber: str) -> None:
        # The native call checks the grammar (str, UTF-8, a non-empty subscriber) on its own; the Python
        # check, which costs as much as a subscribe, runs only to name what it refused.
        try:
            self._trie.subscribe(pattern, subscriber)
        except _NATIVE_PAIR_ERRORS as error:
            _pair_error(pattern, subscriber, error)

    def unsubscribe(self, pattern: str, subscriber: str) -> None:
        try:
            self._trie.unsubscribe(pattern, subscriber)
        except _NATIVE_PAIR_ERRORS as error:
            _pair_error(pattern, subscriber, error)

    def subscribe_many(self, patterns: StringColumn, subscribers: StringColumn, *, limits: Limits | None = None) -> int:
        """Subscribe every row of two row-aligned pyarrow string columns; returns how many pairs were new.

        Every row is validated first (see the module doc): any bad row raises
        :class:`BulkRowError` and nothing is applied. Not one atomic step for
        concurrent readers (they may see a prefix of the rows). Releases the GIL.
        """
        return self._trie.subscribe_many(_column(patterns), _column(subscribers), _row_limits(limits))

    def unsubscribe_many(
        self, patterns: StringColumn, subscribers: StringColumn, *, limits: Limits | None = None
    ) -> int:
        """Unsubscribe every row, like :meth:`subscribe_many`; returns how many pairs were present."""
        return self._trie.unsubscribe_many(_column(patterns), _column(subscribers), _row_limits(limits))

    def lookup(self, key: str) -> frozenset[str]:
        try:
            return self._trie.lookup(key)
        except (TypeError, UnicodeEncodeError) as error:
            _key_error(key, error)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._trie.subscriptions())

    def snapshot(self) -> Snapshot:
        return Snapshot(self._trie.snapshot())

    def freeze(self) -> FrozenMatcher:
        """The same as ``self.snapshot().freeze()``."""
        return FrozenMatcher._wrap(self._trie.freeze())

    def node_count(self) -> int:
        """Trie nodes currently reachable (1 when empty): unsubscribing everything prunes back to 1."""
        return self._trie.node_count()

    def __len__(self) -> int:
        return len(self._trie)

    def __repr__(self) -> str:
        return f"CSTrieMatcher(len={len(self)})"


class FrozenHeader(NamedTuple):
    """What the header of :meth:`FrozenMatcher.to_bytes` output declares (:meth:`FrozenMatcher.header`)."""

    pairs: int
    words: int
    subscribers: int
    nodes: int


class FrozenMatcher:
    """A compact immutable matcher for the data plane.

    ``FrozenMatcher(pairs)`` builds from (pattern, subscriber) pairs (grammar
    checked); usually it comes from :meth:`CSTrieMatcher.freeze`. Pickles as
    its :meth:`to_bytes` form, so a Spark broadcast ships the compact format.
    """

    __slots__ = ("_frozen",)

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        checked = list(pairs)
        for pattern, subscriber in checked:
            _checked_pair(pattern, subscriber)
        self._frozen = _native.FrozenMatcher.build(checked)

    @classmethod
    def _wrap(cls, frozen: _native.FrozenMatcher) -> FrozenMatcher:
        matcher = cls.__new__(cls)
        matcher._frozen = frozen
        return matcher

    @classmethod
    def from_arrow(
        cls, patterns: StringColumn, subscribers: StringColumn, *, limits: Limits | None = None
    ) -> FrozenMatcher:
        """Build from two row-aligned pyarrow string columns of pairs, with no Python per row.

        Duplicates are harmless. Every row is validated (see the module doc);
        any bad row raises :class:`BulkRowError`. Releases the GIL.
        """
        return cls._wrap(_native.FrozenMatcher.from_arrow(_column(patterns), _column(subscribers), _row_limits(limits)))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> FrozenMatcher:
        """Decode :meth:`to_bytes` output; anything else raises :class:`FrozenFormatError`."""
        return cls._wrap(_native.FrozenMatcher.from_bytes(_frozen_bytes(data)))

    @classmethod
    def open(cls, path: str | os.PathLike[str], offset: int = 0) -> FrozenMatcher:
        """Validate the matcher stored in the file at ``path`` from byte ``offset`` (a multiple of 8) on, and
        read it in place from a read-only shared mapping: every process that opens one file shares its pages,
        and loading costs one validation pass, not a copy or a rebuild. Releases the GIL. Bytes that are not an
        intact matcher raise :class:`FrozenFormatError`; a file that cannot be opened or mapped, ``OSError``."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, not {offset!r}")
        return cls._wrap(_native.FrozenMatcher.open(os.fspath(path), offset))

    @staticmethod
    def header(data: bytes | bytearray | memoryview) -> FrozenHeader:
        """The counts the header of :meth:`to_bytes` output declares, in O(1): the magic, the format version,
        the reserved fields and that the counts lay out exactly the bytes' length are checked, the checksum and
        the sections are not (bytes that pass may still fail :meth:`from_bytes`). For bytes already proven by a
        stronger digest, such as a snapshot file's SHA-256; anything else raises :class:`FrozenFormatError`."""
        return FrozenHeader(*_native.FrozenMatcher.header(_frozen_bytes(data)))

    def to_bytes(self) -> bytes:
        """The versioned, checksummed binary form (deterministic for equal contents): a copy of the matcher's
        memory, which is in that form already."""
        return self._frozen.to_bytes()

    @property
    def is_mapped(self) -> bool:
        """Whether the matcher is read from a mapped file (:meth:`open`) rather than its own heap copy."""
        return self._frozen.is_mapped

    def lookup(self, key: str) -> frozenset[str]:
        try:
            return self._frozen.lookup(key)
        except (TypeError, UnicodeEncodeError) as error:
            _key_error(key, error)

    def lookup_states(self, key: str) -> int:
        """The ``(node, key position)`` states a lookup of ``key`` visits: its matching work, as a count.

        ``limits.max_match_cost_per_subscriber`` bounds it (:func:`routing.topic.match_cost`).
        """
        try:
            return self._frozen.lookup_states(key)
        except (TypeError, UnicodeEncodeError) as error:
            _key_error(key, error)

    def match_batch(self, keys: pa.Array, max_rows: int | None = None) -> pa.ListArray:
        """Subscribers of every key of a ``string``/``large_string``/``string_view`` array.

        Returns a row-aligned ``list<string>`` array; a null key gives a null
        row. A key repeated in the batch is matched once while repeats pay (the native side stops
        de-duplicating a mostly-distinct batch and matches it row by row). ``max_rows`` (normally
        ``Limits.max_batch_rows``) rejects a longer batch with
        :class:`BatchLimitError` before any work.
        """
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f"max_rows must be a non-negative int or None, not {max_rows!r}")
        return self._frozen.match_batch(keys, max_rows)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._frozen.subscriptions())

    @property
    def subscriber_count(self) -> int:
        """Distinct subscribers."""
        return self._frozen.subscriber_count

    @property
    def pattern_count(self) -> int:
        """Distinct patterns."""
        return self._frozen.pattern_count

    @property
    def node_count(self) -> int:
        return self._frozen.node_count

    @property
    def word_count(self) -> int:
        """Distinct literal pattern words."""
        return self._frozen.word_count

    def __len__(self) -> int:
        return len(self._frozen)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (FrozenMatcher.from_bytes, (self.to_bytes(),))

    def __repr__(self) -> str:
        return f"FrozenMatcher(len={len(self)}, subscribers={self.subscriber_count}, patterns={self.pattern_count})"


class LayeredMatcher:
    """A base matcher and a delta of the changes since it, matched as one (``native/core/src/layered.rs``).

    ``LayeredMatcher(base, delta)`` refuses (:class:`FrozenFormatError`) a delta built for another base. Its
    lookups are the base's minus the pairs the delta hides, plus the delta's own, by subscriber text.
    """

    __slots__ = ("_layered",)

    def __init__(self, base: FrozenMatcher, delta: FrozenMatcher) -> None:
        self._layered = _native.LayeredMatcher.of(base._frozen, delta._frozen)

    @property
    def base(self) -> FrozenMatcher:
        return FrozenMatcher._wrap(self._layered.base)

    @property
    def delta(self) -> FrozenMatcher:
        return FrozenMatcher._wrap(self._layered.delta)

    def lookup(self, key: str) -> frozenset[str]:
        try:
            return self._layered.lookup(key)
        except (TypeError, UnicodeEncodeError) as error:
            _key_error(key, error)

    def match_batch(self, keys: pa.Array, max_rows: int | None = None) -> pa.ListArray:
        """As :meth:`FrozenMatcher.match_batch`."""
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f"max_rows must be a non-negative int or None, not {max_rows!r}")
        return self._layered.match_batch(keys, max_rows)

    def subscriptions(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._layered.subscriptions())

    def __len__(self) -> int:
        return len(self._layered)

    def __repr__(self) -> str:
        return f"LayeredMatcher(len={len(self)}, delta={len(self._layered.delta)} pairs)"


class DeltaBuilder:
    """The subscription changes since a base matcher, kept as a delta (``native/core/src/layered.rs``).

    :meth:`record` the changed rows of each table version (their final states), :meth:`freeze` a delta for
    :class:`LayeredMatcher`, and :meth:`rebase` onto a newer base: changes up to the version it was frozen at
    are dropped, the later ones kept. No Python per row; the GIL is released.
    """

    __slots__ = ("_builder",)

    def __init__(self, base: FrozenMatcher) -> None:
        self._builder = _native.DeltaBuilder.over(base._frozen)

    @property
    def base(self) -> FrozenMatcher:
        return FrozenMatcher._wrap(self._builder.base)

    def record(
        self,
        patterns: StringColumn,
        subscribers: StringColumn,
        *,
        active: bool,
        version: int,
        limits: Limits | None = None,
    ) -> int:
        """Record the rows as subscribed (``active``) or not as of table ``version``; returns the rows recorded.

        Every row is validated first (any bad row raises :class:`BulkRowError` and nothing is recorded).
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be a non-negative int, not {version!r}")
        return self._builder.record(_column(patterns), _column(subscribers), bool(active), version, _row_limits(limits))

    def rebase(self, base: FrozenMatcher, *, through: int) -> None:
        """Move onto ``base``, a base frozen at table version ``through``."""
        self._builder.rebase(base._frozen, through)

    def freeze(self) -> FrozenMatcher:
        """The delta of the changes so far: O(changed pairs)."""
        return FrozenMatcher._wrap(self._builder.freeze())

    def __len__(self) -> int:
        return len(self._builder)

    def __repr__(self) -> str:
        return f"DeltaBuilder(changed_pairs={len(self)}, base={len(self._builder.base)} pairs)"

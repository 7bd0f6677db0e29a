"""The JVM binding of the native matcher (``native/jvm``, ``udfs/jvm``): the real-time lane's UDF in the test
session's own JVM, against the Python binding on the same snapshot bytes.

* **Conformance.** ``sparktopicrouter.udfs.RouteKey`` returns exactly what ``FrozenMatcher.match_batch``
  returns, in the same order, on every key of ``tests/validity.tsv`` and on generated keys, for one snapshot
  file written by ``routing.router.snapshot_files`` (the oracle is the Python binding, itself checked against
  the regex matcher in ``tests/test_native_matchers.py``).
* **Hostile input.** Keys that are not UTF-8 are dead-lettered as ``invalid_key``, keys far over every limit
  match as they do in Python, a fan-out over the limit is dead-lettered whole with its count: no crash, no
  partial delivery.
* **Snapshots.** A newer published version reaches a running JVM without a restart; a newer file that fails
  verification (digest, claim, decoding) is refused and the current version kept; a table no lookup used for
  its idle time is freed, and a later lookup loads the newest file.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from validity import VALIDITY

from routing import _native, grammar
from routing.jvm import SNAPSHOT_IDLE_MS, loaded_snapshot_sources, register_route_key
from routing.router.snapshot_files import SnapshotFiles, file_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Milliseconds between the UDF's checks for a newer snapshot file (the tests wait for a swap).
REFRESH_MS = 100
#: Milliseconds the UDF waits for a first snapshot file.
FIRST_WAIT_MS = 10_000
MAX_FANOUT = 100
SWAP_TIMEOUT_S = 30.0

Routed = tuple[list[str] | None, int | None, str | None, int]


class Published:
    """One subscription table's snapshot files in a temporary directory, and the UDF that reads them."""

    def __init__(
        self, spark: SparkSession, root: Path, *, max_fanout: int = MAX_FANOUT, idle_ms: int = SNAPSHOT_IDLE_MS
    ) -> None:
        self.spark = spark
        self.idle_ms = idle_ms
        self.table_id = str(uuid.uuid4())
        self.files = SnapshotFiles(str(root), keep=10, table_id=self.table_id)
        self.name = f"route_{self.table_id.replace('-', '_')}"
        self.max_fanout = max_fanout

    def publish(self, version: int, pairs: list[tuple[str, str]]) -> _native.FrozenMatcher:
        matcher = _native.FrozenMatcher.build(pairs)
        assert self.files.write(version, matcher.to_bytes()) is not None
        return matcher

    def register(self) -> None:
        register_route_key(
            self.spark,
            self.name,
            self.files.directory,
            self.table_id,
            refresh_ms=REFRESH_MS,
            first_wait_ms=FIRST_WAIT_MS,
            max_fanout=self.max_fanout,
            idle_ms=self.idle_ms,
        )

    def route(self, keys: list[bytes | None]) -> list[Routed | None]:
        """The UDF's struct for each key, in order (a Spark job over a local table of the keys)."""
        from pyspark.sql import functions as F

        frame = self.spark.createDataFrame([(index, key) for index, key in enumerate(keys)], "index int, key binary")
        rows = frame.select("index", F.expr(f"{self.name}(key)").alias("routed")).orderBy("index").collect()
        return [
            None
            if row.routed is None
            else (row.routed.subscribers, row.routed.fanout, row.routed.reason, row.routed.snapshot_version)
            for row in rows
        ]

    def wait_for_version(self, version: int, probe: bytes = b"probe") -> None:
        deadline = time.monotonic() + SWAP_TIMEOUT_S
        while (routed := self.route([probe])[0]) is None or routed[3] != version:
            assert time.monotonic() < deadline, f"still at {routed} after {SWAP_TIMEOUT_S} s"
            time.sleep(REFRESH_MS / 1000)


def python_lists(matcher: _native.FrozenMatcher, keys: list[str]) -> list[list[str]]:
    return matcher.match_batch(pa.array(keys, pa.string())).to_pylist()  # type: ignore[no-any-return]


def generated_keys(words: list[str], count: int, seed: int) -> list[str]:
    """Keys of 0 to 6 words drawn from the patterns' own words and a few others, so many of them match."""
    rng = random.Random(seed)
    alphabet = [*words, "", "x", "*", "#", "ünï", "a" * 40]
    return [".".join(rng.choice(alphabet) for _ in range(rng.randrange(7))) for _ in range(count)]


@pytest.fixture
def validity_table(spark: SparkSession, tmp_path: Path) -> tuple[Published, _native.FrozenMatcher]:
    published = Published(spark, tmp_path)
    # Every pattern of the table, each held by its own subscriber and by one shared one.
    pairs = [(pattern, f"s{index:03d}") for index, (pattern, _, _) in enumerate(VALIDITY)]
    pairs += [(pattern, "shared") for pattern, _, _ in VALIDITY[::7]]
    matcher = published.publish(1, pairs)
    published.register()
    return published, matcher


def test_the_jvm_udf_returns_what_the_python_binding_returns(
    validity_table: tuple[Published, _native.FrozenMatcher],
) -> None:
    published, matcher = validity_table
    words = sorted({word for pattern, key, _ in VALIDITY for word in (*pattern.split("."), *key.split("."))})
    keys = [key for _, key, _ in VALIDITY] + generated_keys(words, 3_000, seed=60)
    expected = python_lists(matcher, keys)
    routed = published.route([key.encode() for key in keys])
    assert sum(1 for lists in expected if lists) > len(keys) // 4  # the keys exercise real matches
    for key, want, got in zip(keys, expected, routed, strict=True):
        assert got is not None
        subscribers, fanout, reason, version = got
        assert (subscribers, fanout, reason, version) == (want, len(want), None, 1), key


def test_the_validity_table_holds_in_the_jvm(validity_table: tuple[Published, _native.FrozenMatcher]) -> None:
    """Each case's own subscriber is matched exactly when the table says (an oracle apart from Python's)."""
    published, _ = validity_table
    routed = published.route([key.encode() for _, key, _ in VALIDITY])
    for index, ((pattern, key, matches), got) in enumerate(zip(VALIDITY, routed, strict=True)):
        assert got is not None and got[0] is not None
        assert (f"s{index:03d}" in got[0]) == matches, (pattern, key)


def test_hostile_keys_end_as_dead_letters_or_python_s_answer(spark: SparkSession, tmp_path: Path) -> None:
    published = Published(spark, tmp_path, max_fanout=MAX_FANOUT)
    pairs = [("#", f"every{index:04d}") for index in range(5_000)]  # every key: over the limit
    pairs += [("wide.*", f"wide{index:03d}") for index in range(MAX_FANOUT)]  # exactly at it: delivered
    pairs += [("a.#", "deep"), ("*.*.b", "three")]
    matcher = published.publish(1, [pair for pair in pairs if pair[1].startswith(("wide", "deep", "three"))])
    published.register()
    not_utf8 = [b"\xff", b"a.\xc3", b"\xed\xa0\x80", b"ok.\x80.b"]
    huge = [b"a." * 100_000 + b"b", b"x" * 1_000_000, b"." * 50_000]
    valid = [b"", b".", b"wide.one", b"a.b", b"q.r.b"]
    routed = published.route([*not_utf8, *huge, *valid, None])
    assert routed[: len(not_utf8)] == [(None, None, grammar.INVALID_KEY, 1)] * len(not_utf8)
    texts = [key.decode() for key in (*huge, *valid)]
    for key, want, got in zip(texts, python_lists(matcher, texts), routed[len(not_utf8) : -1], strict=True):
        assert got == (want, len(want), None, 1), key[:40]
    assert routed[-1] is None  # a null key: judged by the key rules before the UDF
    assert routed[len(not_utf8) + len(huge) + 2] == ([f"wide{index:03d}" for index in range(MAX_FANOUT)], 100, None, 1)

    # The same table with the 5,000 subscribers of '#': every key is over the limit, dead-lettered whole.
    wide = Published(spark, tmp_path / "wide", max_fanout=MAX_FANOUT)
    wide.publish(1, pairs)
    wide.register()
    over = wide.route([b"wide.one", b"", b"a." * 100_000])
    assert over == [
        (None, 5_000 + MAX_FANOUT, grammar.FANOUT_LIMIT, 1),
        (None, 5_000, grammar.FANOUT_LIMIT, 1),
        (None, 5_001, grammar.FANOUT_LIMIT, 1),
    ]


def test_a_published_version_reaches_the_running_jvm_and_a_bad_one_is_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    published = Published(spark, tmp_path)
    published.publish(1, [("probe", "first")])
    published.register()
    assert published.route([b"probe"]) == [(["first"], 1, None, 1)]
    # The file is local, so the JVM (the driver's, in local mode) maps it rather than reading it into its heap.
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    first = next(Path(published.files.directory).glob("1-*.frozen"))
    assert str(first) in Path(f"/proc/{pid}/maps").read_text(), "the JVM does not map the snapshot file"

    second = published.publish(2, [("probe", "second"), ("#", "all")])
    published.wait_for_version(2)
    assert published.route([b"probe", b"other"]) == [
        (python_lists(second, ["probe"])[0], 2, None, 2),
        (["all"], 1, None, 2),
    ]

    # Newer files that must be refused: garbage under its own digest, a good file renamed to a newer version,
    # and another table's file.
    directory = Path(published.files.directory)
    garbage = b"STRSNAP2" + b"\x00" * 64
    (directory / file_name(5, garbage)).write_bytes(garbage)
    good = next(directory.glob("2-*.frozen"))
    (directory / good.name.replace("2-", "4-", 1)).write_bytes(good.read_bytes())
    other = SnapshotFiles(str(tmp_path / "other"), keep=1, table_id=str(uuid.uuid4()))
    other.write(3, _native.FrozenMatcher.build([("probe", "intruder")]).to_bytes())
    foreign = next(Path(other.directory).glob("3-*.frozen"))
    (directory / foreign.name).write_bytes(foreign.read_bytes())
    # And a good file of this table, its claim intact, with one matcher byte flipped: named by its new digest, so
    # only the native checksum (the file is mapped) tells it from a good one.
    staging = SnapshotFiles(str(tmp_path / "staging"), keep=1, table_id=published.table_id)
    staging.write(7, _native.FrozenMatcher.build([("probe", "seventh")]).to_bytes())
    flipped = bytearray(next(Path(staging.directory).glob("7-*.frozen")).read_bytes())
    flipped[-64] ^= 0x10
    (directory / file_name(7, bytes(flipped))).write_bytes(bytes(flipped))
    time.sleep(REFRESH_MS * 10 / 1000)  # ten checks
    assert published.route([b"probe"]) == [(["all", "second"], 2, None, 2)]

    # A good newer version still gets through after them.
    published.publish(8, [("probe", "eighth")])
    published.wait_for_version(8)
    assert published.route([b"probe"]) == [(["eighth"], 1, None, 8)]


def test_an_idle_snapshot_is_freed_and_a_later_lookup_loads_the_newest(spark: SparkSession, tmp_path: Path) -> None:
    held = loaded_snapshot_sources(spark)
    published = Published(spark, tmp_path, idle_ms=REFRESH_MS * 3)
    published.publish(1, [("probe", "first")])
    published.register()
    assert published.route([b"probe"]) == [(["first"], 1, None, 1)]
    assert loaded_snapshot_sources(spark) == held + 1
    deadline = time.monotonic() + SWAP_TIMEOUT_S
    while loaded_snapshot_sources(spark) > held:
        assert time.monotonic() < deadline, "the idle snapshot was never freed"
        time.sleep(REFRESH_MS / 1000)

    # Published while no source held the table: the next lookup loads it, not the freed version.
    published.publish(2, [("probe", "second")])
    assert published.route([b"probe", b"probe"]) == [(["second"], 1, None, 2)] * 2
    assert loaded_snapshot_sources(spark) == held + 1


def java_exception_class(call: Any, *args: Any) -> str:
    """The class name of the Java exception ``call(*args)`` throws through py4j (pyspark converts some)."""
    try:
        call(*args)
    except Exception as error:  # Py4JJavaError, or pyspark's CapturedException holding it
        origin = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
        assert origin is not None, error
        return str(origin.getClass().getName())
    raise AssertionError(f"{call} did not throw")


def test_malformed_bytes_are_refused_with_the_format_error(spark: SparkSession) -> None:
    jvm: Any = spark._jvm
    from_bytes = jvm.sparktopicrouter.udfs.FrozenMatcher.fromBytes
    good = _native.FrozenMatcher.build([("a.*", "s")]).to_bytes()
    assert jvm.sparktopicrouter.udfs.FrozenMatcher.formatVersion() == _native.FORMAT_VERSION
    for data in (b"", b"garbage", good[:-1], good[:20] + bytes([good[20] ^ 1]) + good[21:]):
        assert java_exception_class(from_bytes, bytearray(data), 0, len(data)) == (
            "sparktopicrouter.udfs.FrozenFormatException"
        ), data[:24]
    for offset, length in ((4, len(good)), (-1, 2), (0, -1)):
        assert java_exception_class(from_bytes, bytearray(good), offset, length) == (
            "java.lang.IndexOutOfBoundsException"
        )
    matcher = from_bytes(bytearray(good), 0, len(good))
    assert matcher.subscriberCount() == 1 and matcher.subscriber(0) == "s"
    matcher.retire()
    assert not matcher.acquire()  # freed: no further lookup can reach the native matcher


def test_a_local_snapshot_file_is_mapped_in_place_and_validated(spark: SparkSession, tmp_path: Path) -> None:
    """``FrozenMatcher.fromFile`` (what the lane's ``SnapshotFiles`` opens a local file with) maps the file and reads
    the matcher in place, after the same validation as a copy; a damaged file, a bad offset and a missing file are
    refused with the exceptions a copy's would get."""
    jvm: Any = spark._jvm
    from_file = jvm.sparktopicrouter.udfs.FrozenMatcher.fromFile
    good = _native.FrozenMatcher.build([("a.*", "s"), ("#", "all")])
    sealed = tmp_path / "sealed"
    sealed.write_bytes(bytes(16) + good.to_bytes())  # the matcher at offset 16, as after a claim

    def path(file: Path) -> Any:
        return jvm.java.io.File(str(file)).toPath()

    matcher = from_file(path(sealed), 16)
    try:
        assert matcher.isMapped()
        assert [matcher.subscriber(i) for i in range(matcher.subscriberCount())] == ["all", "s"]
        ids = jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Integer.TYPE, 4)
        count = matcher.lookup(bytearray(b"a.b"), ids)
        assert sorted(matcher.subscriber(ids[i]) for i in range(count)) == sorted(good.lookup("a.b"))
    finally:
        matcher.retire()
    copied = jvm.sparktopicrouter.udfs.FrozenMatcher.fromBytes(bytearray(good.to_bytes()), 0, len(good.to_bytes()))
    assert not copied.isMapped()
    copied.retire()

    damaged = tmp_path / "damaged"
    data = bytearray(sealed.read_bytes())
    data[-64] ^= 0x10
    damaged.write_bytes(bytes(data))
    assert java_exception_class(from_file, path(damaged), 16) == "sparktopicrouter.udfs.FrozenFormatException"
    assert java_exception_class(from_file, path(sealed), -8) == "java.lang.IndexOutOfBoundsException"
    for offset in (4, 1 << 40):  # misaligned; past the end
        assert java_exception_class(from_file, path(sealed), offset) == "java.lang.IllegalArgumentException"
    assert java_exception_class(from_file, path(tmp_path / "missing"), 0) == "java.lang.IllegalArgumentException"


def test_the_udf_s_reason_codes_are_the_grammar_s(spark: SparkSession) -> None:
    jvm: Any = spark._jvm
    route_key = jvm.sparktopicrouter.udfs.RouteKey
    assert (route_key.INVALID_KEY, route_key.FANOUT_LIMIT) == (grammar.INVALID_KEY, grammar.FANOUT_LIMIT)

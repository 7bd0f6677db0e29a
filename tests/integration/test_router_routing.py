"""Exact end-to-end routing: real broker, real Spark, real Delta, compared with the regex oracle.

Each test produces hostile and ordinary records, runs the router once
(available-now, in-process on the shared session) and checks, record by
record, that the router's output tables say exactly what
:func:`router_support.expected_outcomes` (Python validator + regex
oracle over the subscriptions read back from Delta) says: the subscribers of
every delivery, the reason of every dead letter, every unrouted record.
Conservation, id formulas and the batch reports are checked on top.
"""

from __future__ import annotations

import collections
import json
import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from router_support import (
    DELIVERED,
    UNROUTED,
    Record,
    active_subscriptions,
    apply_subscriptions,
    assert_ids_exact,
    expected_outcomes,
    ledger_versions,
    produce,
    read_routed,
    router_settings,
    run_available_now,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from routing.settings import Settings

pytestmark = pytest.mark.slow

MAX_PAYLOAD_BYTES = 512
MAX_HEADERS_BYTES = 64
#: Low, so several keys below match more subscribers than this and one matches exactly this many.
MAX_FANOUT = 4

#: (pattern, subscriber): '#' edge cases, the empty pattern, empty words, glued wildcards, unicode.
SUBSCRIPTIONS = [
    ("#", "hash"),
    ("#.#", "hash"),  # the same subscriber through two patterns counts once
    ("a.#.b", "a-hash-b"),
    ("*.#.*", "two-or-more"),
    ("", "empty-pattern"),
    ("a..b", "empty-word"),
    ("x..y", "empty-word"),
    ("a*", "glued-star"),
    ("simply#carrots", "glued-hash"),
    ("données.*", "unicode"),
    ("*.x", "star-x"),
    ("stock.*.msft", "stocks"),
    ("#.z", "ends-z"),
    ("a.*.b", "a-star-b"),
    ("a.b", "a-b"),
    ("#.*.#.msft", "msft-anywhere"),
]
#: Without the match-everything patterns, so some records are unrouted.
SELECTIVE = [(pattern, subscriber) for pattern, subscriber in SUBSCRIPTIONS if subscriber != "hash"]

#: Keys worth routing: '#' edge cases, empty key and words, wildcards as text, unicode, controls.
VALID_KEYS = [
    "",
    ".",
    "..",
    ".x",
    "x.",
    "a..b",
    "a.b",
    "a.x.b",
    "a.x.y.b",
    "a.b.b",
    "x.b",
    "q",
    "a",
    "#",
    "*",
    "a*",
    "simply#carrots",
    "a.#.b",
    "stock.nasdaq.msft",
    "stock..msft",
    "stock.nasdaq.msft.x",
    "données.été",
    "données",
    "日本.x",
    "a\x00b.x",
    "x.y.z.msft",
    "STOCK.nasdaq.msft",
    "a.x.y.z.w.b",
    "x..y",
    "z",
    "a.z",
    "x.y.z",
]
RANDOM_WORDS = ["a", "b", "x", "z", "", "stock", "msft", "données", "#", "*"]


def random_keys(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [".".join(rng.choice(RANDOM_WORDS) for _ in range(rng.randrange(0, 6))) for _ in range(count)]


def hostile_keys(settings: Settings) -> list[bytes | None]:
    """One key per dead-letter rule the key can break (under the amqp policy)."""
    limits = settings.limits
    return [
        None,  # null_key
        b"k" * (limits.max_key_bytes + 1),  # key_too_long
        ("é" * (limits.max_key_bytes // 2 + 1)).encode(),  # key_too_long in bytes, not characters
        b"\xff\xfe",  # invalid_key: not UTF-8
        b"a.\xed\xa0\x80",  # invalid_key: an encoded surrogate
        b"\xc0\xaf",  # invalid_key: overlong
        b"a." + b"\xe2\x82",  # invalid_key: truncated
        ".".join(["w"] * (limits.max_key_words + 1)).encode(),  # too_many_words
        b"." * limits.max_key_words,  # too_many_words: max_key_words + 1 empty words
    ]


def test_routing_by_message_key_matches_the_oracle(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = topic_factory(partitions=2)
    limits = settings.limits.replace(
        max_payload_bytes=MAX_PAYLOAD_BYTES, max_headers_bytes=MAX_HEADERS_BYTES, max_fanout=MAX_FANOUT
    )
    job = router_settings(settings.replace(limits=limits), tmp_path, [topic], max_offsets_per_trigger=200)
    version = apply_subscriptions(spark, job, tmp_path / "subscriptions.jsonl", SUBSCRIPTIONS)
    subscriptions = active_subscriptions(spark, job, version)
    assert sorted(subscriptions) == sorted(SUBSCRIPTIONS)

    keys: list[bytes | None] = [key.encode() for key in VALID_KEYS + random_keys(5, 300)]
    keys += hostile_keys(job)
    messages: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (key, f"payload {index}".encode(), []) for index, key in enumerate(keys)
    ]
    messages += [
        (b"a.b", b"p" * (MAX_PAYLOAD_BYTES + 1), []),  # payload_too_large
        (b"q", b"p" * MAX_PAYLOAD_BYTES, []),  # exactly at the limit: routed
        (b"q", None, []),  # a tombstone has no payload: routed
        (b"\xff", b"p" * (MAX_PAYLOAD_BYTES + 1), []),  # the key is judged first: invalid_key
        (b"a.b", b"p", [("h", b"v" * (MAX_HEADERS_BYTES - 1))]),  # exactly at the limit (key + value): routed
        (b"a.b", b"p", [("h", b"v" * MAX_HEADERS_BYTES)]),  # headers_too_large
        (b"a.b", b"p", [("k" * (MAX_HEADERS_BYTES + 1), None)]),  # a huge key with no value: headers_too_large
        (b"a.b", b"p" * (MAX_PAYLOAD_BYTES + 1), [("h", b"v" * MAX_HEADERS_BYTES)]),  # payload first
    ]
    records = produce(job, topic, messages, partitions=2)

    with caplog.at_level(logging.INFO, logger="routing.router.metrics"):
        router = run_available_now(spark, job)

    expected = expected_outcomes(records, job.router, job.validator(), subscriptions)
    # The data covers what it claims to: every reason, fan-out at and over the limit, every subscriber.
    kinds = collections.Counter(kind for kind, _ in expected.values())
    assert set(kinds) == {
        DELIVERED,
        "null_key",
        "key_too_long",
        "invalid_key",
        "too_many_words",
        "payload_too_large",
        "headers_too_large",
        "fanout_limit",
    }
    assert any(len(subs) == MAX_FANOUT for _, subs in expected.values())
    assert {sub for _, subs in expected.values() for sub in subs} == {sub for _, sub in SUBSCRIPTIONS}
    assert_routed_as_expected(spark, job, records, expected, version)

    # Dead letters keep the raw Kafka key; a fan-out dead letter says how many subscribers matched.
    by_coordinates = {record.coordinates: record for record in records}
    routed = read_routed(spark, job)
    for row in routed.dead_letters:
        record = by_coordinates[(row["source_partition"], row["source_offset"])]
        assert (None if row["raw_key"] is None else bytes(row["raw_key"])) == record.key
        if row["reason"] == "fanout_limit":
            assert row["fanout"] > MAX_FANOUT
    for row in routed.deliveries:
        key = by_coordinates[(row["source_partition"], row["source_offset"])].key
        assert key is not None and row["routing_key"] == key.decode()

    # The per-batch reports (an Observation per batch) add up to the same figures.
    totals: collections.Counter[str] = collections.Counter()
    for report in router.reports.values():
        assert report.snapshot_version == version and not report.replayed
        totals.update(report.metrics)
    assert totals["input_rows"] == len(records)
    assert totals["deliveries"] == sum(len(subs) for _, subs in expected.values())
    assert totals["unmatched"] == kinds[UNROUTED] == 0  # '#' matches every valid key
    assert totals["dead_letters"] == len(records) - kinds[DELIVERED]
    assert totals["dead_fanout_limit"] == kinds["fanout_limit"]
    assert len(router.reports) >= 2  # max_offsets_per_trigger split the run into several batches
    assert ledger_versions(spark, job) == sorted((batch, version) for batch in router.reports)

    # One metrics line per batch from the progress listener: Spark's input count (a batch with dead letters
    # reads its input a second time to write them, and Spark counts both reads), and the query's phase times,
    # also kept for the batch.
    lines = [json.loads(entry.getMessage()) for entry in caplog.records if entry.name == "routing.router.metrics"]
    assert sorted(line["batch_id"] for line in lines) == sorted(router.reports)
    for line in lines:
        assert line["event"] == "router_batch"
        report = router.reports[line["batch_id"]]
        reads = 2 if report.metrics["dead_letters"] else 1
        assert line["num_input_rows"] == reads * report.metrics["input_rows"] > 0
        assert line["duration_ms"]["addBatch"] > 0 and line["duration_ms"] == router.durations_ms[line["batch_id"]]


def test_routing_by_header_and_json_field_matches_the_oracle(
    spark: SparkSession, settings: Settings, topic_factory: Any, tmp_path: Path
) -> None:
    # One lower than above: without '#', fewer subscribers match each key.
    limits = settings.limits.replace(max_payload_bytes=MAX_PAYLOAD_BYTES, max_fanout=MAX_FANOUT - 1)
    base = settings.replace(limits=limits)
    version = apply_subscriptions(
        spark, router_settings(base, tmp_path, ["unused"]), tmp_path / "subscriptions.jsonl", SELECTIVE
    )

    # Header: the key lives in header 'routing_key' (first one wins); the message key is ignored.
    header_topic = topic_factory(partitions=2)
    header_job = router_settings(base, tmp_path, [header_topic], key_source="header:routing_key")
    subscriptions = active_subscriptions(spark, header_job, version)
    header_messages: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (b"ignored.key", b"v", [("routing_key", key), ("other", b"x")])
        for key in [key.encode() for key in VALID_KEYS + random_keys(6, 60)] + hostile_keys(header_job)
    ]
    header_messages += [
        (b"a.b", b"v", []),  # no headers at all: null_key
        (b"a.b", b"v", [("other", b"a.b")]),  # no routing_key header: null_key
        (None, b"v", [("routing_key", None)]),  # a header without a value: null_key
        (None, b"v", [("routing_key", b"a.b"), ("routing_key", b"q")]),  # the first one counts
        (None, b"v" * (MAX_PAYLOAD_BYTES + 1), [("routing_key", b"a.b")]),
    ]
    header_records = produce(header_job, header_topic, header_messages, partitions=2)
    run_available_now(spark, header_job)
    expected = expected_outcomes(header_records, header_job.router, header_job.validator(), subscriptions)
    assert {kind for kind, _ in expected.values()} >= {
        DELIVERED,
        UNROUTED,
        "null_key",
        "invalid_key",
        "payload_too_large",
        "fanout_limit",
    }
    assert_routed_as_expected(spark, header_job, header_records, expected, version)

    # JSON: the key is the string field 'routing_key' of the value; a value that is not JSON has no key.
    json_topic = topic_factory(partitions=1)
    json_job = router_settings(base, tmp_path / "json", [json_topic], key_source="json:routing_key")
    json_job = json_job.replace(subscriptions=header_job.subscriptions)  # the same table
    json_values: list[bytes | None] = [
        json.dumps({"routing_key": key, "n": index}, ensure_ascii=index % 2 == 0).encode()
        for index, key in enumerate(VALID_KEYS + random_keys(7, 60) + ["k" * 300, ".".join(["w"] * 40)])
    ]
    json_values += [
        b"not json",
        b'{"routing_key": ',
        b'["a.b"]',
        b'{"other": "a.b"}',
        b"",
        None,
        json.dumps({"routing_key": "a.b", "pad": "x" * MAX_PAYLOAD_BYTES}).encode(),
    ]
    json_records = produce(json_job, json_topic, [(b"ignored", value, []) for value in json_values])
    run_available_now(spark, json_job)
    expected = expected_outcomes(json_records, json_job.router, json_job.validator(), subscriptions)
    assert {kind for kind, _ in expected.values()} >= {
        DELIVERED,
        UNROUTED,
        "null_key",
        "key_too_long",
        "too_many_words",
        "payload_too_large",
        "fanout_limit",
    }
    assert_routed_as_expected(spark, json_job, json_records, expected, version)


def assert_routed_as_expected(
    spark: SparkSession, settings: Settings, records: list[Record], expected: dict[Any, Any], version: int
) -> None:
    routed = read_routed(spark, settings)
    outcomes = routed.outcomes()
    # Record by record: same subscribers, same reason, same unrouted set; nothing missing, nothing extra.
    assert outcomes == expected
    # Conservation: in = distinct delivered + unrouted + dead letters (each record in exactly one table).
    delivered = {(row["source_partition"], row["source_offset"]) for row in routed.deliveries}
    assert len(records) == len(delivered) + len(routed.unrouted) + len(routed.dead_letters)
    assert {row["source_topic"] for row in [*routed.deliveries, *routed.dead_letters, *routed.unrouted]} == {
        records[0].topic
    }
    assert {pinned[1] for pinned in routed.versions().values()} == {version}
    assert_ids_exact(routed)


def test_worker_matcher_cache_tells_tables_apart() -> None:
    """Version numbers collide across subscription tables: a reused worker must not route with the wrong one."""
    from routing.matchers import CSTrieMatcher
    from udfs.route import MatcherCache

    def snapshot_bytes(pattern: str, subscriber: str) -> bytes:
        trie = CSTrieMatcher()
        trie.subscribe(pattern, subscriber)
        return bytes(trie.freeze().to_bytes())

    cache = MatcherCache()
    first, second = snapshot_bytes("a.#", "first"), snapshot_bytes("a.#", "second")
    assert cache.get(1, lambda: first, table="/tables/one").lookup("a.b") == frozenset({"first"})
    assert cache.get(1, lambda: second, table="/tables/two").lookup("a.b") == frozenset({"second"})
    assert cache.get(1, lambda: second, table="/tables/two").lookup("a.b") == frozenset({"second"})
    assert cache.loads == 2  # the same (table, version) again is served from the cache


def test_a_routing_task_freezes_the_workers_long_lived_objects_and_a_driver_never(spark: SparkSession) -> None:
    """PySpark's full collection after every task walks frozen objects no more; a driver's heap is left alone."""
    import gc

    from udfs.route import FREEZE_MIN_OBJECTS, freeze_worker_heap

    on_driver = gc.get_freeze_count()
    assert not freeze_worker_heap(min_objects=0)
    assert gc.get_freeze_count() == on_driver

    def in_a_task(_: object) -> list[tuple[bool, int, bool, int]]:
        """(froze, objects it froze, froze again, long-lived objects left) in a worker, past the threshold."""
        import gc

        from udfs.route import freeze_worker_heap

        kept = [{"i": i} for i in range(3 * FREEZE_MIN_OBJECTS)]  # long-lived, like a module's objects
        gc.collect()  # what the daemon does after a task: survivors go to the oldest generation
        before = gc.get_freeze_count()
        froze = freeze_worker_heap()
        frozen = gc.get_freeze_count() - before
        again = freeze_worker_heap()  # nothing new has lived long since
        left = len(gc.get_objects(generation=2))
        del kept
        return [(froze, frozen, again, left)]

    [(froze, frozen, again, left)] = spark.sparkContext.parallelize([0], 1).mapPartitions(in_a_task).collect()
    assert froze and frozen >= 3 * FREEZE_MIN_OBJECTS
    assert not again
    assert left < FREEZE_MIN_OBJECTS

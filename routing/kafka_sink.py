"""Deliveries to Kafka: topic names no two subscribers share, headers no producer can forge.

``router.kafka_sink_topic`` is one topic, or a template holding ``{subscriber}``: one topic per subscriber.

Topic names
-----------
Kafka allows ``[A-Za-z0-9._-]`` in a topic name, at most 249 characters, never ``.`` or ``..``, and refuses a
topic whose name equals another's once every ``.`` is read as ``_`` (they collide in its metric names). The
template's fixed text is checked against those rules when the settings load (:func:`check_topic_setting`), and
the subscriber's part of the name (:func:`subscriber_part`) is:

==========================================================  ==================================================
subscriber id                                               its part of the topic name
==========================================================  ==================================================
only ``[A-Za-z0-9-]``, and it fits the name's 249            the id itself (``fx-desk`` -> ``fx-desk``)
anything else: a ``.``, a ``_``, any other character,        a readable prefix (each other character as ``-``,
or too long                                                  cut to fit), ``_``, then 20 hex digits of the id's
                                                             SHA-256 (``acme corp`` -> ``acme-corp_2f1c...``)
==========================================================  ==================================================

Why it is injective: a part of the first kind has no ``_`` and a part of the second kind has exactly one, so
the kinds never meet; the first kind is the id; two parts of the second kind differ unless two ids share 80 bits
of SHA-256 (finding another id for a *given* id's hash is a second preimage: about 2**80 hashes). A part has no
``.``, so no two parts collide in Kafka's ``.``-as-``_`` rule either. The same function is written twice, for
the driver (:func:`subscriber_part`) and as a Spark column (:func:`topic_column`); the tests hold them equal.

Headers
-------
Each record carries the router's own headers first: ``delivery_id`` (what consumers dedupe on) and
``snapshot_version``. A source header whose key is one of those names, in any letter case, is **renamed**
``source.<key>`` and kept after them, so a producer cannot plant a second ``delivery_id`` that a consumer
taking the first (or the last) would read, and nothing the producer sent is lost. Other headers pass unchanged.

A leaf below the settings (which check the topic setting with :func:`check_topic_setting`) and the router.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: In ``router.kafka_sink_topic``: one topic per subscriber, its part (:func:`subscriber_part`) in place of this.
SUBSCRIBER_PLACEHOLDER = "{subscriber}"
#: Kafka's limit on a topic name's length.
MAX_TOPIC_CHARS = 249
#: The characters Kafka allows in a topic name.
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: An id that is its own part (when it fits): no ``.`` and no ``_``.
PLAIN_PART = re.compile(r"[A-Za-z0-9-]+")
#: Hex digits of SHA-256 in an escaped part (80 bits).
HASH_CHARS = 20
#: The shortest escaped part: one readable character, ``_``, the hash.
MIN_PART_CHARS = 1 + 1 + HASH_CHARS
#: The micro-batch sink's producer configs under ``kafka.spark_options`` (which win): a batch's write flushes
#: when its task ends, so waiting for full 256 KiB batches costs no latency there and halves the per-record
#: work of the producer and the broker (bench/stream.py's (e)). The real-time lane keeps the client's defaults
#: (``linger.ms`` 0): a record goes out as it is routed.
BATCH_SINK_PRODUCER = {"kafka.batch.size": "262144", "kafka.linger.ms": "20"}
#: The router's own headers, in the order they lead each delivery record.
ROUTER_HEADERS = ("delivery_id", "snapshot_version")
#: The real-time lane's headers of a dead-letter record (:mod:`routing.realtime`), and of an unrouted one.
DEAD_LETTER_HEADERS = ("dead_letter_id", "reason", "rule", "snapshot_version")
UNROUTED_HEADERS = ("unrouted_id", "snapshot_version")
#: What a source header named like one of :data:`ROUTER_HEADERS` is renamed to: this prefix, then its key.
RENAMED_PREFIX = "source."


def check_topic_setting(value: str) -> str | None:
    """Why ``value`` cannot be ``router.kafka_sink_topic`` (one line), or None when it can."""
    if not value:
        return None
    if value.count(SUBSCRIBER_PLACEHOLDER) > 1:
        return f"holds {SUBSCRIBER_PLACEHOLDER} more than once"
    fixed = value.replace(SUBSCRIBER_PLACEHOLDER, "")
    if fixed and not TOPIC_NAME.fullmatch(fixed):
        return "may hold only the characters Kafka allows in a topic name ([A-Za-z0-9._-]) besides {subscriber}"
    if SUBSCRIBER_PLACEHOLDER not in value:
        if value in (".", ".."):
            return "is not a valid Kafka topic name"
        if len(value) > MAX_TOPIC_CHARS:
            return f"is longer than Kafka's {MAX_TOPIC_CHARS} characters"
        return None
    if len(fixed) + MIN_PART_CHARS > MAX_TOPIC_CHARS:
        return f"leaves under {MIN_PART_CHARS} of Kafka's {MAX_TOPIC_CHARS} characters for the subscriber"
    return None


def _room(template: str) -> int:
    return MAX_TOPIC_CHARS - len(template.replace(SUBSCRIBER_PLACEHOLDER, ""))


def subscriber_part(subscriber: str, room: int = MAX_TOPIC_CHARS) -> str:
    """The subscriber's part of its topic name, at most ``room`` characters (see the module docs)."""
    if len(subscriber) <= room and PLAIN_PART.fullmatch(subscriber):
        return subscriber
    readable = re.sub(r"[^A-Za-z0-9-]", "-", subscriber)[: room - 1 - HASH_CHARS]
    digest = hashlib.sha256(subscriber.encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{readable}_{digest}"


def topic_for(template: str, subscriber: str) -> str:
    """The topic ``subscriber``'s deliveries go to under ``router.kafka_sink_topic`` = ``template``."""
    if SUBSCRIBER_PLACEHOLDER not in template:
        return template
    return template.replace(SUBSCRIBER_PLACEHOLDER, subscriber_part(subscriber, _room(template)))


def topic_column(template: str) -> Column:
    """:func:`topic_for` of each row's ``subscriber_id``, as a Spark column."""
    from pyspark.sql import functions as F

    if SUBSCRIBER_PLACEHOLDER not in template:
        return F.lit(template)
    room = _room(template)
    subscriber = F.col("subscriber_id")
    readable = F.substring(F.regexp_replace(subscriber, r"[^A-Za-z0-9-]", "-"), 1, room - 1 - HASH_CHARS)
    escaped = F.concat(readable, F.lit("_"), F.substring(F.sha2(subscriber, 256), 1, HASH_CHARS))
    # \z, not $: Java's $ also matches before a final line break ("fx\n").
    plain = (F.length(subscriber) <= room) & subscriber.rlike(r"^[A-Za-z0-9-]+\z")
    part = F.when(plain, subscriber).otherwise(escaped)
    before, _, after = template.partition(SUBSCRIBER_PLACEHOLDER)
    return F.concat(F.lit(before), part, F.lit(after))


def headers_column(names: Sequence[str] = ROUTER_HEADERS) -> Column:
    """The record's headers: the router's own ``names`` (:data:`ROUTER_HEADERS` for a delivery), each from the
    column of that name, then the source's, those named like one of ``names`` renamed (see the module docs)."""
    from pyspark.sql import functions as F

    own = [
        F.struct(F.lit(name).alias("key"), F.col(name).cast("string").cast("binary").alias("value")) for name in names
    ]
    reserved = F.array(*[F.lit(name) for name in names])

    def renamed(header: Column) -> Column:
        key = header["key"]
        clashes = F.array_contains(reserved, F.lower(key))
        new_key = F.when(clashes, F.concat(F.lit(RENAMED_PREFIX), key)).otherwise(key)
        return F.struct(new_key.alias("key"), header["value"].alias("value"))

    headers = F.col("headers")
    # transform() is interpreted, row by row and header by header (Spark generates no code for lambdas): in the
    # real-time lane's profile it took 18% of the task. Only a record with a header named like one of ours needs
    # it, and this test is generated code: the keys joined and lower-cased, each between NULs, hold "\0name\0"
    # for every key whose lower case is a name (the names are ASCII, and a key's lower case does not change
    # beside a NUL). A key holding a NUL may take the transform needlessly; its result is the same.
    joined = F.concat(F.lit("\0"), F.lower(F.array_join(headers["key"], "\0")), F.lit("\0"))
    clash = None
    for name in names:
        found = joined.contains(f"\0{name}\0")
        clash = found if clash is None else clash | found
    assert clash is not None
    forwarded = F.when(clash, F.transform(headers, renamed)).otherwise(headers)
    return F.when(headers.isNull(), F.array(*own)).otherwise(F.concat(F.array(*own), forwarded))


def forwarded_headers(
    headers: list[tuple[str, bytes]], delivery_id: str, snapshot_version: int
) -> list[tuple[str, bytes]]:
    """:func:`headers_column` of one delivery record, in Python: the oracle the tests hold the column to."""
    return own_then_source_headers({"delivery_id": delivery_id, "snapshot_version": str(snapshot_version)}, headers)


def own_then_source_headers(own: dict[str, str], headers: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """:func:`headers_column` of ``own`` (name -> text, in order) and the source ``headers``, in Python."""
    renamed = [(RENAMED_PREFIX + key if key.lower() in own else key, value) for key, value in headers]
    return [(name, text.encode()) for name, text in own.items()] + renamed

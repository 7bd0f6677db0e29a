"""The router's output tables: deliveries, dead letters and (optionally) unrouted messages; their schemas,
paths and Delta properties.

All three are Delta tables written from ``foreachBatch`` with idempotent
appends (``txnAppId`` = the router's app id + ``":"`` + its query id, see
:func:`routing.streaming.txn_app_id`; ``txnVersion`` = the batch id), so a
re-executed batch never duplicates a row.

**Partitioning.** Each table is partitioned by ``kafka_date``, the UTC date of
the source record's Kafka timestamp. It is deterministic (a replayed batch
lands in the same partitions), it keeps the partition count small and bounded
by retention (one per day, unlike the high-cardinality ``subscriber_id``,
which would shred the table into tiny files), and it is what consumers and
retention jobs filter on ("deliveries since yesterday", "drop partitions older
than 30 days"). A consumer of one subscriber (``python -m routing tail``,
:mod:`routing.tail`) gets little from data skipping on ``subscriber_id``
statistics, though: each batch's files hold every subscriber's rows, so their
min/max ranges exclude no one and one subscriber's read scans every row
(docs/router.md, "Reading one subscriber's deliveries"). ``OPTIMIZE ... ZORDER BY (subscriber_id)`` clusters
the history for such reads; splitting each batch's write by subscriber range
would cost the router a second pass over its input (the range sample).

**Statistics.** Delta keeps per-file min/max statistics of the columns a reader can skip
files by. For deliveries that is :data:`DELIVERIES_STATS_COLUMNS` (table property
``delta.dataSkippingStatsColumns``, set when the router creates the table): the subscriber, the
source coordinates and times, the snapshot version and batch id. Not ``delivery_id``: it is
those coordinates and the subscriber again (or their hash, which every file's range covers
nearly whole), so it skips nothing they do not. Not
``routing_key``: each batch's files hold every key. Their statistics (a string min/max per row)
cost 6-21% of the deliveries write of a 100k-record batch, in three interleaved A/Bs. ``ALTER
TABLE ... SET TBLPROPERTIES`` changes the list of an existing table.

**Delivery ids.** ``delivery_id`` is deterministic, so at-least-once delivery
downstream can dedupe on it, and unique per (message, subscriber): it is the
text ``topic|partition|offset|subscriber_id`` itself, unique by construction, and
unambiguous because Kafka topic names cannot contain ``|``, partition and offset
are decimal digits and the subscriber comes last. Dead letters get
``dead_letter_id`` from ``topic|partition|offset`` the same way.

Why the text and not a hash of it: on a 100k-message batch a hash was one of the
costliest parts of the write. Spark's ``sha2`` looks up a digest and builds a
hex string per row, and 64 random hex characters are the least compressible
column of a delivery, larger than ``bench/stream.py``'s 64-byte payloads once
compressed. The coordinates compress well, since every row of a file shares
the topic and partition. In one interleaved run (30 rounds, 88,000 deliveries
per Delta append), the median append took 602 ms with the hash, 561 ms with
the text, and 477 ms with no id at all.

**Parquet encodings.** Parquet tries a dictionary for every column: each value is
hashed and looked up, and the dictionary is dropped only once it outgrows its page
(1 MB). The columns that are distinct per message gain nothing from it, and a
batch's rows are in message order, so a value repeated by the fan-out sits next
to its copies and compresses without one. So each output table turns the
dictionary off for its ids and its per-message columns
(:data:`PLAIN_ENCODED_COLUMNS`: table properties
``parquet.enable.dictionary#<column> = false``, which Delta hands its Parquet
writer; for a table created before, ``ALTER TABLE ... SET TBLPROPERTIES``). In
``bench/parquet_encodings.py`` (394,307 deliveries rows of a ``bench/stream.py`` run
written again in their order, one task per file, 30 interleaved rounds; task CPU
means per write) a write took 1,123 ms with the dictionary off for ``delivery_id``
only; 958 with the payload plain too, 1,007 with the routing key, 1,071 with the
offset, 1,058 with the timestamps as ``TIMESTAMP_MICROS`` rather than ``INT96``
(``spark.sql.parquet.outputTimestampType``, a session setting:
:func:`routing.spark.runtime_conf`); 743 with all of them, and the files 4% smaller
(the offsets 40% smaller, the payloads 8% larger). A workload with few distinct routing
keys (a few thousand stock symbols) writes smaller files with the key's
dictionary: ``ALTER TABLE ... UNSET TBLPROPERTIES
('parquet.enable.dictionary#routing_key')``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

# The dead letters' ``reason`` values are the error classes' codes (their one home is routing.errors).
from routing.errors import DEAD_LETTER_REASONS as DEAD_LETTER_REASONS

if TYPE_CHECKING:
    from routing.settings import RouterSettings

HEADERS_DDL = "ARRAY<STRUCT<key: STRING, value: BINARY>>"

DELIVERIES_DDL = (
    "delivery_id STRING, subscriber_id STRING, routing_key STRING, "
    "source_topic STRING, source_partition INT, source_offset BIGINT, kafka_timestamp TIMESTAMP, "
    f"payload BINARY, headers {HEADERS_DDL}, "
    "snapshot_version BIGINT, batch_id BIGINT, routed_at TIMESTAMP, kafka_date DATE"
)

DEAD_LETTERS_DDL = (
    "dead_letter_id STRING, reason STRING, rule STRING, fanout INT, "
    "source_topic STRING, source_partition INT, source_offset BIGINT, kafka_timestamp TIMESTAMP, "
    f"raw_key BINARY, payload BINARY, headers {HEADERS_DDL}, "
    "snapshot_version BIGINT, batch_id BIGINT, routed_at TIMESTAMP, kafka_date DATE"
)

UNROUTED_DDL = (
    "routing_key STRING, source_topic STRING, source_partition INT, source_offset BIGINT, "
    f"kafka_timestamp TIMESTAMP, payload BINARY, headers {HEADERS_DDL}, "
    "snapshot_version BIGINT, batch_id BIGINT, routed_at TIMESTAMP, kafka_date DATE"
)

PARTITION_COLUMN = "kafka_date"

#: Each output table's columns written without a Parquet dictionary (see Parquet encodings above): its id and
#: the columns distinct per message. Keyed like :data:`OUTPUT_TABLES`.
PLAIN_ENCODED_COLUMNS = {
    "deliveries": ("delivery_id", "routing_key", "source_offset", "payload"),
    "dead_letters": ("dead_letter_id", "source_offset", "raw_key", "payload"),
    "unrouted": ("routing_key", "source_offset", "payload"),
}
#: The output tables' DDLs by name.
OUTPUT_TABLES = {"deliveries": DELIVERIES_DDL, "dead_letters": DEAD_LETTERS_DDL, "unrouted": UNROUTED_DDL}


def dictionary_off(columns: Iterable[str]) -> dict[str, str]:
    """The Parquet writer settings (or Delta table properties, which Delta hands its Parquet writer) that write
    ``columns`` without a dictionary."""
    return {f"parquet.enable.dictionary#{column}": "false" for column in columns}


#: The deliveries' columns with Delta file statistics (``delta.dataSkippingStatsColumns``; see Statistics above).
DELIVERIES_STATS_COLUMNS = (
    "subscriber_id",
    "source_topic",
    "source_partition",
    "source_offset",
    "kafka_timestamp",
    "snapshot_version",
    "batch_id",
    "routed_at",
)


def output_paths(router: RouterSettings) -> dict[str, str]:
    """The path (or table name) of each output table the router writes, by name (as :data:`OUTPUT_TABLES`)."""
    paths = {"deliveries": router.deliveries_path, "dead_letters": router.dead_letters_path}
    if router.unrouted_path:
        paths["unrouted"] = router.unrouted_path
    return paths


def table_properties(table: str) -> dict[str, str]:
    """The Delta properties of one output table (``deliveries``, ``dead_letters``, ``unrouted``): file statistics
    only where they skip files, and no Parquet dictionary for the columns distinct per message (see
    Statistics and Parquet encodings above). Delta's own session defaults
    (``spark.databricks.delta.properties.defaults.*``, such as ``checkpointInterval``) apply to them too."""
    properties = dictionary_off(PLAIN_ENCODED_COLUMNS[table])
    if table == "deliveries":
        properties["delta.dataSkippingStatsColumns"] = ",".join(DELIVERIES_STATS_COLUMNS)
    return properties

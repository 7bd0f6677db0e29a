"""Per-subscriber Kafka topic names are injective and always valid; the setting is checked when it loads.

The oracle of validity is Kafka's own rule set, written out here: ``[A-Za-z0-9._-]``, at most 249 characters,
not ``.`` or ``..``, and no two names equal once ``.`` is read as ``_`` (Kafka refuses such a pair).
"""

from __future__ import annotations

import random
import re

import pytest

from routing.config import ConfigError
from routing.kafka_sink import (
    HASH_CHARS,
    MAX_TOPIC_CHARS,
    MIN_PART_CHARS,
    check_topic_setting,
    forwarded_headers,
    subscriber_part,
    topic_for,
)
from routing.settings import load_settings

TEMPLATE = "deliveries.{subscriber}"
#: The issue's collisions and length cases, and their neighbours.
HOSTILE_IDS = [
    "acme_corp",
    "acme corp",
    "acme/corp",
    "acme\u00e9corp",
    "acme-corp",
    "acme.corp",
    "acme--corp",
    ".",
    "..",
    "...",
    "_",
    "-",
    "a" * 250,
    "a" * 249,
    "a" * 226,
    "a" * 227,
    "b" * 250 + "x",
    "b" * 250 + "y",
    "\U0001f600",
    "\u0130",
    "fx\n",
    "fx-desk\n",
    "x_" + "0" * HASH_CHARS,
    "x-" + "0" * HASH_CHARS,
    "",
]


def kafka_valid(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]{1,249}", name)) and name not in (".", "..")


def random_ids(count: int) -> list[str]:
    rng = random.Random(58)
    alphabet = "aA0-_. /\u00e9\U0001f600|\n"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(count)] + [
        rng.choice("ab") * rng.randint(200, 300) for _ in range(200)
    ]


def test_the_issues_ids_get_distinct_valid_topics() -> None:
    ids = list(dict.fromkeys(HOSTILE_IDS + random_ids(20_000)))
    topics = [topic_for(TEMPLATE, subscriber) for subscriber in ids]
    assert all(kafka_valid(topic) for topic in topics), [t for t in topics if not kafka_valid(t)][:5]
    assert len(set(topics)) == len(ids)
    # Kafka's own collision rule: '.' and '_' are the same character in its metric names.
    assert len({topic.replace(".", "_") for topic in topics}) == len(ids)


def test_a_plain_id_is_its_own_part_and_anything_else_gets_a_prefix_and_a_hash() -> None:
    assert topic_for(TEMPLATE, "fx-desk") == "deliveries.fx-desk"
    assert topic_for(TEMPLATE, "Risk-42") == "deliveries.Risk-42"
    escaped = subscriber_part("acme corp")
    assert re.fullmatch(rf"acme-corp_[0-9a-f]{{{HASH_CHARS}}}", escaped)
    assert subscriber_part("acme_corp") != escaped != subscriber_part("acme/corp")
    assert topic_for(TEMPLATE, "acme_corp").startswith("deliveries.acme-corp_")
    # The longest plain id that fits is kept; one more character and it is cut and hashed, to exactly the limit.
    room = MAX_TOPIC_CHARS - len("deliveries.")
    assert topic_for(TEMPLATE, "a" * room) == "deliveries." + "a" * room
    longer = topic_for(TEMPLATE, "a" * (room + 1))
    assert len(longer) == MAX_TOPIC_CHARS and longer.startswith("deliveries." + "a" * 10) and "_" in longer
    assert topic_for("one-topic", "anyone") == "one-topic"


def test_a_part_is_never_longer_than_its_room() -> None:
    for room in (MIN_PART_CHARS, MIN_PART_CHARS + 1, 40, MAX_TOPIC_CHARS):
        for subscriber in HOSTILE_IDS:
            assert len(subscriber_part(subscriber, room)) <= room, (room, subscriber)


SETTING_TABLE = [
    ("", None),
    ("deliveries", None),
    ("deliveries.{subscriber}", None),
    ("{subscriber}", None),
    ("{subscriber}.out", None),
    ("d.{subscriber}.{subscriber}", "holds {subscriber} more than once"),
    ("deliveries/{subscriber}", "may hold only the characters Kafka allows"),
    ("deliv eries", "may hold only the characters Kafka allows"),
    ("{subscriber}\u00e9", "may hold only the characters Kafka allows"),
    (".", "is not a valid Kafka topic name"),
    ("..", "is not a valid Kafka topic name"),
    ("t" * 249, None),
    ("t" * 250, "is longer than Kafka's 249 characters"),
    ("t" * (249 - MIN_PART_CHARS) + "{subscriber}", None),
    ("t" * (250 - MIN_PART_CHARS) + "{subscriber}", f"leaves under {MIN_PART_CHARS} of Kafka's 249 characters"),
]


@pytest.mark.parametrize(("value", "problem"), SETTING_TABLE)
def test_the_topic_setting_is_checked_when_it_loads(value: str, problem: str | None) -> None:
    found = check_topic_setting(value)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem)), found
    if problem is None:
        load_settings(overrides={"router": {"kafka_sink_topic": value}})
    else:
        with pytest.raises(ConfigError, match=r"^setting router\.kafka_sink_topic " + re.escape(problem)):
            load_settings(overrides={"router": {"kafka_sink_topic": value}})


def test_the_routers_headers_lead_and_a_forged_one_is_renamed_not_dropped() -> None:
    source = [("delivery_id", b"forged"), ("Snapshot_Version", b"99"), ("trace", b"t1"), ("delivery_id", b"again")]
    out = forwarded_headers(source, "t|0|5|fx-desk", 7)
    assert out[:2] == [("delivery_id", b"t|0|5|fx-desk"), ("snapshot_version", b"7")]
    assert [key for key, _ in out].count("delivery_id") == 1
    assert out[2:] == [
        ("source.delivery_id", b"forged"),
        ("source.Snapshot_Version", b"99"),
        ("trace", b"t1"),
        ("source.delivery_id", b"again"),
    ]

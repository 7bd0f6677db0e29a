"""Subscription ACLs through the refresh job, against a real broker, Spark and Delta tables.

A forbidden subscribe is rejected ``forbidden_pattern`` into the rejects table; tightening the rules
deactivates a subscription already held on the next run, recorded in the rejects table (op
``deactivate``) and in the row (``source`` ``acl``, change id suffixed), never silently; a further
run changes nothing. Oracle: the plain-Python model with the same rules
(:meth:`~routing.subscriptions.model.SubscriptionModel.deactivate_forbidden`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from integration.test_refresh_job import produce, rejects_in_table, sub, unsub
from jobs.refresh_subscriptions import refresh_from_kafka
from routing.acl import AclRule, AclSettings
from routing.settings import Settings
from routing.subscriptions.acl_sweep import DEACTIVATION_SUFFIX, SOURCE_ACL
from routing.subscriptions.model import SubscriptionModel
from routing.subscriptions.table import latest_version, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAX_EVENT_BYTES = 65_536


def with_acl(settings: Settings, *rules: AclRule) -> Settings:
    return settings.replace(acl=AclSettings(rules=rules, default_allow=False))


def test_forbidden_subscribes_are_rejected_and_tightened_rules_deactivate(
    spark: SparkSession, settings: Settings, tmp_path: Path, topic_factory: Any, kafka_broker: Any
) -> None:
    subscriptions = dataclasses.replace(
        settings.subscriptions,
        table_path=str(tmp_path / "subscriptions"),
        rejects_path=str(tmp_path / "subscription_rejects"),
        checkpoint_path=str(tmp_path / "checkpoint"),
        events_topic=topic_factory(partitions=1),
    )
    loose = with_acl(
        settings.replace(subscriptions=subscriptions),
        AclRule("tenant-42-*", ("tenant.42.#", "shared.#")),
        AclRule("audit", ("#",)),
    )
    model = SubscriptionModel(loose.validator(), MAX_EVENT_BYTES)

    first = produce(
        loose,
        [
            sub("tenant-42-a", "tenant.42.orders.*", 1000),
            sub("tenant-42-a", "shared.news", 1000),
            sub("tenant-42-a", "#", 1000),  # forbidden
            sub("tenant-42-b", "tenant.*", 1000),  # forbidden: tenant.43 too
            sub("audit", "#", 1000),
            sub("stranger", "a", 1000),  # no rule names it, default deny
            unsub("stranger", "b", 1000),  # unsubscribes always pass
        ],
    )
    summary = refresh_from_kafka(spark, loose)
    assert summary.rejected == {"forbidden_pattern": 3}
    model.apply_batch(first)
    assert read_rows(spark, subscriptions.table_path) == {
        key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()
    }
    assert rejects_in_table(spark, loose) == sorted(model.rejects.items())

    # Tightened: tenant-42-* loses shared.#. The next run deactivates the held shared.news, with a recorded reason.
    tight = with_acl(loose, AclRule("tenant-42-*", ("tenant.42.#",)), AclRule("audit", ("#",)))
    second = produce(tight, [sub("tenant-42-a", "shared.sport", 2000)])  # now forbidden as it arrives
    assert refresh_from_kafka(spark, tight).deactivated == 1
    model.validator = tight.validator()
    assert model.deactivate_forbidden() == [("tenant-42-a", "shared.news")]
    model.apply_batch(second)
    rows = read_rows(spark, subscriptions.table_path)
    assert rows == {key: (row.active, row.ts_millis, row.change_id) for key, row in model.rows.items()}
    active, _, change_id = rows[("tenant-42-a", "shared.news")]
    assert not active and change_id.endswith(DEACTIVATION_SUFFIX)
    assert rejects_in_table(spark, tight) == sorted(model.rejects.items())

    table = spark.read.format("delta").load(subscriptions.table_path)
    assert [row["source"] for row in table.where(f"change_id = '{change_id}'").collect()] == [SOURCE_ACL]
    record = spark.read.format("delta").load(subscriptions.rejects_path).where(f"change_id = '{change_id}'").collect()
    assert len(record) == 1
    assert (record[0]["reason"], record[0]["op"], record[0]["source"]) == ("forbidden_pattern", "deactivate", "acl")
    assert (record[0]["subscriber_id"], record[0]["pattern"]) == ("tenant-42-a", "shared.news")
    assert "may no longer hold pattern 'shared.news'" in record[0]["detail"]

    # A further run with the same rules finds nothing more to do: no new table version, no new rejects.
    version = latest_version(spark, subscriptions.table_path)
    assert refresh_from_kafka(spark, tight).deactivated == 0
    assert latest_version(spark, subscriptions.table_path) == version
    assert rejects_in_table(spark, tight) == sorted(model.rejects.items())

"""Which table settings name catalog tables and which are paths (``routing.delta_tables``), and how they are stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from routing.config import ConfigError
from routing.delta_tables import is_table_name, sql_identifier
from routing.settings import RouterSettings, SubscriptionSettings, load_settings

#: (setting value, is it a table name?)
VALIDITY = [
    ("db.deliveries", True),
    ("main.router.deliveries", True),
    ("spark_catalog.default.subscriptions", True),
    ("_private.t_1", True),
    ("Router.Deliveries", True),
    ("deliveries", False),  # one word: a relative path, as it always was
    ("a.b.c.d", False),  # four parts: no catalog has them
    ("./db.deliveries", False),
    ("/var/delta/db.deliveries", False),
    ("s3a://bucket/db.deliveries", False),
    ("db.1deliveries", False),  # an identifier does not start with a digit
    ("db..deliveries", False),
    (".db.deliveries", False),
    ("db.deliveries.", False),
    ("db.del-iveries", False),
    ("db.deliveries ", False),
    ("`db`.`deliveries`", False),  # quoted identifiers are not taken
    ("db.délivery", False),
    ("", False),
]


@pytest.mark.parametrize(("value", "expected"), VALIDITY)
def test_a_table_name_is_two_or_three_plain_identifiers(value: str, expected: bool) -> None:
    assert is_table_name(value) is expected


def test_sql_identifiers_quote_each_part_of_a_name_and_a_path_whole() -> None:
    assert sql_identifier("main.router.deliveries") == "`main`.`router`.`deliveries`"
    assert sql_identifier("/tmp/odd`dir") == "delta.`/tmp/odd``dir`"


def test_table_settings_keep_names_as_written_and_resolve_paths(tmp_path: Path) -> None:
    conf = tmp_path / "router.toml"
    conf.write_text(
        "[subscriptions]\n"
        'table_path = "main.router.subscriptions"\n'
        'rejects_path = "../rejects"\n'
        "[router]\n"
        'deliveries_path = "router.deliveries"\n'
        'dead_letters_path = "dead"\n'
        'metrics_path = "spark_catalog.router.metrics"\n'
        'checkpoint_path = "checkpoints.route"\n'
    )
    settings = load_settings(conf, env={})
    assert settings.subscriptions.table_path == "main.router.subscriptions"
    assert settings.subscriptions.rejects_path == str(tmp_path.parent / "rejects")
    assert settings.router.deliveries_path == "router.deliveries"
    assert settings.router.dead_letters_path == str(tmp_path / "dead")
    assert settings.router.metrics_path == "spark_catalog.router.metrics"
    # A checkpoint is a directory, never a table: a dotted word there is a relative path.
    assert settings.router.checkpoint_path == str(tmp_path / "checkpoints.route")


def test_only_delta_table_settings_take_names() -> None:
    assert set(SubscriptionSettings.TABLES) == {"table_path", "rejects_path"}
    assert set(RouterSettings.TABLES) == {"deliveries_path", "dead_letters_path", "unrouted_path", "metrics_path"}
    for section in (SubscriptionSettings, RouterSettings):
        assert set(section.TABLES) <= set(section.PATHS)
    # The snapshot files are a directory of plain files, so a name there stays a path.
    router = load_settings(overrides={"router": {"snapshot_files_path": "db.snaps"}}).router
    assert Path(router.snapshot_files_path).is_absolute()


def test_a_local_only_setting_still_refuses_a_uri() -> None:
    with pytest.raises(ConfigError, match="must be a local path"):
        load_settings(overrides={"kafka": {"data_dir": "s3a://bucket/kafka"}})

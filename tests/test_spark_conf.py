"""``routing.spark.spark_conf`` without a JVM: the defaults it adds, and the settings' ``[spark.conf]`` over them."""

from __future__ import annotations

from pathlib import Path

from test_class_archive import archive_settings

from routing.spark import spark_conf


def test_the_codegen_cache_holds_two_thousand_classes_unless_the_settings_say_otherwise(tmp_path: Path) -> None:
    key = "spark.sql.codegen.cache.maxEntries"
    assert spark_conf(archive_settings(tmp_path, archive_dir=""))[key] == "2000"
    assert spark_conf(archive_settings(tmp_path, archive_dir="", conf={key: "100"}))[key] == "100"

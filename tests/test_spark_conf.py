"""``routing.spark.spark_conf`` without a JVM: the defaults it adds, and the settings' ``[spark.conf]`` over them."""

from __future__ import annotations

from pathlib import Path

from routing.settings import Settings, load_settings
from routing.spark import spark_conf


def settings_under(tmp_path: Path, conf: dict[str, str] | None = None) -> Settings:
    spark = {
        "jars_provided": True,
        "class_archive": "",
        "ivy_dir": str(tmp_path / "ivy"),
        "local_dir": str(tmp_path / "spark-local"),
        "warehouse_dir": str(tmp_path / "warehouse"),
        "conf": conf or {},
    }
    return load_settings(env={}, overrides={"spark": spark})


def test_the_codegen_cache_holds_two_thousand_classes_unless_the_settings_say_otherwise(tmp_path: Path) -> None:
    key = "spark.sql.codegen.cache.maxEntries"
    assert spark_conf(settings_under(tmp_path))[key] == "2000"
    assert spark_conf(settings_under(tmp_path, {key: "100"}))[key] == "100"

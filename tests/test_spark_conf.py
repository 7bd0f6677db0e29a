"""``routing.spark.spark_conf`` without a JVM: the defaults it adds, and the settings' ``[spark.conf]`` over them."""

from __future__ import annotations

from pathlib import Path

from test_class_archive import archive_settings

from routing.spark import BACKGROUND_POOL, STREAM_MIN_SHARE, scheduler_pools_xml, spark_conf


def test_the_codegen_cache_holds_two_thousand_classes_unless_the_settings_say_otherwise(tmp_path: Path) -> None:
    key = "spark.sql.codegen.cache.maxEntries"
    assert spark_conf(archive_settings(tmp_path, archive_dir=""))[key] == "2000"
    assert spark_conf(archive_settings(tmp_path, archive_dir="", conf={key: "100"}))[key] == "100"


def test_the_stream_pool_is_served_before_the_background_pool_unless_the_settings_say_otherwise(
    tmp_path: Path,
) -> None:
    import xml.etree.ElementTree as ElementTree

    conf = spark_conf(archive_settings(tmp_path, archive_dir=""))
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools_file = Path(conf["spark.scheduler.allocation.file"])
    assert pools_file.parent == (tmp_path / "spark-local").resolve()
    pools = {
        pool.get("name"): {field.tag: (field.text or "").strip() for field in pool}
        for pool in ElementTree.parse(pools_file).getroot()
    }
    assert set(pools) == {"default", BACKGROUND_POOL}
    # Spark's fair scheduler serves a pool below its minShare first: the stream's default pool always is.
    assert int(pools["default"]["minShare"]) == STREAM_MIN_SHARE >= 1_000_000
    assert int(pools[BACKGROUND_POOL]["minShare"]) == 0
    assert {pool["schedulingMode"] for pool in pools.values()} == {"FIFO"}

    # A second session start finds the file as it is (a stale one is replaced whole); a user's settings win.
    pools_file.write_text("<allocations/>")
    assert spark_conf(archive_settings(tmp_path, archive_dir=""))["spark.scheduler.allocation.file"] == str(pools_file)
    assert pools_file.read_text() == scheduler_pools_xml()
    assert [path.name for path in pools_file.parent.iterdir()] == [pools_file.name]
    own = {"spark.scheduler.mode": "FIFO", "spark.scheduler.allocation.file": "/etc/spark/pools.xml"}
    conf = spark_conf(archive_settings(tmp_path, archive_dir="", conf=own))
    assert {key: conf[key] for key in own} == own

"""``routing.spark.spark_conf`` without a JVM: the defaults it adds, and the settings' ``[spark.conf]`` over them."""

from __future__ import annotations

from pathlib import Path

from test_class_archive import archive_settings

from routing.settings import DEFAULT_SPARK_CONF, load_settings
from routing.spark import BACKGROUND_POOL, STREAM_MIN_SHARE, scheduler_pools_xml, spark_conf


def test_the_codegen_cache_holds_two_thousand_classes_unless_the_settings_say_otherwise(tmp_path: Path) -> None:
    key = "spark.sql.codegen.cache.maxEntries"
    assert spark_conf(archive_settings())[key] == "2000"
    assert spark_conf(archive_settings(conf={key: "100"}))[key] == "100"


def test_the_stream_pool_is_served_before_the_background_pool_unless_the_settings_say_otherwise(
    tmp_path: Path,
) -> None:
    import xml.etree.ElementTree as ElementTree

    local = {"spark.local.dir": str(tmp_path / "spark-local")}
    conf = spark_conf(archive_settings(conf=local))
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools_file = Path(conf["spark.scheduler.allocation.file"])
    assert pools_file.parent == (tmp_path / "spark-local").resolve()  # beside Spark's scratch space
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
    assert spark_conf(archive_settings(conf=local))["spark.scheduler.allocation.file"] == str(pools_file)
    assert pools_file.read_text() == scheduler_pools_xml()
    assert [path.name for path in pools_file.parent.iterdir()] == [pools_file.name]
    own = {"spark.scheduler.mode": "FIFO", "spark.scheduler.allocation.file": "/etc/spark/pools.xml"}
    conf = spark_conf(archive_settings(conf=own))
    assert {key: conf[key] for key in own} == own


def test_the_session_defaults_are_spark_s_own_keys_and_the_settings_file_spells_them_out() -> None:
    """JVM flags, memory, the UI and partitions are Spark's keys in ``[spark.conf]``; a user's entry wins."""
    conf = spark_conf(archive_settings())
    assert {key: conf[key] for key in DEFAULT_SPARK_CONF} == dict(DEFAULT_SPARK_CONF)
    assert DEFAULT_SPARK_CONF["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC"
    assert load_settings(env={}).spark.conf == dict(DEFAULT_SPARK_CONF)  # conf/router.toml's [spark.conf]
    g1 = spark_conf(archive_settings(conf={"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}))
    assert g1["spark.driver.extraJavaOptions"] == "-XX:+UseG1GC"  # the user's options, nothing of ours added
    # Under spark-submit the submitter's wins over the settings.
    submitted = {"spark.master": "local[2]", "spark.driver.extraJavaOptions": "-Xss4m"}
    assert spark_conf(archive_settings(), submitted=submitted)["spark.driver.extraJavaOptions"] == "-Xss4m"

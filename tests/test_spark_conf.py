"""``routing.spark.spark_conf`` without a JVM: the defaults it adds, and the settings' ``[spark.conf]`` over them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from test_class_archive import archive_settings

from routing.spark import (
    BACKGROUND_POOL,
    DRIVER_CLASS_PATH,
    LOCAL_FS_CLASSES,
    STREAM_MIN_SHARE,
    scheduler_pools_xml,
    spark_conf,
)


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


def test_a_local_session_gets_the_spawn_free_local_file_system_on_its_class_path(tmp_path: Path) -> None:
    jar = tmp_path / "localfs.jar"
    jar.write_bytes(b"PK")  # only its presence is checked here; tests/integration/test_local_fs.py loads it
    conf = spark_conf(archive_settings(tmp_path, archive_dir="", local_fs_jar=str(jar)))
    assert {key: conf[key] for key in LOCAL_FS_CLASSES} == LOCAL_FS_CLASSES
    assert conf[DRIVER_CLASS_PATH] == str(jar)

    # The user's class path comes first; ours is added to it, not put in its place.
    own = {DRIVER_CLASS_PATH: "/opt/extra.jar"}
    conf = spark_conf(archive_settings(tmp_path, archive_dir="", local_fs_jar=str(jar), conf=own))
    assert conf[DRIVER_CLASS_PATH] == f"/opt/extra.jar{os.pathsep}{jar}"


@pytest.mark.parametrize(
    ("case", "changes"),
    [
        ("a cluster master: executors elsewhere lack the jar", {"master": "spark://cluster:7077"}),
        ("the user's own file system", {"conf": {"spark.hadoop.fs.file.impl": "org.example.Fs"}}),
        ("the user's own FileContext file system", {"conf": {"spark.hadoop.fs.AbstractFileSystem.file.impl": "x.Fs"}}),
        ("turned off", {"local_fs_jar": ""}),
    ],
)
def test_the_spawn_free_local_file_system_stays_out(tmp_path: Path, case: str, changes: dict[str, object]) -> None:
    jar = tmp_path / "localfs.jar"
    jar.write_bytes(b"PK")
    settings = archive_settings(tmp_path, archive_dir="", **{"local_fs_jar": str(jar), **changes})
    conf = spark_conf(settings)
    assert DRIVER_CLASS_PATH not in conf, case
    assert all(conf.get(key) != value for key, value in LOCAL_FS_CLASSES.items()), case


def test_a_missing_local_file_system_jar_is_logged_and_hadoop_s_own_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "not-built.jar"
    with caplog.at_level(logging.WARNING, logger="routing.spark"):
        conf = spark_conf(archive_settings(tmp_path, archive_dir="", local_fs_jar=str(missing)))
    assert DRIVER_CLASS_PATH not in conf and not any(key in conf for key in LOCAL_FS_CLASSES)
    assert f"{missing} is missing (run `make jars`)" in caplog.text

"""The child process of :func:`dev.class_archive.build`: a small run of what the jobs do, then a clean exit.

    python -m dev.class_archive_workload SPEC.json

Its driver JVM starts with ``-XX:ArchiveClassesAtExit=<temporary file>`` and no archive of its own, and
touches the classes the jobs load: Delta (create, append, read, a SQL ``MERGE INTO``, ``DESCRIBE
HISTORY``), a streaming query from the ``rate`` source whose ``foreachBatch`` appends to Delta
idempotently with ``availableNow``, an Arrow round trip through a Python worker (``mapInArrow``) and
the Kafka source's reader, built but not run (no broker needed). Then it stops the session, closes the
JVM's stdin (PySpark's gateway exits on end of input, a normal ``System.exit(0)``, which is when the JVM
writes the archive) and waits for the JVM to be gone, so the archive is complete when this process
exits. It writes the JVM's class path to the spec's ``result`` file for the parent's mapping check.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Seconds to wait for the JVM to write the archive and exit (a few seconds here).
JVM_EXIT_TIMEOUT_S = 300.0


def run(spec: dict[str, Any]) -> str:
    """The workload; the JVM's class path."""
    from pyspark import SparkContext

    from routing.settings import Settings, SparkSettings
    from routing.spark import get_spark

    settings = Settings(spark=SparkSettings(**spec["spark"]))
    # Prepended to the session's own spark.driver.extraJavaOptions (its collector among them), as the archive's
    # options are when it is used (dev.local_spark).
    spark = get_spark(
        settings,
        app_name="class-archive",
        extra_conf={"spark.driver.defaultJavaOptions": spec["java_options"]},
    )
    scratch = Path(spec["scratch"])
    table, sink = str(scratch / "delta" / "table"), str(scratch / "delta" / "sink")

    rows = spark.range(200).selectExpr("id", "cast(id % 7 as string) AS key", "current_timestamp() AS at")
    rows.write.format("delta").save(table)
    rows.where("id < 50").write.format("delta").mode("append").save(table)
    spark.read.format("delta").load(table).groupBy("key").count().collect()
    spark.range(150, 250).selectExpr("id", "'merged' AS key", "current_timestamp() AS at").createOrReplaceTempView(
        "changes"
    )
    spark.sql(
        f"MERGE INTO delta.`{table}` AS target USING changes AS source ON target.id = source.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()

    def append(batch: Any, batch_id: int) -> None:
        writer = batch.write.format("delta").mode("append")
        writer.option("txnAppId", "class-archive").option("txnVersion", batch_id).save(sink)

    stream = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
    query = (
        stream.writeStream.foreachBatch(append)
        .option("checkpointLocation", str(scratch / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.read.format("delta").load(sink).count()

    def identity(batches: Iterator[Any]) -> Iterator[Any]:
        yield from batches

    rows.mapInArrow(identity, rows.schema).count()
    kafka = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
    kafka.option("subscribe", "class-archive").load().selectExpr("CAST(key AS STRING)", "value").printSchema()

    jvm: Any = spark.sparkContext._jvm
    class_path = str(jvm.java.lang.System.getProperty("java.class.path"))
    spark.stop()
    gateway: Any = SparkContext._gateway
    process = gateway.proc
    process.stdin.close()  # the gateway's end of input: the JVM exits normally and writes the archive
    process.wait(JVM_EXIT_TIMEOUT_S)
    if process.returncode != 0:
        raise RuntimeError(f"the driver JVM exited with status {process.returncode}")
    return class_path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dev.class_archive_workload SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    class_path = run(spec)
    Path(spec["result"]).write_text(json.dumps({"class_path": class_path, "pid": os.getpid()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

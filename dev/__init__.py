"""Local development machinery: what the demo, the tests and the benchmarks start their Spark JVMs with.

None of it is the product's: ``routing/``, ``udfs/`` and ``jobs/`` never import it, and a deployment never
sees it. It reaches the JVMs through Spark's own mechanism, a ``spark-defaults.conf`` in ``$SPARK_CONF_DIR``
(:mod:`dev.local_spark`), which the ``spark-submit`` that pyspark runs to start a local driver JVM reads.
"""

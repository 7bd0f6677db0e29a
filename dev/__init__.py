"""Local development machinery: what the demo, the tests and the benchmarks start their Spark JVMs with.

None of it is the product's: ``routing/``, ``udfs/`` and ``jobs/`` never import it, and a deployment never
sees it. It reaches the JVMs through Spark's own mechanism, a Spark properties file (:mod:`dev.local_spark`)
that the ``spark-submit`` pyspark runs to start a local driver JVM loads (``--properties-file`` in
``$PYSPARK_SUBMIT_ARGS``).
"""

# Shared by the spark-submit examples in this folder (source it, do not run it).
#
# What every deployment ships, built by `make package`:
#   dist/spark-topic-router-env.tar.gz  the packed virtualenv (the wheel with routing._native and its
#                                       dependencies); unpacked as ./environment in every container
#   dist/jars/*.jar                     Delta and the Kafka source (--jars; nothing is resolved at run time)
#   conf/router.toml                    the settings file (--files; the job reads $ROUTER_CONF)
#
# Override any of these from the environment: DIST, ROUTER_CONF_FILE, JOB, SPARK_SUBMIT (and the JVM flags below).
# Arguments after the script name go to the job, e.g. --available-now or --set router.topics=orders.
# The master and jars given to spark-submit win over the settings file (routing.spark.spark_conf).
# Arrow batch size is not set here: the router sets spark.sql.execution.arrow.maxRecordsPerBatch
# from the settings file's [spark.conf] (it must not exceed limits.max_batch_rows).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIST="${DIST:-$ROOT/dist}"
ENV_ARCHIVE="$DIST/spark-topic-router-env.tar.gz"
ROUTER_CONF_FILE="${ROUTER_CONF_FILE:-$ROOT/conf/router.toml}"
JOB="${JOB:-$ROOT/jobs/route.py}"
SPARK_SUBMIT="${SPARK_SUBMIT:-spark-submit}"

if [[ ! -f "$ENV_ARCHIVE" ]] || ! compgen -G "$DIST/jars/*.jar" >/dev/null; then
    echo "error: $ENV_ARCHIVE or $DIST/jars/ missing: run \`make package\`" >&2
    exit 1
fi
JARS="$(printf '%s\n' "$DIST"/jars/*.jar | paste -sd, -)"

# The Python of every executor is the shipped environment's, relative to the container's directory.
EXECUTOR_PYTHON=./environment/bin/python

COMMON_ARGS=(
    --archives "$ENV_ARCHIVE#environment"
    --jars "$JARS"
    --files "$ROUTER_CONF_FILE"
    --conf "spark.executorEnv.PYSPARK_PYTHON=$EXECUTOR_PYTHON"
    # The per-worker matcher cache lives in the Python worker: reuse keeps it across tasks.
    --conf spark.python.worker.reuse=true
    # A few partitions per executor core: micro-batches are small, Spark's default of 200 is too many.
    --conf spark.sql.shuffle.partitions="${SHUFFLE_PARTITIONS:-8}"
    # JVM flags are Spark's own: the driver collects with the parallel collector (the least CPU per byte
    # collected; full collections of 0.3-0.7 s every few minutes under load), as conf/router.toml's local
    # default. DRIVER_JAVA_OPTIONS="-XX:+UseG1GC" where that pause matters more than throughput;
    # EXECUTOR_JAVA_OPTIONS for the executors (their JVM's default otherwise).
    --conf "spark.driver.extraJavaOptions=${DRIVER_JAVA_OPTIONS:--XX:+UseParallelGC}"
)
if [[ -n "${EXECUTOR_JAVA_OPTIONS:-}" ]]; then
    COMMON_ARGS+=(--conf "spark.executor.extraJavaOptions=$EXECUTOR_JAVA_OPTIONS")
fi

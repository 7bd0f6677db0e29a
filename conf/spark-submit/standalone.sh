#!/usr/bin/env bash
# The router on a Spark standalone cluster, client deploy mode (the driver runs on this host).
#
#   MASTER=spark://spark-master:7077 conf/spark-submit/standalone.sh --available-now
#
# Try it on this machine: `python -m jobs.cluster start` prints a master URL (one master, two
# workers from pyspark's own classes); `python -m jobs.cluster stop` stops them.
# Standalone cluster deploy mode cannot run Python applications; use client mode.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${MASTER:?set MASTER to the standalone master URL, e.g. spark://spark-master:7077}"

# Client mode: the driver runs here, with a Python that has the package (the dev virtualenv, or the
# packed environment unpacked: mkdir env && tar -xzf dist/spark-topic-router-env.tar.gz -C env).
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$ROOT/.venv/bin/python}"
# Read by the driver and handed to every executor: the shipped environment's Python.
export PYSPARK_PYTHON="$EXECUTOR_PYTHON"
export ROUTER_CONF="$ROUTER_CONF_FILE"

exec "$SPARK_SUBMIT" \
    --master "$MASTER" \
    --deploy-mode client \
    --name spark-topic-router \
    --executor-cores "${EXECUTOR_CORES:-1}" \
    --executor-memory "${EXECUTOR_MEMORY:-1g}" \
    --conf spark.pyspark.driver.python="$PYSPARK_DRIVER_PYTHON" \
    --conf spark.pyspark.python="$EXECUTOR_PYTHON" \
    "${COMMON_ARGS[@]}" \
    "$JOB" "$@"

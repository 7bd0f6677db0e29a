#!/usr/bin/env bash
# The router on YARN, cluster deploy mode: the driver runs in the application master's container,
# which unpacks the same environment as the executors.
#
#   HADOOP_CONF_DIR=/etc/hadoop/conf conf/spark-submit/yarn.sh
#
# Delta tables and checkpoints must be on shared storage (HDFS, S3, ABFS): set their paths in
# the settings file, e.g. router.deliveries_path = "hdfs:///router/deliveries".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${HADOOP_CONF_DIR:?set HADOOP_CONF_DIR to the YARN client configuration directory}"

# --files puts router.toml in each container's working directory.
CONF_NAME="$(basename "$ROUTER_CONF_FILE")"
# A streaming job runs for weeks: YARN may restart the driver (it resumes from its checkpoint), up to
# maxAppAttempts failures per validity interval.

exec "$SPARK_SUBMIT" \
    --master yarn \
    --deploy-mode cluster \
    --name spark-topic-router \
    --queue "${YARN_QUEUE:-default}" \
    --num-executors "${NUM_EXECUTORS:-4}" \
    --executor-cores "${EXECUTOR_CORES:-2}" \
    --executor-memory "${EXECUTOR_MEMORY:-4g}" \
    --conf spark.yarn.appMasterEnv.PYSPARK_PYTHON="$EXECUTOR_PYTHON" \
    --conf spark.yarn.appMasterEnv.ROUTER_CONF="$CONF_NAME" \
    --conf spark.pyspark.python="$EXECUTOR_PYTHON" \
    --conf spark.yarn.maxAppAttempts=4 \
    --conf spark.yarn.am.attemptFailuresValidityInterval=1h \
    "${COMMON_ARGS[@]}" \
    "$JOB" "$@"

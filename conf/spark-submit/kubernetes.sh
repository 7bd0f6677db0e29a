#!/usr/bin/env bash
# The router on Kubernetes, cluster deploy mode: driver and executors are pods of a Spark 4.2
# image (with Python 3.11 at the same path as on the machine that ran `make package`, because the
# packed environment links to it). spark-submit uploads the archive, jars and settings file to
# UPLOAD_PATH (S3, HDFS, ...) and every pod fetches them from there.
#
#   K8S_API=https://k8s-api:6443 IMAGE=registry.example/spark:4.2.0-py311 \
#   UPLOAD_PATH=s3a://router-artifacts/upload conf/spark-submit/kubernetes.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${K8S_API:?set K8S_API to the Kubernetes API server URL}"
: "${IMAGE:?set IMAGE to a Spark 4.2 image with Python 3.11}"
: "${UPLOAD_PATH:?set UPLOAD_PATH to shared storage spark-submit uploads local files to}"

CONF_NAME="$(basename "$ROUTER_CONF_FILE")"

exec "$SPARK_SUBMIT" \
    --master "k8s://$K8S_API" \
    --deploy-mode cluster \
    --name spark-topic-router \
    --conf spark.kubernetes.namespace="${NAMESPACE:-spark}" \
    --conf spark.kubernetes.container.image="$IMAGE" \
    --conf spark.kubernetes.authenticate.driver.serviceAccountName="${SERVICE_ACCOUNT:-spark}" \
    --conf spark.kubernetes.file.upload.path="$UPLOAD_PATH" \
    --conf spark.kubernetes.driverEnv.PYSPARK_PYTHON="$EXECUTOR_PYTHON" \
    --conf spark.kubernetes.driverEnv.ROUTER_CONF="$CONF_NAME" \
    --conf spark.pyspark.python="$EXECUTOR_PYTHON" \
    --conf spark.executor.instances="${NUM_EXECUTORS:-4}" \
    --conf spark.kubernetes.executor.request.cores="${EXECUTOR_CORES:-2}" \
    --conf spark.executor.cores="${EXECUTOR_CORES:-2}" \
    --conf spark.executor.memory="${EXECUTOR_MEMORY:-4g}" \
    "${COMMON_ARGS[@]}" \
    "$JOB" "$@"

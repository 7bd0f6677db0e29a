"""The streaming router: classification, snapshot broadcasts, the replay ledger, the pipeline.

See :mod:`routing.router.pipeline` for one micro-batch's path; ``jobs/route.py``
is the spark-submit entry point.
"""

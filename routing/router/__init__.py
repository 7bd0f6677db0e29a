"""The streaming router: classification, snapshot broadcasts, the replay ledger, the pipeline.

See :mod:`routing.router.pipeline` (the :class:`~routing.router.pipeline.Router`) for one micro-batch's path;
``jobs/route.py`` is the spark-submit entry point. Beside it, one job each: :mod:`~routing.router.columns` (the
column expressions of a batch's frames), :mod:`~routing.router.classify` (classification in the JVM),
:mod:`~routing.router.metrics` (the per-batch figures), :mod:`~routing.router.tables` (the output tables),
:mod:`~routing.router.snapshots` and :mod:`~routing.router.snapshot_files` (the published snapshots),
:mod:`~routing.router.ledger` (each batch's snapshot version), :mod:`~routing.router.connect` (the router on
Spark Connect) and :mod:`~routing.router.listener` (the progress listener).
"""

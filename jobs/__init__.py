"""Runnable jobs (``python -m jobs.<name>``); each takes the standard ``--conf``/``--set`` flags."""

"""Paths and URIs opened with ``pyarrow.fs``: files a job keeps beside its tables and checkpoints without Spark.

:func:`arrow_filesystem` maps a directory setting to a pyarrow filesystem and a path in it: local
paths, ``file:``, ``s3://`` (and Hadoop's ``s3a://``/``s3n://`` names for the same buckets),
``gs://``, ``hdfs://`` and ``abfs[s]://``, as far as pyarrow was built with them. Used by the snapshot
files (:mod:`routing.router.snapshot_files`) and by the checkpoint files (:mod:`routing.checkpoints`)
where there is no JVM to reach Hadoop's FileSystem (Spark Connect) or the directory is on the local
disk (:func:`on_local_filesystem`).
"""

from __future__ import annotations

import os
from typing import Any

from routing.settings import is_uri


def on_local_filesystem(directory: str, default_fs: str = "file:///") -> bool:
    """Whether ``directory`` is on the local filesystem: a ``file:`` URI, or a plain path when Hadoop's
    ``fs.defaultFS`` (``default_fs``) is the local one (with an HDFS default, a plain path is on HDFS)."""
    if is_uri(directory):
        return directory.split(":", 1)[0].lower() == "file"
    return default_fs.split(":", 1)[0].lower() == "file"


class FilesystemUnavailable(RuntimeError):
    """pyarrow cannot open the directory's filesystem (the message says which URI and why)."""


def arrow_filesystem(directory: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path within it) of ``directory``; :class:`FilesystemUnavailable` if it cannot."""
    import pyarrow.fs as pafs

    if not is_uri(directory):
        return pafs.LocalFileSystem(), os.path.abspath(directory)
    scheme, rest = directory.split(":", 1)
    # Hadoop's S3 connectors name the same buckets s3a:// (and the old s3n://).
    uri = f"s3:{rest}" if scheme.lower() in ("s3a", "s3n") else directory
    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except Exception as error:  # pyarrow raises ArrowInvalid / ArrowNotImplementedError / OSError
        raise FilesystemUnavailable(f"pyarrow cannot open {directory!r}: {error}") from error
    return filesystem, path

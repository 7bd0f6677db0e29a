"""Whether a table setting is a catalog table name or a path: a leaf, so the settings can check their table
settings without importing the Delta layer (:mod:`routing.delta_tables`) that reads them.
"""

from __future__ import annotations

import re

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_TABLE_NAME = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER}){{1,2}}")


def is_table_name(value: str) -> bool:
    """Whether a table setting names a catalog table (``schema.table``, ``catalog.schema.table``) rather than a path."""
    return _TABLE_NAME.fullmatch(value) is not None

"""Tests of the benchmark code, beside it.

``bench/``'s scripts import their neighbours as top-level modules (``harness``, ``stream``), so this folder's
tests do too: bench/ goes on ``sys.path``. The benchmarks' tiny end-to-end runs use the suite's own broker
fixtures, ``settings`` and ``kafka_broker`` of ``tests/conftest.py`` (its var/ paths under the session's tmp dir,
its broker reuse). That file is loaded from its path under a name of its own: ``conftest`` is whichever folder's
pytest loaded last, and ``tests.conftest`` is this file to mypy (whose roots include bench/). This folder is a
package (``bench.tests``), so pytest does not take its conftest for ``conftest``, which ``tests/`` imports.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1]
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))


def _suite_conftest(name: str = "suite_conftest") -> ModuleType:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH.parent / "tests" / "conftest.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


settings = _suite_conftest().settings
kafka_broker = _suite_conftest().kafka_broker

"""The notebooks: committed without outputs, and ``notebooks/explore.ipynb`` runs top to bottom.

The run executes every cell in a real IPython kernel (nbclient) against the test session's
broker (passed to the kernel as ``ROUTER__KAFKA__*`` variables, so the notebook reuses it and
leaves it running) with the notebook's state under a pytest tmp dir. The notebook's own
``assert`` cells are the checks: matchers agree with the regex oracle, conservation of
messages, the ``router_metrics`` table sums to the output tables, time travel shows the
applied change. Any failing cell fails this test with the cell's traceback.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from routing.settings import REPO_ROOT, Settings

if TYPE_CHECKING:
    from jobs.local_kafka import Broker

EXPLORE = REPO_ROOT / "notebooks" / "explore.ipynb"
#: Seconds one cell may run (Spark start-up and the stream on a loaded 2-core machine).
CELL_TIMEOUT_S = 600


def committed_notebooks() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "*.ipynb"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO_ROOT / name for name in listed]


def test_explore_notebook_is_tracked() -> None:
    assert EXPLORE in committed_notebooks()


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_notebooks_are_committed_without_outputs(path: Path) -> None:
    """Outputs and execution counts never reach git (strip them with ``.venv/bin/nbstripout FILE``)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    dirty = [
        index
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert dirty == [], f"{path.name}: cells {dirty} carry outputs or execution counts"
    assert "widgets" not in notebook.get("metadata", {}), "widget state is output too"


@pytest.mark.integration
@pytest.mark.slow
def test_explore_notebook_runs_top_to_bottom(
    settings: Settings,
    kafka_broker: Broker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """The notebook as it is, on a real Spark Connect server (``spark.remote``).

    Connect only: its API is the narrower one (no ``sparkContext``, no RDDs), so a notebook that runs there uses
    nothing a classic session lacks, and every other test runs on classic sessions; a second run cost 75 s.
    """
    import nbformat
    from nbclient import NotebookClient

    from jobs.local_kafka import answers

    kafka = settings.kafka
    monkeypatch.setenv("ROUTER__SPARK__REMOTE", request.getfixturevalue("connect_server").url)
    for name, value in {
        "ROUTER__KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "ROUTER__KAFKA__CLIENT_PORT": str(kafka.client_port),
        "ROUTER__KAFKA__CONTROLLER_PORT": str(kafka.controller_port),
        "ROUTER__KAFKA__DATA_DIR": kafka.data_dir,
        "EXPLORE_WORK_DIR": str(tmp_path / "notebook"),
    }.items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.read(EXPLORE, as_version=4)  # type: ignore[no-untyped-call]  # nbformat has no hints here
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(REPO_ROOT)}}
    )
    client.execute()  # raises CellExecutionError (with the cell's traceback) if any cell fails

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    charts = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(charts) >= 3, "subscription statistics, matcher comparison and per-batch metrics each draw a chart"
    assert (tmp_path / "notebook" / "router_metrics" / "_delta_log").is_dir()
    assert answers(settings), "the notebook reused the session's broker and must leave it running"

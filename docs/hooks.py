"""MkDocs hook (mkdocs.yml ``hooks``): the benchmarks' results files, bench/results/*.md with their charts and
anything else they link, become ``results/`` of the site, so the performance page links each file rather than
copying its figures.

Documentation tooling only: nothing in the library imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"


def on_files(files: Files, config: Any) -> Files:
    for path in sorted(RESULTS.iterdir()):
        # Not a run's temporary file (bench/results/*.tmp is git-ignored) nor a dot file.
        if path.is_file() and path.suffix != ".tmp" and not path.name.startswith("."):
            files.append(
                File(
                    f"results/{path.name}",
                    src_dir=str(RESULTS.parent),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files

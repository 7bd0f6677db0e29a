"""Build the class-data archive that starts every Spark driver JVM faster (:mod:`routing.class_archive`).

    python -m jobs.class_archive [--force] [--conf FILE] [--set SECTION.KEY=VALUE ...]

Writes the archive for the current settings' JDK, pyspark and jars into ``spark.class_archive`` unless
it is there already (then it does nothing, at once); ``--force`` rebuilds it. A build runs a small Delta,
streaming and Arrow workload in a child Spark session whose JVM dumps its classes at exit: a minute
or two on 2 cores; its output goes to ``build.log`` beside the archive. Concurrent runs build it once.
``make test`` and ``make demo`` run this first.

Exit status: 0 built or already there (or ``spark.class_archive`` is empty: off); 1 the build failed
(the log's tail says why); 2 bad flags or settings, no Java, or the jars are missing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from routing.class_archive import ClassArchiveError, build
from routing.config import ConfigError
from routing.settings import add_settings_arguments, settings_from_args
from routing.spark import SparkJarsMissingError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.class_archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild the archive even if it exists")
    add_settings_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ConfigError as error:
        print(f"class_archive: {error}", file=sys.stderr)
        return 2
    if not settings.spark.class_archive:
        print("class_archive: spark.class_archive is empty (off): nothing to build")
        return 0
    try:
        result = build(settings, force=args.force, log=lambda line: print(f"class_archive: {line}", flush=True))
    except (SparkJarsMissingError, ValueError) as error:
        print(f"class_archive: {error}", file=sys.stderr)
        return 2
    except ClassArchiveError as error:
        print(f"class_archive: {error}", file=sys.stderr)
        return 2 if error.usage else 1
    if not result.built:
        print(f"class_archive: {result.path} is up to date ({result.size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

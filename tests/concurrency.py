"""A shared harness: writer threads on disjoint subscribers while reader threads look up."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any


def run_writers_and_readers(
    matcher: Any,
    patterns: Sequence[str],
    read_once: Callable[[], None],
    *,
    writers: int,
    ops_per_writer: int,
    readers: int = 2,
) -> set[tuple[str, str]]:
    """Run seeded subscribe/unsubscribe writers and looping readers at once; return the model state.

    Each writer uses its own subscriber ids, so the final state does not depend on the
    interleaving: it is the union of the writers' sequential models. Any exception in any thread
    fails the caller.
    """
    errors: list[BaseException] = []
    models: list[set[tuple[str, str]]] = [set() for _ in range(writers)]
    done = threading.Event()

    def write(index: int) -> None:
        rng = random.Random(index)
        model = models[index]
        try:
            for _ in range(ops_per_writer):
                pair = (rng.choice(patterns), f"w{index}-{rng.randrange(3)}")
                if rng.random() < 0.6:
                    matcher.subscribe(*pair)
                    model.add(pair)
                else:
                    matcher.unsubscribe(*pair)
                    model.discard(pair)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    def read() -> None:
        try:
            while not done.is_set():
                read_once()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    writer_threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    reader_threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in reader_threads + writer_threads:
        thread.start()
    for thread in writer_threads:
        thread.join()
    done.set()
    for thread in reader_threads:
        thread.join()
    assert not errors, errors
    return set().union(*models)

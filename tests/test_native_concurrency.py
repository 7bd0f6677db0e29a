"""The native matchers under Python threads: linearizable snapshots, concurrent updates, GIL release.

Every check compares against a sequential model (sets of pairs), never timing.
"""

from __future__ import annotations

import random
import sys
import threading
import time

import pyarrow as pa
import pytest
from concurrency import run_writers_and_readers

from routing.matchers import CSTrieMatcher, FrozenMatcher, Snapshot
from routing.reference import ReferenceMatcher

PATTERNS = ("a.b", "a.*", "#", "a.#", "*.b", "#.b.#", "*.*.*", "a..b", "b", "")
KEYS = ("a.b", "a", "b", "", "a.b.c", "x.b.y", "a..b", "c.c.c")


def known_operations(count: int, seed: int) -> list[tuple[str, str, str]]:
    """Operations that each change the state (so consecutive model states differ)."""
    rng = random.Random(seed)
    held: set[tuple[str, str]] = set()
    ops: list[tuple[str, str, str]] = []
    while len(ops) < count:
        pair = (rng.choice(PATTERNS), f"s{rng.randrange(6)}")
        if pair in held:
            held.discard(pair)
            ops.append(("unsubscribe", *pair))
        else:
            held.add(pair)
            ops.append(("subscribe", *pair))
    return ops


@pytest.mark.timeout(120)
def test_snapshots_are_linearizable() -> None:
    """Each snapshot equals the model after k ops, k within the ops completed around the call."""
    ops = known_operations(1500, seed=11)
    states: list[frozenset[tuple[str, str]]] = [frozenset()]
    for op, pattern, subscriber in ops:
        previous = set(states[-1])
        (previous.add if op == "subscribe" else previous.discard)((pattern, subscriber))
        states.append(frozenset(previous))

    m = CSTrieMatcher()
    completed = [0]  # ops finished; written only by the writer, after each op returns
    # Snapshots are immutable, so reading their pairs after the run sees what they saw.
    observations: list[tuple[int, int, Snapshot]] = []
    errors: list[BaseException] = []
    finished = threading.Event()
    all_started = threading.Barrier(3)

    def write() -> None:
        try:
            all_started.wait()
            for index, (op, pattern, subscriber) in enumerate(ops):
                getattr(m, op)(pattern, subscriber)
                completed[0] = index + 1
                time.sleep(0)  # let the readers in between operations, not only at GIL switch intervals
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            finished.set()

    def read() -> None:
        try:
            all_started.wait()
            # Bounded, so checking them stays cheap; spread over the run by the writer's yields.
            while not finished.is_set() and len(observations) < 300:
                before = completed[0]
                snapshot = m.snapshot()
                after = completed[0]
                observations.append((before, after, snapshot))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sum(1 for before, _, _ in observations if before < len(ops)) > 10, "too few snapshots during the writes"
    for before, after, snapshot in observations:
        seen = snapshot.subscriptions()
        # The op running during the call (index `after`) may or may not be in the snapshot.
        window = range(before, min(after + 1, len(ops)) + 1)
        assert any(states[k] == seen for k in window), f"snapshot matches no state in ops {before}..{after + 1}"
    assert m.subscriptions() == states[-1]


@pytest.mark.timeout(120)
def test_concurrent_updates_and_lookups_end_in_the_sequential_state() -> None:
    m = CSTrieMatcher()

    def read_once() -> None:
        for key in KEYS:
            result = m.lookup(key)
            assert isinstance(result, frozenset)
        snapshot = m.snapshot()
        frozen = snapshot.freeze()
        # A snapshot and what is frozen from it always agree.
        assert frozen.subscriptions() == snapshot.subscriptions()

    final = run_writers_and_readers(m, PATTERNS, read_once, writers=4, ops_per_writer=400)
    assert m.subscriptions() == final
    assert len(m) == len(final)
    oracle = ReferenceMatcher(final)
    frozen = m.freeze()
    for key in KEYS:
        assert m.lookup(key) == oracle.lookup(key)
        assert frozen.lookup(key) == oracle.lookup(key)


@pytest.mark.timeout(120)
def test_match_batch_releases_the_gil() -> None:
    """Another Python thread makes progress while match_batch runs.

    With a huge switch interval the interpreter never forces a GIL hand-over,
    so the counter thread (which yields the GIL voluntarily each step) can only
    advance during the call if the call releases the GIL itself.
    """
    rng = random.Random(2)
    frozen = FrozenMatcher([(f"k{i}.*.#", f"s{i % 50}") for i in range(2000)] + [("#.x", "x")])
    batch = pa.array([f"k{rng.randrange(3000)}.{i}.x" for i in range(400_000)])
    counter = [0]
    stop = threading.Event()
    started = threading.Event()

    def count() -> None:
        started.set()
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)  # releases the GIL, so the main thread can take it back

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    thread = threading.Thread(target=count)
    try:
        thread.start()
        started.wait()
        before = counter[0]
        result = frozen.match_batch(batch)
        during = counter[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(old_interval)
        thread.join()
    assert len(result) == len(batch)
    assert during > 100, f"counter advanced only {during} times during match_batch"

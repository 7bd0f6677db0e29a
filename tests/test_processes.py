"""``routing.processes``: the one liveness rule of the local broker and the local Spark cluster.

A zombie (exited, not yet reaped) counts as dead, both as a process and as the last member of its
group; a group whose leader exited stays alive while a child it left behind runs. Real processes,
each in a session of its own; every one is killed and reaped at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from routing.processes import group_alive, process_alive, process_state


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@contextlib.contextmanager
def session(command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command, start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def test_a_zombie_counts_as_dead() -> None:
    with session(["sleep", "30"]) as process:
        assert process_alive(process.pid) and group_alive(process.pid)
        os.kill(process.pid, signal.SIGKILL)
        # Not reaped yet: the process is a zombie, still listed in /proc and in its group.
        assert wait_for(lambda: (process_state(process.pid) or ("", 0))[0] == "Z")
        assert not process_alive(process.pid)
        assert not group_alive(process.pid)
        process.wait(timeout=10)
        assert process_state(process.pid) is None and not group_alive(process.pid)


def test_a_group_outlives_its_leader_while_a_member_runs() -> None:
    # The leader starts a member in the background and exits: a launcher script and its JVM.
    with session(["sh", "-c", "sleep 30 & exit 0"]) as leader:
        assert wait_for(lambda: not process_alive(leader.pid))
        assert group_alive(leader.pid), "the background sleep is still in the group"
        os.killpg(leader.pid, signal.SIGKILL)
        assert wait_for(lambda: not group_alive(leader.pid))


def test_no_such_process() -> None:
    with session(["true"]) as process:
        process.wait(timeout=10)
    assert not process_alive(process.pid) and not group_alive(process.pid)


@pytest.mark.parametrize("module", ["jobs.local_kafka", "jobs.cluster"])
def test_the_jobs_use_the_one_helper(module: str) -> None:
    import importlib

    loaded = importlib.import_module(module)
    assert loaded.group_alive is group_alive
    assert not hasattr(loaded, "_group_alive")

"""Process liveness from ``/proc`` (Linux): a checkpoint lease's holder on this host, the local broker and the
local Spark cluster.

One rule for both: a process is alive unless it is gone or in state ``Z`` (a zombie: it has
exited and only its exit status waits to be collected) or ``X`` (dead). A process group is
alive while any of its processes is, so a group whose leader exited is still alive while a
child it left behind (a JVM forked by a launcher script) runs.
"""

from __future__ import annotations

import os
from pathlib import Path

#: ``/proc/<pid>/stat`` states of a process that has exited.
DEAD_STATES = frozenset({"Z", "X"})


def stat_fields(stat: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` (or ``task/<tid>/stat``) line after the parenthesised command name,
    which may itself hold spaces and ')': state (field 3) first, so field n is at index n - 3."""
    return stat.rsplit(")", 1)[1].split()


def process_state(pid: int) -> tuple[str, int] | None:
    """(state letter, process group id) of ``pid``, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat_fields(stat)  # state, ppid, pgrp, ...
    return fields[0], int(fields[2])


def process_started(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None when there is no such process): a pid reused by
    another process has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat_fields(stat)[19])  # field 22, starttime


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    state = process_state(pid)
    return state is not None and state[0] not in DEAD_STATES


def group_alive(pgid: int) -> bool:
    """Whether any live process (zombies count as dead) is left in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # the group exists (someone else's); look at its members
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        state = process_state(int(entry.name))
        if state is not None and state[1] == pgid and state[0] not in DEAD_STATES:
            return True
    return False

"""The snapshot refresh thread's priority (``routing.router.snapshots.lower_thread_priority``)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from routing.router.snapshots import lower_thread_priority

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux only")


def thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_only_the_calling_thread_is_lowered() -> None:
    seen: dict[str, int | None] = {}

    def refresh_thread() -> None:
        seen["returned"] = lower_thread_priority(4)
        seen["own"] = thread_nice()

    before = thread_nice()
    thread = threading.Thread(target=refresh_thread)
    thread.start()
    thread.join()
    assert seen == {"returned": min(19, before + 4), "own": min(19, before + 4)}
    assert thread_nice() == before


def test_an_increment_past_the_lowest_priority_stops_there_and_zero_changes_nothing() -> None:
    seen: list[int | None] = []

    def refresh_thread() -> None:
        seen.append(lower_thread_priority(0))
        seen.append(thread_nice())
        seen.append(lower_thread_priority(19))
        seen.append(lower_thread_priority(19))

    before = thread_nice()
    thread = threading.Thread(target=refresh_thread)
    thread.start()
    thread.join()
    assert seen == [None, before, 19, 19]

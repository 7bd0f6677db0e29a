"""``jobs.cluster.free_ports``: ports that stay free until bound, outside the kernel's ephemeral range.

A test session's broker binds its ports minutes after they are chosen; an ephemeral port could be
taken meanwhile by any outgoing connection (a clean-clone run once lost its broker that way). Real
sockets: a port the test binds first is skipped.
"""

from __future__ import annotations

import itertools
import socket

import pytest
from conftest import WORKER_PORT_BAND, worker_port_start

from jobs.cluster import (
    LOWEST_FREE_PORT,
    ephemeral_port_range,
    free_port_candidates,
    free_ports,
)

#: (ephemeral range, the candidates: the larger span outside it, from 10000).
CANDIDATE_TABLE = [
    ((32768, 60999), range(10000, 32768)),  # Linux's default: below it
    ((49152, 65535), range(10000, 49152)),  # the IANA range
    ((1024, 40000), range(40001, 65536)),  # a range from low ports: above it
    ((10000, 65535), range(10000, 10000)),  # nothing left: empty
    ((5000, 20000), range(20001, 65536)),
]


@pytest.mark.parametrize(("ephemeral", "expected"), CANDIDATE_TABLE)
def test_candidates_avoid_the_ephemeral_range(ephemeral: tuple[int, int], expected: range) -> None:
    assert free_port_candidates(ephemeral) == expected


def test_free_ports_are_distinct_bindable_and_not_ephemeral() -> None:
    low, high = ephemeral_port_range()
    ports = free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        assert port >= LOWEST_FREE_PORT and not low <= port <= high
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))


def test_a_bound_port_is_skipped() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        (first,) = free_ports(1)
        taken.bind(("127.0.0.1", first))
        taken.listen()
        ports = free_ports(2, start=first)
    assert first not in ports and len(set(ports)) == 2


def test_a_start_outside_the_candidates_is_refused() -> None:
    low, _high = ephemeral_port_range()
    with pytest.raises(ValueError, match="outside"):
        free_ports(1, start=low)


def test_xdist_workers_search_disjoint_bands() -> None:
    last_offset = WORKER_PORT_BAND - 1
    bands = sorted(
        (worker_port_start(f"gw{index}", offset=0) or 0, worker_port_start(f"gw{index}", offset=last_offset) or 0)
        for index in range(8)
    )
    assert all(first >= LOWEST_FREE_PORT for first, _ in bands)
    # Each band [first, last] lies wholly before the next one's first port.
    assert all(last < next_first for (_, last), (next_first, _) in itertools.pairwise(bands))
    assert worker_port_start("main", offset=3) is None
    assert worker_port_start("gwx", offset=3) is None

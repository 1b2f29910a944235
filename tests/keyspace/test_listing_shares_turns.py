"""Many listings at once share one slice of the event loop per turn (issue 27, "Fair under floods"), on
a real server.

``LISTINGS`` clients each send one ``KEYS`` with a costly glob over ``NAMES`` 1 KiB names and read
nothing until the end. Once every request is under way (MONITOR shows them) and until every listing
has answered, another client's ``PING`` and ``INCR`` round trips are timed: their median stays within
``BOUND`` seconds. The bound is generous (a loaded 2-core machine), yet it fails where each listing
takes a slice of its own per turn of the loop (a turn then lasts up to ``LISTINGS`` slices, and every
round trip needs a turn). Every listing answers the same names, in byte order.

The server is stopped by its fixture; waits are conditions with deadlines; nothing else is timed.
"""

from __future__ import annotations

import select
import socket
import statistics
import time
from collections.abc import Callable

import pytest
from march_harness import MarchServer, RespConn
from march_harness.resp import encode

from march.glob import compile_glob

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]

NAMES = 200  # 1 KiB names: ~10 slices of matching each listing (~2 ms a slice)
LISTINGS = 60  # listings at once (the flood row has 20 flooding connections)
# Seconds: the median round trip of another client while the listings run. Generous: measured 2 ms
# after, 49-66 ms before (a turn held a slice of each listing then, and every round trip needs a turn).
BOUND = 0.020
ROUND_TRIPS = 10  # at least this many round trips timed while every listing runs
DEADLINE = 240.0  # seconds for the whole test's waits
# A glob with nothing to anchor on (as tests/keyspace/test_listing_takes_turns.py's): every 1 KiB name
# costs a full match, ~14 names a slice; it keeps the names with a 7 in the last three digits.
GLOB = b"*" + b"[a-b]" * 400 + b"[^a]*7*"


def name(i: int) -> bytes:
    return b"prefix:" + b"a" * 1000 + b"%04d" % i  # 1,011 bytes: under the default max_key_len (1,024)


def create(conn: RespConn, names: list[bytes]) -> None:
    """INCR each name once (pipelined): a new sequence each."""
    conn.send(b"".join(encode("INCR", n) for n in names))
    assert [conn.read_reply() for _ in names] == [1] * len(names)


def arrived(sock: socket.socket) -> bool:
    """A byte of a reply is waiting on ``sock`` (checked without waiting)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


@pytest.mark.timeout(400)
def test_many_listings_at_once_leave_other_clients_a_short_loop_turn(march_server: MarchServer) -> None:
    names = [name(i) for i in range(NAMES)]
    glob = compile_glob(GLOB)
    want = sorted(n for n in names if glob.match(n))
    assert 0 < len(want) < NAMES
    deadline = time.monotonic() + DEADLINE
    with march_server.conn(timeout=120) as admin:
        create(admin, names)
    listers = [RespConn(march_server.port, timeout=120) for _ in range(LISTINGS)]
    try:
        times: list[float] = []
        with march_server.conn(timeout=120) as monitor, march_server.conn(timeout=120) as other:
            assert monitor.call("MONITOR") == "OK"
            for lister in listers:
                lister.send(encode("KEYS", GLOB))
            started = 0
            while started < LISTINGS:  # every listing under way (their requests read and dispatched)
                assert time.monotonic() < deadline, "the listings did not start"
                started += '"KEYS"' in str(monitor.read_reply())
            while not all(arrived(lister.sock) for lister in listers):
                assert time.monotonic() < deadline, "the listings did not answer"
                sent = time.perf_counter()
                assert other.call("PING") == "PONG"
                between = time.perf_counter()
                assert isinstance(other.call("INCR", "other:counter"), int)
                times += [between - sent, time.perf_counter() - between]
        # The listings took long enough to be measured meanwhile.
        assert len(times) >= ROUND_TRIPS, f"only {len(times)} round trips while the listings ran"
        median = statistics.median(times)
        assert median < BOUND, f"median round trip {median * 1000:.1f} ms while {LISTINGS} listings ran"
        for lister in listers:
            assert lister.read_reply() == want
    finally:
        for lister in listers:
            lister.close()
    assert "Traceback" not in march_server.log_tail(1 << 20)

"""Replies that grow with the clients or the log entries are bounded (issue 16 §1, row 4), on a real
march process with thousands of real connections.

- CLIENT LIST with thousands of connections is made a slice at a time: another client's PING,
  sent just after it, is answered before the listing arrives (ordering, not wall-clock time).
- CLIENT LIST that would pass the caller's ``max_output_buffer`` is refused before it is built:
  an error reply, the connection kept, and the server's peak RSS barely moves (it used to build
  the whole reply, ~2x its size, then drop the connection).
- ACL LOG entries are capped (object and user name as SLOWLOG cuts arguments, client-info fields):
  128 denials of 1 MB keys leave the log, and an ACL LOG reply, at a few hundred KB (they used to
  hold ~128 MB, and an admin's ACL LOG passed the 64 MB output limit and was dropped).
- INFO does not grow with the clients.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from march_harness import MarchServer, RespConn, RespError, wait_until
from march_harness.resp import encode

from march import errors

pytestmark = pytest.mark.e2e

CLIENTS = 3000  # idle connections for the listing tests (the machine's fd limit is far above)
LISTINGS = 10  # CLIENT LISTs pipelined at once: ~40 slices during which another client's request runs
MiB = 1 << 20


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """A process's ``VmRSS`` (resident now) or ``VmHWM`` (peak resident) in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


@pytest.fixture
def idle_clients(march_server: MarchServer) -> Iterator[list[socket.socket]]:
    """``CLIENTS`` idle connections to ``march_server``, all accepted (CLIENT LIST shows them)."""
    with ExitStack() as stack:
        address = ("127.0.0.1", march_server.port)
        socks = [stack.enter_context(socket.create_connection(address)) for _ in range(CLIENTS)]
        with RespConn(march_server.port) as c:
            wait_until(lambda: _connected(c) >= CLIENTS + 1, message="every connection accepted")
        yield socks


def _connected(c: RespConn) -> int:
    found = re.search(rb"connected_clients:(\d+)", c.call("INFO", "clients"))
    assert found is not None
    return int(found.group(1))


def test_client_list_with_thousands_of_clients_lets_others_run(
    march_server: MarchServer, idle_clients: list[socket.socket]
) -> None:
    """Ten CLIENT LISTs pipelined, then the last connection renames itself: made a slice at a time,
    the later listings show the new name (the rename ran between their slices). Made in one step
    each, all ten were answered before the rename ran: none showed it."""
    with RespConn(march_server.port) as lister, RespConn(march_server.port) as late:
        late_id = late.call("CLIENT", "ID")
        lister.send(encode("CLIENT", "LIST") * LISTINGS)
        late.send(encode("CLIENT", "SETNAME", "renamed-meanwhile"))
        listings = [lister.read_reply() for _ in range(LISTINGS)]
        assert late.read_reply() == "OK"
        for listing in listings:
            assert isinstance(listing, bytes)
            assert len(listing.splitlines()) == CLIENTS + 2  # the idle ones, the lister, the late one
        (late_line,) = [line for line in listings[-1].decode().splitlines() if line.startswith(f"id={late_id} ")]
        assert " name=renamed-meanwhile " in late_line, late_line
        info = lister.call("INFO", "everything")
        assert len(info) < 16 * 1024  # INFO does not grow with the clients


def test_client_list_past_the_output_limit_is_refused_before_it_is_built(
    march_factory: Callable[..., MarchServer],
) -> None:
    server = march_factory(extra_args=["--max-output-buffer", str(4 * MiB)])
    with ExitStack() as stack:
        named = [stack.enter_context(RespConn(server.port)) for _ in range(150)]
        for c in named:  # 150 library names of 512 KiB: a 75 MB listing, 18 times the caller's limit
            assert c.call("CLIENT", "SETINFO", "LIB-NAME", "n" * (MiB // 2)) == "OK"
        with RespConn(server.port) as admin:
            peak_before = rss_kib(server.pid, "VmHWM")
            reply = admin.call("CLIENT", "LIST")
            assert reply == RespError(errors.CLIENT_LIST_TOO_LARGE.format(4 * MiB))
            grown = rss_kib(server.pid, "VmHWM") - peak_before
            assert grown < 32 * 1024, f"peak RSS grew by {grown} KiB for a refused CLIENT LIST"
            mine = admin.call("CLIENT", "LIST", "ID", admin.call("CLIENT", "ID"))  # a narrow one still works
            assert isinstance(mine, bytes) and mine.count(b"\n") == 1
            assert admin.call("PING") == "PONG"


def test_acl_log_entries_are_capped(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(requirepass="bounded-admin-pw")
    with RespConn(server.port) as admin:
        assert admin.call("AUTH", "bounded-admin-pw") == "OK"
        assert admin.call("ACL", "SETUSER", "lim", "on", ">lim-pw", "~allowed:*", "+@all") == "OK"
        rss_before = rss_kib(server.pid)
        with RespConn(server.port) as lim:
            assert lim.call("AUTH", "lim", "lim-pw") == "OK"
            assert lim.call("CLIENT", "SETINFO", "LIB-NAME", "l" * (MiB // 2)) == "OK"
            for i in range(140):  # 140 denials, each of its own 1 MB key: 128 entries kept
                assert isinstance(lim.call("INCR", b"%03d" % i + b"k" * (MiB - 16)), RespError)
        # every entry kept (ACL LOG alone shows 10, as Redis); 128 MB here before: past the 64 MB output limit, dropped
        log = admin.call("ACL", "LOG", "200")
        rss_after = rss_kib(server.pid)
        size = len(admin.raw_log)
    assert len(log) == 128
    for entry in log:
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        assert fields[b"reason"] == b"key"
        assert re.fullmatch(rb"\d{3}k{125}\.\.\. \(\d+ more bytes\)", fields[b"object"]), fields[b"object"][:200]
        info = fields[b"client-info"].decode()
        assert re.search(r" lib-name=l{128}\.\.\. ", info), info[:400]
        assert all(len(item) < 300 for item in info.split(" "))
    assert size < 400 * 1024, f"ACL LOG reply of {size} bytes"
    assert rss_after - rss_before < 40 * 1024, f"RSS grew by {rss_after - rss_before} KiB"

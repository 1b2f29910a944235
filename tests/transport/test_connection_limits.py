"""Every limit of a connection, against a real march process started with that limit:
``--max-args``, ``--max-bulk-len``, ``--max-inline-len``, ``--max-clients``, ``--timeout`` and
``--max-output-buffer`` / back-pressure. A limit costs the offending client an error or its
connection; the server keeps serving everyone else.

What the code does for a client that pipelines and does not read (march/server.py): when its unsent
replies pass the transport's high-water mark (256 KiB), the server stops reading from it until they
drain (back-pressure); if they still pass ``max_output_buffer`` the client is disconnected. Both
paths are tested below.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from march_harness import MarchServer, serving, wait_until
from march_harness.raw import Raw, barrier, bulk, info_field, mb

pytestmark = pytest.mark.e2e

MAX_ARGS = 8
MAX_BULK = 4096
MAX_INLINE = 1024

MULTIBULK_ERROR = b"-ERR Protocol error: invalid multibulk length\r\n"
BULK_ERROR = b"-ERR Protocol error: invalid bulk length\r\n"
INLINE_ERROR = b"-ERR Protocol error: too big inline request\r\n"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    args = ["--max-args", str(MAX_ARGS), "--max-bulk-len", str(MAX_BULK), "--max-inline-len", str(MAX_INLINE)]
    server = MarchServer.in_dir(tmp_path_factory.mktemp("limits"), extra_args=args)
    with serving(server, during="the module"):
        yield server


def refused(server: MarchServer, payload: bytes, reply: bytes, key: str) -> None:
    """``payload`` gets exactly ``reply`` and a close; another connection and new ones carry on."""
    with Raw(server.port) as other:
        other.send(mb("INCR", key))
        first = other.read_int()
        with Raw(server.port) as bad:
            bad.send(payload)
            bad.expect_closed(reply)
        other.call(mb("INCR", key), b":%d\r\n" % (first + 1))
    with Raw(server.port) as fresh:
        fresh.call(mb("INCR", key), b":%d\r\n" % (first + 2))


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    return "limits:" + request.node.name


# --- max-args ---------------------------------------------------------------------------------


def test_max_args_accepted_up_to_the_limit(limited: MarchServer) -> None:
    keys = [f"limits:none{i}" for i in range(MAX_ARGS - 1)]
    with Raw(limited.port) as c:
        c.call(mb("MGET", *keys), b"*%d\r\n" % len(keys) + b"$-1\r\n" * len(keys))
        c.call(b"MGET " + " ".join(keys).encode() + b"\r\n", b"*%d\r\n" % len(keys) + b"$-1\r\n" * len(keys))


def test_max_args_multibulk(limited: MarchServer, key: str) -> None:
    refused(limited, mb("MGET", *[f"k{i}" for i in range(MAX_ARGS)]), MULTIBULK_ERROR, key)


def test_max_args_inline(limited: MarchServer, key: str) -> None:
    refused(limited, b"MGET " + b" ".join(b"k%d" % i for i in range(MAX_ARGS)) + b"\r\n", MULTIBULK_ERROR, key)


def test_max_args_header_refused_at_once(limited: MarchServer) -> None:
    with Raw(limited.port) as c:
        c.send(b"*%d\r\n" % (MAX_ARGS + 1))
        c.expect_closed(MULTIBULK_ERROR, timeout=3)


# --- max-bulk-len -------------------------------------------------------------------------------


def test_bulk_at_the_limit(limited: MarchServer) -> None:
    with Raw(limited.port) as c:
        c.call(mb("ECHO", "x" * MAX_BULK), bulk("x" * MAX_BULK))


@pytest.mark.parametrize("length", [MAX_BULK + 1, 10**12])
def test_huge_bulk_header_refused_without_the_body(limited: MarchServer, key: str, length: int) -> None:
    # Only the header is sent: the error must come at once, not after the body.
    refused(limited, b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % length, BULK_ERROR, key)


@pytest.mark.parametrize("length", [MAX_BULK + 1, 10**12])
def test_huge_bulk_header_in_a_later_read(limited: MarchServer, length: int) -> None:
    with Raw(limited.port) as c:
        c.send(b"*2\r\n$4\r\nECHO\r\n")
        barrier(limited.port)
        c.send(b"$%d\r\n" % length)
        c.expect_closed(BULK_ERROR, timeout=2)


def test_oversized_bulk_in_small_reads_is_not_run(limited: MarchServer) -> None:
    with Raw(limited.port) as c:
        c.send(b"*2\r\n$4\r\nECHO\r\n")
        barrier(limited.port)
        c.send(b"$%d\r\n" % (MAX_BULK + 1))
        body = b"x" * (MAX_BULK + 1) + b"\r\n"
        try:
            for i in range(0, len(body), 2000):
                barrier(limited.port)
                c.send(body[i : i + 2000])
        except OSError:
            pass  # refused and closed while the body was still coming: what Redis does
        c.expect_closed(BULK_ERROR, timeout=2)


def test_oversized_bulk_with_its_body_is_not_run(limited: MarchServer) -> None:
    with Raw(limited.port) as c:
        c.send(mb("PING") + mb("ECHO", "x" * (MAX_BULK + 1)))
        c.expect_closed(b"+PONG\r\n" + BULK_ERROR)


# --- max-inline-len -----------------------------------------------------------------------------


def test_inline_below_the_limit(limited: MarchServer) -> None:
    payload = "x" * (MAX_INLINE - 10)
    with Raw(limited.port) as c:
        c.call(f"ECHO {payload}\r\n".encode(), bulk(payload))


def test_inline_too_long(limited: MarchServer, key: str) -> None:
    refused(limited, b"ECHO " + b"x" * (2 * MAX_INLINE) + b"\r\n", INLINE_ERROR, key)


def test_inline_too_long_refused_before_its_newline(limited: MarchServer, key: str) -> None:
    refused(limited, b"ECHO " + b"x" * (MAX_INLINE + 100), INLINE_ERROR, key)


# --- max-clients --------------------------------------------------------------------------------


def connect_served(port: int) -> Raw:
    """A connection that the server has accepted as a client (retried while slots free up)."""

    def attempt() -> Raw | None:
        c = Raw(port)
        c.send(b"PING\r\n")
        if c.read_line() == b"+PONG\r\n":
            return c
        c.close()
        return None

    return wait_until(attempt, timeout=10, message="a connection to be served")


def test_max_clients(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(extra_args=["--max-clients", "2"])
    first = connect_served(server.port)
    second = connect_served(server.port)
    try:
        with Raw(server.port) as extra:
            extra.expect_closed(b"-ERR max number of clients reached\r\n")
        first.call(mb("INCR", "limits:clients"), b":1\r\n")  # the clients already in are served
        second.call(mb("INCR", "limits:clients"), b":2\r\n")
        assert int(info_field_via(first, "stats", "rejected_connections")) >= 1
    finally:
        second.close()
    # the freed slot is given to the next client
    third = connect_served(server.port)
    third.call(mb("INCR", "limits:clients"), b":3\r\n")
    third.close()
    first.close()


def info_field_via(c: Raw, section: str, field: str) -> str:
    c.send(mb("INFO", section))
    for line in c.read_bulk().decode().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    raise AssertionError(f"no {field} in INFO {section}")


# --- timeout ------------------------------------------------------------------------------------


def test_idle_client_is_closed(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(extra_args=["--timeout", "1"])
    with Raw(server.port) as idle, Raw(server.port) as active:
        idle.assert_open()
        idle_since = time.monotonic()
        deadline = idle_since + 10
        while not idle.closed_within(0.2):  # closed with no reply, as Redis does
            assert time.monotonic() < deadline, "the idle connection was not closed within 10 s"
            active.assert_open()  # a client that keeps talking is never idle
        assert time.monotonic() - idle_since >= 0.9, "closed before it had been idle for --timeout"
        active.assert_open()
        assert info_field_via(active, "stats", "idle_timeouts") == "1"
    with Raw(server.port) as fresh:
        fresh.assert_open()


# --- output buffer and back-pressure ------------------------------------------------------------


def client_ids(port: int) -> set[int]:
    with Raw(port) as c:
        c.send(mb("CLIENT", "LIST"))
        text = c.read_bulk().decode()
    return {int(line.split()[0].removeprefix("id=")) for line in text.splitlines() if line}


def test_client_over_max_output_buffer_is_disconnected(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(extra_args=["--max-output-buffer", "65536"])
    with Raw(server.port) as probe:
        probe.send(mb("COMMAND"))
        reply_size = len(probe.read_reply())
    n = 600  # megabytes of replies for a few KB of requests: far more than the socket buffers hold
    with Raw(server.port, rcvbuf=4096) as hog, Raw(server.port) as other:
        hog.send(mb("CLIENT", "ID"))
        hog_id = hog.read_int()
        hog.send(b"COMMAND\r\n" * n)  # and never read
        wait_until(lambda: hog_id not in client_ids(server.port), timeout=20, message="the hog to be disconnected")
        other.call(mb("INCR", "limits:obuf"), b":1\r\n")  # everyone else is served
        received = hog.read_until_closed(timeout=20)
        assert len(received) < n * reply_size
    with Raw(server.port) as fresh:
        fresh.call(mb("INCR", "limits:obuf"), b":2\r\n")


def test_backpressure_pauses_a_client_that_does_not_read(march_factory: Callable[..., MarchServer]) -> None:
    """A client that pipelines 12 MB and reads nothing is paused, not disconnected, and not buffered.

    While the client does not read, the kernel holds at most its receive window (about 128 KiB: the
    window only grows as the application reads) plus the server's send buffer (4 MiB at most here).
    Had the server kept reading, it would have had to buffer more than the 2 MiB ``max-output-buffer``
    and disconnected the client. Instead every reply arrives, in order, once the client reads.
    """
    server = march_factory(extra_args=["--max-output-buffer", str(2 << 20)])
    payloads = [b"%08d" % i + b"x" * 992 for i in range(12_000)]
    requests = b"".join(b"ECHO " + p + b"\r\n" for p in payloads)
    expected = b"".join(bulk(p) for p in payloads)
    sent = [0]
    errors: list[BaseException] = []
    with Raw(server.port, timeout=30) as hog:

        def send_all() -> None:
            try:
                for i in range(0, len(requests), 1 << 16):
                    chunk = requests[i : i + (1 << 16)]
                    hog.sock.sendall(chunk)
                    sent[0] = i + len(chunk)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        try:
            wait_until(lambda: sent[0] >= 2 << 20 or errors, timeout=20, message="2 MB of requests sent")
            assert not errors, errors
            with Raw(server.port) as other:  # the server serves others while the hog is stuck
                other.call(mb("INCR", "limits:bp"), b":1\r\n")
                other.assert_open()
            received = hog.read_exact(len(expected), timeout=60)
        finally:
            sender.join(timeout=60)
        assert not sender.is_alive()
        assert not errors, errors
        if received != expected:
            at = next(i for i, (a, b) in enumerate(zip(received, expected, strict=True)) if a != b)
            raise AssertionError(f"replies differ at byte {at}: {received[at - 40 : at + 40]!r}")
        hog.assert_open()


def test_info_reports_limits(limited: MarchServer) -> None:
    assert info_field(limited.port, "clients", "maxclients") == "10000"
    with Raw(limited.port) as c:
        c.call(
            mb("CONFIG", "GET", "max-args"),
            b"*2\r\n$8\r\nmax-args\r\n$%d\r\n%d\r\n" % (len(str(MAX_ARGS)), MAX_ARGS),
        )

"""Raw-socket helpers for protocol tests: ``Raw`` asserts exact reply bytes; ``barrier`` makes a
request split across two server reads without sleeping (see its docstring); ``mb`` is
``march_harness.resp.encode``, one request as a RESP multibulk of bulk strings. ``PASSWORD`` is the
password of the ``locked`` servers (tests/conftest.py).
"""

from __future__ import annotations

import select
import time

import pytest

from march_harness.resp import Connection
from march_harness.resp import encode as mb

PASSWORD = "s3cret pass"  # a space: it must arrive as one argument


class Raw(Connection):
    """A raw TCP connection: send bytes, expect exact bytes, see the server close it."""

    def __init__(self, port: int, timeout: float = 5.0, rcvbuf: int | None = None) -> None:
        super().__init__(port, timeout=timeout, rcvbuf=rcvbuf)

    def _recv(self, deadline: float) -> bytes:
        """One recv before ``deadline``: b'' means closed by the peer; TimeoutError past the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        try:
            return self.sock.recv(1 << 16)
        except ConnectionResetError:
            return b""

    def expect(self, expected: bytes, timeout: float | None = None) -> None:
        """The next bytes from the server are exactly ``expected``; fails as soon as they differ."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < len(expected):
            if not expected.startswith(self.buf):
                break
            try:
                chunk = self._recv(deadline)
            except TimeoutError:
                raise AssertionError(f"timed out: expected {expected!r}, got only {self.buf!r}") from None
            if not chunk:
                raise AssertionError(f"connection closed: expected {expected!r}, got {self.buf!r}")
            self.buf += chunk
        got, self.buf = self.buf[: len(expected)], self.buf[len(expected) :]
        assert got == expected

    def call(self, data: bytes, expected: bytes) -> None:
        self.send(data)
        self.expect(expected)

    def read_exact(self, n: int, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n:
            chunk = self._recv(deadline)
            if not chunk:
                raise AssertionError(f"connection closed after {len(self.buf)} of {n} bytes: {self.buf[-200:]!r}")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_line(self) -> bytes:
        deadline = time.monotonic() + self.timeout
        while b"\r\n" not in self.buf:
            chunk = self._recv(deadline)
            if not chunk:
                raise AssertionError(f"connection closed while reading a line: {self.buf!r}")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def read_reply(self) -> bytes:
        """The exact bytes of one reply of any RESP2/RESP3 type."""
        line = self.read_line()
        kind = line[:1]
        if kind in b"+-:_,#(":
            return line
        n = int(line[1:-2])
        if kind in b"$=!":
            return line + (self.read_exact(n + 2) if n >= 0 else b"")
        if kind in b"*~>":
            return line + b"".join(self.read_reply() for _ in range(max(n, 0)))
        if kind in b"%|":
            return line + b"".join(self.read_reply() for _ in range(2 * n))
        raise AssertionError(f"not a RESP reply: {line!r}")

    def read_int(self) -> int:
        line = self.read_line()
        assert line[:1] == b":", line
        return int(line[1:-2])

    def read_bulk(self) -> bytes:
        """The payload of one bulk (or RESP3 verbatim) string reply."""
        reply = self.read_reply()
        assert reply[:1] in (b"$", b"="), reply
        return reply.split(b"\r\n", 1)[1][:-2]

    def read_until_closed(self, timeout: float = 5.0) -> bytes:
        """Everything the server sends until it closes the connection; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        out, self.buf = self.buf, b""
        while True:
            try:
                chunk = self._recv(deadline)
            except TimeoutError:
                raise AssertionError(f"connection still open after {timeout}s; received {out!r}") from None
            if not chunk:
                return out
            out += chunk

    def expect_closed(self, expected: bytes, timeout: float = 5.0) -> None:
        """The server sends exactly ``expected`` and closes; fails as soon as the bytes differ."""
        deadline = time.monotonic() + timeout
        out, self.buf = self.buf, b""
        while expected.startswith(out):
            try:
                chunk = self._recv(deadline)
            except TimeoutError:
                raise AssertionError(f"connection still open after {timeout}s; received {out!r}") from None
            if not chunk:
                break
            out += chunk
        assert out == expected

    def closed_within(self, timeout: float) -> bool:
        """True if the server closes the connection (no bytes arriving) within ``timeout``."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        self.sock.settimeout(1.0)
        try:
            chunk = self.sock.recv(1 << 16)
        except ConnectionResetError:
            return True
        assert not chunk, f"unexpected bytes from the server: {chunk!r}"
        return True

    def assert_open(self) -> None:
        self.call(b"PING\r\n", b"+PONG\r\n")


def bulk(data: bytes | str) -> bytes:
    b = data.encode() if isinstance(data, str) else data
    return b"$%d\r\n%s\r\n" % (len(b), b)


def barrier(port: int) -> None:
    """Two PING round trips on a fresh connection.

    On loopback, ``sendall`` has put its bytes in the server's socket queue when it returns. The
    first PONG means the server's event loop ran an iteration in which every socket readable then
    was read; the second PONG needs one more iteration. So everything sent on any connection before
    this call has been read (and parsed) by the server: what is sent next arrives in a new read.
    """
    with Raw(port) as c:
        c.call(b"PING\r\n", b"+PONG\r\n")
        c.call(b"PING\r\n", b"+PONG\r\n")


def info_field(port: int, section: str, field: str) -> str:
    with Raw(port) as c:
        c.send(mb("INFO", section))
        text = c.read_bulk().decode()
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    raise AssertionError(f"no {field} in INFO {section}: {text!r}")


def march_bug(reason: str) -> pytest.MarkDecorator:
    """A known march bug: the test fails today. Strict, so a fix makes it fail until the mark goes."""
    return pytest.mark.xfail(strict=True, reason="march bug: " + reason)

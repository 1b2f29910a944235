"""A deliberately small, independent RESP client for tests: raw bytes in and out, one reply at
a time, RESP2 and RESP3 replies. Errors come back as `RespError` values (not raised) so a
reply from march can be compared to a reply from redis-server with `==`.

It shares no code with march's own protocol layer on purpose: a bug there must not be
mirrored here.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar

T = TypeVar("T")


class RespError:
    """An error reply (`-ERR ...` or RESP3 `!`). Compares equal to another with the same text."""

    def __init__(self, message: str) -> None:
        self.message = message

    @property
    def prefix(self) -> str:
        return self.message.split(" ", 1)[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RespError) and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)

    def __repr__(self) -> str:
        return f"RespError({self.message!r})"


class Push(list[Any]):
    """A RESP3 push message (`>`)."""


def encode(*args: bytes | str | int) -> bytes:
    """One request as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Connection:
    """One TCP connection (TCP_NODELAY) with a buffer of received bytes not yet consumed; `send()`
    writes bytes as they are. Closed by `close()` or at the end of a `with` block.

    `rcvbuf` sets SO_RCVBUF before connecting, so the TCP window starts that small.
    """

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0, rcvbuf: int | None = None) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.settimeout(timeout)
            sock.connect((host, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            sock.close()  # a refused connect (a server still starting) must not leak the socket
            raise
        self.sock = sock
        self.timeout = timeout
        self.buf = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


class RespConn(Connection):
    """One TCP connection. `call()` sends a command and returns its parsed reply."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        super().__init__(port, host, timeout)
        self.raw_log = b""  # every byte of every reply read, for exact-bytes assertions

    def call(self, *args: bytes | str | int) -> Any:
        self.send(encode(*args))
        return self.read_reply()

    def call_raw(self, *args: bytes | str | int) -> bytes:
        """The exact bytes of the reply to one command."""
        self.send(encode(*args))
        return self.read_reply_raw()

    def read_reply_raw(self) -> bytes:
        before = len(self.raw_log)
        self.read_reply()
        return self.raw_log[before:]

    def read_reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-" or kind == b"!":
            if kind == b"!":
                rest = self._exact(int(rest))
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"(":
            return int(rest)
        if kind == b",":
            return float(rest)
        if kind == b"#":
            return rest == b"t"
        if kind == b"_":
            return None
        if kind in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n)
            if kind == b"=":
                return data[4:]  # drop the "txt:" format prefix
            return data
        if kind in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return None
            items = [self.read_reply() for _ in range(n)]
            if kind == b"~":
                return set(items) if all(_hashable(i) for i in items) else items
            return Push(items) if kind == b">" else items
        if kind == b"%" or kind == b"|":
            n = int(rest)
            pairs = {}
            for _ in range(n):
                k = self.read_reply()
                pairs[_freeze(k)] = self.read_reply()
            if kind == b"|":  # attribute: metadata for the reply that follows
                return self.read_reply()
            return pairs
        raise AssertionError(f"not a RESP reply: {line!r}")

    def read_available(self, timeout: float = 0.5) -> bytes:
        """Whatever arrives until the peer closes or nothing comes for `timeout` seconds."""
        out, self.buf = self.buf, b""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        finally:
            self.sock.settimeout(old)
        self.raw_log += out
        return out

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the server closes this connection within `timeout` (pending bytes are discarded)."""
        deadline = time.monotonic() + timeout
        self.buf = b""
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = self.sock.recv(65536)
                except TimeoutError:
                    return False
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        return False

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by server")
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2 :]
                self.raw_log += line + b"\r\n"
                return line
            self._fill()

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        self.raw_log += data + b"\r\n"
        return data


def _hashable(x: object) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _freeze(x: Any) -> Any:
    return tuple(x) if isinstance(x, list) else x


def wait_until(
    predicate: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.01, message: str = "condition"
) -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds.

    Exceptions from the predicate count as "not yet" (a server that is still starting refuses
    connections); the last one is shown if the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as e:
            last_exc = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}; last error: {last_exc!r}")
        time.sleep(interval)

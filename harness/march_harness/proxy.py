"""A TCP proxy the test controls, to put a network partition between a march node and etcd.

`TcpProxy(target_port)` listens on a free 127.0.0.1 port and forwards every connection to
127.0.0.1:target_port, bytes as they are (gRPC over HTTP/2 included). `cut()` makes a
partition, `restore()` heals it, `reset()` closes every connection it carries, `close()`
ends it all.

A cut is a blackhole, as a pulled cable is: nothing is delivered in either direction, no
connection is closed or refused; new connections are accepted (the kernel would complete the
handshake anyway) but not connected onwards. Bytes that arrive during the cut are held, not
dropped: TCP over a partitioned link retransmits them, so after `restore()` they arrive late,
in order, which is what a healed network does (a dropped byte in the middle of an HTTP/2
stream is something a real network never does). Held connections are connected onwards on
`restore()`.

Threads: one accepting, two per connection (one per direction), all daemons, all ended by
`close()`; each waits on events or socket timeouts, never sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Self

POLL = 0.1  # how often blocked threads look at the closed flag


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()  # set: forwarding; clear: partitioned
        self._open.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self.accepted = 0
        self._spawn(self._accept_loop, "accept")

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return not self._open.is_set()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut(self) -> None:
        """Partition: from now on no byte crosses in either direction until `restore()`."""
        self._open.clear()

    def restore(self, reset: bool = False) -> None:
        """Heal: held bytes and held connections go through, in order. With ``reset``, every
        connection open during the cut is closed first, as after a partition long enough for TCP
        to give up; new connections go through."""
        if reset:
            self.reset()
        self._open.set()

    def reset(self) -> None:
        """Close every connection now (both sides see the close); new ones are still accepted."""
        with self._lock:
            socks = list(self._sockets)
        for s in socks:
            _close(s)

    def close(self) -> None:
        self._closed.set()
        self._open.set()  # wake every waiter so it sees the closed flag
        _close(self._listener)
        self.reset()
        for t in self._threads:
            t.join(5)

    # -- internals -------------------------------------------------------------------------
    def _spawn(self, target: Callable[..., object], name: str, *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=f"proxy:{self.port}:{name}", daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _track(self, s: socket.socket) -> bool:
        with self._lock:
            if self._closed.is_set():
                return False
            self._sockets.add(s)
            return True

    def _untrack(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(s)
        _close(s)

    def _wait_open(self) -> bool:
        """Block while cut; False once the proxy is closed."""
        while not self._open.wait(POLL):
            if self._closed.is_set():
                return False
        return not self._closed.is_set()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # listener closed
            self.accepted += 1
            if not self._track(client):
                _close(client)
                return
            self._spawn(self._connect, "conn", client)

    def _connect(self, client: socket.socket) -> None:
        if not self._wait_open():  # a connection made during a cut waits for the network to heal
            self._untrack(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            self._untrack(client)  # target down: the client sees its connection closed
            return
        if not self._track(upstream):
            _close(upstream)
            self._untrack(client)
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(POLL)
        self._spawn(self._pump, "up", client, upstream)
        self._spawn(self._pump, "down", upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                if not self._wait_open():
                    return
                try:
                    chunk = src.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                # Cut while this chunk was in flight: hold it (and read no more) until healed.
                if not self._wait_open() or not self._send_all(dst, chunk):
                    return
        except OSError:
            return
        finally:
            # One direction ended: end the other too, as the peer would see.
            self._untrack(src)
            self._untrack(dst)

    def _send_all(self, dst: socket.socket, data: bytes) -> bool:
        """Like sendall, but a peer that reads slowly (or is paused) is waited for, not timed out."""
        view = memoryview(data)
        while view:
            if self._closed.is_set():
                return False
            try:
                view = view[dst.send(view) :]
            except TimeoutError:
                continue
        return True


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()

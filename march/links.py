"""Forwarding links: pooled, pipelined, authenticated RESP connections from this node to a primary.

In ``redirect forward`` mode a node relays a key request it cannot serve to the group's primary
(``commands.forward``); this module is the wire under it. ``Links`` keeps, per (primary address,
RESP version), up to ``POOL_SIZE`` ``Link`` connections. A link is pipelined: requests are written
in the order they come and replies matched to them first in, first out (``reply_end`` finds where
one raw reply ends; replies are relayed as the primary encoded them, never decoded).

A link is plain TCP to the primary's advertised address, or with ``tls_cluster`` TLS to its TLS
address (``link_tls``). Opening a link is a challenge-response on ``cluster_secret`` (the secret
never travels):
``MARCH.LINK HELLO`` gets a fresh nonce from the primary, ``MARCH.LINK AUTH <node> <proof>`` answers
``proof(secret, nonce)`` (HMAC-SHA256, hex); then ``HELLO 3`` for a RESP3 pool. Each request runs
there as the user it came from: a link announces a user (``MARCH.LINK AS <user>``) before the
first request of another user than the one before, in the same write.

What it must never do: send a request again. A request whose link breaks (or whose primary does
not answer within the request's deadline: the link is then closed) fails with ``LinkLost``: it may
have run, and only the client may decide to try again (a lost INCR reply is a gap, never a
duplicate). A request is written once, on one link; a link that could not be opened (``LinkDown``)
had nothing written to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from . import log as march_log
from .config import Config
from .resp import encode_request

log = logging.getLogger("march")

LINK_COMMAND = b"march.link"  # the internal command (``commands.forward``): no user can run it
POOL_SIZE = 4  # links per primary and protocol: a pipelined link carries thousands of requests a second; a few
# spread the primary's reading over its connections without one per client
CONNECT_TIMEOUT = 2.0  # seconds to connect and authenticate a link (loopback or LAN: milliseconds)
RETRY_AFTER = 1.0  # seconds before a link that failed to open is tried again for readiness (``warm``)
_PROOF_CONTEXT = b"march-link\0"  # what the HMAC covers besides the nonce: a proof for nothing else

_LINE = frozenset(b"+-:,#_(")  # replies of one line
_BULK = frozenset(b"$=!")  # a length, then that many bytes
_AGGREGATE = frozenset(b"*~>")  # a count of replies
_PAIRS = frozenset(b"%|")  # a count of pairs of replies (an attribute ``|`` is followed by its reply)


def link_tls(config: Config) -> ssl.SSLContext | None:
    """The client side of TLS links (``tls_cluster``): primaries' certificates checked against
    ``tls_ca_cert_file`` (and their advertised host), this node's client certificate shown
    (``tls_client_cert_file``, else ``tls_cert_file``). None without ``tls_cluster``."""
    if not config.tls_cluster:
        return None
    context = ssl.create_default_context(cafile=config.tls_ca_cert_file)
    context.load_cert_chain(
        config.tls_client_cert_file or config.tls_cert_file, config.tls_client_key_file or config.tls_key_file
    )
    return context


class LinkDown(Exception):
    """No link to the primary could be opened: nothing was sent."""


class LinkLost(Exception):
    """The link broke (or was closed for its silence) before the reply: the request may have run."""


class LinkTimeout(LinkLost):
    """The primary did not answer in time (the link was closed): the request may have run."""


class LinkProtocolError(Exception):
    """The far end sent bytes that are not a RESP reply."""


def proof(secret: bytes, nonce: bytes) -> bytes:
    """What a node that knows ``secret`` answers to ``nonce`` (hex)."""
    return hmac.new(secret, _PROOF_CONTEXT + nonce, hashlib.sha256).hexdigest().encode()


def proof_ok(secret: bytes, nonce: bytes, answer: bytes) -> bool:
    """Whether ``answer`` proves ``secret`` for ``nonce`` (compared in constant time)."""
    return hmac.compare_digest(proof(secret, nonce), answer)


def reply_end(buf: bytes | bytearray, pos: int) -> int:
    """Where the one complete RESP2/RESP3 reply that starts at ``pos`` ends; -1 if it is not complete.
    The work is linear in the reply's elements (the primary bounds a reply by its max_output_buffer)."""
    todo, n = 1, len(buf)
    while todo:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return -1
        kind = buf[pos]
        todo -= 1
        if kind in _LINE:
            pos = eol + 2
            continue
        try:
            size = int(buf[pos + 1 : eol])
        except ValueError:
            raise LinkProtocolError(bytes(buf[pos : eol + 2])) from None
        pos = eol + 2
        if kind in _BULK:
            if size >= 0:
                pos += size + 2
                if pos > n:
                    return -1
        elif kind in _AGGREGATE:
            todo += max(size, 0)
        elif kind in _PAIRS:
            todo += 2 * max(size, 0) + (1 if kind == ord("|") else 0)
        else:
            raise LinkProtocolError(bytes(buf[pos - 2 : pos]))
        if pos >= n and todo:
            return -1
    return pos


@dataclass(slots=True, eq=False)
class _Batch:
    """Requests written together, and the raw replies read for them so far."""

    future: asyncio.Future[list[bytes]]
    count: int
    replies: list[bytes] = field(default_factory=list)


class Link(asyncio.Protocol):
    """One pipelined connection to a primary (see the module docstring)."""

    def __init__(self, addr: str, gone: Callable[[Link], None], proto: int = 2) -> None:
        self.addr = addr
        self.proto = proto
        self._gone = gone
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiting: deque[_Batch] = deque()  # written, not fully answered, in write order
        self.outgoing: list[bytes] = []  # requests of this loop turn, not written yet (``_flush``)
        self.user: bytes | None = None  # whom the far end runs this link's next request as (in write order)
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's are not subclasses)
        self.open = True

    def send(self, requests: list[list[bytes]]) -> asyncio.Future[list[bytes]]:
        """Write ``requests`` at once; the future gets their raw replies (or ``LinkLost``)."""
        future: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        if not self.open or self.transport is None:
            future.set_exception(LinkLost(self.addr))
            return future
        self.waiting.append(_Batch(future, len(requests)))
        if not self.outgoing:  # written together at the end of this loop turn: one write for a pipeline
            asyncio.get_running_loop().call_soon(self._flush)
        self.outgoing.extend(map(encode_request, requests))
        return future

    def _flush(self) -> None:
        outgoing, self.outgoing = self.outgoing, []
        if self.open and self.transport is not None:
            self.transport.write(b"".join(outgoing))

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos = 0
        try:
            while self.waiting:
                end = reply_end(buf, pos)
                if end < 0:
                    break
                batch = self.waiting[0]
                batch.replies.append(bytes(buf[pos:end]))
                pos = end
                if len(batch.replies) == batch.count:
                    self.waiting.popleft()
                    if not batch.future.done():
                        batch.future.set_result(batch.replies)
            if pos < len(buf) and not self.waiting:
                raise LinkProtocolError(bytes(buf[pos : pos + 64]))  # bytes no request asked for
        except LinkProtocolError as exc:
            log.error("forwarding link to %s: not a reply (%r): closing it", self.addr, exc.args[0])
            self.abort()
            return
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        waiting, self.waiting = self.waiting, deque()
        for batch in waiting:
            if not batch.future.done():
                batch.future.set_exception(LinkLost(self.addr))
                batch.future.exception()  # (its client may be gone: no "exception never retrieved")
        self._gone(self)

    def abort(self) -> None:
        """Close at once: every request still waiting on it gets ``LinkLost``."""
        self.open = False
        if self.transport is not None:
            self.transport.abort()


@dataclass(frozen=True, slots=True)
class Sent:
    """Requests written on a link: where, the future of their replies, and whether an ``AS`` went first."""

    link: Link
    future: asyncio.Future[list[bytes]]
    switch: bool


@dataclass
class LinkStats:
    """What the forwarding side counts (INFO stats, /metrics)."""

    forwarded: int = 0  # requests (or transactions) written to a link
    lost: int = 0  # of them, answered with an error because the link broke or timed out
    opened: int = 0  # links opened and authenticated
    failed: int = 0  # links that could not be opened (refused, unreachable, wrong secret)


class Links:
    """This node's links to the primaries, pooled per (address, RESP version)."""

    def __init__(self, secret: str, size: int = POOL_SIZE, timeout: float = CONNECT_TIMEOUT) -> None:
        self.secret = secret.encode()
        self.size = size
        self.timeout = timeout
        self.name = "?"  # this node's id, which the far end names the link after (set once it is known)
        self.tls: ssl.SSLContext | None = None  # links to the primaries' TLS ports (``link_tls``), set at start
        self.stats = LinkStats()
        self._pools: dict[tuple[str, int], list[Link]] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[Link]] = {}
        self._failed_at: dict[str, float] = {}  # address -> when a link to it last failed to open

    async def request(
        self, addr: str, proto: int, user: bytes, requests: list[list[bytes]], timeout: float
    ) -> list[bytes]:
        """Write ``requests`` together on one link to ``addr``, run there as ``user``; their raw replies.
        ``LinkDown``: nothing was sent. ``LinkLost``: the link broke, or ``timeout`` passed (the link
        is then closed), before every reply came: they may have run."""
        link = await self.link(addr, proto)
        if not link.open:  # (closed since it was chosen: nothing was written to it)
            raise LinkDown(addr)
        return await self.replies(self.write(link, user, requests), timeout)

    def open_link(self, addr: str, proto: int, prefer: Link | None) -> Link | None:
        """An open link to ``addr`` now, without waiting: ``prefer`` if it is one (a connection keeps
        its link, so its pipelined requests run in the order it sent them), else the least busy;
        None if none is open."""
        if prefer is not None and prefer.open and prefer.addr == addr and prefer.proto == proto:
            return prefer
        pool = self._pools.get((addr, proto))
        if not pool:
            return None
        best = min(pool, key=lambda k: len(k.waiting))
        if best.waiting and len(pool) < self.size:  # all busy: another link for the connections to come
            self._start(addr, proto)
        return best

    def write(self, link: Link, user: bytes, requests: list[list[bytes]]) -> Sent:
        """Write ``requests`` on ``link`` now, to run there as ``user`` (announced if it changed)."""
        batch = requests
        switch = link.user != user
        if switch:
            batch = [[LINK_COMMAND, b"AS", user], *requests]
            link.user = user
        self.stats.forwarded += 1
        return Sent(link, link.send(batch), switch)

    async def replies(self, sent: Sent, timeout: float) -> list[bytes]:
        """The raw replies of what ``write`` sent; ``LinkLost`` if the link broke first, or ``timeout``
        passed (the link is then closed: its later replies could not be told apart from these)."""
        try:
            if sent.future.done():  # (pipelined: most replies are in by the time they are asked for)
                replies = sent.future.result()
            else:
                replies = await asyncio.wait_for(asyncio.shield(sent.future), timeout)
        except TimeoutError:
            self.stats.lost += 1
            sent.link.abort()
            raise LinkTimeout(sent.link.addr) from None
        except LinkLost:
            self.stats.lost += 1
            raise
        return replies[1:] if sent.switch else replies

    async def link(self, addr: str, proto: int) -> Link:
        """An open link to ``addr``: the least busy of the pool; another is opened while all are busy."""
        key = (addr, proto)
        pool = self._pools.get(key)
        best = min(pool, key=lambda k: len(k.waiting)) if pool else None
        if best is not None and (not best.waiting or len(pool or ()) >= self.size):
            return best
        task = self._start(addr, proto)
        if best is not None:
            return best  # busy, but a pipelined link still carries it; the new one serves later requests
        return await asyncio.shield(task)

    def _start(self, addr: str, proto: int) -> asyncio.Task[Link]:
        """Open a link to ``addr`` in the background (one at a time per address and protocol)."""
        key = (addr, proto)
        task = self._opening.get(key)
        if task is None:
            task = self._opening[key] = asyncio.get_running_loop().create_task(self._open(addr, proto))
            task.add_done_callback(lambda t: self._opened(key, t))
        return task

    def _opened(self, key: tuple[str, int], task: asyncio.Task[Link]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # (retrieved: whoever awaited it got it too)

    async def _open(self, addr: str, proto: int) -> Link:
        host, _, port = addr.rpartition(":")
        loop = asyncio.get_running_loop()
        link = Link(addr, self._gone, proto)
        try:
            host = host.strip("[]")
            connecting = loop.create_connection(
                lambda: link, host, int(port), ssl=self.tls, server_hostname=host if self.tls else None
            )
            await asyncio.wait_for(connecting, self.timeout)
            await asyncio.wait_for(self._handshake(link, proto), self.timeout)
        except (OSError, ValueError, TimeoutError, LinkLost, LinkDown) as exc:  # (ssl.SSLError is an OSError)
            self.stats.failed += 1
            self._failed_at[addr] = time.monotonic()
            link.abort()
            march_log.event(
                log, logging.WARNING, "forward_link", "cannot open a forwarding link to %s: %s", addr, exc or type(exc)
            )
            raise LinkDown(addr) from exc
        self._failed_at.pop(addr, None)
        self.stats.opened += 1
        self._pools.setdefault((addr, proto), []).append(link)
        return link

    async def _handshake(self, link: Link, proto: int) -> None:
        """Prove the secret on ``link`` (and switch it to RESP3 for a RESP3 pool); LinkDown if refused."""
        (nonce,) = await link.send([[LINK_COMMAND, b"HELLO"]])
        if not nonce.startswith(b"$"):
            raise LinkDown(f"{link.addr} refused the link: {nonce[:80]!r}")
        nonce = nonce.split(b"\r\n")[1]
        requests = [[LINK_COMMAND, b"AUTH", self.name.encode(), proof(self.secret, nonce)]]
        if proto == 3:
            requests.append([b"HELLO", b"3"])
        replies = await link.send(requests)
        refused = next((r for r in replies if r.startswith(b"-")), None)
        if refused is not None:
            raise LinkDown(f"{link.addr} refused the link: {refused[:80]!r}")

    def _gone(self, link: Link) -> None:
        for pool in self._pools.values():
            if link in pool:
                pool.remove(link)

    def reachable(self, addr: str) -> bool:
        """Whether an authenticated link to ``addr`` is open now."""
        return any(k[0] == addr and any(link.open for link in pool) for k, pool in self._pools.items())

    def warm(self, addr: str) -> None:
        """Open a link to ``addr`` in the background if none is open (readiness asks for it), at most
        once per ``RETRY_AFTER`` after a failure."""
        if self.reachable(addr) or time.monotonic() - self._failed_at.get(addr, -RETRY_AFTER) < RETRY_AFTER:
            return
        self._start(addr, 2)

    async def close(self) -> None:
        """Close every link (at shutdown); links being opened are cancelled."""
        for task in list(self._opening.values()):
            task.cancel()
        for task in list(self._opening.values()):
            with contextlib.suppress(BaseException):
                await task
        for pool in list(self._pools.values()):
            for link in list(pool):
                link.abort()
        self._pools.clear()

"""Forwarding links: pooled, multiplexed, mutually authenticated RESP connections from this node to a primary.

In ``redirect forward`` mode a node relays a key request it cannot serve to the group's primary
(``commands.forward``); this module is the wire under it. ``Links`` keeps, per primary (``Peer``: its
address and its node id as registered in etcd) and RESP version, up to ``POOL_SIZE`` ``Link``
connections.

**Opening a link proves both ends.** ``MARCH.LINK HELLO`` gets the listener's fresh nonce; ``MARCH.LINK
AUTH <node> <peer> <nonce> <proof> <proto>`` sends this node's id, the id of the node it means to
reach, a fresh nonce of its own and ``proof(INITIATOR, ...)``; the listener, once that checks, answers
``proof(RESPONDER, ...)``, which this node checks before it writes anything else (a listener that
cannot prove the secret is refused: ``LinkDown``, counted in ``LinkStats.unproven``). Each proof is
an HMAC-SHA256 on ``cluster_secret`` (which never travels) over both nonces, both node ids and the
direction, so a proof is worth nothing anywhere else: relayed to another node (its id differs),
reflected back (the direction differs) or replayed (a nonce differs). On plain TCP the bytes after
the handshake are not protected: ``tls_cluster`` (and ``tls_cluster_required``) for that.

**A link never makes one client wait for another.** After the handshake every request carries a
lane (``[lane, user, command, args...]``; the lane is the entry node's client id) and every reply
comes back tagged with its lane (``*2 :lane reply``). The primary runs each lane's requests in the
order they came and different lanes independently (``waiting.Lanes``), and answers each request
when it is done: a request that waits there (a store write, the timestamp lead cap) holds back only
the later requests of its own lane, that is of its own client. Replies are relayed as the primary
encoded them, never decoded (``reply_end`` finds where one ends).

What it must never do: send a request again. A request whose link breaks fails with ``LinkLost``: it
may have run, and only the client may decide to try again (a lost INCR reply is a gap, never a
duplicate). A request whose primary does not answer within its deadline fails with ``LinkTimeout``
(it may have run too); the link stays (the reply, if it comes, is dropped) unless the primary does
not answer a ``PING`` on the control lane within ``PROBE_TIMEOUT`` either: then it is taken for dead
and closed. A request is written once, on one link; a link that could not be opened (``LinkDown``)
had nothing written to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from march import log as march_log
from march.config import Config
from march.resp import encode_request

log = logging.getLogger("march")

LINK_COMMAND = b"march.link"  # the internal command (``commands.forward``): no user can run it
POOL_SIZE = 4  # links per primary and protocol: a link carries thousands of requests a second; a few
# spread the primary's reading over its connections without one per client
CONNECT_TIMEOUT = 2.0  # seconds to connect and authenticate a link (loopback or LAN: milliseconds)
RETRY_AFTER = 1.0  # seconds before a link that failed to open is tried again for readiness (``warm``)
# Seconds a primary has to answer the control lane's PING once a request on the link timed out: a
# live primary answers it at once whatever its lanes wait for, so silence that long is a dead peer.
PROBE_TIMEOUT = 2.0
CONTROL = 0  # the link's own lane (its PING); the entry node's client ids, the other lanes, start at 1
NONCE_BYTES = 16  # of randomness in each nonce (sent as 32 hex digits): never repeats
NONCE_MAX = 128  # bytes of a nonce accepted from the other end (a longer one is no nonce of ours)
INITIATOR = b"initiator"  # the role of the node that opens a link (it proves first)...
RESPONDER = b"responder"  # ...and of the listener (it proves once the initiator's proof checks)
_PROOF_CONTEXT = b"march-link/2\0"  # what the HMAC covers besides its fields: a proof for nothing else
_TAG = b"*2\r\n:"  # how a reply on a proven link starts: a two-element array, its lane, then the reply

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
    """The link broke before the reply: the request may have run."""


class LinkTimeout(LinkLost):
    """The primary did not answer in time: the request may have run."""


class LinkProtocolError(Exception):
    """The far end sent bytes that are not a reply this link asked for."""


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a link goes: the primary's address, and its node id as registered in etcd (what the
    listener there must prove to be)."""

    addr: str
    node: str


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES).hex().encode()


def proof(
    secret: bytes, role: bytes, initiator: bytes, responder: bytes, initiator_nonce: bytes, responder_nonce: bytes
) -> bytes:
    """What a node that knows ``secret`` answers in ``role`` on a link from ``initiator`` to
    ``responder`` (node ids) with these nonces (hex). Every field is length-prefixed: no two
    different handshakes have the same message."""
    fields = (role, initiator, responder, initiator_nonce, responder_nonce)
    message = _PROOF_CONTEXT + b"".join(b"%d:%s" % (len(f), f) for f in fields)
    return hmac.new(secret, message, hashlib.sha256).hexdigest().encode()


def proof_ok(
    secret: bytes,
    role: bytes,
    initiator: bytes,
    responder: bytes,
    initiator_nonce: bytes,
    responder_nonce: bytes,
    answer: bytes,
) -> bool:
    """Whether ``answer`` is ``proof(...)`` of these fields (compared in constant time)."""
    return hmac.compare_digest(proof(secret, role, initiator, responder, initiator_nonce, responder_nonce), answer)


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


def _bulk(reply: bytes) -> bytes | None:
    """The string a raw bulk reply holds; None for any other reply."""
    if not reply.startswith(b"$") or reply.startswith(b"$-"):
        return None
    return reply.partition(b"\r\n")[2][:-2]


@dataclass(slots=True, eq=False)
class _Batch:
    """Requests written together, and the raw replies read for them so far."""

    future: asyncio.Future[list[bytes]]
    count: int
    replies: list[bytes] = field(default_factory=list)


# Longer than 100 lines: one connection whole (writing, matching tagged replies to lanes, the probe).
class Link(asyncio.Protocol):
    """One connection to a primary (see the module docstring): untagged while its handshake runs
    (``call``), then every request on a lane and every reply matched to its lane (``send``)."""

    def __init__(self, peer: Peer, gone: Callable[[Link], None], proto: int = 2) -> None:
        self.peer = peer
        self.addr = peer.addr
        self.proto = proto
        self._gone = gone
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.handshake: deque[_Batch] = deque()  # written while untagged, not fully answered, in order
        self.lanes: dict[int, deque[_Batch]] = {}  # each lane's batches written, not fully answered, in order
        self.pending = 0  # batches written and not fully answered, every lane together
        self.outgoing: list[bytes] = []  # requests of this loop turn, not written yet (``_flush``)
        self.tagged = False  # the handshake is over: requests carry their lane, replies a tag
        self.open = False
        self.probe: asyncio.Future[list[bytes]] | None = None  # the control lane's PING in flight (``check_alive``)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's are not subclasses)
        self.open = True

    def call(self, requests: list[list[bytes]]) -> asyncio.Future[list[bytes]]:
        """Write ``requests`` as they are (the handshake); the future gets their raw replies."""
        future: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        if not self.open or self.transport is None:
            future.set_exception(LinkLost(self.addr))
            return future
        self.handshake.append(_Batch(future, len(requests)))
        self._queue(b"".join(map(encode_request, requests)))
        return future

    def send(self, lane: int, user: bytes, requests: list[list[bytes]]) -> asyncio.Future[list[bytes]]:
        """Write ``requests`` at once on ``lane``, to run there as ``user``; the future gets their
        raw replies (or ``LinkLost``)."""
        future: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        if not self.open or self.transport is None:
            future.set_exception(LinkLost(self.addr))
            return future
        queue = self.lanes.get(lane)
        if queue is None:
            queue = self.lanes[lane] = deque()
        queue.append(_Batch(future, len(requests)))
        self.pending += 1
        tag = b"%d" % lane
        self._queue(b"".join([encode_request([tag, user, *request]) for request in requests]))
        return future

    def _queue(self, data: bytes) -> None:
        if not self.outgoing:  # written together at the end of this loop turn: one write for a pipeline
            asyncio.get_running_loop().call_soon(self._flush)
        self.outgoing.append(data)

    def _flush(self) -> None:
        outgoing, self.outgoing = self.outgoing, []
        if self.open and self.transport is not None:
            self.transport.write(b"".join(outgoing))

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos, n = 0, len(buf)
        try:
            while pos < n:
                end = reply_end(buf, pos)
                if end < 0:
                    break
                if self.tagged:
                    self._tagged(buf, pos, end)
                else:
                    self._untagged(bytes(buf[pos:end]))
                pos = end
        except LinkProtocolError as exc:
            log.error("forwarding link to %s: not a reply it asked for (%r): closing it", self.addr, exc.args[0])
            self.abort()
            return
        del buf[:pos]

    def _untagged(self, reply: bytes) -> None:
        if not self.handshake:
            raise LinkProtocolError(reply[:64])  # bytes no request asked for
        batch = self.handshake[0]
        batch.replies.append(reply)
        if len(batch.replies) == batch.count:
            self.handshake.popleft()
            if not batch.future.done():
                batch.future.set_result(batch.replies)

    def _tagged(self, buf: bytearray, pos: int, end: int) -> None:
        """The reply ``buf[pos:end]`` (``*2 :lane reply``): the next one of its lane's oldest batch."""
        eol = buf.find(b"\r\n", pos + 5)
        if buf[pos : pos + 5] != _TAG or not 0 < eol < end:
            raise LinkProtocolError(bytes(buf[pos : pos + 64]))
        try:
            lane = int(buf[pos + 5 : eol])
        except ValueError:
            raise LinkProtocolError(bytes(buf[pos : eol + 2])) from None
        queue = self.lanes.get(lane)
        if not queue:
            raise LinkProtocolError(b"a reply on lane %d, which waits for none" % lane)
        batch = queue[0]
        batch.replies.append(bytes(buf[eol + 2 : end]))
        if len(batch.replies) == batch.count:
            queue.popleft()
            self.pending -= 1
            if not queue:
                del self.lanes[lane]
            if not batch.future.done():  # (done: its request timed out; the reply is dropped)
                batch.future.set_result(batch.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        batches = [*self.handshake, *(batch for queue in self.lanes.values() for batch in queue)]
        self.handshake, self.lanes, self.pending = deque(), {}, 0
        for batch in batches:
            if not batch.future.done():
                batch.future.set_exception(LinkLost(self.addr))
                batch.future.exception()  # (its client may be gone: no "exception never retrieved")
        self._gone(self)

    def check_alive(self) -> None:
        """A request on this link timed out: its lane may just wait long (its own client's doing),
        or the primary is dead. A PING on the control lane tells: unanswered in ``PROBE_TIMEOUT``,
        the link is closed (every request still on it gets ``LinkLost``)."""
        if self.probe is not None or not self.open or not self.tagged:
            return
        probe = self.probe = self.send(CONTROL, b"", [[b"PING"]])
        timer = asyncio.get_running_loop().call_later(PROBE_TIMEOUT, self._unanswered, probe)
        probe.add_done_callback(lambda done: self._probed(done, timer))

    def _unanswered(self, probe: asyncio.Future[list[bytes]]) -> None:
        if not probe.done() and self.open:
            march_log.event(
                log,
                logging.WARNING,
                "forward_link_dead",
                "forwarding link to %s: the primary answered no PING in %.1fs: closing the link",
                self.addr,
                PROBE_TIMEOUT,
            )
            self.abort()

    def _probed(self, probe: asyncio.Future[list[bytes]], timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        self.probe = None
        if not probe.cancelled():
            probe.exception()  # (retrieved)

    def abort(self) -> None:
        """Close at once: every request still waiting on it gets ``LinkLost``."""
        self.open = False
        if self.transport is not None:
            self.transport.abort()


@dataclass(frozen=True, slots=True)
class Sent:
    """Requests written on a link: where, and the future of their replies."""

    link: Link
    future: asyncio.Future[list[bytes]]


@dataclass
class LinkStats:
    """What the forwarding side counts (INFO stats, /metrics)."""

    forwarded: int = 0  # requests (or transactions) written to a link
    lost: int = 0  # of them, answered with an error because the link broke or timed out
    opened: int = 0  # links opened and authenticated
    failed: int = 0  # links that could not be opened (refused, unreachable, wrong secret)
    unproven: int = 0  # of them, listeners that did not prove the secret (or not as the node expected)
    proofs_failed: int = 0  # links to this node that did not prove the secret (or were refused unchecked)


class Links:
    """This node's links to the primaries, pooled per (primary, RESP version)."""

    def __init__(self, secret: str, size: int = POOL_SIZE, timeout: float = CONNECT_TIMEOUT) -> None:
        self.secret = secret.encode()
        self.size = size
        self.timeout = timeout
        self.name = "?"  # this node's id, which its links prove to be (set once it is known)
        self.tls: ssl.SSLContext | None = None  # links to the primaries' TLS ports (``link_tls``), set at start
        self.stats = LinkStats()
        self._pools: dict[tuple[Peer, int], list[Link]] = {}
        self._opening: dict[tuple[Peer, int], asyncio.Task[Link]] = {}
        self._failed_at: dict[Peer, float] = {}  # primary -> when a link to it last failed to open

    async def request(
        self, peer: Peer, proto: int, lane: int, user: bytes, requests: list[list[bytes]], timeout: float
    ) -> list[bytes]:
        """Write ``requests`` together on ``lane`` of one link to ``peer``, run there as ``user``; their
        raw replies. ``LinkDown``: nothing was sent. ``LinkLost``: the link broke, or ``timeout``
        passed, before every reply came: they may have run."""
        link = await self.link(peer, proto)
        if not link.open:  # (closed since it was chosen: nothing was written to it)
            raise LinkDown(peer.addr)
        return await self.replies(self.write(link, lane, user, requests), timeout)

    def open_link(self, peer: Peer, proto: int, prefer: Link | None) -> Link | None:
        """An open link to ``peer`` now, without waiting: ``prefer`` if it is one (a connection keeps
        its link, so its pipelined requests run in the order it sent them), else the least busy;
        None if none is open."""
        if prefer is not None and prefer.open and prefer.peer == peer and prefer.proto == proto:
            return prefer
        pool = self._pools.get((peer, proto))
        if not pool:
            return None
        best = min(pool, key=lambda k: k.pending)
        if best.pending and len(pool) < self.size:  # all busy: another link for the connections to come
            self._start(peer, proto)
        return best

    def write(self, link: Link, lane: int, user: bytes, requests: list[list[bytes]]) -> Sent:
        """Write ``requests`` on ``lane`` of ``link`` now, to run there as ``user``."""
        self.stats.forwarded += 1
        return Sent(link, link.send(lane, user, requests))

    async def replies(self, sent: Sent, timeout: float) -> list[bytes]:
        """The raw replies of what ``write`` sent; ``LinkLost`` if the link broke first, ``LinkTimeout``
        if ``timeout`` passed (the link stays, unless the primary proves dead: ``Link.check_alive``)."""
        try:
            if sent.future.done():  # (pipelined: most replies are in by the time they are asked for)
                return sent.future.result()
            return await asyncio.wait_for(asyncio.shield(sent.future), timeout)
        except TimeoutError:
            self.stats.lost += 1
            sent.link.check_alive()
            raise LinkTimeout(sent.link.addr) from None
        except LinkLost:
            self.stats.lost += 1
            raise

    async def link(self, peer: Peer, proto: int) -> Link:
        """An open link to ``peer``: the least busy of the pool; another is opened while all are busy."""
        key = (peer, proto)
        pool = self._pools.get(key)
        best = min(pool, key=lambda k: k.pending) if pool else None
        if best is not None and (not best.pending or len(pool or ()) >= self.size):
            return best
        task = self._start(peer, proto)
        if best is not None:
            return best  # busy, but a link still carries it; the new one serves later requests
        return await asyncio.shield(task)

    def _start(self, peer: Peer, proto: int) -> asyncio.Task[Link]:
        """Open a link to ``peer`` in the background (one at a time per primary and protocol)."""
        key = (peer, proto)
        task = self._opening.get(key)
        if task is None:
            task = self._opening[key] = asyncio.get_running_loop().create_task(self._open(peer, proto))
            task.add_done_callback(lambda t: self._opened(key, t))
        return task

    def _opened(self, key: tuple[Peer, int], task: asyncio.Task[Link]) -> None:
        self._opening.pop(key, None)
        if not task.cancelled():
            task.exception()  # (retrieved: whoever awaited it got it too)

    async def _open(self, peer: Peer, proto: int) -> Link:
        host, _, port = peer.addr.rpartition(":")
        loop = asyncio.get_running_loop()
        link = Link(peer, self._gone, proto)
        try:
            host = host.strip("[]")
            connecting = loop.create_connection(
                lambda: link, host, int(port), ssl=self.tls, server_hostname=host if self.tls else None
            )
            await asyncio.wait_for(connecting, self.timeout)
            await asyncio.wait_for(self._handshake(link, proto), self.timeout)
        except (OSError, ValueError, TimeoutError, LinkLost, LinkDown) as exc:  # (ssl.SSLError is an OSError)
            self.stats.failed += 1
            self._failed_at[peer] = time.monotonic()
            link.abort()
            march_log.event(
                log,
                logging.WARNING,
                "forward_link",
                "cannot open a forwarding link to %s (node %s): %s",
                peer.addr,
                peer.node,
                exc or type(exc),
            )
            raise LinkDown(peer.addr) from exc
        self._failed_at.pop(peer, None)
        self.stats.opened += 1
        self._pools.setdefault((peer, proto), []).append(link)
        return link

    async def _handshake(self, link: Link, proto: int) -> None:
        """Prove the secret on ``link`` and have the listener prove it back, as the node it should
        be (``Peer.node``); LinkDown if it refuses, or cannot prove it: then nothing else is sent."""
        (hello,) = await link.call([[LINK_COMMAND, b"HELLO"]])
        theirs = _bulk(hello)
        if theirs is None or not 0 < len(theirs) <= NONCE_MAX:
            raise LinkDown(f"{link.addr} refused the link: {hello[:80]!r}")
        me, peer, mine = self.name.encode(), link.peer.node.encode(), new_nonce()
        mine_proof = proof(self.secret, INITIATOR, me, peer, mine, theirs)
        (answer,) = await link.call([[LINK_COMMAND, b"AUTH", me, peer, mine, mine_proof, b"%d" % proto]])
        if answer.startswith(b"-"):
            raise LinkDown(f"{link.addr} refused the link: {answer[:80]!r}")
        theirs_proof = _bulk(answer)
        if theirs_proof is None or not proof_ok(self.secret, RESPONDER, me, peer, mine, theirs, theirs_proof):
            self.stats.unproven += 1
            march_log.event(
                log,
                logging.WARNING,
                "forward_link_unproven",
                "the listener at %s did not prove the cluster secret as node %s: it is not linked to",
                link.addr,
                link.peer.node,
            )
            raise LinkDown(f"{link.addr} did not prove the cluster secret as node {link.peer.node}")
        link.tagged = True

    def _gone(self, link: Link) -> None:
        for pool in self._pools.values():
            if link in pool:
                pool.remove(link)

    def reachable(self, peer: Peer) -> bool:
        """Whether an authenticated link to ``peer`` is open now."""
        return any(k[0] == peer and any(link.open for link in pool) for k, pool in self._pools.items())

    def warm(self, peer: Peer) -> None:
        """Open a link to ``peer`` in the background if none is open (readiness asks for it), at most
        once per ``RETRY_AFTER`` after a failure."""
        if self.reachable(peer) or time.monotonic() - self._failed_at.get(peer, -RETRY_AFTER) < RETRY_AFTER:
            return
        self._start(peer, 2)

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

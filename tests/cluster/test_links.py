"""The forwarding links (``march.cluster.links``) against a tiny RESP server of the test's own.

The server speaks just enough: the ``MARCH.LINK`` handshake (checking the proof with the secret it
was given, and proving it back as node ``p1``, or not, as a test asks), then lanes: ``ECHO``
(answered as it comes), ``HANG`` (its lane answers nothing more), ``FREEZE`` (nothing more is
answered at all, as a dead primary) and ``DROP`` (the connection is closed, unanswered), and
``PING`` on the control lane. It records every request each connection sent, so a test can see
what was written, in which order, and that nothing was ever sent twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import hiredis
import pytest

from march import errors
from march.cluster import links
from march.cluster.directory import NodeInfo
from march.cluster.links import (
    INITIATOR,
    LINK_COMMAND,
    RESPONDER,
    LinkDown,
    LinkLost,
    Links,
    LinkTimeout,
    Peer,
    proof,
    proof_ok,
    reply_end,
)
from march.commands.forward import _settle
from march.errors import CommandError

SECRET = "s3cret"
ME = "n1"  # the node the links open from


@dataclass
class TinyPrimary:
    secret: bytes
    node: bytes = b"p1"
    proves: str = "yes"  # "yes"; "ok": answers +OK as if no proof were due; "as-other": proves as another node
    seen: list[list[list[bytes]]] = field(default_factory=list)  # per connection, its requests in order
    server: asyncio.Server | None = None
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def addr(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    @property
    def peer(self) -> Peer:
        return Peer(self.addr, self.node.decode())

    def requests(self, name: bytes) -> list[list[bytes]]:
        """Every request of command ``name`` (laned ones without their lane and user)."""
        out = []
        for conn in self.seen:
            for r in conn:
                command = r[2:] if r[0].isdigit() else r
                if command and command[0] == name:
                    out.append(command)
        return out

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parse, seen, nonce, proven, hung, frozen = hiredis.Reader(), [], b"", False, set(), False
        self.seen.append(seen)
        self.writers.append(writer)
        while data := await reader.read(65536):
            parse.feed(data)
            out = []
            while (req := parse.gets()) is not False:
                seen.append(req)
                if not proven:
                    if req[0].lower() == LINK_COMMAND and req[1] == b"HELLO":
                        nonce = os.urandom(16).hex().encode()
                        out.append(b"$32\r\n%s\r\n" % nonce)
                    elif req[0].lower() == LINK_COMMAND and req[1] == b"AUTH" and len(req) == 7:
                        node, me, theirs, answer = req[2:6]
                        if me != self.node or not proof_ok(self.secret, INITIATOR, node, me, theirs, nonce, answer):
                            out.append(b"-WRONGPASS no\r\n")
                            continue
                        proven = True
                        as_node = self.node if self.proves == "yes" else b"p2"
                        back = proof(self.secret, RESPONDER, node, as_node, theirs, nonce)
                        out.append(b"+OK\r\n" if self.proves == "ok" else b"$64\r\n%s\r\n" % back)
                    else:
                        out.append(b"-ERR unknown command\r\n")
                    continue
                lane, command = int(req[0]), req[2:]
                name = command[0].lower()
                frozen = frozen or name == b"freeze"
                if name == b"hang":
                    hung.add(lane)  # like a request that waits there for ever: its lane answers nothing more
                if frozen or lane in hung:
                    continue
                tag = b"*2\r\n:%d\r\n" % lane
                if name == b"echo":
                    out.append(tag + b"$%d\r\n%s\r\n" % (len(command[1]), command[1]))
                elif name == b"ping":
                    out.append(tag + b"+PONG\r\n")
                elif name == b"drop":
                    writer.transport.abort()
                    return
            writer.write(b"".join(out))


@pytest.fixture
async def primary() -> AsyncIterator[TinyPrimary]:
    tiny = TinyPrimary(SECRET.encode())
    tiny.server = await asyncio.start_server(tiny.handle, "127.0.0.1", 0)
    yield tiny
    tiny.server.close()
    for writer in tiny.writers:
        writer.transport.abort()
    await asyncio.sleep(0)  # (the handlers see their connections end)


def new_links(secret: str = SECRET, size: int = 1) -> Links:
    made = Links(secret, size=size)
    made.name = ME
    return made


async def test_pipelined_replies_match_their_requests(primary: TinyPrimary) -> None:
    links = new_links()
    calls = [links.request(primary.peer, 2, 7, b"app", [[b"ECHO", b"%d" % i]], 5.0) for i in range(200)]
    replies = await asyncio.gather(*calls)
    assert replies == [[b"$%d\r\n%d\r\n" % (len(str(i)), i)] for i in range(200)]
    assert len(primary.seen) == 1  # one link: every request pipelined on it, in the order they came
    assert primary.requests(b"ECHO") == [[b"ECHO", b"%d" % i] for i in range(200)]
    assert all(r[:2] == [b"7", b"app"] for r in primary.seen[0][2:])  # each on its lane, as its user
    auth = primary.seen[0][1]  # the nonces and proofs, never the secret
    assert auth[:4] == [LINK_COMMAND, b"AUTH", ME.encode(), b"p1"] and len(auth[4]) == 32 and len(auth[5]) == 64
    assert SECRET.encode() not in b"".join(auth) and auth[6] == b"2"
    # a RESP3 pool is another link, which says so in its AUTH
    assert await links.request(primary.peer, 3, 7, b"app", [[b"ECHO", b"x"]], 5.0) == [b"$1\r\nx\r\n"]
    assert primary.seen[1][1][6] == b"3"
    assert links.stats.opened == 2 and links.stats.forwarded == 201
    await links.close()


async def test_each_request_names_its_lane_and_user(primary: TinyPrimary) -> None:
    links = new_links()
    for lane, user in ((1, b"a"), (1, b"a"), (2, b"b"), (3, b"a")):
        assert await links.request(primary.peer, 2, lane, user, [[b"ECHO", user]], 5.0) == [b"$1\r\n%s\r\n" % user]
    assert primary.seen[0][2:] == [
        [b"1", b"a", b"ECHO", b"a"], [b"1", b"a", b"ECHO", b"a"],
        [b"2", b"b", b"ECHO", b"b"], [b"3", b"a", b"ECHO", b"a"],
    ]  # fmt: skip
    await links.close()


async def test_a_wrong_secret_sends_nothing(primary: TinyPrimary) -> None:
    links = new_links("not-the-secret")
    with pytest.raises(LinkDown):
        await links.request(primary.peer, 2, 1, b"app", [[b"ECHO", b"x"]], 5.0)
    assert primary.requests(b"ECHO") == [] and links.stats.failed == 1 and links.stats.forwarded == 0
    assert not links.reachable(primary.peer)
    await links.close()


@pytest.mark.parametrize("proves", ["ok", "as-other"])
async def test_a_listener_that_cannot_prove_the_secret_is_never_linked_to(primary: TinyPrimary, proves: str) -> None:
    """A listener that answers the proof with OK (as one that never saw the secret would), or proves
    it as another node than the one registered at that address: refused, and nothing else is sent."""
    primary.proves = proves
    links = new_links()
    with pytest.raises(LinkDown):
        await links.request(primary.peer, 2, 1, b"app", [[b"ECHO", b"x"]], 5.0)
    assert [r[1] for r in primary.seen[0]] == [b"HELLO", b"AUTH"]  # and nothing after it
    assert links.stats.unproven == 1 and links.stats.failed == 1 and not links.reachable(primary.peer)
    await links.close()


async def test_a_link_to_another_node_than_the_one_registered_is_refused(primary: TinyPrimary) -> None:
    links = new_links()
    with pytest.raises(LinkDown):  # the listener is p1; the node registered at its address, p9
        await links.request(Peer(primary.addr, "p9"), 2, 1, b"app", [[b"ECHO", b"x"]], 5.0)
    assert primary.requests(b"ECHO") == []
    await links.close()


async def test_a_lost_reply_is_never_sent_again(primary: TinyPrimary) -> None:
    links = new_links()
    with pytest.raises(LinkLost):
        await links.request(primary.peer, 2, 1, b"app", [[b"DROP"]], 5.0)
    assert await links.request(primary.peer, 2, 1, b"app", [[b"ECHO", b"after"]], 5.0) == [b"$5\r\nafter\r\n"]
    assert len(primary.requests(b"DROP")) == 1 and len(primary.seen) == 2  # a new link, and no DROP on it
    assert links.stats.lost == 1
    await links.close()


async def test_a_waiting_lane_delays_only_itself(primary: TinyPrimary) -> None:
    """A request that waits on the primary (HANG) times out alone: the other lanes on the same link
    are answered meanwhile and after, the link stays (the primary answers the probe), and nothing
    is sent twice."""
    links = new_links()
    hang = asyncio.ensure_future(links.request(primary.peer, 2, 1, b"app", [[b"HANG"]], 0.3))
    others = [await links.request(primary.peer, 2, 2, b"app", [[b"ECHO", b"%d" % i]], 5.0) for i in range(20)]
    assert others == [[b"$%d\r\n%d\r\n" % (len(str(i)), i)] for i in range(20)] and not hang.done()
    link = links.open_link(primary.peer, 2, None)
    assert link is not None
    with pytest.raises(LinkTimeout):
        await hang
    assert link.probe is not None  # the timeout asked the primary whether it lives
    await _until(lambda: link.probe is None)  # it answered: the link stays
    assert link.open and any(r[:3] == [b"0", b"", b"PING"] for r in primary.seen[0])
    assert await links.request(primary.peer, 2, 2, b"app", [[b"ECHO", b"y"]], 5.0) == [b"$1\r\ny\r\n"]
    assert len(primary.seen) == 1 and len(primary.requests(b"HANG")) == 1 and links.stats.lost == 1
    await links.close()


async def test_a_dead_primary_loses_what_waits_on_the_link(
    primary: TinyPrimary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(links, "PROBE_TIMEOUT", 0.2)
    link_set = new_links()
    assert await link_set.request(primary.peer, 2, 1, b"app", [[b"ECHO", b"x"]], 5.0)
    frozen = asyncio.ensure_future(link_set.request(primary.peer, 2, 1, b"app", [[b"FREEZE"]], 0.2))
    behind = asyncio.ensure_future(link_set.request(primary.peer, 2, 2, b"app", [[b"ECHO", b"y"]], 30.0))
    with pytest.raises(LinkTimeout):
        await frozen
    with pytest.raises(LinkLost):  # the probe went unanswered: the link is closed, what waited on it lost
        await behind
    assert len(primary.requests(b"FREEZE")) == 1 and link_set.stats.lost == 2
    await link_set.close()


def test_reply_end_finds_one_whole_reply() -> None:
    replies = [
        b":12\r\n",
        b"+OK\r\n",
        b"-ERR x\r\n",
        b"$-1\r\n",
        b"$5\r\nab\r\nc\r\n",  # CRLF inside a bulk
        b"*-1\r\n",
        b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
        b"%2\r\n+a\r\n:1\r\n+b\r\n~1\r\n#t\r\n",
        b"|1\r\n+ttl\r\n:3\r\n:7\r\n",  # an attribute, then its reply
        b"=8\r\ntxt:abcd\r\n",
        b"_\r\n",
        b"*0\r\n",
    ]
    stream = b"".join(replies)
    pos = 0
    for reply in replies:
        end = reply_end(stream, pos)
        assert stream[pos:end] == reply
        for cut in range(pos, end):  # every proper prefix is incomplete
            assert reply_end(stream[:cut], pos) == -1
        pos = end
    assert pos == len(stream)


async def test_a_moved_from_the_primary_is_followed_once(primary: TinyPrimary) -> None:
    """A MOVED means the request did not run there: sent once more to the node it names (the entry
    side's rule, ``commands.forward._settle``), at the address that node takes links at, never to
    the one that refused it, nor to itself, nor to an address no registered node has."""
    links = new_links()
    config = SimpleNamespace(max_wait=1.0, store_timeout=1.0)
    app = SimpleNamespace(links=links, config=config)
    client = SimpleNamespace(app=app, id=5, proto=2, user=SimpleNamespace(name="app"))
    # p1 is told to clients at an address nobody listens at (a container's published port, seen
    # from another container) and takes links at its own (link_address)
    told = "10.255.255.1:7001"
    nodes = {told: NodeInfo("p1", told, link_addr=primary.addr), "127.0.0.1:1": NodeInfo(ME, "127.0.0.1:1")}
    group = SimpleNamespace(member=SimpleNamespace(me=SimpleNamespace(id=ME)), node_at=nodes.get)
    echo = [[b"ECHO", b"x"]]
    moved_there = [b"-MOVED 1 %s\r\n" % told.encode()]
    assert await _settle(client, group, Peer("127.0.0.1:2", "p2"), echo, moved_there) == b"$1\r\nx\r\n"  # type: ignore[arg-type]
    assert len(primary.requests(b"ECHO")) == 1
    for refused_by, names in ((Peer(primary.addr, "p1"), told), (Peer("127.0.0.1:2", "p2"), "127.0.0.1:1")):
        with pytest.raises(CommandError) as refused:  # the node that refused it; this node
            await _settle(client, group, refused_by, echo, [b"-MOVED 1 %s\r\n" % names.encode()])  # type: ignore[arg-type]
        assert refused.value.message == errors.FORWARD_MOVED
    with pytest.raises(CommandError) as refused:  # no registered node there
        await _settle(client, group, Peer("127.0.0.1:2", "p2"), echo, [b"-MOVED 1 127.0.0.1:3\r\n"])  # type: ignore[arg-type]
    assert refused.value.message == errors.FORWARD_MOVED
    assert len(primary.requests(b"ECHO")) == 1  # nothing more was sent
    await links.close()


async def test_the_pool_grows_while_its_links_are_busy_and_a_connection_keeps_its_link(primary: TinyPrimary) -> None:
    links = new_links(size=2)
    await links.request(primary.peer, 2, 1, b"app", [[b"ECHO", b"x"]], 5.0)
    first = links.open_link(primary.peer, 2, None)
    assert first is not None
    links.write(first, 1, b"app", [[b"HANG"]])  # busy from now on
    assert links.open_link(primary.peer, 2, None) is first  # used now; a second one is being opened
    await _until(lambda: links.open_link(primary.peer, 2, None) not in (None, first))
    assert links.open_link(primary.peer, 2, first) is first  # a connection's requests stay on its link
    assert len(primary.seen) == 2 and links.stats.opened == 2
    await links.close()


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)

"""The forwarding links (``march.links``) against a tiny RESP server of the test's own.

The server speaks just enough: the ``MARCH.LINK`` handshake (checking the proof with the secret it
was given), ``HELLO 3``, ``ECHO`` (answered as it comes), ``HANG`` (never answered) and ``DROP``
(the connection is closed, unanswered). It records every request each connection sent, so a test
can see what was written, in which order, and that nothing was ever sent twice.
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
from march.commands.forward import _settle
from march.errors import CommandError
from march.links import LINK_COMMAND, LinkDown, LinkLost, Links, proof_ok, reply_end

SECRET = "s3cret"


@dataclass
class TinyPrimary:
    secret: bytes
    seen: list[list[list[bytes]]] = field(default_factory=list)  # per connection, its requests in order
    server: asyncio.Server | None = None
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def addr(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def requests(self, name: bytes) -> list[list[bytes]]:
        return [r for conn in self.seen for r in conn if r[0] == name]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parse, seen, nonce, hung = hiredis.Reader(), [], b"", False
        self.seen.append(seen)
        self.writers.append(writer)
        while data := await reader.read(65536):
            parse.feed(data)
            out = []
            while (req := parse.gets()) is not False:
                seen.append(req)
                name = req[0].lower()
                hung = hung or name == b"hang"  # like a real server, nothing after it is answered
                if hung:
                    continue
                if name == LINK_COMMAND and req[1] == b"HELLO":
                    nonce = os.urandom(16).hex().encode()
                    out.append(b"$32\r\n%s\r\n" % nonce)
                elif name == LINK_COMMAND and req[1] == b"AUTH":
                    out.append(b"+OK\r\n" if proof_ok(self.secret, nonce, req[3]) else b"-WRONGPASS no\r\n")
                elif name in (LINK_COMMAND, b"hello"):
                    out.append(b"%1\r\n+proto\r\n:3\r\n" if name == b"hello" else b"+OK\r\n")
                elif name == b"echo":
                    out.append(b"$%d\r\n%s\r\n" % (len(req[1]), req[1]))
                elif name == b"drop":
                    writer.transport.abort()
                    return
            writer.write(b"".join(out))  # (HANG: nothing)


@pytest.fixture
async def primary() -> AsyncIterator[TinyPrimary]:
    tiny = TinyPrimary(SECRET.encode())
    tiny.server = await asyncio.start_server(tiny.handle, "127.0.0.1", 0)
    yield tiny
    tiny.server.close()
    for writer in tiny.writers:
        writer.transport.abort()
    await asyncio.sleep(0)  # (the handlers see their connections end)


async def test_pipelined_replies_match_their_requests(primary: TinyPrimary) -> None:
    links = Links(SECRET, size=1)
    links.name = "n1"
    calls = [links.request(primary.addr, 2, b"app", [[b"ECHO", b"%d" % i]], 5.0) for i in range(200)]
    replies = await asyncio.gather(*calls)
    assert replies == [[b"$%d\r\n%d\r\n" % (len(str(i)), i)] for i in range(200)]
    assert len(primary.seen) == 1  # one link: every request pipelined on it, in the order they came
    assert [r for r in primary.seen[0] if r[0] == b"ECHO"] == [[b"ECHO", b"%d" % i] for i in range(200)]
    auth = primary.seen[0][1]  # (the nonce itself never comes back: only the proof)
    assert auth[:3] == [LINK_COMMAND, b"AUTH", b"n1"] and len(auth[3]) == 64 and SECRET.encode() not in auth[3]
    # a RESP3 pool is another link, switched with HELLO 3
    assert await links.request(primary.addr, 3, b"app", [[b"ECHO", b"x"]], 5.0) == [b"$1\r\nx\r\n"]
    assert [b"HELLO", b"3"] in primary.seen[1]
    assert links.stats.opened == 2 and links.stats.forwarded == 201
    await links.close()


async def test_the_user_is_announced_when_it_changes(primary: TinyPrimary) -> None:
    links = Links(SECRET, size=1)
    for user in (b"a", b"a", b"b", b"a"):
        assert await links.request(primary.addr, 2, user, [[b"ECHO", user]], 5.0) == [b"$1\r\n%s\r\n" % user]
    assert primary.seen[0][2:] == [
        [LINK_COMMAND, b"AS", b"a"], [b"ECHO", b"a"], [b"ECHO", b"a"],
        [LINK_COMMAND, b"AS", b"b"], [b"ECHO", b"b"],
        [LINK_COMMAND, b"AS", b"a"], [b"ECHO", b"a"],
    ]  # fmt: skip
    await links.close()


async def test_a_wrong_secret_sends_nothing(primary: TinyPrimary) -> None:
    links = Links("not-the-secret")
    with pytest.raises(LinkDown):
        await links.request(primary.addr, 2, b"app", [[b"ECHO", b"x"]], 5.0)
    assert primary.requests(b"ECHO") == [] and links.stats.failed == 1 and links.stats.forwarded == 0
    assert not links.reachable(primary.addr)
    await links.close()


async def test_a_lost_reply_is_never_sent_again(primary: TinyPrimary) -> None:
    links = Links(SECRET, size=1)
    with pytest.raises(LinkLost):
        await links.request(primary.addr, 2, b"app", [[b"DROP"]], 5.0)
    assert await links.request(primary.addr, 2, b"app", [[b"ECHO", b"after"]], 5.0) == [b"$5\r\nafter\r\n"]
    assert len(primary.requests(b"DROP")) == 1 and len(primary.seen) == 2  # a new link, and no DROP on it
    assert links.stats.lost == 1
    await links.close()


async def test_a_silent_primary_loses_what_waits_on_the_link(primary: TinyPrimary) -> None:
    links = Links(SECRET, size=1)
    assert await links.request(primary.addr, 2, b"app", [[b"ECHO", b"x"]], 5.0)
    hang = asyncio.ensure_future(links.request(primary.addr, 2, b"app", [[b"HANG"]], 0.2))
    behind = asyncio.ensure_future(links.request(primary.addr, 2, b"app", [[b"ECHO", b"y"]], 30.0))
    for call in (hang, behind):  # the link is closed at HANG's deadline: ECHO y's reply could not be told apart
        with pytest.raises(LinkLost):
            await call
    assert len(primary.requests(b"HANG")) == 1 and links.stats.lost == 2
    await links.close()


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
    side's rule, ``commands.forward._settle``), never to the one that refused it, nor to itself."""
    links = Links(SECRET)
    config = SimpleNamespace(max_wait=1.0, store_timeout=1.0)
    client = SimpleNamespace(app=SimpleNamespace(links=links, config=config), proto=2, user=SimpleNamespace(name="app"))
    group = SimpleNamespace(member=SimpleNamespace(me=SimpleNamespace(addr="127.0.0.1:1")))
    echo = [[b"ECHO", b"x"]]
    moved_here = [b"-MOVED 1 %s\r\n" % primary.addr.encode()]
    assert await _settle(client, group, "127.0.0.1:2", echo, moved_here) == b"$1\r\nx\r\n"  # type: ignore[arg-type]
    assert len(primary.requests(b"ECHO")) == 1
    for refused_by, names in (("127.0.0.1:2", "127.0.0.1:2"), ("127.0.0.1:2", "127.0.0.1:1")):
        with pytest.raises(CommandError) as refused:
            await _settle(client, group, refused_by, echo, [b"-MOVED 1 %s\r\n" % names.encode()])  # type: ignore[arg-type]
        assert refused.value.message == errors.FORWARD_MOVED
    assert len(primary.requests(b"ECHO")) == 1  # nothing more was sent
    await links.close()


async def test_the_pool_grows_while_its_links_are_busy_and_a_connection_keeps_its_link(primary: TinyPrimary) -> None:
    links = Links(SECRET, size=2)
    await links.request(primary.addr, 2, b"app", [[b"ECHO", b"x"]], 5.0)
    first = links.open_link(primary.addr, 2, None)
    assert first is not None
    links.write(first, b"app", [[b"HANG"]])  # busy from now on
    assert links.open_link(primary.addr, 2, None) is first  # used now; a second one is being opened
    await _until(lambda: links.open_link(primary.addr, 2, None) not in (None, first))
    assert links.open_link(primary.addr, 2, first) is first  # a connection's requests stay on its link
    assert len(primary.seen) == 2 and links.stats.opened == 2
    await links.close()


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)

"""A request that waits (march/transport/waiting.py), with a real node (SQLite store in the test's
directory), its ``App``, a ``Client`` and the request timer: its reply, how it is timed, and what
a connection that goes away leaves behind.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from march import config as config_module
from march.app import App
from march.client import Client
from march.commands.table import COMMANDS, HOT
from march.errors import CommandError
from march.node import Node
from march.resp import encode_error
from march.transport.timing import RequestTimer
from march.transport.waiting import Relays, Waiting


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    config = config_module.load(None, {}, {"data_dir": str(tmp_path / "data")})
    node = Node(config, COMMANDS)
    await node.open()
    try:
        yield App(config, node, HOT)
    finally:
        await node.stop()


def parts(app: App) -> tuple[Client, RequestTimer]:
    client = Client(app, 1, "127.0.0.1:5001", "127.0.0.1:7379")
    return client, RequestTimer(client, app.metrics.commands, app.slowlog, app.latency, app)


def error_reply(exc: Exception, args: list[bytes]) -> bytes:
    return encode_error(str(exc))


async def answer(value: object, delay: float = 0.0) -> object:
    await asyncio.sleep(delay)
    if isinstance(value, Exception):
        raise value
    return value


async def test_a_waiting_request_is_answered_and_timed_as_a_wait(app: App) -> None:
    client, timer = parts(app)
    args = [b"INCR", b"k"]
    waiting = Waiting(answer(7, 0.01), args, [args], 1, time.monotonic_ns(), 0)
    assert await waiting.reply(client, timer, error_reply) == b":7\r\n"
    stats = app.metrics.commands.by_name["incr"]
    assert stats.calls == 1 and stats.waits == 1 and stats.total_ns >= 10_000_000


async def test_a_waiting_request_that_fails_gets_the_error_reply(app: App) -> None:
    client, timer = parts(app)
    args = [b"INCR", b"k"]
    waiting = Waiting(answer(CommandError("ERR boom")), args, [args], 1, 0, 0)
    assert await waiting.reply(client, timer, error_reply) == b"-ERR boom\r\n"
    assert app.metrics.commands.by_name["incr"].waits == 1


async def test_a_connection_gone_before_its_wait_began_closes_the_handler(app: App) -> None:
    coro = answer(1)
    waiting = Waiting(coro, [b"INCR", b"k"], [], 1, 0, 0)
    waiting.task = asyncio.get_running_loop().create_task(asyncio.sleep(10))  # (not started either)
    waiting.cancel()
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited" warning
    with pytest.raises(asyncio.CancelledError):
        await waiting.task


async def test_relayed_replies_take_their_places_in_order() -> None:
    """A read's replies wait for its relayed ones (``Relays``), each in its place, an error too."""
    out = [b"+first\r\n"]
    relays = Relays(out)
    relays.add(answer(b":7\r\n", 0.02), [b"INCR", b"k"])  # type: ignore[arg-type]  # (any awaitable)
    out.append(b"+between\r\n")
    relays.add(answer(CommandError("ERR lost")), [b"INCR", b"k"])  # type: ignore[arg-type]
    out.append(b"+last\r\n")
    written = await relays.written(error_reply)
    assert written == b"+first\r\n:7\r\n+between\r\n-ERR lost\r\n+last\r\n"

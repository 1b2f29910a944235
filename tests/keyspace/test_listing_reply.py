"""KEYS' reply encoded a page at a time (``march.keyspace.listing.reply``): the same bytes as the
whole list encoded at once, in RESP2 and RESP3, the loop turning between pages, the budget kept.
"""

from __future__ import annotations

import asyncio

import pytest

from march import errors
from march.errors import CommandError
from march.keyspace import listing
from march.keyspace.listing import PAGE, Selection
from march.resp import Encoded, encode


class Pages:
    """A store's ``list_keys`` over ``names`` (sorted), counting its reads."""

    def __init__(self, names: list[bytes]) -> None:
        self.names = sorted(names)
        self.reads = 0

    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]:
        self.reads += 1
        await asyncio.sleep(0)  # (a read on the store's thread: the loop turns meanwhile)
        found = [n for n in self.names if n.startswith(prefix) and (after is None or n > after)]
        return found[:limit]


NAMES = [b"p:%05d" % i for i in range(2 * PAGE + 17)] + [b"", b"p:", b"p:\r\n$1\r\n", b"p:" + b"x" * 2000, b"q"]


async def test_the_reply_is_the_list_encoded_at_once() -> None:
    store = Pages(NAMES)
    every = await listing.reply(store, None, b"", 0, 0)  # type: ignore[arg-type]
    assert isinstance(every, Encoded)
    assert every == encode(sorted(NAMES), 2) == encode(sorted(NAMES), 3)
    assert store.reads == 3
    prefixed = sorted(n for n in NAMES if n.startswith(b"p:"))
    assert await listing.reply(store, None, b"p:", 0, 0) == encode(prefixed, 2)  # type: ignore[arg-type]
    odd = Selection(lambda n: n.endswith(b"7"), lambda n: 1)
    kept = [n for n in prefixed if n.endswith(b"7")]
    assert await listing.reply(store, odd, b"p:", 0, 0) == encode(kept, 2)  # type: ignore[arg-type]
    assert await listing.reply(Pages([]), None, b"", 0, 0) == b"*0\r\n"  # type: ignore[arg-type]


async def test_the_loop_turns_between_pages() -> None:
    """Another task runs between the pages (each page takes a turn of ``listing.Turns``)."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(ticker())
    try:
        await listing.reply(Pages(NAMES), None, b"", 0, 0)  # type: ignore[arg-type]
    finally:
        done = True
        await task
    assert ticks >= 3


async def test_a_reply_past_the_budget_is_refused_before_it_is_built() -> None:
    with pytest.raises(CommandError) as refused:
        await listing.reply(Pages(NAMES), None, b"", 5000, 1234)  # type: ignore[arg-type]
    assert refused.value.message == errors.REPLY_TOO_LARGE.format(1234)

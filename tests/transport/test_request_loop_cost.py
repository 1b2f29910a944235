"""The request loop's cost (march/server.py), measured in work, not time: a server run in the test's
own loop on a real store and real sockets, whose parser hands ``Connection.run`` request lists that
count how often they are indexed (every look at a request: running it, or comparing it with the
one before to find a run of identical requests).

A pipeline of 9,000 INCRs on a key that does not exist yet must cost a few looks per request,
whatever the waits for the store in between (the first INCR creates the key, later ones wait for
the durable range to be extended): the loop used to compare the rest of the pipeline again after
each wait and each request it ran alone, about n²/2 looks. The same for a key whose pipelined
INCRs are never answered together (a sonyflake-like layout: the sequence field is not the lowest,
so consecutive IDs are not consecutive integers).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, SupportsIndex

import pytest
from march_harness.aio import finish
from march_harness.resp import encode

from march import config as config_module
from march import server as server_module
from march.resp import RequestParser
from march.server import serve

PIPELINE = 9000
LOOKS_PER_REQUEST = 4  # each request is run once and compared at most once or twice: linear


class Counted(list[list[bytes]]):
    """A read's requests that count every index into them (slices count once)."""

    looks = 0

    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        Counted.looks += 1
        return super().__getitem__(index)


class CountingParser(RequestParser):
    def feed(self, data: bytes) -> list[list[bytes]]:
        return Counted(super().feed(data))


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(server_module, "RequestParser", CountingParser)
    Counted.looks = 0
    yield
    gc.unfreeze()  # (serve freezes what startup made; in a test process that is the test's business)


@pytest.fixture
async def node(tmp_path: Path, counting: None) -> AsyncIterator[int]:
    """A node served in this loop: its port."""
    config = config_module.load(None, {}, {"port": 0, "bind": "127.0.0.1", "data_dir": str(tmp_path / "data")})
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(config, stop, ready))
    port = await finish(asyncio.shield(ready), timeout=20)
    yield port
    stop.set_result(None)
    await finish(task, timeout=20)


async def pipeline(port: int, requests: bytes, replies: int) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(requests)
        return [await finish(reader.readline(), timeout=30) for _ in range(replies)]
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_pipeline_of_incrs_on_a_new_key_costs_linear_work(node: int) -> None:
    replies = await pipeline(node, encode("INCR", "fresh") * PIPELINE, PIPELINE)
    assert replies == [b":%d\r\n" % i for i in range(1, PIPELINE + 1)]
    assert Counted.looks <= LOOKS_PER_REQUEST * PIPELINE, f"{Counted.looks} looks at {PIPELINE} requests"


async def test_pipelined_incrs_that_cannot_be_answered_together_cost_linear_work(node: int) -> None:
    # Node bits below the sequence: consecutive slots are IDs 2^10 apart, so no run is answered at once.
    create = encode("SEQ.CREATE", "spread", "TIMESTAMP", "ORDER", "time,seq,node", "NODEBITS", "10")
    assert await pipeline(node, create, 1) == [b"+OK\r\n"]
    Counted.looks = 0
    replies = await pipeline(node, encode("INCR", "spread") * PIPELINE, PIPELINE)
    ids = [int(r[1:]) for r in replies]
    assert ids == sorted(set(ids)) and len(ids) == PIPELINE
    assert Counted.looks <= LOOKS_PER_REQUEST * PIPELINE, f"{Counted.looks} looks at {PIPELINE} requests"

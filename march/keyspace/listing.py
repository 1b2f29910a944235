"""Listing sequence names (KEYS, SEQ.LIST, takeover tests) a page at a time, in slices; counting
them that way too (DBSIZE of a node that serves some of several groups: ``count``).

Listing never queues in front of writes: the store reads names beside its writes
(``march.store.contract``). ``names`` reads a page at a time in byte order, and decides on the names
of a page in slices (``sift``): at most ``SLICE`` units of work (``Selection.cost``, about a byte of
a name matched against a pattern each) at a time, so a 2 KiB glob over a thousand 1 KiB names takes
turns with every other client. The slices of every listing of the node share one budget: one slice
per turn of the event loop for all of them together, round robin (``Turns``), so twenty listings at
once stretch a turn no more than one does; they take longer instead. A reply that would pass the caller's
budget (the room left in its output buffer) is an error before it is built: a listing holds its
reply and one page. KEYS' reply is encoded a page at a time as the pages come (``reply``), never
all at once in one step of the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from march import errors
from march.errors import CommandError
from march.resp import Encoded
from march.store.contract import Store

PAGE = 1000  # names per store read when listing
HEADS = 1024  # name lengths whose bulk string header is made once (a longer name's is formatted)
SLICE = 20_000  # work units (~0.1 us each) a listing does between two yields to the event loop: ~2 ms


_HEADS = [b"$%d\r\n" % n for n in range(HEADS)]
_CRLF = b"\r\n"


@dataclass(frozen=True)
class Selection:
    """Which names a listing returns: those ``keep`` accepts, each costing ``cost(len(name))`` work units."""

    keep: Callable[[bytes], bool]
    cost: Callable[[int], int]


class Turns:
    """The listings' share of one event loop: one slice a turn for all of them together, round robin.

    A listing asks (``take``) before each slice of its work; ``_pump`` hands out one slice per turn of
    the loop, to the longest waiting, so a turn holds at most one slice of listing work whatever the
    number of listings (twenty listings each taking a slice per turn made a turn twenty slices long,
    and a new key needs three turns). Its callbacks never run a listing's work themselves."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._pumping = False

    def take(self) -> asyncio.Future[None]:
        """Done when this listing may run one slice (in a later turn of the loop)."""
        turn: asyncio.Future[None] = self.loop.create_future()
        self._waiting.append(turn)
        if not self._pumping:
            self._pumping = True
            self.loop.call_soon(self._pump)
        return turn

    def waiting(self) -> int:
        """Listings waiting for a slice (the tests' view)."""
        return len(self._waiting)

    def _pump(self) -> None:
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():  # (a cancelled listing's: its client went)
                turn.set_result(None)  # its slice runs in the next turn, beside the next _pump
                break
        if self._waiting:
            self.loop.call_soon(self._pump)
        else:
            self._pumping = False


_turns: Turns | None = None


def turns() -> Turns:
    """The running loop's ``Turns`` (one per loop: every keyspace and group of a node shares it)."""
    global _turns
    loop = asyncio.get_running_loop()
    if _turns is None or _turns.loop is not loop:
        _turns = Turns(loop)
    return _turns


async def sift(names: list[bytes], selection: Selection) -> list[bytes]:
    """The names ``selection`` keeps, in order, in slices of at most ``SLICE`` units of work, each
    run when ``Turns`` gives this listing its turn."""
    keep, cost = selection.keep, selection.cost
    out: list[bytes] = []
    await turns().take()  # a page's first slice waits for a turn too (its read gave the GIL away already)
    work = 0
    for name in names:
        work += cost(len(name))
        if work > SLICE:
            # time.sleep(0) hands the GIL to the store's threads first (a new key's store write
            # waits for it otherwise), then the listing waits for its turn.
            time.sleep(0)
            await turns().take()
            work = cost(len(name))
        if keep(name):
            out.append(name)
    return out


async def names(
    store: Store, selection: Selection | None, prefix: bytes, budget: int, max_output_buffer: int
) -> list[bytes]:
    """Every name starting with ``prefix`` that ``selection`` keeps (all: None), in byte order.

    ``budget``: the reply may not pass this many bytes (an error naming ``max_output_buffer``
    instead of a reply that the client's output limit would drop anyway: the list is never built
    past it)."""
    out: list[bytes] = []
    async for found in _pages(store, selection, prefix, budget, max_output_buffer):
        out.extend(found)
    return out


async def reply(
    store: Store, selection: Selection | None, prefix: bytes, budget: int, max_output_buffer: int
) -> Encoded:
    """``names``' list as its RESP reply (an array of bulk strings, the same in RESP2 and RESP3), each
    page's names encoded as the page comes: a reply of 20,000 names is never one step of the loop
    (encoded at once it was one of 2 ms, tens under load, while every other client waited)."""
    parts = [b""]
    count = 0
    async for found in _pages(store, selection, prefix, budget, max_output_buffer):
        parts.append(bulk_strings(found))
        count += len(found)
    parts[0] = b"*%d\r\n" % count
    return Encoded(b"".join(parts))


def bulk_strings(names: list[bytes]) -> bytes:
    """``names`` as RESP bulk strings one after the other (an array's elements), about 45 ns a name."""
    heads = _HEADS
    out: list[bytes] = [_CRLF] * (3 * len(names))
    out[0::3] = [heads[n] if n < HEADS else b"$%d\r\n" % n for n in map(len, names)]
    out[1::3] = names
    return b"".join(out)


async def _pages(
    store: Store, selection: Selection | None, prefix: bytes, budget: int, max_output_buffer: int
) -> AsyncIterator[list[bytes]]:
    """The names ``names`` returns, a page at a time (see there)."""
    size = 0
    after: bytes | None = None
    while True:
        if selection is None:  # (a page to sift waits for its turn in ``sift``)
            await turns().take()  # one page a turn for all listings: seventy KEYS at once read no faster than one
        page = await store.list_keys(prefix, after, PAGE)
        found = page if selection is None else await sift(page, selection)
        if budget:
            size += sum(map(len, found)) + 16 * len(found)  # a bulk string's framing is at most 16 bytes
            if size > budget:
                raise CommandError(errors.REPLY_TOO_LARGE.format(max_output_buffer))
        yield found
        if len(page) < PAGE:
            return
        after = page[-1]


async def count(store: Store, selection: Selection) -> int:
    """How many names ``selection`` keeps: a page at a time, decided on in slices (``sift``); holds one page."""
    total = 0
    after: bytes | None = None
    while True:
        page = await store.list_keys(b"", after, PAGE)
        total += len(await sift(page, selection))
        if len(page) < PAGE:
            return total
        after = page[-1]

"""Listing sequence names (KEYS, SEQ.LIST, takeover tests) a page at a time, in slices; counting
them that way too (DBSIZE of a node that serves some of several groups: ``count``).

Listing never queues in front of writes: the store reads names beside its writes
(``march.store.contract``). ``names`` reads a page at a time in byte order, and decides on the names
of a page in slices (``sift``): at most ``SLICE`` units of work (``Selection.cost``, about a byte of
a name matched against a pattern each) between two yields to the event loop, so a 2 KiB glob over
a thousand 1 KiB names takes turns with every other client. A reply that would pass the caller's
budget (the room left in its output buffer) is an error before it is built: a listing holds its
reply and one page.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from march import errors
from march.errors import CommandError
from march.store.contract import Store

PAGE = 1000  # names per store read when listing
SLICE = 20_000  # work units (~0.1 us each) a listing does between two yields to the event loop: ~2 ms


@dataclass(frozen=True)
class Selection:
    """Which names a listing returns: those ``keep`` accepts, each costing ``cost(len(name))`` work units."""

    keep: Callable[[bytes], bool]
    cost: Callable[[int], int]


async def sift(names: list[bytes], selection: Selection) -> list[bytes]:
    """The names ``selection`` keeps, in order, yielding to the event loop after every ``SLICE`` units of work."""
    keep, cost = selection.keep, selection.cost
    out: list[bytes] = []
    work = 0
    for name in names:
        work += cost(len(name))
        if work > SLICE:
            # Other clients' requests run here. time.sleep(0) hands the GIL to the store's threads
            # first: a loop that never blocks lets them have it only every 5 ms (the switch
            # interval), which made each SQLite statement of a new key's INCR wait that long.
            time.sleep(0)
            await asyncio.sleep(0)
            work = 0
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
    size = 0
    after: bytes | None = None
    while True:
        page = await store.list_keys(prefix, after, PAGE)
        found = page if selection is None else await sift(page, selection)
        out.extend(found)
        if budget:
            size += sum(len(k) + 16 for k in found)  # a bulk string's framing is at most 16 bytes
            if size > budget:
                raise CommandError(errors.REPLY_TOO_LARGE.format(max_output_buffer))
        if len(page) < PAGE:
            return out
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

"""SCAN cursors over a store whose names are listed in byte order (the etcd store's ``scan``).

**SCAN cursors** are offsets in byte order: a cursor ``c`` handed out after a page ending at name
``L`` never exceeds the number of names at or before ``L`` (pages are counted as read; names are
never deleted, so that number only grows). Resuming right after the ``c``-th name of *now* is
therefore always safe, whoever handed the cursor out (this node, another one, a past term): it is
at or before ``L``, so nothing after ``L`` is missed; names between it and ``L`` come again. The
store remembers a bounded number of resume points (``_CURSORS``), each the name at an offset:
- *exact* while nothing can have moved it: it was counted with no creation in flight, under the
  guard of the term that is still the only one creating names, and none has started since. A
  cursor that hits an exact point resumes there at once (the common case: one page read);
- otherwise a point is checked with one count (the names at or before it: etcd counts its index,
  reading no values) before it is used: at most ``_VERIFY`` points, the nearest below the cursor.
An unknown cursor with no usable point walks from the start a page at a time (one walk at a time
per node, each page a loop turn), leaving a point every page: the walk happens once, later cursors
near it cost a count and a page or two. A cursor at or past the number of names ends the pass.

``ScanCursors`` keeps the points and does the walk; it reads names only through ``Names`` (the
store's own listing and counts) and must never hand out a cursor past a name it has not listed.
Every creation goes through ``creating()``, so that a point counted meanwhile is never taken as exact.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from march.store.contract import Guard

_PAGE = 1000  # names per read when a SCAN cursor walks to its position
_CURSORS = 4096  # SCAN resume points remembered (each a name): a bounded table; the rest are counted again
_VERIFY = 3  # remembered points checked (a count each) for an unknown cursor before it walks from the start

Stamp = tuple[Guard, int]  # (the term's guard, creations started so far): while it is current, no name moved


class Names(Protocol):
    """The reads a SCAN needs from its store (``march.store.contract.Store`` semantics)."""

    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]: ...

    async def count(self) -> int: ...

    async def count_through(self, name: bytes) -> int:
        """How many names sort at or before ``name``."""
        ...


@dataclass(frozen=True)
class _Point:
    """A name at a SCAN offset: exact while ``stamp`` is current, else a point to check by counting."""

    name: bytes
    stamp: Stamp | None


class ScanCursors:
    """The resume points of one store's SCAN cursors, and the walk that finds an unknown one."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self._points: OrderedDict[int, _Point] = OrderedDict()  # SCAN offset -> the name there (LRU)
        self._offsets: list[int] = []  # the keys of _points, sorted (the nearest point below a cursor)
        self._creations = 0  # creates started by this store: a point counted before one may have moved
        self._creating = 0  # creates not answered yet
        self._walking = asyncio.Lock()  # one unknown SCAN cursor found at a time (counts and walks)

    @contextmanager
    def creating(self) -> Iterator[None]:
        """Around one creation, from before it is sent until it is answered: points may move."""
        self._creations += 1  # SCAN points counted before now may move
        self._creating += 1
        try:
            yield
        finally:
            self._creating -= 1

    def _stamp(self, guard: Guard) -> Stamp | None:
        return None if self._creating else (guard, self._creations)

    def _mark(self, offset: int, name: bytes, stamp: Stamp | None) -> None:
        old = self._points.get(offset)
        if old is None:
            bisect.insort(self._offsets, offset)
        elif old.stamp is not None and stamp is None and old.name != name:
            return  # an exact point is worth more than a lower bound; it is checked before use anyway
        self._points[offset] = _Point(name, stamp)
        self._points.move_to_end(offset)
        while len(self._points) > _CURSORS:
            gone, _ = self._points.popitem(last=False)
            del self._offsets[bisect.bisect_left(self._offsets, gone)]

    async def scan(self, cursor: int, limit: int, guard: Guard) -> tuple[int, list[bytes]]:
        after: bytes | None = None
        at, stamp = 0, self._stamp(guard)
        if cursor:
            point = self._points.get(cursor)
            if point is not None and point.stamp is not None and point.stamp == stamp:
                after, at = point.name, cursor
                self._points.move_to_end(cursor)
            else:
                async with self._walking:
                    found = await self._resume(cursor, guard)
                    if found is None:
                        return 0, []
                    after, at, stamp = found
                    while at < cursor:  # walk from the point to the cursor's offset
                        page = await self.names.list_keys(b"", after, min(_PAGE, cursor - at))
                        if not page:
                            return 0, []
                        at, after = at + len(page), page[-1]
                        stamp = stamp if stamp == self._stamp(guard) else None
                        self._mark(at, after, stamp)
        page = await self.names.list_keys(b"", after, limit)
        if len(page) < limit:
            return 0, page
        at += len(page)
        self._mark(at, page[-1], stamp if stamp == self._stamp(guard) else None)
        return at, page

    async def _resume(self, cursor: int, guard: Guard) -> tuple[bytes | None, int, Stamp | None] | None:
        """A name at most ``cursor`` names in (None: the start), its offset and stamp; None: past the end."""
        stamp = self._stamp(guard)
        if cursor >= await self.names.count():
            return None
        below = bisect.bisect_right(self._offsets, cursor)
        for offset in reversed(self._offsets[max(0, below - _VERIFY) : below]):
            point = self._points.get(offset)
            if point is None:
                continue
            if point.stamp is not None and point.stamp == stamp:
                return point.name, offset, stamp
            now = await self.names.count_through(point.name)
            if now <= cursor:
                stamp = stamp if stamp == self._stamp(guard) else None
                self._mark(now, point.name, stamp)
                return point.name, now, stamp
        return None, 0, stamp

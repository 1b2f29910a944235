"""Unit tests of ``ScanCursors`` (``march.store.cursors``): SCAN resume points over a sorted listing.

The store contract (``test_store_contract.py``) runs SCAN through the etcd store; here the cursors run
over a plain sorted list (``Listing``: the three reads of ``Names``, each counted), so that what a
cursor costs and when a remembered point may be trusted are visible. The rule under test: a
cursor ``c`` resumes right after the ``c``-th name of *now*; a point is taken as exact only while
no creation can have moved it (same guard, no creation started or in flight since it was counted).
"""

from __future__ import annotations

import bisect

import pytest

from march.store import cursors
from march.store.contract import Guard
from march.store.cursors import ScanCursors

TERM = Guard(b"n1", 7)


class Listing:
    """Names in byte order, with the reads ``ScanCursors`` makes counted."""

    def __init__(self, names: list[bytes]) -> None:
        self.names = sorted(names)
        self.lists = 0
        self.counts = 0

    def add(self, name: bytes) -> None:
        bisect.insort(self.names, name)

    async def list_keys(self, prefix: bytes = b"", after: bytes | None = None, limit: int = 1000) -> list[bytes]:
        self.lists += 1
        start = 0 if after is None else bisect.bisect_right(self.names, after)
        return self.names[start : start + limit]

    async def count(self) -> int:
        self.counts += 1
        return len(self.names)

    async def count_through(self, name: bytes) -> int:
        self.counts += 1
        return bisect.bisect_right(self.names, name)


def names(n: int, step: int = 10) -> list[bytes]:
    return [b"k%06d" % (i * step) for i in range(n)]


async def a_pass(scan: ScanCursors, limit: int, cursor: int = 0) -> list[bytes]:
    seen: list[bytes] = []
    for _ in range(10_000):
        cursor, page = await scan.scan(cursor, limit, TERM)
        seen += page
        if cursor == 0:
            return seen
    raise AssertionError("the pass never ended")


async def test_a_pass_returns_every_name_once_and_a_known_cursor_costs_one_read() -> None:
    listing = Listing(names(95))
    scan = ScanCursors(listing)
    assert await a_pass(scan, 10) == listing.names
    assert (listing.lists, listing.counts) == (10, 0)  # a page each; no count while every point is exact


async def test_a_cursor_given_out_elsewhere_resumes_after_its_offset_of_now() -> None:
    listing = Listing(names(50))
    cursor, first = await ScanCursors(listing).scan(0, 20, TERM)
    assert cursor == 20
    other = ScanCursors(listing)  # another node (or this one after a restart): no points at all
    rest = await a_pass(other, 20, cursor)
    assert first + rest == listing.names
    assert listing.counts >= 1  # it counted before walking: the cursor is below the number of names


async def test_a_cursor_at_or_past_the_end_ends_the_pass() -> None:
    listing = Listing(names(5))
    assert await ScanCursors(listing).scan(5, 10, TERM) == (0, [])
    assert await ScanCursors(listing).scan(2**64 - 1, 10, TERM) == (0, [])


@pytest.mark.parametrize("how", ["a creation through this store", "a new term"])
async def test_a_point_counted_before_names_moved_is_counted_again(how: str) -> None:
    """Node A remembers cursor 10 = the name ``k000090``; five names are then created before it. The same
    cursor 10, now meaning the 10th name of now (given out by another node), must not resume after
    ``k000090``: that would skip the five names between."""
    listing = Listing(names(30))
    scan = ScanCursors(listing)
    cursor, _ = await scan.scan(0, 10, TERM)
    assert cursor == 10
    guard = TERM
    for i in range(5):
        if how == "a creation through this store":
            with scan.creating():
                listing.add(b"k%06d" % (i * 10 + 5))
        else:
            listing.add(b"k%06d" % (i * 10 + 5))
            guard = Guard(b"n2", 8)
    _, page = await scan.scan(cursor, 10, guard)
    assert page == listing.names[10:20]


async def test_no_point_is_exact_while_a_creation_is_in_flight() -> None:
    listing = Listing(names(30))
    scan = ScanCursors(listing)
    with scan.creating():
        cursor, _ = await scan.scan(0, 10, TERM)  # counted while a creation may land anywhere
        listing.add(b"k000001")
    counts = listing.counts
    _, page = await scan.scan(cursor, 10, TERM)
    assert page == listing.names[10:20]
    assert listing.counts > counts  # the point was checked, not trusted


async def test_the_points_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cursors, "_CURSORS", 3)
    listing = Listing(names(100))
    scan = ScanCursors(listing)
    assert await a_pass(scan, 5) == listing.names
    assert len(scan._points) == 3 and scan._offsets == sorted(scan._points)
    assert scan._offsets == [90, 95, 100]  # the most recently used

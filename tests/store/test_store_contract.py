"""The store contract (``march.store.contract``), one suite run against every backend.

Each test takes the ``subject`` fixture, four times: ``memory`` (``MemoryStore``), ``sqlite``
(``SqliteStore`` in a fresh data dir), ``etcd`` (``EtcdStore`` over ``GrpcEtcd`` on a real
one-member etcd shared by the module, a fresh key prefix per test) and ``fake-etcd``
(``EtcdStore`` over ``FakeEtcd``). On etcd the fixture takes the leader key the way a campaign
does and writes under that term's guard; memory and SQLite write under ``SINGLE_NODE``.

What it pins down, identically on every backend:

- ``load`` of a missing key is None; ``create`` then ``load`` round-trips kind, settings and
  ceiling, for binary names (NUL, 0xff, CR LF, the empty name) and ceilings up to 2**63;
  ceilings compare as numbers (9 < 10, 2**63 - 1 < 2**63), never as text.
- ``create`` of an existing key is False and writes nothing.
- ``load_or_create`` creates an absent name (True) and finds an existing one as stored (False,
  ceiling and settings unchanged), also when calls of one batch name it twice or mix existing and
  new names; an absent name under a guard that does not hold is ``GuardFailed``.
- ``save_ceiling`` returns the ceiling now durable: the new one, or the stored one when that is
  already at least as high (never a failure, never a lower ceiling); a missing key is
  ``GuardFailed`` on every backend, whichever store object asks.
- A guard that does not hold (a wrong one, or one whose term ended, even when the same node
  leads again) is ``GuardFailed`` for ``save_ceiling`` and ``create`` (SQLite's guard is
  trivial: skipped there).
- Settings survive ceiling writes made by a new store object on the same data.
- ``list_keys`` is in byte order and honours ``prefix``, ``after`` and ``limit``; 2,500 keys page
  through completely; ``count`` counts.
- ``scan``: a pass from cursor 0 returns every name (exactly once while nothing is created); names
  created during a pass never make it miss one that existed throughout (SQLite and memory: still
  exactly once); any cursor (huge, past the end, 2**64 - 1, never handed out) is accepted and its
  pass ends; a pass goes on with a new store object on the same data (another node, a restart);
  an unknown cursor costs a bounded number of reads once the store has found one nearby.
- ``save_settings`` replaces the settings and keeps kind and ceiling (also across ceiling writes
  made before and after, by this or a new store object); a missing key or a guard that does not
  hold is ``GuardFailed``.
- Worker records: ``save_worker`` is a compare-and-set (absent -> only with ``expected=None``;
  present -> only with the exact stored record), so of two concurrent ACQUIREs of one id exactly
  one wins; records round-trip by (namespace, id), one namespace never sees another's (even one
  whose name extends it, with ``/`` or NUL), they survive a new store object, are never listed or
  counted as sequences, and a guard that does not hold is ``GuardFailed``. ``delete_worker`` is a
  compare-and-delete (only the exact stored record; of concurrent deletes one wins) that keeps the
  highest floor ever deleted as ``retired_worker_upto`` (never lowered, durable, also when many
  deletes race), refused to a guard that does not hold; ``worker_namespaces`` pages through every
  namespace with records exactly once, whatever the page size, and nothing else.
- Users: ``save_user`` is a compare-and-set on the record's revision (0: absent), for writes and
  deletions alike, so of concurrent read-modify-writes of one user exactly one lands and a
  deleted user is never written back by someone who read it before the deletion; revisions only
  grow; ``load_users`` reads every user (more than a page of them) and names a revision at or
  below which every change is in what it read; on etcd ``watch_users`` then yields each later
  change (a deletion as ``rules`` None) with its revision, in order; users survive a new store
  object and are never listed or counted as sequences.
- Backup and restore: ``export`` yields every record (sequences in byte order, users, worker
  records, the retired floor) in pages of at most the limit, the same from a new store object, and
  reads while a primary serves; ``raise_to`` creates what is absent, raises a lower ceiling keeping
  the stored kind and settings, never lowers, leaves the other kind alone, takes a name twice in
  order, and crosses every backend's batch size; ``restore_users`` creates, keeps a readable user
  and replaces only an unreadable one; ``raise_workers`` and ``raise_retired_upto`` only raise
  (the holder kept); a dry run says the same and writes nothing; every restore write, dry runs
  too, is ``PrimaryServing`` while a primary serves, and on etcd also when one is elected between
  the restore's read and its write (any group's leader key), nothing written.
- Calls made together are batched yet each gets its own answer: 1,000 concurrent creates and
  saves all land (on etcd in a few transactions, not one each), two saves of one key in one loop
  turn both get a correct answer, and one failing item does not fail its neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from march_harness.aio import finish
from march_harness.etcd import EtcdCluster
from march_harness.fake_etcd import FakeEtcd, FakeEtcdClient
from march_harness.manual_clock import ManualClock
from march_harness.memory_store import MemoryStore

from march.errors import GuardFailed, PrimaryServing
from march.etcd.api import Put, created_at
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths
from march.store.contract import (
    NO_GUARD,
    SINGLE_NODE,
    Exported,
    Guard,
    Restored,
    RetiredUpto,
    SequenceRecord,
    Store,
    UserRecord,
    WorkerRecord,
)
from march.store.etcd_store import EtcdStore
from march.store.etcd_users import USERS_PAGE
from march.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.e2e

TOP = 2**63  # the largest ceiling a store must keep (a sequence's IDs end at 2**63 - 1)


def rec(key: bytes, ceiling: int, kind: str = "sequence", **settings: Any) -> SequenceRecord:
    return SequenceRecord(key, kind, ceiling, settings)


# --- the backends --------------------------------------------------------------------------------


class Subject:
    """One backend under test: its store, the guard that holds, and how to break or reopen it."""

    name = ""
    trivial_guard = False  # True: no guard can fail (SQLite), so the guard tests skip
    scan_once = True  # a SCAN pass returns each name once even while names are created (etcd may repeat)

    def __init__(self, store: Store, guard: Guard) -> None:
        self.store = store
        self.guard = guard

    def wrong_guards(self) -> list[Guard]:
        """Guards that do not hold while ``self.guard`` does."""
        raise NotImplementedError

    async def end_term(self) -> None:
        """Make ``self.guard`` stop holding, with nobody leading."""
        raise NotImplementedError

    async def new_term(self) -> Guard:
        """The same node leads again, in a new term: the guard of that term."""
        raise NotImplementedError

    async def reopen(self) -> Store:
        """A new store object on the same data (nothing cached), which becomes ``self.store``."""
        raise NotImplementedError

    async def primary_serves(self) -> None:
        """A primary named ``n1`` serves from this store (restore writes must refuse)."""
        raise NotImplementedError

    async def no_primary(self) -> None:
        """Nobody serves from this store (a restore may write)."""
        raise NotImplementedError

    def transactions(self) -> int | None:
        """Round trips (etcd transactions) made so far, or None where there is nothing to count."""
        return None

    def reads(self) -> int | None:
        """Range requests (etcd reads and counts) made so far, or None where there is nothing to count."""
        return None

    async def close(self) -> None:
        await self.store.close()

    def needs_guard(self) -> None:
        if self.trivial_guard:
            pytest.skip(
                f"{self.name}: the guard is trivial (the data dir's flock is the leadership), so no guard can fail"
            )


class MemorySubject(Subject):
    name = "memory"
    store: MemoryStore

    def __init__(self) -> None:
        super().__init__(MemoryStore(), SINGLE_NODE)
        self.terms = 0

    def wrong_guards(self) -> list[Guard]:
        return [Guard(b"n2", 0), Guard(b"", 1), NO_GUARD]

    async def end_term(self) -> None:
        self.store.guard = Guard(b"\0nobody", -2)

    async def new_term(self) -> Guard:
        self.terms += 1
        self.store.guard = Guard(b"", 100 + self.terms)
        self.guard = self.store.guard
        return self.guard

    async def reopen(self) -> Store:
        return self.store  # its data lives in the object: there is nothing else to open

    async def primary_serves(self) -> None:
        self.store.serving = "n1"

    async def no_primary(self) -> None:
        self.store.serving = None


class SqliteSubject(Subject):
    name = "sqlite"
    trivial_guard = True

    def __init__(self, data_dir: Path) -> None:
        super().__init__(SqliteStore(data_dir), SINGLE_NODE)
        self.dir = data_dir

    async def reopen(self) -> Store:
        await self.store.close()
        self.store = SqliteStore(self.dir)
        await self.store.open()
        return self.store

    async def primary_serves(self) -> None:
        pytest.skip("sqlite: a serving node holds the data dir's lock, so no restore opens it (test_sqlite.py)")

    async def no_primary(self) -> None:
        pass  # this store object holds the lock


class CountingEtcd:
    """A ``GrpcEtcd`` that counts its transactions (the fake counts its own calls)."""

    def __init__(self, inner: GrpcEtcd) -> None:
        self.inner = inner
        self.txns = 0
        self.ranges = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def txn(self, *args: Any, **kwargs: Any) -> Any:
        self.txns += 1
        return await self.inner.txn(*args, **kwargs)

    async def range(self, *args: Any, **kwargs: Any) -> Any:
        self.ranges += 1
        return await self.inner.range(*args, **kwargs)


class EtcdSubject(Subject):
    """An ``EtcdStore`` on a real etcd (``CountingEtcd``) or on the fake (``FakeEtcdClient``)."""

    scan_once = False  # offsets in byte order: names created before a cursor's position shift it

    def __init__(self, name: str, etcd: CountingEtcd | FakeEtcdClient) -> None:
        self.name = name
        self.etcd = etcd
        self.keys = KeyPaths.of(f"/contract-{uuid.uuid4().hex[:8]}")
        super().__init__(EtcdStore(etcd, self.keys), Guard())  # type: ignore[arg-type]

    async def lead(self, owner: bytes = b"n1") -> Guard:
        """Take the leader key the way a campaign does; the guard of that term."""
        reply = await self.etcd.txn([created_at(self.keys.leader, 0)], [Put(self.keys.leader, owner)])
        assert reply.succeeded, "the leader key was already taken"
        self.guard = Guard(owner, reply.revision)
        return self.guard

    def wrong_guards(self) -> list[Guard]:
        g = self.guard
        return [Guard(b"n2", g.revision), Guard(g.owner, g.revision + 1), Guard(g.owner, 0), SINGLE_NODE, NO_GUARD]

    async def end_term(self) -> None:
        await self.etcd.delete(self.keys.leader)  # the lease ran out

    async def new_term(self) -> Guard:
        return await self.lead()

    async def reopen(self) -> Store:
        self.store = EtcdStore(self.etcd, self.keys)  # type: ignore[arg-type]  # a new primary: nothing cached
        return self.store

    async def primary_serves(self) -> None:
        if await self.etcd.get(self.keys.leader) is None:
            await self.lead()

    async def no_primary(self) -> None:
        await self.end_term()

    def transactions(self) -> int:
        if isinstance(self.etcd, FakeEtcdClient):
            return self.etcd.calls["txn"]
        return self.etcd.txns

    def reads(self) -> int:
        if isinstance(self.etcd, FakeEtcdClient):
            return self.etcd.calls["range"]
        return self.etcd.ranges

    async def close(self) -> None:
        await self.store.close()
        await self.etcd.close()


@pytest.fixture(scope="module")
def module_etcd(tmp_path_factory: pytest.TempPathFactory, etcd_bin: str) -> Iterator[EtcdCluster]:
    """One real etcd for the whole module (each test has its own prefix): starting one per test costs ~0.5 s."""
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"), size=1, binary=etcd_bin)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["memory", "sqlite", "etcd", "fake-etcd"])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    s: Subject
    if request.param == "memory":
        s = MemorySubject()
    elif request.param == "sqlite":
        s = SqliteSubject(tmp_path / "data")
    elif request.param == "etcd":
        cluster: EtcdCluster = request.getfixturevalue("module_etcd")
        s = EtcdSubject("etcd", CountingEtcd(GrpcEtcd(cluster.endpoints.split(","), timeout=5.0)))
    else:
        s = EtcdSubject("fake-etcd", FakeEtcd(ManualClock()).client("n1"))
    try:
        await s.store.open()
        if isinstance(s, EtcdSubject):
            await s.lead()
        yield s
    finally:
        await s.close()


# --- reads and creates ---------------------------------------------------------------------------


async def test_a_missing_key_loads_as_none(subject: Subject) -> None:
    store = subject.store
    assert await store.load(b"missing") is None
    await store.create(rec(b"present", 5), subject.guard)
    assert await store.load(b"missing") is None
    assert await store.load(b"present\x00") is None  # no prefix match: the exact name only
    assert await store.load(b"presen") is None


ODD_NAMES = [b"\x00", b"nul\x00inside", b"\xff", b"\xff\xfe\xfd", b"cr\r\nlf", b"", b"caf\xc3\xa9", b" spaced "]


async def test_create_then_load_round_trips(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    records = [
        rec(b"plain", 11),
        rec(b"tuned", 1001, min_batch=5, max_batch=50),
        rec(b"stamp", 1_700_000_000_000, "timestamp", epoch_ms=1288834974657, node_bits=10, name="caf\u00e9"),
        rec(b"top", TOP),
        rec(b"max", TOP - 1),  # must not pass through a float: 2**63 - 1 would round
        rec(b"zero", 0),
        *(rec(name, 7 + i, "sequence", n=i) for i, name in enumerate(ODD_NAMES)),
    ]
    for r in records:
        assert await store.create(r, guard) is True
    for r in records:
        loaded = await store.load(r.key)
        assert loaded == r
        assert loaded is not None and type(loaded.key) is bytes and type(loaded.ceiling) is int
        assert dict(loaded.settings) == dict(r.settings)
    assert await store.count() == len(records)


async def test_create_of_an_existing_key_returns_false_and_changes_nothing(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await store.create(rec(b"k", 100, min_batch=3), guard) is True
    assert await store.create(rec(b"k", 5), guard) is False
    assert await store.create(rec(b"k", 10**6, "timestamp", node_bits=4), guard) is False
    assert await store.load(b"k") == rec(b"k", 100, min_batch=3)
    assert await store.count() == 1
    # Two creates of one new key in the same loop turn: exactly one wins, and its record is stored.
    first, second = rec(b"race", 1, who=1), rec(b"race", 2, who=2)
    results = await asyncio.gather(store.create(first, guard), store.create(second, guard))
    assert sorted(results) == [False, True]
    assert await store.load(b"race") == (first if results[0] else second)


async def test_load_or_create_creates_an_absent_name_and_finds_an_existing_one_unchanged(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await store.load_or_create(rec(b"new", 11), guard) == (rec(b"new", 11), True)
    assert await store.load(b"new") == rec(b"new", 11)
    await store.create(rec(b"old", 500, min_batch=3), guard)
    await store.save_ceiling(b"old", 900, guard)
    # An existing name is found with its stored ceiling and settings, never reset or written.
    assert await store.load_or_create(rec(b"old", 11), guard) == (rec(b"old", 900, min_batch=3), False)
    assert await store.load_or_create(rec(b"new", 2, "timestamp", node_bits=4), guard) == (rec(b"new", 11), False)
    assert await store.load(b"old") == rec(b"old", 900, min_batch=3)
    assert await store.count() == 2
    # Concurrent calls (one batch): one name twice is created once, the other call finds it; a
    # name that exists in the same batch as new ones is found; every new one is created once.
    # A name stored exactly as the call's record would be (never written since) is found all the same.
    await store.create(rec(b"same", 7), guard)
    calls = [
        rec(b"twice", 1, who=1),
        rec(b"twice", 2, who=2),
        rec(b"old", 5),
        rec(b"same", 7),
        *(rec(b"n%d" % i, 7) for i in range(600)),
    ]
    results = await asyncio.gather(*(store.load_or_create(r, guard) for r in calls))
    (a, a_created), (b, b_created) = results[0], results[1]
    assert sorted([a_created, b_created]) == [False, True] and a == b == await store.load(b"twice")
    assert results[2] == (rec(b"old", 900, min_batch=3), False)
    assert results[3] == (rec(b"same", 7), False)
    assert all(result == (r, True) for r, result in zip(calls[4:], results[4:], strict=True))
    assert await store.count() == 3 + 1 + 600
    assert await store.load(b"n599") == rec(b"n599", 7)


async def test_load_or_create_of_an_absent_name_under_a_guard_that_does_not_hold_is_refused(subject: Subject) -> None:
    subject.needs_guard()
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 1000), guard)
    for wrong in subject.wrong_guards():
        with pytest.raises(GuardFailed):
            await store.load_or_create(rec(b"new", 1), wrong)
        assert await store.load_or_create(rec(b"k", 1), wrong) == (rec(b"k", 1000), False)  # a read only
    assert await store.load(b"new") is None
    assert await store.count() == 1


# --- ceiling writes ------------------------------------------------------------------------------


async def test_save_ceiling_returns_the_new_ceiling_and_load_sees_it(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 100, "timestamp", node_bits=10), guard)
    assert await store.save_ceiling(b"k", 101, guard) == 101
    assert await store.load(b"k") == rec(b"k", 101, "timestamp", node_bits=10)  # kind and settings kept
    assert await store.save_ceiling(b"k", 10**12, guard) == 10**12
    assert await store.load(b"k") == rec(b"k", 10**12, "timestamp", node_bits=10)


async def test_a_ceiling_at_or_below_the_stored_one_returns_the_stored_one(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 100, min_batch=3), guard)
    assert await store.save_ceiling(b"k", 500, guard) == 500
    for not_greater in (500, 499, 101, 1, 0):
        assert await store.save_ceiling(b"k", not_greater, guard) == 500  # no failure, nothing lowered
    assert await store.load(b"k") == rec(b"k", 500, min_batch=3)
    assert await store.save_ceiling(b"k", 501, guard) == 501  # and it still moves up afterwards
    assert await store.load(b"k") == rec(b"k", 501, min_batch=3)


async def test_ceilings_compare_as_numbers(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    await store.create(rec(b"nine", 9), guard)
    assert await store.save_ceiling(b"nine", 10, guard) == 10  # "10" < "9" as text; 10 > 9 as numbers
    assert await store.save_ceiling(b"nine", 9, guard) == 10
    assert await store.save_ceiling(b"nine", 99, guard) == 99
    assert await store.save_ceiling(b"nine", 100, guard) == 100
    await store.create(rec(b"big", TOP - 5), guard)
    assert await store.save_ceiling(b"big", TOP - 1, guard) == TOP - 1
    assert await store.save_ceiling(b"big", TOP, guard) == TOP  # the largest ceiling of all still compares
    assert await store.save_ceiling(b"big", TOP, guard) == TOP
    assert await store.save_ceiling(b"big", TOP - 1, guard) == TOP
    assert [(await store.load(k)) for k in (b"nine", b"big")] == [rec(b"nine", 100), rec(b"big", TOP)]


async def test_save_ceiling_of_a_missing_key_raises_guard_failed(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    with pytest.raises(GuardFailed):  # on an empty store
        await store.save_ceiling(b"ghost", 10, guard)
    await store.create(rec(b"k", 1), guard)
    with pytest.raises(GuardFailed):  # next to a record that exists
        await store.save_ceiling(b"ghost", 10, guard)
    with pytest.raises(GuardFailed):  # a name that only extends an existing one
        await store.save_ceiling(b"k\x00", 10, guard)
    fresh = await subject.reopen()  # and asked by a store object that has read nothing yet
    with pytest.raises(GuardFailed):
        await fresh.save_ceiling(b"ghost", 10, guard)
    assert await fresh.load(b"ghost") is None  # nothing was created on the way
    assert await fresh.count() == 1


# --- guards --------------------------------------------------------------------------------------


async def test_a_guard_that_does_not_hold_is_refused(subject: Subject) -> None:
    subject.needs_guard()
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 1000, min_batch=2), guard)
    for wrong in subject.wrong_guards():
        with pytest.raises(GuardFailed):
            await store.save_ceiling(b"k", 2000, wrong)
        with pytest.raises(GuardFailed):
            await store.save_ceiling(b"k", 10, wrong)  # even one that would change nothing
        with pytest.raises(GuardFailed):
            await store.create(rec(b"new", 1), wrong)
        with pytest.raises(GuardFailed):
            await store.create(rec(b"k", 1), wrong)  # even one that exists
    assert await store.load(b"k") == rec(b"k", 1000, min_batch=2)
    assert await store.load(b"new") is None
    assert await store.save_ceiling(b"k", 2000, guard) == 2000  # the holder is unaffected


async def test_a_guard_that_stopped_holding_is_refused_even_when_the_same_node_leads_again(subject: Subject) -> None:
    subject.needs_guard()
    store, old = subject.store, subject.guard
    await store.create(rec(b"k", 1000), old)
    await subject.end_term()
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"k", 2000, old)
    with pytest.raises(GuardFailed):
        await store.create(rec(b"other", 10), old)
    new = await subject.new_term()
    assert new != old
    with pytest.raises(GuardFailed):  # the old term is fenced for good
        await store.save_ceiling(b"k", 3000, old)
    with pytest.raises(GuardFailed):
        await store.create(rec(b"other", 10), old)
    assert await store.load(b"k") == rec(b"k", 1000)
    assert await store.load(b"other") is None
    assert await store.save_ceiling(b"k", 3000, new) == 3000
    assert await store.create(rec(b"other", 10), new) is True


async def test_each_call_in_a_batch_gets_its_own_answer(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    for r in (rec(b"a", 10), rec(b"b", 50), rec(b"c", 10)):
        await store.create(r, guard)
    calls = [
        store.save_ceiling(b"a", 20, guard),
        store.save_ceiling(b"ghost", 5, guard),
        store.save_ceiling(b"b", 40, guard),
        store.create(rec(b"d", 1), guard),
        store.create(rec(b"a", 99), guard),
        store.save_ceiling(b"c", 30, guard),
        store.load(b"b"),
        store.load(b"ghost"),
        store.load(b"b"),
    ]
    wrong = [] if subject.trivial_guard else subject.wrong_guards()[:1]
    for w in wrong:
        calls += [store.save_ceiling(b"c", 1000, w), store.create(rec(b"e", 1), w)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert results[0] == 20
    assert isinstance(results[1], GuardFailed)
    assert results[2] == 50
    assert results[3] is True
    assert results[4] is False
    assert results[5] == 30
    assert results[6:9] == [rec(b"b", 50), None, rec(b"b", 50)]
    for extra in results[9:]:
        assert isinstance(extra, GuardFailed)
    assert [await store.load(k) for k in (b"a", b"b", b"c", b"d", b"e", b"ghost")] == [
        rec(b"a", 20),
        rec(b"b", 50),
        rec(b"c", 30),
        rec(b"d", 1),
        None,
        None,
    ]


# --- a new store object on the same data ---------------------------------------------------------


async def test_settings_survive_ceiling_writes_by_a_new_store_object(subject: Subject) -> None:
    guard = subject.guard
    records = [
        rec(b"t", 10, "timestamp", epoch_ms=5, node_bits=3),
        rec(b"s", 7, min_batch=9),
        rec(b"\xff\x00", 1, x="y"),
    ]
    for r in records:
        await subject.store.create(r, guard)
    first = subject.store
    again = await subject.reopen()  # nothing cached: it never read these records
    for r in records:
        assert await again.save_ceiling(r.key, r.ceiling + 1000, guard) == r.ceiling + 1000
    for r in records:
        expected = SequenceRecord(r.key, r.kind, r.ceiling + 1000, r.settings)
        assert await again.load(r.key) == expected
        if first is not again and isinstance(subject, EtcdSubject):  # the old object sees the same data
            assert await first.load(r.key) == expected
    again = await subject.reopen()
    assert [await again.load(r.key) for r in records] == [
        SequenceRecord(r.key, r.kind, r.ceiling + 1000, r.settings) for r in records
    ]


# --- listing -------------------------------------------------------------------------------------

LISTED = [b"", b"\x00", b"A", b"a", b"a\x00", b"a\r\n", b"a\xff", b"ab", b"abc", b"b", b"b\x00x", b"z\xff", b"\xfe"]
PREFIXES = [b"", b"a", b"a\x00", b"ab", b"b", b"c", b"\x00", b"z"]
AFTERS = [None, b"", b"\x00", b"0", b"a", b"a\x00", b"a\xfe", b"ab", b"b", b"b\x00x", b"zz", b"\xff\xff"]


async def test_list_keys_in_byte_order_with_prefix_after_and_limit(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    for i, key in enumerate(reversed(LISTED)):  # created out of order
        await store.create(rec(key, i), guard)
    ordered = sorted(LISTED)
    assert await store.list_keys() == ordered
    assert await store.count() == len(LISTED)
    for prefix in PREFIXES:
        for after in AFTERS:
            matching = [k for k in ordered if k.startswith(prefix) and (after is None or k > after)]
            for limit in (1, 2, 1000):
                got = await store.list_keys(prefix, after, limit)
                assert got == matching[:limit], (prefix, after, limit)


async def test_list_keys_with_a_prefix_of_0xff_bytes(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    keys = [b"\xfe\xff", b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01"]
    for key in keys:
        await store.create(rec(key, 1), guard)
    assert await store.list_keys(b"\xff") == [b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01"]
    assert await store.list_keys(b"\xff\xff") == [b"\xff\xff", b"\xff\xff\x01"]
    assert await store.list_keys(b"\xff", b"\xff\x00", 2) == [b"\xff\xff", b"\xff\xff\x01"]


async def test_list_keys_pages_through_thousands_of_keys(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    keys = [b"p:%04d" % i for i in range(2500)]
    extra = [b"o:before", b"q:after"]
    created = await asyncio.gather(*(store.create(rec(k, 1), guard) for k in [*keys, *extra]))
    assert all(created)
    assert await store.count() == 2502
    pages: list[list[bytes]] = []
    after: bytes | None = None
    for _ in range(5):  # bounded: a store that ignores ``after`` must fail here, not loop forever
        page = await store.list_keys(b"p:", after, 1000)
        pages.append(page)
        if len(page) < 1000:
            break
        after = page[-1]
    assert [len(p) for p in pages] == [1000, 1000, 500]
    assert [k for p in pages for k in p] == keys
    assert await store.list_keys(b"p:", keys[-1], 1000) == []
    assert await store.list_keys(b"", b"p:2499", 10) == [b"q:after"]


# --- SCAN ----------------------------------------------------------------------------------------


async def scan_pass(
    store: Store,
    guard: Guard,
    limit: int,
    cursor: int = 0,
    between: Callable[[], Awaitable[None]] | None = None,
    calls: int = 20_000,
) -> tuple[list[bytes], int]:
    """Follow SCAN's cursors from ``cursor`` to 0 (``between()`` after each call): (names, last cursor
    before 0). Bounded: a store whose passes never end fails here instead of looping forever."""
    seen: list[bytes] = []
    last = cursor
    for _ in range(calls):
        cursor, page = await store.scan(cursor, limit, guard)
        assert len(page) <= limit
        seen += page
        if cursor == 0:
            return seen, last
        last = cursor
        if between is not None:
            await between()
    raise AssertionError("the SCAN pass did not end")


async def test_scan_returns_every_name_once(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    names = [*LISTED, *(b"s:%04d" % i for i in range(2500))]
    assert all(await asyncio.gather(*(store.create(rec(k, 1), guard) for k in names)))
    for limit in (7, 1000, 5000):
        seen, _ = await scan_pass(store, guard, limit)
        assert sorted(seen) == sorted(names), limit  # every name, none twice


async def test_scan_misses_no_name_that_existed_throughout(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    old = [b"m:%04d" % i for i in range(0, 600, 2)]
    assert all(await asyncio.gather(*(store.create(rec(k, 1), guard) for k in old)))
    fresh = iter([b"m:%04d" % i for i in range(1, 600, 2)] + [b"a:%04d" % i for i in range(300)])
    created: set[bytes] = set()

    async def create_three() -> None:  # before and after the pass's position, in byte order
        for _ in range(3):
            name = next(fresh, None)
            if name is not None:
                assert await store.create(rec(name, 1), guard)
                created.add(name)

    seen, _ = await scan_pass(store, guard, 20, between=create_three)
    assert set(old) <= set(seen), "a name that existed throughout was missed"
    assert set(seen) <= set(old) | created
    if subject.scan_once:
        assert len(seen) == len(set(seen)), "a name came twice"


@pytest.mark.parametrize("cursor", [1, 3, 49, 50, 51, 10**6, 2**63 - 1, 2**63, 2**64 - 1, 2**64])
async def test_scan_takes_any_cursor(subject: Subject, cursor: int) -> None:
    store, guard = subject.store, subject.guard
    names = {b"n:%02d" % i for i in range(50)}
    for name in sorted(names):
        await store.create(rec(name, 1), guard)
    seen, _ = await scan_pass(store, guard, 10, cursor)  # no error, and the pass ends
    assert set(seen) <= names
    if cursor >= 2**63:
        assert seen == []


async def test_a_scan_goes_on_with_a_new_store_object(subject: Subject) -> None:
    """Another node after a failover (etcd), or a restart (SQLite): the cursor goes on, nothing is missed."""
    store, guard = subject.store, subject.guard
    names = [b"g:%04d" % i for i in range(0, 3000, 3)]
    assert all(await asyncio.gather(*(store.create(rec(k, 1), guard) for k in names)))
    seen: list[bytes] = []
    cursor = 0
    for _ in range(12):
        cursor, page = await store.scan(cursor, 50, guard)
        seen += page
    assert cursor != 0
    more = [b"g:%04d" % i for i in range(1, 3000, 30)]
    assert all(await asyncio.gather(*(store.create(rec(k, 1), guard) for k in more)))
    fresh = await subject.reopen()
    rest, _ = await scan_pass(fresh, guard, 50, cursor)
    assert set(names) <= set(seen) | set(rest)
    if subject.scan_once:
        assert len(seen + rest) == len(set(seen + rest))


async def test_an_unknown_cursor_costs_a_bounded_number_of_reads(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    names = [b"u:%05d" % i for i in range(6000)]
    for chunk in range(0, len(names), 1000):
        assert all(await asyncio.gather(*(store.create(rec(k, 1), guard) for k in names[chunk : chunk + 1000])))
    store = await subject.reopen()  # remembers nothing
    cursor, page = await store.scan(4321, 10, guard)  # the first unknown cursor may walk to its place
    assert len(page) == 10 and cursor != 0
    for cursor in (4400, 3999, 4777, 2500, 5555, 4321):  # never handed out: found near what the walk left
        before = subject.reads()
        nxt, page = await store.scan(cursor, 10, guard)
        assert len(page) == 10 and nxt != 0
        used = subject.reads()
        if before is not None and used is not None:
            assert used - before <= 8, f"{used - before} reads for cursor {cursor}"
    rest, _ = await scan_pass(store, guard, 500, 2500)  # and the pass from one of them is complete
    assert len(rest) == len(set(rest)) == 3500 and set(rest) <= set(names)


# --- many calls at once --------------------------------------------------------------------------


async def test_a_thousand_concurrent_creates_and_saves_all_land(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    n = 1000
    keys = [b"k%d" % i for i in range(n)]
    before = subject.transactions()
    created = await asyncio.gather(*(store.create(rec(k, i, i=i), guard) for i, k in enumerate(keys)))
    assert created == [True] * n
    middle = subject.transactions()
    saved = await asyncio.gather(*(store.save_ceiling(k, 10_000 + i, guard) for i, k in enumerate(keys)))
    assert saved == [10_000 + i for i in range(n)]
    after = subject.transactions()
    loaded = await asyncio.gather(*(store.load(k) for k in keys))
    assert loaded == [rec(k, 10_000 + i, i=i) for i, k in enumerate(keys)]
    assert await store.count() == n
    if before is not None and middle is not None and after is not None:
        assert 0 < middle - before <= 30, f"{middle - before} transactions for {n} creates: not batched"
        assert 0 < after - middle <= 30, f"{after - middle} transactions for {n} saves: not batched"


async def test_two_saves_of_one_key_in_one_loop_turn_both_get_a_correct_answer(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    pairs = {b"up": (500, 400), b"down": (400, 500), b"same": (450, 450), b"under": (5, 6)}
    for key in pairs:
        await store.create(rec(key, 100, tag=key.decode()), guard)
    await store.save_ceiling(b"under", 300, guard)  # both of its saves are below what is stored
    calls = [store.save_ceiling(key, c, guard) for key, pair in pairs.items() for c in pair]
    results = await asyncio.gather(*calls)
    got = dict(zip([(key, c) for key, pair in pairs.items() for c in pair], results, strict=True))
    for key, (x, y) in pairs.items():
        final = await store.load(key)
        expected = max(x, y, 300 if key == b"under" else 0)
        assert final == rec(key, expected, tag=key.decode()), key
        for asked in (x, y):
            answer = got[(key, asked)]
            assert asked <= answer <= expected, (key, asked, answer)
        assert got[(key, max(x, y))] == expected  # the higher one landed (or was already there)


# --- settings (SEQ.ALTER) ----------------------------------------------------------------------


async def test_save_settings_replaces_settings_and_keeps_the_rest(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 100, "timestamp", node_bits=10, lookahead=3000), guard)
    assert await store.save_ceiling(b"k", 200, guard) == 200
    await store.save_settings(b"k", {"node_bits": 10, "lookahead": 3000, "max_lead": 50}, guard)
    assert await store.load(b"k") == rec(b"k", 200, "timestamp", node_bits=10, lookahead=3000, max_lead=50)
    assert await store.save_ceiling(b"k", 300, guard) == 300  # a later ceiling write keeps the new settings
    assert await store.load(b"k") == rec(b"k", 300, "timestamp", node_bits=10, lookahead=3000, max_lead=50)
    fresh = await subject.reopen()  # a new store object (a new primary) writes ceilings with them too
    assert await fresh.save_ceiling(b"k", 400, guard) == 400
    await fresh.save_settings(b"k", {"node_bits": 10, "max_lead": 0}, guard)
    assert await fresh.save_ceiling(b"k", 500, guard) == 500
    assert await fresh.load(b"k") == rec(b"k", 500, "timestamp", node_bits=10, max_lead=0)
    with pytest.raises(GuardFailed):
        await fresh.save_settings(b"ghost", {"min_batch": 1}, guard)
    assert await fresh.load(b"ghost") is None


async def test_save_settings_races_ceiling_writes(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 10, min_batch=1), guard)
    calls = [store.save_ceiling(b"k", 10 + i, guard) for i in range(1, 6)]
    calls.insert(2, store.save_settings(b"k", {"min_batch": 7, "max_batch": 9}, guard))
    await asyncio.gather(*calls)
    assert await store.load(b"k") == rec(b"k", 15, min_batch=7, max_batch=9)


async def test_save_settings_needs_the_guard(subject: Subject) -> None:
    subject.needs_guard()
    store, guard = subject.store, subject.guard
    await store.create(rec(b"k", 10, min_batch=1), guard)
    for wrong in subject.wrong_guards():
        with pytest.raises(GuardFailed):
            await store.save_settings(b"k", {"min_batch": 2}, wrong)
    assert await store.load(b"k") == rec(b"k", 10, min_batch=1)


# --- worker ids --------------------------------------------------------------------------------


def worker(ns: bytes, i: int, token: bytes = b"t", expires: int = 1000, floor: int = 0, ttl: int = 30) -> WorkerRecord:
    return WorkerRecord(ns, i, token, expires, floor, ttl)


async def test_save_worker_is_a_compare_and_set(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await store.load_workers(b"ns") == []
    first = worker(b"ns", 0, b"a" * 32, 5_000, 0, 30)
    assert await store.save_worker(first, None, guard) is True
    assert await store.save_worker(worker(b"ns", 0, b"b"), None, guard) is False  # exists: no second holder
    assert await store.load_workers(b"ns") == [first]
    stale = worker(b"ns", 0, b"a" * 32, 4_000, 0, 30)
    renewed = worker(b"ns", 0, b"a" * 32, 9_000, 77, 30)
    assert await store.save_worker(renewed, stale, guard) is False  # compared with what is stored, exactly
    assert await store.save_worker(renewed, first, guard) is True
    assert await store.save_worker(worker(b"ns", 0, b"c"), first, guard) is False  # first is gone
    released = worker(b"ns", 0, b"", 9_500, 80, 30)
    assert await store.save_worker(released, renewed, guard) is True
    assert await store.load_workers(b"ns") == [released]
    assert await store.load_workers(b"ns", 0) == [released]
    assert await store.load_workers(b"ns", 1) == []


async def test_concurrent_acquires_of_one_id_one_wins(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    contenders = [worker(b"ns", 3, b"%02d" % i) for i in range(5)]
    results = await asyncio.gather(*(store.save_worker(c, None, guard) for c in contenders))
    assert sorted(results) == [False] * 4 + [True]
    (stored,) = await store.load_workers(b"ns")
    assert stored == contenders[results.index(True)]
    taken = [worker(b"ns", 3, b"x%d" % i, 2_000) for i in range(5)]
    results = await asyncio.gather(*(store.save_worker(t, stored, guard) for t in taken))
    assert sorted(results) == [False] * 4 + [True]


async def test_worker_namespaces_are_separate_and_not_sequences(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    names = [b"a", b"a/b", b"a/0001", b"a\x00", b"ab", b"\xff", b"a/b/0002"]
    for n, ns in enumerate(names):
        for i in (0, 2, 1023):
            assert await store.save_worker(worker(ns, i, b"tok%d" % n, 10 + i, n), None, guard)
    fresh = await subject.reopen()
    for n, ns in enumerate(names):
        assert await fresh.load_workers(ns) == [worker(ns, i, b"tok%d" % n, 10 + i, n) for i in (0, 2, 1023)]
        assert await fresh.load_workers(ns, 2) == [worker(ns, 2, b"tok%d" % n, 12, n)]
    assert await fresh.count() == 0
    assert await fresh.list_keys() == []
    assert await fresh.load(b"a") is None


async def test_save_worker_needs_the_guard(subject: Subject) -> None:
    subject.needs_guard()
    store, guard = subject.store, subject.guard
    held = worker(b"ns", 0)
    assert await store.save_worker(held, None, guard)
    for wrong in subject.wrong_guards():
        with pytest.raises(GuardFailed):
            await store.save_worker(worker(b"ns", 1), None, wrong)
        with pytest.raises(GuardFailed):
            await store.save_worker(worker(b"ns", 0, b"thief"), held, wrong)
    assert await store.load_workers(b"ns") == [held]
    await subject.end_term()
    new = await subject.new_term()
    with pytest.raises(GuardFailed):  # a deposed primary can never take an id again
        await store.save_worker(worker(b"ns", 0, b"thief"), held, guard)
    assert await store.save_worker(worker(b"ns", 0, b"heir"), held, new)


async def test_delete_worker_is_a_compare_and_delete_that_keeps_the_floor(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await store.retired_worker_upto() == 0
    held = worker(b"ns", 0, b"a" * 32, 5_000, 500, 30)
    assert await store.save_worker(held, None, guard)
    for other in (worker(b"ns", 0, b"a" * 32, 4_000, 500, 30), worker(b"ns", 0, b"b", 5_000, 500, 30)):
        assert await store.delete_worker(other, guard) is False  # not what is stored: nothing changes
    assert await store.delete_worker(worker(b"ns", 1), guard) is False  # no such record
    assert await store.load_workers(b"ns") == [held]
    assert await store.retired_worker_upto() == 0
    assert await store.delete_worker(held, guard) is True
    assert await store.load_workers(b"ns") == []
    assert await store.retired_worker_upto() == 500  # the floor outlives its record
    assert await store.delete_worker(held, guard) is False  # gone already
    lower = worker(b"other", 7, b"", 1, 300)
    assert await store.save_worker(lower, None, guard)
    assert await store.delete_worker(lower, guard)
    assert await store.retired_worker_upto() == 500  # never lowered
    higher = worker(b"ns", 0, b"c", 1, 10**13)
    assert await store.save_worker(higher, None, guard)
    assert await store.delete_worker(higher, guard)
    fresh = await subject.reopen()
    assert await fresh.retired_worker_upto() == 10**13
    assert await fresh.load_workers(b"ns") == []
    assert await fresh.count() == 0


async def test_concurrent_deletes_one_wins_and_the_highest_floor_is_kept(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    held = worker(b"ns", 3, b"t", 1, 40)
    assert await store.save_worker(held, None, guard)
    results = await asyncio.gather(*(store.delete_worker(held, guard) for _ in range(5)))
    assert sorted(results) == [False] * 4 + [True]
    many = [worker(b"ns", i, b"t%d" % i, 1, 1_000 + i) for i in range(20)]
    for record in many:
        assert await store.save_worker(record, None, guard)
    random.Random(7).shuffle(many)  # each raises the retired floor the others compare: they read it again
    assert await asyncio.gather(*(store.delete_worker(r, guard) for r in many)) == [True] * 20
    assert await store.retired_worker_upto() == 1_019
    assert await store.load_workers(b"ns") == []


async def test_delete_worker_needs_the_guard(subject: Subject) -> None:
    subject.needs_guard()
    store, guard = subject.store, subject.guard
    held = worker(b"ns", 0, floor=77)
    assert await store.save_worker(held, None, guard)
    for wrong in subject.wrong_guards():
        with pytest.raises(GuardFailed):
            await store.delete_worker(held, wrong)
    await subject.end_term()
    new = await subject.new_term()
    with pytest.raises(GuardFailed):  # a deposed primary can never delete a record
        await store.delete_worker(held, guard)
    assert await store.load_workers(b"ns") == [held]
    assert await store.retired_worker_upto() == 0
    assert await store.delete_worker(held, new)
    assert await store.retired_worker_upto() == 77


async def test_worker_namespaces_page_through_each_namespace_once(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await store.worker_namespaces() == []
    names = [b"a", b"a/b", b"a/0001", b"a\x00", b"ab", b"\xff", b"b" * 300, b"z"]
    ids = {ns: (0, 5, 1023) if n % 2 else tuple(range(70)) for n, ns in enumerate(names)}  # some span pages
    for ns, held in ids.items():
        for i in held:
            assert await store.save_worker(worker(ns, i), None, guard)
    await store.save_user("u", "on", 0)  # other records are never namespaces
    assert await store.create(rec(b"seq", 10), guard)
    for limit in (1, 2, 3, 100):
        assert sorted(await every_namespace(store, limit)) == sorted(names), f"limit {limit}"  # each once
    for i in ids[b"a/b"]:
        assert await store.delete_worker(worker(b"a/b", i), guard)
    assert sorted(await every_namespace(store, 100)) == sorted(n for n in names if n != b"a/b")


async def every_namespace(store: Store, limit: int) -> list[bytes]:
    """Page through ``worker_namespaces`` (a page may be short; [] is the end)."""
    seen: list[bytes] = []
    after: bytes | None = None
    for _ in range(1000):
        page = await store.worker_namespaces(after, limit)
        assert len(page) <= limit
        if not page:
            return seen
        seen += page
        after = page[-1]
    raise AssertionError("worker_namespaces never ended")


# --- users ----------------------------------------------------------------------------------------


async def test_save_user_is_a_compare_and_set_on_the_revision(subject: Subject) -> None:
    store = subject.store
    assert await store.load_user("u") is None
    assert (await store.load_users()).records == []
    first = await store.save_user("u", "on #ab ~* +@all", 0)
    assert first is not None and first > 0
    assert await store.load_user("u") == UserRecord("u", "on #ab ~* +@all", first)
    assert await store.save_user("u", "off", 0) is None  # it exists: "absent" no longer holds
    assert await store.save_user("u", "off", first - 1) is None
    assert await store.load_user("u") == UserRecord("u", "on #ab ~* +@all", first)
    second = await store.save_user("u", "off ~* +@read", first)
    assert second is not None and second > first
    assert await store.save_user("u", None, first) is None  # a deletion read before the change: refused
    assert await store.load_user("u") == UserRecord("u", "off ~* +@read", second)
    deleted = await store.save_user("u", None, second)
    assert deleted is not None and deleted > second
    assert await store.load_user("u") is None
    assert await store.save_user("u", "on >back", second) is None  # read before the deletion: stays deleted
    assert await store.load_user("u") is None
    again = await store.save_user("u", "on", 0)  # created anew
    assert again is not None and again > deleted
    fresh = await subject.reopen()
    assert await fresh.load_user("u") == UserRecord("u", "on", again)
    assert await fresh.count() == 0 and await fresh.list_keys() == []


async def test_concurrent_read_modify_writes_of_one_user_one_lands(subject: Subject) -> None:
    store = subject.store
    base = await store.save_user("u", "on", 0)
    assert base is not None
    results = await asyncio.gather(*(store.save_user("u", f"on ~k{i}", base) for i in range(5)))
    landed = [i for i, r in enumerate(results) if r is not None]
    assert len(landed) == 1
    stored = await store.load_user("u")
    assert stored is not None and stored.rules == f"on ~k{landed[0]}" and stored.revision == results[landed[0]]
    creators = await asyncio.gather(*(store.save_user("v", f"on ~c{i}", 0) for i in range(5)))
    assert sum(r is not None for r in creators) == 1


async def test_load_users_reads_every_user_past_a_page(subject: Subject) -> None:
    store = subject.store
    names = [f"user{i:05d}" for i in range(USERS_PAGE * 2 + 17)]
    revisions = await asyncio.gather(*(store.save_user(n, f"on ~{n}", 0) for n in names))
    read = await store.load_users()
    assert sorted(r.name for r in read.records) == names
    assert {r.name: r.revision for r in read.records} == dict(zip(names, revisions, strict=True))
    assert all(r.rules == f"on ~{r.name}" for r in read.records)
    assert read.revision >= max(r for r in revisions if r is not None)


async def test_watch_users_yields_each_later_change_with_its_revision(subject: Subject) -> None:
    store = subject.store
    before = await store.save_user("a", "on", 0)
    assert before is not None
    read = await store.load_users()
    watch = store.watch_users(read.revision)
    if watch is None:
        assert subject.name in ("memory", "sqlite")  # one server per store: nothing else changes the users
        return
    assert isinstance(watch, AsyncGenerator)
    async with contextlib.aclosing(watch):
        changed = await store.save_user("a", "off", before)
        created = await store.save_user("b", "on ~b", 0)
        deleted = await store.save_user("a", None, changed or 0)
        seen: list[UserRecord] = []
        while len(seen) < 3:
            seen += await finish(anext(watch), 5.0)
    assert seen == [
        UserRecord("a", "off", changed or 0),
        UserRecord("b", "on ~b", created or 0),
        UserRecord("a", None, deleted or 0),
    ]
    assert read.revision < (changed or 0)


# --- backup and restore ---------------------------------------------------------------------------


async def exported(store: Store, limit: int) -> list[list[Exported]]:
    return [page async for page in store.export(limit)]


async def test_export_yields_every_record_a_page_at_a_time(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await exported(store, 10) == [[RetiredUpto(0)]]
    names = [*ODD_NAMES, *(b"s%03d" % i for i in range(25))]
    records = [rec(name, 10 + i, min_batch=i + 1) for i, name in enumerate(names)]
    records.append(rec(b"stamp", 1_700_000_000_000, "timestamp", epoch_ms=1288834974657))
    for record in records:
        assert await store.create(record, guard)
    users = {name: await store.save_user(name, f"on ~{name}", 0) for name in ("b", "a", "c")}
    workers = [worker(b"ns", 0, floor=5), worker(b"ns", 7, b"", 0, 9), worker(b"ns\x00", 1), worker(b"\xff", 1023)]
    for w in [*workers, worker(b"gone", 3, floor=99)]:
        assert await store.save_worker(w, None, guard)
    assert await store.delete_worker(worker(b"gone", 3, floor=99), guard)

    pages = await exported(store, 10)  # (a primary serves on etcd: export only reads)
    assert all(0 < len(page) <= 10 for page in pages)
    flat = [r for page in pages for r in page]
    families = [type(r).__name__ for r in flat]
    assert families == sorted(families, key=["SequenceRecord", "UserRecord", "WorkerRecord", "RetiredUpto"].index)
    assert [r for r in flat if isinstance(r, SequenceRecord)] == sorted(records, key=lambda r: r.key)
    assert [r for r in flat if isinstance(r, UserRecord)] == [UserRecord(n, f"on ~{n}", users[n]) for n in "abc"]
    key = lambda w: (w.namespace, w.id)  # noqa: E731 - namespaces come in the backend's own order
    assert sorted((r for r in flat if isinstance(r, WorkerRecord)), key=key) == sorted(workers, key=key)
    assert pages[-1] == [RetiredUpto(99)]
    assert [r for page in await exported(await subject.reopen(), 1000) for r in page] == flat


async def test_raise_to_creates_raises_and_never_lowers_or_touches_settings(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    stored = [rec(b"low", 10, min_batch=7), rec(b"high", 5000), rec(b"stamp", 100, "timestamp", epoch_ms=1)]
    for record in stored:
        assert await store.create(record, guard)
    await subject.no_primary()
    wanted = [rec(b"new", 42, max_batch=9), rec(b"low", 300), rec(b"high", 20), rec(b"stamp", 900)]
    wanted.append(rec(b"\xff\x00", TOP))
    expected = [Restored.CREATED, Restored.RAISED, Restored.UNCHANGED, Restored.OTHER_KIND, Restored.CREATED]
    assert await store.raise_to(wanted, dry_run=True) == expected
    assert [await store.load(r.key) for r in wanted] == [None, *stored[:2], stored[2], None]  # nothing written
    assert await store.count() == 3
    assert await store.raise_to(wanted) == expected
    assert [await store.load(r.key) for r in wanted] == [
        rec(b"new", 42, max_batch=9),
        rec(b"low", 300, min_batch=7),  # raised; its kind and settings as stored
        rec(b"high", 5000),  # never lowered
        stored[2],  # the other kind: left alone
        rec(b"\xff\x00", TOP),
    ]
    assert await store.count() == 5 and await store.list_keys() == [b"high", b"low", b"new", b"stamp", b"\xff\x00"]
    again = [Restored.UNCHANGED, Restored.UNCHANGED, Restored.UNCHANGED, Restored.OTHER_KIND, Restored.UNCHANGED]
    assert await store.raise_to(wanted) == again
    twice = [rec(b"twice", 5), rec(b"twice", 9), rec(b"twice", 7)]  # in order: each meets the one before
    assert await store.raise_to(twice) == [Restored.CREATED, Restored.RAISED, Restored.UNCHANGED]
    fresh = await subject.reopen()
    assert await fresh.load(b"twice") == rec(b"twice", 9)
    assert await fresh.load(b"low") == rec(b"low", 300, min_batch=7)


async def test_raise_to_of_many_records_crosses_every_batch(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    names = [b"m%04d" % i for i in range(1200)]  # past SQLite's 500 and etcd's 90 per transaction
    assert all(await asyncio.gather(*(store.create(rec(n, 10), guard) for n in names[::2])))
    await subject.no_primary()
    outcomes = await store.raise_to([rec(n, 20) for n in names])
    assert outcomes == [Restored.RAISED, Restored.CREATED] * 600
    assert await store.count() == 1200
    assert [r.ceiling for r in await asyncio.gather(*(store.load(n) for n in names))] == [20] * 1200  # type: ignore[union-attr]


def readable(name: str, rules: str) -> bool:
    """What the tests call a user a node can read."""
    return "unreadable" not in rules


async def test_restore_users_creates_and_replaces_only_an_unreadable_user(subject: Subject) -> None:
    store = subject.store
    kept = await store.save_user("kept", "on ~kept", 0)
    broken = await store.save_user("broken", "on unreadable", 0)
    assert kept is not None and broken is not None
    await subject.no_primary()
    users = {"kept": "off", "broken": "on ~fixed", "new": "on ~new"}
    expected = [Restored.UNCHANGED, Restored.REPLACED, Restored.CREATED]
    assert await store.restore_users(users, readable, dry_run=True) == expected
    assert await store.load_user("broken") == UserRecord("broken", "on unreadable", broken)
    assert await store.load_user("new") is None
    assert await store.restore_users(users, readable) == expected
    assert await store.load_user("kept") == UserRecord("kept", "on ~kept", kept)  # the store's copy is newer
    fixed, new = await store.load_user("broken"), await store.load_user("new")
    assert fixed is not None and fixed.rules == "on ~fixed" and fixed.revision > broken
    assert new is not None and new.rules == "on ~new"
    assert await store.restore_users(users, readable) == [Restored.UNCHANGED] * 3  # readable now: kept
    assert sorted(u.name for u in (await store.load_users()).records) == ["broken", "kept", "new"]
    assert await store.count() == 0


async def test_raise_workers_and_the_retired_floor_only_rise(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    held = worker(b"ns", 1, b"holder", 5_000, 100)
    assert await store.save_worker(held, None, guard)
    assert await store.save_worker(worker(b"ns", 9, floor=50), None, guard)
    assert await store.delete_worker(worker(b"ns", 9, floor=50), guard)
    await subject.no_primary()
    records = [worker(b"ns", 1, b"", 0, 60), worker(b"ns", 3, b"", 0, 10), worker(b"ns\x00", 1, b"", 0, 3)]
    expected = [Restored.UNCHANGED, Restored.CREATED, Restored.CREATED]
    assert await store.raise_workers(records, dry_run=True) == expected
    assert await store.load_workers(b"ns") == [held] and await store.load_workers(b"ns\x00") == []
    assert await store.raise_workers(records) == expected
    assert await store.load_workers(b"ns") == [held, records[1]]
    assert await store.load_workers(b"ns\x00") == [records[2]]
    assert await store.raise_workers([worker(b"ns", 1, b"", 0, 700)]) == [Restored.RAISED]
    assert await store.load_workers(b"ns", 1) == [worker(b"ns", 1, b"holder", 5_000, 700)]  # the holder kept
    twice = [worker(b"d", 0, b"", 0, 5), worker(b"d", 0, b"", 0, 9)]
    assert await store.raise_workers(twice) == [Restored.CREATED, Restored.RAISED]
    assert await store.load_workers(b"d") == [twice[1]]

    assert await store.raise_retired_upto(30) == Restored.UNCHANGED
    assert await store.raise_retired_upto(80, dry_run=True) == Restored.RAISED
    assert await store.retired_worker_upto() == 50
    assert await store.raise_retired_upto(80) == Restored.RAISED
    assert await store.raise_retired_upto(80) == Restored.UNCHANGED
    fresh = await subject.reopen()
    assert await fresh.retired_worker_upto() == 80 and await fresh.count() == 0


def restore_calls(store: Store, dry_run: bool) -> list[Callable[[], Awaitable[object]]]:
    """One call of each restore write, with a record that would change the store (``nothing_restored``)."""
    return [
        lambda: store.raise_to([rec(b"k", 99), rec(b"new", 5)], dry_run),
        lambda: store.restore_users({"u": "on"}, readable, dry_run),
        lambda: store.raise_workers([worker(b"ns", 0)], dry_run),
        lambda: store.raise_retired_upto(9, dry_run),
    ]


async def nothing_restored(store: Store) -> None:
    """None of ``restore_calls`` wrote: ``k`` still at 10."""
    assert await store.load(b"k") == rec(b"k", 10) and await store.load(b"new") is None
    assert await store.load_user("u") is None
    assert await store.load_workers(b"ns") == [] and await store.retired_worker_upto() == 0


async def test_restore_writes_are_refused_while_a_primary_serves(subject: Subject) -> None:
    store, guard = subject.store, subject.guard
    assert await store.create(rec(b"k", 10), guard)
    await subject.primary_serves()
    assert await store.serving_primary() == "n1"
    for dry in (True, False):
        for call in restore_calls(store, dry):
            with pytest.raises(PrimaryServing) as refused:
                await call()
            assert refused.value.primary == "n1"
    await nothing_restored(store)
    await subject.no_primary()
    assert await store.serving_primary() is None
    assert await store.raise_to([rec(b"k", 99)]) == [Restored.RAISED]


class ElectedMeanwhile:
    """An etcd client on which a primary is elected (``leader`` written) just before each transaction
    that writes: between a restore's read and its write."""

    def __init__(self, inner: Any, leader: bytes) -> None:
        self.inner = inner
        self.leader = leader
        self.elected = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def txn(self, compare: Any, success: Any, failure: Any = (), timeout: float | None = None) -> Any:
        if any(isinstance(op, Put) for op in success):
            await self.inner.put(self.leader, b"n1")
            self.elected += 1
        return await self.inner.txn(compare, success, failure, timeout)


@pytest.mark.parametrize("leader", ["", "/2-of-4"], ids=["one-group", "group-2-of-4"])
async def test_a_primary_elected_between_a_restores_read_and_its_write_stops_it_unwritten(
    subject: Subject, leader: str
) -> None:
    """The compare in the write itself protects, not a check before it: every group's leader key."""
    if not isinstance(subject, EtcdSubject):
        pytest.skip(f"{subject.name}: no primary can be elected while the restore holds the store")
    assert await subject.store.create(rec(b"k", 10), subject.guard)
    await subject.no_primary()
    electing = ElectedMeanwhile(subject.etcd, subject.keys.leader + leader.encode())
    store = EtcdStore(electing, subject.keys)  # type: ignore[arg-type]
    calls = restore_calls(store, False)
    for call in calls:
        with pytest.raises(PrimaryServing):
            await call()
        await subject.etcd.delete(electing.leader)
    assert electing.elected == len(calls)
    await nothing_restored(store)

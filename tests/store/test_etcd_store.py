"""What only the etcd store and its client have, mostly against a real etcd (one member).

The store contract (round trips, guards, ceilings only up, listing, batching) is in
``tests/store/test_store_contract.py``, which runs against a real etcd and the fake alike; the client's
own contract is in ``tests/etcd/test_etcd_contract.py``. Here:

- The record format: ``<prefix>/seq/<key>`` holds the ceiling as 20 zero-padded digits, a space,
  then JSON; the digits compare bytewise like the numbers, which is what the guarded write's
  ``value(seq) < digits(new)`` compare relies on. A record deleted behind the store's back is
  ``GuardFailed``, not a write that recreates it.
- The client moves to the next endpoint when one is unreachable, but NOT on a request etcd will
  never take (too large: ``StoreRejected``) nor on etcd's NOSPACE alarm (``StoreFull``, its
  message naming the alarm and what to do); neither breaks later calls, and only the offending
  call of a batch fails.
- NOSPACE shows in ``out_of_space`` / ``describe()`` and clears once a write lands again (on the
  fake's ``full`` switch: disarming a real alarm needs etcdctl and a compaction).
- User/password authentication and TLS with client certificates.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from march_harness.etcd import EtcdCluster, EtcdMember
from march_harness.fake_etcd import FakeEtcd
from march_harness.manual_clock import ManualClock
from march_harness.proxy import TcpProxy
from march_harness.tls import Certs, make_certs

from march.errors import GuardFailed, StoreError, StoreFull, StoreRejected
from march.etcd.api import Delete, Etcd, Get, Put, created_at
from march.etcd.grpc_etcd import TLS, GrpcEtcd
from march.etcd.keypath import KeyPaths, prefix_end
from march.store.contract import Guard, SequenceRecord
from march.store.etcd_store import EtcdStore
from march.store.etcd_values import decode_record, encode_ceiling, encode_record

pytestmark = pytest.mark.e2e

MAX_ID = 2**63 - 1
TOP = 2**63
DEAD = "127.0.0.1:1"  # nothing listens there: a call to it fails at once


def rec(key: bytes, ceiling: int, kind: str = "sequence", **settings: object) -> SequenceRecord:
    return SequenceRecord(key, kind, ceiling, settings)


async def lead(etcd: Etcd, keys: KeyPaths, owner: bytes = b"n1") -> Guard:
    """Take the leader key the way a campaign does; the guard of that term."""
    reply = await etcd.txn([created_at(keys.leader, 0)], [Put(keys.leader, owner)])
    assert reply.succeeded
    return Guard(owner, reply.revision)


def fresh_keys() -> KeyPaths:
    return KeyPaths.of(f"/t-{uuid.uuid4().hex[:8]}")


async def connect(etcd: GrpcEtcd) -> None:
    """The first call: the client opens its channel to its first endpoint."""
    await etcd.range(Get(b"/connect"))


@pytest.fixture
async def client(etcd: EtcdCluster) -> AsyncIterator[GrpcEtcd]:
    """A connected client whose second endpoint is dead: a call that moved on would fail, and shows in ``endpoint``."""
    c = GrpcEtcd([etcd.endpoints.split(",")[0], DEAD], timeout=5.0)
    try:
        await connect(c)
        assert c.endpoint == etcd.endpoints.split(",")[0]
        yield c
    finally:
        await c.close()


# --- the record format ---------------------------------------------------------------------------


def test_value_encoding_compares_like_the_numbers() -> None:
    values = [0, 1, 9, 10, 99, 100, 999, 1000, 10**18, MAX_ID, TOP]
    digits = [encode_ceiling(v) for v in values]
    assert digits == sorted(digits) and all(len(d) == 20 for d in digits)
    records = [encode_record(rec(b"k", v, min_batch=5)) for v in values]
    assert records == sorted(records)
    for v, e in zip(values, records, strict=True):
        assert decode_record(b"k", e) == rec(b"k", v, min_batch=5)
    # The guarded write's "stored < new" compare is on the whole value against the new digits alone.
    for lower, higher in itertools.pairwise(values):
        assert encode_record(rec(b"k", lower, x="\uffff" * 9)) < encode_ceiling(higher)
        assert not encode_record(rec(b"k", higher)) < encode_ceiling(higher)  # equal: not below
    assert prefix_end(b"/p/seq/") == b"/p/seq0"
    assert prefix_end(b"a\xff") == b"b"


async def test_records_are_stored_in_the_documented_format(client: GrpcEtcd) -> None:
    keys = fresh_keys()
    store = EtcdStore(client, keys)
    guard = await lead(client, keys)
    assert await store.create(rec(b"bin\x00\xff", 42, "timestamp", node_bits=10), guard)
    assert await store.save_ceiling(b"bin\x00\xff", 1000, guard) == 1000
    kv = await client.get(keys.seqs + b"bin\x00\xff")
    assert kv is not None
    digits, space, meta = kv.value.partition(b" ")
    assert (digits, space) == (b"00000000000000001000", b" ")
    assert json.loads(meta) == {"kind": "timestamp", "settings": {"node_bits": 10}}
    # A record written by hand in that format is read as such.
    await client.put(keys.seq(b"by-hand"), b"%020d " % TOP + b'{"kind": "sequence", "settings": {"min_batch": 7}}')
    assert await store.load(b"by-hand") == rec(b"by-hand", TOP, min_batch=7)
    assert await store.save_ceiling(b"by-hand", TOP - 1, guard) == TOP


async def test_a_record_deleted_behind_the_stores_back_is_guard_failed(client: GrpcEtcd) -> None:
    keys = fresh_keys()
    store = EtcdStore(client, keys)
    guard = await lead(client, keys)
    await store.create(rec(b"k", 10, min_batch=3), guard)
    await store.create(rec(b"j", 10), guard)
    assert await store.load(b"k") == rec(b"k", 10, min_batch=3)  # the store has it cached now
    await client.txn([], [Delete(keys.seq(b"k"))])
    results = await asyncio.gather(
        store.save_ceiling(b"k", 20, guard), store.save_ceiling(b"j", 20, guard), return_exceptions=True
    )
    assert isinstance(results[0], GuardFailed) and results[1] == 20
    assert await client.get(keys.seq(b"k")) is None  # not recreated by the write


# --- endpoints and errors ------------------------------------------------------------------------


async def test_client_moves_to_the_next_endpoint(etcd: EtcdCluster) -> None:
    live = etcd.endpoints.split(",")[0]
    c = GrpcEtcd([DEAD, live], timeout=2.0)
    try:
        with pytest.raises(StoreError) as err:
            await c.get(b"x")
        assert not isinstance(err.value, StoreRejected | StoreFull)
        assert c.endpoint == live
        await connect(c)
        assert c.endpoint == live
        await c.put(b"x", b"1")
        kv = await c.get(b"x")
        assert kv is not None and kv.value == b"1"
    finally:
        await c.close()


async def test_a_slow_connection_handshake_does_not_fail_the_first_call(etcd: EtcdCluster) -> None:
    with TcpProxy(etcd.members[0].port) as proxy:
        proxy.cut()  # the handshake is held until restore(): a link with a 300 ms round trip, or a busy etcd
        c = GrpcEtcd([proxy.endpoint], timeout=5.0)
        asyncio.get_running_loop().call_later(0.3, proxy.restore)
        try:
            assert await c.get(b"x") is None  # well within the call's 5 s deadline
        finally:
            await c.close()


async def test_a_request_too_large_is_rejected_without_breaking_later_calls(client: GrpcEtcd) -> None:
    keys = fresh_keys()
    store = EtcdStore(client, keys)
    guard = await lead(client, keys)
    live = client.endpoint
    huge = rec(b"huge", 1, pad="x" * (1700 << 10))  # over etcd's default 1.5 MiB request limit
    results = await asyncio.gather(
        store.create(rec(b"a", 1), guard), store.create(huge, guard), store.create(rec(b"b", 1), guard),
        return_exceptions=True,
    )  # fmt: skip
    assert results[0] is True and results[2] is True  # only the offending call fails
    assert isinstance(results[1], StoreRejected), results[1]
    assert client.endpoint == live  # no retry can help, so no reason to move on
    assert await store.load(b"huge") is None
    assert await store.save_ceiling(b"a", 50, guard) == 50  # later calls work
    assert await store.create(rec(b"c", 1), guard) is True
    assert await store.list_keys() == [b"a", b"b", b"c"]
    assert client.endpoint == live
    assert store.last_error == "" and not store.out_of_space


class QuotaMember(EtcdMember):
    """An etcd member whose backend quota is one byte: its first write raises the NOSPACE alarm."""

    def command(self) -> list[str]:
        return [*super().command(), "--quota-backend-bytes", "1"]


@pytest.fixture
def full_etcd(tmp_path: Path, etcd_bin: str) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path / "full-etcd", size=1, binary=etcd_bin)
    cluster.members = [QuotaMember(cluster, 0, etcd_bin)]
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def test_etcd_nospace_is_store_full_naming_the_alarm_and_the_client_stays(full_etcd: EtcdCluster) -> None:
    live = full_etcd.endpoints
    c = GrpcEtcd([live, DEAD], timeout=5.0)
    keys = fresh_keys()
    store = EtcdStore(c, keys)
    try:
        await connect(c)
        with pytest.raises(StoreFull) as err:
            await store.create(rec(b"k", 1), Guard(b"n1", 2))
        message = str(err.value)
        assert "NOSPACE" in message and "quota-backend-bytes" in message and live in message
        assert "\n" not in message
        assert store.out_of_space
        facts = store.describe()
        assert facts["store_out_of_space"] == 1 and facts["store_last_error"] == message
        with pytest.raises(StoreFull):
            await c.put(b"x", b"1")
        assert c.endpoint == live  # NOSPACE passes only once an operator acts: moving on cannot help
        assert await store.count() == 0  # a plain range read still works
        # etcd 3.5 refuses every Txn while over quota, even a read-only one (which is how ``load``
        # reads): a load may fail, but only as StoreFull naming the alarm, never with a wrong answer.
        try:
            assert await store.load(b"k") is None
        except StoreFull as exc:
            assert "NOSPACE" in str(exc)
        assert c.endpoint == live
    finally:
        await c.close()


async def test_fake_etcd_nospace_is_store_full_until_it_clears() -> None:
    server = FakeEtcd(ManualClock())
    etcd = server.client("n1")
    keys = fresh_keys()
    store = EtcdStore(etcd, keys)
    guard = await lead(etcd, keys)
    await store.create(rec(b"k", 10, min_batch=2), guard)
    assert store.describe() == {
        "store": "etcd",
        "etcd_endpoint": "fake:n1",
        "etcd_prefix": keys.prefix.decode(),
        "store_out_of_space": 0,
        "store_last_error": "",
    }
    server.full = True
    with pytest.raises(StoreFull, match="database space exceeded"):
        await store.save_ceiling(b"k", 20, guard)
    assert store.out_of_space and store.describe()["store_out_of_space"] == 1
    assert "database space exceeded" in store.describe()["store_last_error"]
    with pytest.raises(StoreFull):
        await store.create(rec(b"j", 1), guard)
    assert await store.load(b"k") == rec(b"k", 10, min_batch=2)  # reads still work, nothing written
    server.full = False
    assert await store.save_ceiling(b"k", 20, guard) == 20
    assert not store.out_of_space and store.describe()["store_out_of_space"] == 0
    assert store.last_error == ""
    assert await store.create(rec(b"j", 1), guard) is True


# --- authentication and TLS ----------------------------------------------------------------------


def etcdctl(etcd: EtcdCluster, *args: str) -> str:
    binary = Path(etcd.binary).with_name("etcdctl")
    out = subprocess.run(
        [str(binary), "--endpoints", etcd.endpoints, *args], capture_output=True, text=True, timeout=20
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def test_user_and_password(etcd: EtcdCluster) -> None:
    etcdctl(etcd, "user", "add", "root:rootpw")
    etcdctl(etcd, "auth", "enable")
    endpoints = etcd.endpoints.split(",")
    anonymous = GrpcEtcd(endpoints, timeout=2.0)
    wrong = GrpcEtcd(endpoints, user="root", password="nope", timeout=2.0)
    right = GrpcEtcd(endpoints, user="root", password="rootpw", timeout=2.0)
    try:
        with pytest.raises(StoreRejected, match="user name is empty"):  # no retry can help
            await anonymous.put(b"x", b"1")
        with pytest.raises(StoreError, match=r"authentication failed.*invalid user ID or password"):
            await wrong.put(b"x", b"1")
        await connect(right)
        await right.put(b"x", b"1")
        kv = await right.get(b"x")
        assert kv is not None and kv.value == b"1"
    finally:
        for c in (anonymous, wrong, right):
            await c.close()
        etcdctl(etcd, "--user", "root:rootpw", "auth", "disable")


class TlsMember(EtcdMember):
    """An etcd member that serves clients over TLS and requires a client certificate."""

    certs: Certs

    @property
    def client_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        c = self.certs
        return [*super().command(), "--cert-file", c.server_cert, "--key-file", c.server_key,
                "--client-cert-auth", "--trusted-ca-file", c.ca]  # fmt: skip

    def healthy(self) -> bool:
        context = self.certs.client_context()
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=1.0, context=context) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False


def test_tls_to_etcd(tmp_path: Path, etcd_bin: str) -> None:
    certs = make_certs(tmp_path / "certs")
    etcd = EtcdCluster(tmp_path / "etcd", size=1, binary=etcd_bin)
    TlsMember.certs = certs
    etcd.members = [TlsMember(etcd, 0, etcd_bin)]

    async def check() -> None:
        plain = GrpcEtcd([etcd.endpoints], timeout=2.0)
        tls = GrpcEtcd([etcd.endpoints], tls=TLS(certs.ca, certs.client_cert, certs.client_key))
        try:
            with pytest.raises(StoreError):
                await plain.put(b"x", b"1")
            await connect(tls)
            await tls.put(b"x", b"tls")
            kv = await tls.get(b"x")
            assert kv is not None and kv.value == b"tls"
        finally:
            await plain.close()
            await tls.close()

    try:
        etcd.start()
        asyncio.run(check())
    finally:
        etcd.stop()

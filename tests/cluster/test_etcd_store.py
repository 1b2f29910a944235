"""The etcd store and client against a real etcd (one member, started by the fixture).

What matters for the guarantees: a ceiling write lands only while the writer holds the leader key
(same value, same create revision) and only if it raises the stored ceiling; a failed guard is
``GuardFailed`` (step down), never a silent success; reads are linearizable; the client moves to
the next endpoint when one is unreachable.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.aio import finish
from support.etcd import EtcdCluster, EtcdMember

from march.generators.base import BatchPolicy
from march.generators.sequence import MAX_ID, TOP, SequenceGenerator
from march.store.base import Guard, GuardFailed, SequenceRecord, StoreError
from march.store.etcd import TLS, EtcdClient, EtcdStore, created_at, decode_record, encode_record, prefix_end, put_op


@pytest.fixture
async def client(etcd: EtcdCluster) -> AsyncIterator[EtcdClient]:
    c = EtcdClient(etcd.endpoints.split(","), timeout=5.0)
    yield c
    await c.close()


@pytest.fixture
def store(client: EtcdClient) -> EtcdStore:
    return EtcdStore(client, f"/t-{uuid.uuid4().hex[:8]}")


async def lead(store: EtcdStore, owner: bytes = b"n1") -> Guard:
    """Take the leader key the way a campaign does; the guard of that term."""
    reply = await store.client.txn([created_at(store.leader_key, 0)], [put_op(store.leader_key, owner)], [])
    assert reply.succeeded
    return Guard(owner, reply.header.revision)


def rec(key: bytes, ceiling: int, kind: str = "sequence", **settings: int) -> SequenceRecord:
    return SequenceRecord(key, kind, ceiling, settings)


def test_value_encoding_compares_like_the_numbers() -> None:
    values = [0, 1, 9, 10, 999, 1000, 10**18, MAX_ID, TOP]
    encoded = [encode_record(rec(b"k", v)) for v in values]
    assert encoded == sorted(encoded)
    for v, e in zip(values, encoded, strict=True):
        assert decode_record(b"k", e) == rec(b"k", v)
    assert prefix_end(b"/p/seq/") == b"/p/seq0"
    assert prefix_end(b"a\xff") == b"b"


async def test_create_load_and_load_all_in_creation_order(store: EtcdStore) -> None:
    guard = await lead(store)
    assert await store.load(b"a") is None
    records = [rec(b"b", 11), rec(b"a", 1001, min_batch=5), rec(b"\xff\x00bin\r\n", 7, "timestamp", unit=1)]
    for r in records:
        assert await store.create(r, guard) is True
    assert await store.create(rec(b"a", 5), guard) is False  # exists: unchanged
    assert await store.load(b"a") == records[1]
    assert await store.load_all() == records


async def test_ceiling_moves_only_up_and_only_under_the_guard(store: EtcdStore) -> None:
    guard = await lead(store)
    await store.create(rec(b"k", 1000), guard)
    await store.save_ceiling(b"k", 2000, guard)
    for lower_or_equal in (2000, 1999, 1):
        with pytest.raises(GuardFailed):
            await store.save_ceiling(b"k", lower_or_equal, guard)
    for wrong in (Guard(b"n2", guard.revision), Guard(b"n1", guard.revision + 1), Guard(b"", 0)):
        with pytest.raises(GuardFailed):
            await store.save_ceiling(b"k", 3000, wrong)
    await store.save_ceiling(b"k", TOP, guard)  # the largest ceiling of all still compares right
    loaded = await store.load(b"k")
    assert loaded is not None and loaded.ceiling == TOP


async def test_a_new_term_fences_the_old_one(store: EtcdStore) -> None:
    old = await lead(store, b"n1")
    await store.create(rec(b"k", 1000), old)
    await store.client.delete(store.leader_key)  # the lease ran out
    new = await lead(store, b"n1")  # the same node id wins again: a new create revision
    assert new.revision != old.revision
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"k", 5000, old)
    with pytest.raises(GuardFailed):
        await store.create(rec(b"other", 10), old)
    await store.save_ceiling(b"k", 5000, new)


async def test_no_leader_key_no_write(store: EtcdStore) -> None:
    guard = await lead(store)
    await store.create(rec(b"k", 10), guard)
    await store.client.delete(store.leader_key)
    with pytest.raises(GuardFailed):
        await store.save_ceiling(b"k", 20, guard)


async def test_settings_survive_ceiling_writes_from_another_store_object(store: EtcdStore) -> None:
    guard = await lead(store)
    await store.create(rec(b"k", 10, "timestamp", unit=10), guard)
    other = EtcdStore(store.client, store.prefix.decode())  # a new primary: nothing cached
    await other.save_ceiling(b"k", 20, guard)
    assert await store.load(b"k") == rec(b"k", 20, "timestamp", unit=10)
    with pytest.raises(StoreError):
        await other.save_ceiling(b"missing", 20, guard)


async def test_generator_over_etcd_persists_before_it_serves(store: EtcdStore) -> None:
    guard = await lead(store)

    class Lease:
        def __init__(self) -> None:
            self.guard = guard
            self.lost_reason = ""

        def valid(self) -> bool:
            return not self.lost_reason

        def lost(self, reason: str) -> None:
            self.lost_reason = reason

    lease = Lease()
    await store.create(rec(b"k", 1), guard)
    policy = BatchPolicy(min_batch=100, max_batch=100)
    gen = SequenceGenerator(b"k", 1, store, lease, policy, asyncio.get_running_loop().time)
    ids = [await finish(gen.take_wait(1)) for _ in range(250)]
    assert ids == list(range(1, 251))
    loaded = await store.load(b"k")
    assert loaded is not None and loaded.ceiling > 250
    await store.client.delete(store.leader_key)  # leadership gone: the next extension is refused
    with pytest.raises(Exception):  # noqa: B017 - NotServing or TRYAGAIN: never an ID
        for _ in range(1000):
            await finish(gen.take_wait(1))
    assert lease.lost_reason


async def test_client_moves_to_the_next_endpoint(etcd: EtcdCluster) -> None:
    dead = "127.0.0.1:1"
    c = EtcdClient([dead, etcd.endpoints.split(",")[0]], timeout=2.0)
    try:
        with pytest.raises(StoreError):
            await c.get(b"x")
        assert c.endpoint != dead
        await c.put(b"x", b"1")
        kv = await c.get(b"x")
        assert kv is not None and kv.value == b"1"
    finally:
        await c.close()


async def test_lease_keep_alive_and_watch(client: EtcdClient) -> None:
    lease, ttl = await client.grant(5)
    assert ttl >= 5
    assert await client.keep_alive(lease, timeout=2.0) > 0
    key = f"/w-{uuid.uuid4().hex[:8]}/leader".encode()
    revision = await client.put(key, b"n1", lease)
    seen: list[int] = []

    async def watch() -> None:
        async for changed in client.watch(key, key + b"\0", start_revision=revision + 1):
            seen.append(changed)
            return

    task = asyncio.create_task(watch())
    await client.revoke(lease)  # deletes the key: the watch sees it
    await finish(task, 5.0)
    assert seen
    assert await client.get(key) is None
    assert await client.keep_alive(lease, timeout=2.0) <= 0


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
    anonymous = EtcdClient(endpoints, timeout=2.0)
    wrong = EtcdClient(endpoints, user="root", password="nope", timeout=2.0)
    right = EtcdClient(endpoints, user="root", password="rootpw", timeout=2.0)
    try:
        with pytest.raises(StoreError):
            await anonymous.put(b"x", b"1")
        with pytest.raises(StoreError, match="authentication failed"):
            await wrong.put(b"x", b"1")
        await right.put(b"x", b"1")
        kv = await right.get(b"x")
        assert kv is not None and kv.value == b"1"
    finally:
        for c in (anonymous, wrong, right):
            await c.close()
        etcdctl(etcd, "--user", "root:rootpw", "auth", "disable")


def make_certs(base: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    base.mkdir(parents=True, exist_ok=True)
    files = {name: base / name for name in ("ca.key", "ca.crt", "server.key", "server.crt", "client.key", "client.crt")}

    def run(*args: str) -> None:
        out = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30, cwd=base)
        assert out.returncode == 0, out.stderr

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=march-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    (base / "san.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    for who in ("server", "client"):
        run(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", f"{who}.key", "-out", f"{who}.csr"
        )
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", f"{who}.crt")  # fmt: skip
    return files


class TlsMember(EtcdMember):
    """An etcd member that serves clients over TLS and requires a client certificate."""

    certs: dict[str, Path] = {}

    @property
    def client_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        c = self.certs
        return [*super().command(), "--cert-file", str(c["server.crt"]), "--key-file", str(c["server.key"]),
                "--client-cert-auth", "--trusted-ca-file", str(c["ca.crt"])]  # fmt: skip

    def healthy(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.certs["ca.crt"]))
        context.load_cert_chain(str(self.certs["client.crt"]), str(self.certs["client.key"]))
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
        plain = EtcdClient([etcd.endpoints], timeout=2.0)
        tls = EtcdClient(
            [etcd.endpoints], tls=TLS(str(certs["ca.crt"]), str(certs["client.crt"]), str(certs["client.key"]))
        )
        try:
            with pytest.raises(StoreError):
                await plain.put(b"x", b"1")
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

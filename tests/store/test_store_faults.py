"""Store faults seen from a client, on real processes: a real etcd, real march nodes, real clients.

- A frozen etcd (SIGSTOP): `INCR` on a new key gets `TRYAGAIN` within `max_wait`, not after the
  freeze; the same key works once etcd is back.
- etcd's NOSPACE alarm (a real etcd with a tiny quota, filled up): keys with a durable range keep
  serving; a key that needs a store write gets a `TRYAGAIN` that names the cause; `INFO
  persistence` says `store_out_of_space:1` and the error; after the alarm is cleared, IDs go on.
- A request etcd can never accept is an error, not TRYAGAIN, and leaves the primary serving.

Every process is stopped by its fixture; waits are conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from march_harness.cluster import MarchCluster, parse_info
from march_harness.etcd import EtcdCluster
from march_harness.resp import RespConn, RespError

from march import errors
from march.errors import StoreFull
from march.etcd.grpc_etcd import GrpcEtcd

pytestmark = pytest.mark.e2e

QUOTA = 4 << 20  # bytes: etcd's backend quota in the NOSPACE test (small, so it fills in a second)


def wait_for(cond: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling a condition with a deadline


@pytest.fixture
def small_etcd(tmp_path: Path, etcd_bin: str) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path / "etcd-small", binary=etcd_bin, extra_args=["--quota-backend-bytes", str(QUOTA)])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_a_new_key_on_a_frozen_etcd_gets_tryagain_within_max_wait(tmp_path: Path, etcd: EtcdCluster) -> None:
    max_wait = 0.5
    # TTL 6: etcd writes time out after TTL/3 = 2 s, so only max_wait can answer within 1.5 s.
    with MarchCluster(tmp_path / "m", etcd.endpoints, size=1, lease_ttl=6, extra_args=["--max-wait", "0.5"]) as c:
        primary = c.wait_settled(20)
        with RespConn(primary.port) as conn:
            assert conn.call("INCR", "warm") == 1
            etcd.members[0].pause()
            try:
                started = time.monotonic()
                reply = conn.call("INCR", "brand-new")
                took = time.monotonic() - started
            finally:
                etcd.members[0].resume()
            assert isinstance(reply, RespError) and reply.prefix == "TRYAGAIN", reply
            assert took < max_wait + 1.0, f"waited {took:.2f}s for a frozen store (max_wait {max_wait})"
        primary = c.wait_settled(20)
        with RespConn(primary.port) as conn:
            wait_for(lambda: isinstance(conn.call("INCR", "brand-new"), int), "the key to work once etcd is back")


def test_nospace_is_named_to_clients_and_in_info(tmp_path: Path, small_etcd: EtcdCluster) -> None:
    with MarchCluster(tmp_path / "m", small_etcd.endpoints, size=1, lease_ttl=3, extra_args=["--max-wait", "0.5"]) as c:
        primary = c.wait_settled(20)
        with RespConn(primary.port) as conn:
            assert conn.call("INCR", "k") == 1
            assert conn.call("SEQ.CREATE", "small", "MINBATCH", 5, "MAXBATCH", 5) == "OK"
            assert conn.call("INCR", "small") == 1  # 1..5 are durable
        asyncio.run(_fill(small_etcd.endpoints))  # etcd raises its NOSPACE alarm
        with RespConn(primary.port) as conn:
            served = [conn.call("INCR", "small") for _ in range(4)]
            assert served == [2, 3, 4, 5]  # the durable range is still served
            reply = conn.call("INCR", "small")  # the range is spent: a write is needed
            assert isinstance(reply, RespError), reply
            assert reply == RespError(errors.TRYAGAIN_STORE_FULL)
            info = parse_info(conn.call("INFO", "persistence"))  # type: ignore[arg-type]
            assert info["store_out_of_space"] == "1", info
            assert "NOSPACE" in info["store_last_error"] or "space" in info["store_last_error"], info
            new_key = conn.call("INCR", "brand-new")  # a creation is a write too
            assert isinstance(new_key, RespError) and "out of space" in new_key.message, new_key


async def _fill(endpoints: str) -> None:
    """Write junk outside march's prefix until etcd refuses with NOSPACE."""
    client = GrpcEtcd(endpoints.split(","), timeout=5.0)
    junk = b"x" * (512 << 10)
    try:
        for i in range(64 * QUOTA // len(junk)):  # etcd's file grows in steps: bounded, not exact
            try:
                await client.put(b"/junk/%d-%s" % (i, uuid.uuid4().hex.encode()), junk)
            except StoreFull:
                return
        raise AssertionError("etcd never raised NOSPACE")
    finally:
        await client.close()


def test_a_request_etcd_never_accepts_is_an_error_and_the_primary_keeps_serving(tmp_path: Path, etcd_bin: str) -> None:
    """Once, a 1 MB name made etcd refuse the request, and march took that for a broken connection:
    it reset the channel the keep-alive shared (a healthy primary stepped down) and told the
    client TRYAGAIN, which could never succeed. Here etcd takes at most 100 kB per request, and
    max_key_len lets a 64 kB name through to it."""
    strict = EtcdCluster(tmp_path / "etcd-strict", binary=etcd_bin, extra_args=["--max-request-bytes", "100000"])
    args = ["--max-key-len", "65536"]
    try:
        strict.start()
        with MarchCluster(tmp_path / "m", strict.endpoints, size=1, lease_ttl=3, extra_args=args) as c:
            primary = c.wait_settled(20)
            with RespConn(primary.port) as conn:
                assert conn.call("INCR", "a") == 1
                for i in range(5):
                    reply = conn.call("INCR", "h" * 65000 + str(i))  # its creation passes 100 kB
                    assert isinstance(reply, RespError) and reply.prefix == "ERR", reply
                    assert reply.message.startswith("ERR the store refused the request"), reply
                assert conn.call("INCR", "a") == 2
                too_long = conn.call("INCR", "k" * 65537)
                assert too_long == RespError(errors.KEY_TOO_LONG.format(65536)), too_long
            info = parse_info(primary.call("INFO", "cluster"))  # type: ignore[arg-type]
            assert info["demotions"] == "0", info  # the keep-alive never noticed
            assert c.primary() is primary
    finally:
        strict.stop()

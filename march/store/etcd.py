"""The etcd store (cluster mode): ceilings under ``<prefix>/seq/<key>``, every write guarded.

``EtcdClient`` is a small asyncio client over the gRPC stubs that ``aetcd`` ships: linearizable
reads, transactions, leases and watches, with several endpoints (a call that finds its endpoint
unreachable moves the client to the next one), TLS and user/password authentication. It raises
``StoreError`` for anything transient. Writes are never retried inside the client: a write whose
outcome is unknown is retried by its caller with a strictly greater ceiling (see the generators).

Key layout (``prefix`` defaults to ``/march``):

- ``<prefix>/leader``: the primary's node id, attached to its lease (see ``march.cluster``).
- ``<prefix>/leader-handoff``: during a planned FAILOVER, the node chosen to take over.
- ``<prefix>/nodes/<id>``: each node's registration (JSON: id, address, role), under its lease.
- ``<prefix>/seq/<key>``: one sequence. The value is the ceiling as 20 zero-padded decimal digits,
  a space, then JSON ``{"kind": ..., "settings": {...}}``. Fixed-width digits make etcd's bytewise
  value comparison numeric, so "new ceiling > stored ceiling" is one compare in the same
  transaction as the leadership guard: ``value(seq) < digits(new)`` holds exactly when the stored
  ceiling is smaller (equal digits followed by the JSON compare greater).

Every ceiling write is one transaction: ``value(leader) == guard.owner``, ``create_revision(leader)
== guard.revision`` and ``value(seq) < digits(new)``; if any compare fails, ``GuardFailed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# gRPC's C core logs every failed connection attempt to stderr; March logs what matters itself.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc
from aetcd import rpc

from .base import Guard, GuardFailed, SequenceRecord, Store, StoreError

log = logging.getLogger(__name__)

_DIGITS = 20  # 2**63 has 19 digits: every ceiling fits, and the compare stays numeric
_TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True)
class KV:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


def _kv(kv: Any) -> KV:
    return KV(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease)


@dataclass(frozen=True)
class TLS:
    ca_cert_file: str = ""
    cert_file: str = ""
    key_file: str = ""


def _cancelled(endpoint: str) -> BaseException:
    """A call cancelled under us: our own task's cancellation goes on; a call cut short because its
    channel was closed (another call found the endpoint broken) is an ordinary StoreError."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return asyncio.CancelledError()
    return StoreError(f"etcd {endpoint}: the call was cut short (its channel was closed)")


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


class EtcdClient:
    """One gRPC channel to one of ``endpoints`` at a time; transient failures move to the next."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        user: str = "",
        password: str = "",
        tls: TLS | None = None,
        timeout: float = 5.0,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = list(endpoints)
        self.user = user
        self.password = password
        self.tls = tls
        self.timeout = timeout
        self._index = 0
        self._channel: grpc.aio.Channel | None = None
        self._generation = 0  # bumped at every channel change, so concurrent failures move once
        self._metadata: tuple[tuple[str, str], ...] | None = None
        self._kv: Any = None
        self._lease: Any = None
        self._watch: Any = None
        self._connecting: asyncio.Lock | None = None

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._index]

    # --- channel -------------------------------------------------------------------------------

    def _open_channel(self) -> grpc.aio.Channel:
        target = self.endpoint
        options = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000)]
        if self.tls is None:
            return grpc.aio.insecure_channel(target, options=options)
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls.ca_cert_file),
            private_key=_read(self.tls.key_file),
            certificate_chain=_read(self.tls.cert_file),
        )
        return grpc.aio.secure_channel(target, creds, options=options)

    async def _ensure(self) -> int:
        if self._channel is not None:
            return self._generation
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._channel is not None:
                return self._generation
            channel = self._open_channel()
            metadata = None
            if self.user:
                try:
                    auth = rpc.AuthStub(channel)
                    reply = await auth.Authenticate(
                        rpc.AuthenticateRequest(name=self.user, password=self.password), timeout=self.timeout
                    )
                except grpc.aio.AioRpcError as exc:
                    await channel.close()
                    self._failed(self._generation)
                    raise StoreError(f"etcd {self.endpoint}: authentication failed: {exc.details()}") from None
                metadata = (("token", reply.token),)
            self._channel = channel
            self._metadata = metadata
            self._kv = rpc.KVStub(channel)
            self._lease = rpc.LeaseStub(channel)
            self._watch = rpc.WatchStub(channel)
            self._generation += 1
            return self._generation

    def _failed(self, generation: int) -> None:
        """The channel of ``generation`` failed: the next call uses the next endpoint."""
        if generation != self._generation:
            return  # someone already moved on
        channel, self._channel = self._channel, None
        self._generation += 1
        self._index = (self._index + 1) % len(self.endpoints)
        if channel is not None:
            asyncio.get_running_loop().create_task(channel.close())

    async def _unary(self, stub: str, method: str, request: Any, timeout: float | None) -> Any:
        generation = await self._ensure()
        fn = getattr(getattr(self, stub), method)
        try:
            return await fn(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, generation) from None
        except asyncio.CancelledError:
            raise _cancelled(self.endpoint) from None

    def _error(self, exc: grpc.aio.AioRpcError, generation: int) -> StoreError:
        code = exc.code()
        details = exc.details() or ""
        error = StoreError(f"etcd {self.endpoint}: {code.name}: {details}")
        if code in _TRANSIENT or code == grpc.StatusCode.UNAUTHENTICATED or "auth token" in details:
            self._failed(generation)  # next call: next endpoint (and a fresh auth token)
        return error

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        self._generation += 1
        if channel is not None:
            await channel.close()

    # --- KV ------------------------------------------------------------------------------------

    async def get(self, key: bytes, timeout: float | None = None) -> KV | None:
        """Linearizable read of one key."""
        reply = await self._unary("_kv", "Range", rpc.RangeRequest(key=key), timeout)
        return _kv(reply.kvs[0]) if reply.kvs else None

    async def get_range(self, start: bytes, end: bytes, timeout: float | None = None) -> tuple[list[KV], int]:
        """Linearizable read of ``[start, end)``: the pairs and the store revision of the read."""
        reply = await self._unary("_kv", "Range", rpc.RangeRequest(key=start, range_end=end), timeout)
        return [_kv(kv) for kv in reply.kvs], reply.header.revision

    async def txn(
        self, compare: list[Any], success: list[Any], failure: list[Any], timeout: float | None = None
    ) -> Any:
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure)
        return await self._unary("_kv", "Txn", request, timeout)

    async def put(self, key: bytes, value: bytes, lease: int = 0, timeout: float | None = None) -> int:
        reply = await self._unary("_kv", "Put", rpc.PutRequest(key=key, value=value, lease=lease), timeout)
        return int(reply.header.revision)

    async def delete(self, key: bytes, timeout: float | None = None) -> None:
        await self._unary("_kv", "DeleteRange", rpc.DeleteRangeRequest(key=key), timeout)

    # --- leases --------------------------------------------------------------------------------

    async def grant(self, ttl: int, timeout: float | None = None) -> tuple[int, int]:
        """A new lease: (id, granted ttl)."""
        reply = await self._unary("_lease", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl), timeout)
        if reply.error:
            raise StoreError(f"etcd {self.endpoint}: lease grant: {reply.error}")
        return int(reply.ID), int(reply.TTL)

    async def keep_alive(self, lease: int, timeout: float) -> int:
        """One keep-alive: the remaining TTL the server granted (<= 0: the lease is gone)."""
        generation = await self._ensure()
        call = self._lease.LeaseKeepAlive(
            iter([rpc.LeaseKeepAliveRequest(ID=lease)]), timeout=timeout, metadata=self._metadata
        )
        async with contextlib.aclosing(self._replies(call, generation)) as replies:
            async for reply in replies:
                return int(reply.TTL)
        raise StoreError(f"etcd {self.endpoint}: keep-alive stream ended without a reply")

    async def revoke(self, lease: int, timeout: float | None = None) -> None:
        await self._unary("_lease", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease), timeout)

    # --- watch ---------------------------------------------------------------------------------

    async def watch(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncIterator[int]:
        """Yield the revision of every change in ``[start, end)`` until the stream breaks (StoreError)."""
        generation = await self._ensure()
        create = rpc.WatchCreateRequest(key=start, range_end=end, start_revision=start_revision)
        call = self._watch.Watch(iter([rpc.WatchRequest(create_request=create)]), metadata=self._metadata)
        async with contextlib.aclosing(self._replies(call, generation)) as replies:
            async for reply in replies:
                if reply.canceled:
                    raise StoreError(f"etcd {self.endpoint}: watch canceled: {reply.cancel_reason}")
                if reply.events:
                    yield int(reply.header.revision)
        raise StoreError(f"etcd {self.endpoint}: watch stream ended")

    async def _replies(self, call: Any, generation: int) -> AsyncGenerator[Any, None]:
        """The replies of a streaming call, its failures as StoreError; the call ends with the iteration."""
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, generation) from None
        except asyncio.CancelledError:
            raise _cancelled(self.endpoint) from None
        finally:
            call.cancel()


# --- transaction building blocks ----------------------------------------------------------------


def value_is(key: bytes, value: bytes) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.VALUE, result=rpc.Compare.EQUAL, value=value)


def value_below(key: bytes, value: bytes) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.VALUE, result=rpc.Compare.LESS, value=value)


def created_at(key: bytes, revision: int) -> Any:
    """``create_revision(key) == revision`` (0: the key does not exist)."""
    return rpc.Compare(key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=revision)


def put_op(key: bytes, value: bytes, lease: int = 0) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def get_op(key: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


def delete_op(key: bytes) -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))


def guard_compares(leader_key: bytes, guard: Guard) -> list[Any]:
    """The leadership guard: the leader key holds this owner and was created at this revision."""
    return [value_is(leader_key, guard.owner), created_at(leader_key, guard.revision)]


# --- the store -----------------------------------------------------------------------------------


def encode_ceiling(ceiling: int) -> bytes:
    return b"%020d" % ceiling


def encode_record(record: SequenceRecord) -> bytes:
    meta = json.dumps({"kind": record.kind, "settings": dict(record.settings)}, sort_keys=True)
    return encode_ceiling(record.ceiling) + b" " + meta.encode()


def decode_record(key: bytes, value: bytes) -> SequenceRecord:
    digits, _, meta = value.partition(b" ")
    data = json.loads(meta) if meta else {}
    return SequenceRecord(key, data.get("kind", "sequence"), int(digits), data.get("settings", {}))


class EtcdStore(Store):
    """Sequences in etcd; the leadership guard comes from ``march.cluster``."""

    name = "etcd"

    def __init__(self, client: EtcdClient, prefix: str, timeout: float = 5.0, write_timeout: float = 5.0) -> None:
        self.client = client
        # A write caught by an etcd leader change can hang until its deadline although etcd elects
        # a new leader in about a second: writes get a short deadline, and the generator retries
        # with a greater ceiling (an abandoned write that lands later is harmless).
        self.write_timeout = min(timeout, write_timeout)
        self.prefix = prefix.encode()
        self.leader_key = self.prefix + b"/leader"
        self.seq_prefix = self.prefix + b"/seq/"
        self.timeout = timeout
        self._meta: dict[bytes, bytes] = {}  # key -> the JSON part of its value, written back unchanged

    def seq_key(self, key: bytes) -> bytes:
        return self.seq_prefix + key

    async def open(self) -> None:
        pass  # the client connects on first use; the cluster node owns its life

    async def close(self) -> None:
        pass

    def _remember(self, record_key: bytes, value: bytes) -> SequenceRecord:
        record = decode_record(record_key, value)
        self._meta[record_key] = value.partition(b" ")[2]
        return record

    async def load(self, key: bytes) -> SequenceRecord | None:
        kv = await self.client.get(self.seq_key(key), self.timeout)
        return None if kv is None else self._remember(key, kv.value)

    async def load_all(self) -> list[SequenceRecord]:
        kvs, _ = await self.client.get_range(self.seq_prefix, prefix_end(self.seq_prefix), self.timeout)
        kvs.sort(key=lambda kv: kv.create_revision)  # creation order, as SEQ.LIST and SCAN show it
        return [self._remember(kv.key[len(self.seq_prefix) :], kv.value) for kv in kvs]

    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        seq = self.seq_key(record.key)
        value = encode_record(record)
        reply = await self.client.txn(
            [*guard_compares(self.leader_key, guard), created_at(seq, 0)],
            [put_op(seq, value)],
            [get_op(self.leader_key)],
            self.write_timeout,
        )
        if reply.succeeded:
            self._meta[record.key] = value.partition(b" ")[2]
            return True
        leader = reply.responses[0].response_range.kvs
        if not leader or leader[0].value != guard.owner or leader[0].create_revision != guard.revision:
            raise GuardFailed(f"creating {record.key!r}: this node no longer holds the leader key")
        return False  # the guard held, so the key exists

    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> None:
        seq = self.seq_key(key)
        meta = self._meta.get(key)
        if meta is None:
            if await self.load(key) is None:
                raise StoreError(f"sequence {key!r} is not in the store")
            meta = self._meta[key]
        digits = encode_ceiling(ceiling)
        reply = await self.client.txn(
            [*guard_compares(self.leader_key, guard), value_below(seq, digits)],
            [put_op(seq, digits + b" " + meta)],
            [],
            self.write_timeout,
        )
        if not reply.succeeded:
            raise GuardFailed(f"ceiling {ceiling} for {key!r}: leadership lost or a higher ceiling is stored")

    def describe(self) -> dict[str, Any]:
        return {"store": self.name, "etcd_endpoint": self.client.endpoint, "etcd_prefix": self.prefix.decode()}

"""``GrpcEtcd``: the ``Etcd`` interface over the gRPC stubs that ``aetcd`` ships.

- **Endpoints.** One channel to one endpoint at a time. A call that finds its endpoint unreachable
  moves *later* calls to the next endpoint; the old channel is closed only once the calls still
  running on it have finished, so one call's failure never cuts another call short.
- **Independent clients.** A node makes one client per purpose (the lease keep-alive, the
  election and directory, the data), so a data call that fails, or a burst of them, can never
  cancel or delay a keep-alive.
- **Reconnects.** gRPC's reconnect back-off is capped near one second (its default grows to two
  minutes): once etcd answers again, a node notices within about a second. Each channel keeps
  its own subchannels, so a fresh channel really reconnects.
- **Errors.** Anything that may pass is ``StoreError`` (unreachable, timed out, a leader change).
  A request etcd will never take (too large, too many operations, invalid, not permitted) is
  ``StoreRejected``: no retry can help, and it does not move the client to another endpoint.
  etcd's NOSPACE alarm ("database space exceeded") is ``StoreFull``, named as such. Writes are
  never retried inside the client: a write whose outcome is unknown is the caller's to retry.
- TLS (CA, client certificate) and user/password authentication (a token per channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# gRPC's C core logs every failed connection attempt to stderr; March logs what matters itself.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc
from aetcd import rpc

from march.errors import StoreError, StoreFull, StoreRejected
from march.etcd.api import KV, Compare, Event, Get, Op, Put, Range, Request, Target, TxnResult

log = logging.getLogger("march.etcd")

# Channel options: keepalive pings find a dead TCP connection in seconds, and reconnect attempts
# back off from 100 ms to at most 1 s (gRPC's default grows to 120 s: an etcd restarted after a
# few seconds would be noticed seconds late). Not grpc.min_reconnect_backoff_ms: it is also the
# shortest time a connection attempt is given, and a slow handshake would fail every call.
# A local subchannel pool keeps channels independent.
_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.use_local_subchannel_pool", 1),
]

# Codes after which the next call goes to the next endpoint (and, for auth, gets a fresh token).
_MOVE_ON = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNAUTHENTICATED,
}
# Codes that say "this request will never be accepted".
_REJECTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNIMPLEMENTED,
}

_TARGET = {
    Target.VERSION: rpc.Compare.VERSION,
    Target.CREATE: rpc.Compare.CREATE,
    Target.MOD: rpc.Compare.MOD,
    Target.VALUE: rpc.Compare.VALUE,
    Target.LEASE: rpc.Compare.LEASE,
}
_OPERAND = {
    Target.VERSION: "version",
    Target.CREATE: "create_revision",
    Target.MOD: "mod_revision",
    Target.VALUE: "value",
    Target.LEASE: "lease",
}
_RESULT = {
    Op.EQUAL: rpc.Compare.EQUAL,
    Op.LESS: rpc.Compare.LESS,
    Op.GREATER: rpc.Compare.GREATER,
    Op.NOT_EQUAL: rpc.Compare.NOT_EQUAL,
}


@dataclass(frozen=True)
class TLS:
    ca_cert_file: str = ""
    cert_file: str = ""
    key_file: str = ""


def classify(code: grpc.StatusCode, details: str, endpoint: str) -> StoreError:
    """The March error for a gRPC status."""
    text = f"etcd {endpoint}: {code.name}: {details}"
    lowered = details.lower()
    if "database space exceeded" in lowered or "nospace" in lowered:
        return StoreFull(
            f"etcd {endpoint} is out of space (NOSPACE alarm: {details}); raise its --quota-backend-bytes, "
            "compact and defragment, then disarm the alarm"
        )
    if code in _REJECTED or "too large" in lowered or "larger than max" in lowered or "too many operations" in lowered:
        return StoreRejected(text)
    return StoreError(text)


def _cut_short(endpoint: str) -> BaseException:
    """A call cancelled under us: our own task's cancellation goes on; a call whose channel was
    closed (the client is closing) is an ordinary StoreError for its caller."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        return asyncio.CancelledError()
    return StoreError(f"etcd {endpoint}: the call was cut short (the client is closing)")


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _compare(c: Compare) -> Any:
    return rpc.Compare(
        key=c.key, range_end=c.end, target=_TARGET[c.target], result=_RESULT[c.op], **{_OPERAND[c.target]: c.operand}
    )


def _range_request(g: Get) -> Any:
    return rpc.RangeRequest(key=g.key, range_end=g.end, limit=g.limit, keys_only=g.keys_only, count_only=g.count_only)


def _request(op: Request) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(request_put=rpc.PutRequest(key=op.key, value=op.value, lease=op.lease))
    if isinstance(op, Get):
        return rpc.RequestOp(request_range=_range_request(op))
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=op.key, range_end=op.end))


def _kv(kv: Any) -> KV:
    return KV(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


def _range(reply: Any, revision: int) -> Range:
    return Range([_kv(kv) for kv in reply.kvs], int(reply.count), bool(reply.more), revision)


class _Channel:
    """One gRPC channel and its stubs; closed once retired and idle."""

    def __init__(self, channel: grpc.aio.Channel, endpoint: str, metadata: tuple[tuple[str, str], ...] | None) -> None:
        self.channel = channel
        self.endpoint = endpoint
        self.metadata = metadata
        self.kv = rpc.KVStub(channel)
        self.lease = rpc.LeaseStub(channel)
        self.watch = rpc.WatchStub(channel)
        self.calls = 0
        self.retired = False

    def enter(self) -> None:
        self.calls += 1

    def leave(self) -> None:
        self.calls -= 1
        self.close_if_idle()

    def retire(self) -> None:
        self.retired = True
        self.close_if_idle()

    def close_if_idle(self) -> None:
        if self.retired and self.calls == 0:
            self.retired = False  # close once
            asyncio.get_running_loop().create_task(self.channel.close())


class GrpcEtcd:
    """One client of an etcd cluster; transient failures move later calls to the next endpoint."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        user: str = "",
        password: str = "",
        tls: TLS | None = None,
        timeout: float = 5.0,
        name: str = "etcd",
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        self.endpoints = list(endpoints)
        self.user = user
        self.password = password
        self.tls = tls
        self.timeout = timeout
        self.name = name
        self._index = 0
        self._current: _Channel | None = None
        self._connecting: asyncio.Lock | None = None
        self._closed = False

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._index]

    # --- channels ------------------------------------------------------------------------------

    def _open(self, target: str) -> grpc.aio.Channel:
        if self.tls is None:
            return grpc.aio.insecure_channel(target, options=_OPTIONS)
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(self.tls.ca_cert_file),
            private_key=_read(self.tls.key_file),
            certificate_chain=_read(self.tls.cert_file),
        )
        return grpc.aio.secure_channel(target, creds, options=_OPTIONS)

    async def _channel(self) -> _Channel:
        current = self._current
        if current is not None:
            return current
        if self._closed:
            raise StoreError(f"{self.name}: the client is closed")
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._current is not None:
                return self._current
            endpoint = self.endpoint
            channel = self._open(endpoint)
            metadata = None
            if self.user:
                try:
                    reply = await rpc.AuthStub(channel).Authenticate(
                        rpc.AuthenticateRequest(name=self.user, password=self.password), timeout=self.timeout
                    )
                except grpc.aio.AioRpcError as exc:
                    await channel.close()
                    self._index = (self._index + 1) % len(self.endpoints)
                    raise StoreError(f"etcd {endpoint}: authentication failed: {exc.details()}") from None
                metadata = (("token", reply.token),)
            self._current = _Channel(channel, endpoint, metadata)
            return self._current

    def _failed(self, ch: _Channel) -> None:
        """``ch`` failed: later calls use the next endpoint; ``ch`` closes once its calls are done."""
        if self._current is not ch:
            return  # someone already moved on
        self._current = None
        self._index = (self._index + 1) % len(self.endpoints)
        ch.retire()

    def _error(self, exc: grpc.aio.AioRpcError, ch: _Channel) -> StoreError:
        code = exc.code()
        details = exc.details() or ""
        if code in _MOVE_ON or "auth token" in details:
            self._failed(ch)
        return classify(code, details, ch.endpoint)

    @contextlib.contextmanager
    def _on(self, ch: _Channel) -> Iterator[None]:
        """A call running on ``ch``: counted (the channel closes only when idle); failures as StoreError."""
        ch.enter()
        try:
            yield
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, ch) from None
        except asyncio.CancelledError:
            raise _cut_short(ch.endpoint) from None
        finally:
            ch.leave()

    async def _unary(self, stub: str, method: str, request: Any, timeout: float | None) -> Any:
        ch = await self._channel()
        with self._on(ch):
            fn = getattr(getattr(ch, stub), method)
            return await fn(request, timeout=timeout or self.timeout, metadata=ch.metadata)

    async def close(self) -> None:
        self._closed = True
        ch, self._current = self._current, None
        if ch is not None:
            await ch.channel.close()

    # --- KV ------------------------------------------------------------------------------------

    async def get(self, key: bytes, timeout: float | None = None) -> KV | None:
        reply = await self._unary("kv", "Range", rpc.RangeRequest(key=key), timeout)
        return _kv(reply.kvs[0]) if reply.kvs else None

    async def range(self, get: Get, timeout: float | None = None) -> Range:
        reply = await self._unary("kv", "Range", _range_request(get), timeout)
        return _range(reply, int(reply.header.revision))

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Request],
        failure: Sequence[Request] = (),
        timeout: float | None = None,
    ) -> TxnResult:
        request = rpc.TxnRequest(
            compare=[_compare(c) for c in compare],
            success=[_request(op) for op in success],
            failure=[_request(op) for op in failure],
        )
        reply = await self._unary("kv", "Txn", request, timeout)
        revision = int(reply.header.revision)
        ranges = [
            _range(r.response_range, revision) if r.WhichOneof("response") == "response_range" else None
            for r in reply.responses
        ]
        return TxnResult(bool(reply.succeeded), revision, ranges)

    async def put(self, key: bytes, value: bytes, lease: int = 0, timeout: float | None = None) -> int:
        reply = await self._unary("kv", "Put", rpc.PutRequest(key=key, value=value, lease=lease), timeout)
        return int(reply.header.revision)

    async def delete(self, key: bytes, timeout: float | None = None) -> None:
        await self._unary("kv", "DeleteRange", rpc.DeleteRangeRequest(key=key), timeout)

    # --- leases --------------------------------------------------------------------------------

    async def grant(self, ttl: int, timeout: float | None = None) -> tuple[int, int]:
        reply = await self._unary("lease", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl), timeout)
        if reply.error:
            raise StoreError(f"etcd {self.endpoint}: lease grant: {reply.error}")
        return int(reply.ID), int(reply.TTL)

    async def keep_alive(self, lease: int, timeout: float) -> int:
        ch = await self._channel()
        call = ch.lease.LeaseKeepAlive(
            iter([rpc.LeaseKeepAliveRequest(ID=lease)]), timeout=timeout, metadata=ch.metadata
        )
        async with contextlib.aclosing(self._replies(call, ch)) as replies:
            async for reply in replies:
                return int(reply.TTL)
        raise StoreError(f"etcd {ch.endpoint}: keep-alive stream ended without a reply")

    async def revoke(self, lease: int, timeout: float | None = None) -> None:
        await self._unary("lease", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease), timeout)

    # --- watch ---------------------------------------------------------------------------------

    async def watch(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncIterator[int]:
        ch = await self._channel()
        create = rpc.WatchCreateRequest(key=start, range_end=end, start_revision=start_revision)
        call = ch.watch.Watch(iter([rpc.WatchRequest(create_request=create)]), metadata=ch.metadata)
        async with contextlib.aclosing(self._replies(call, ch)) as replies:
            async for reply in replies:
                if reply.canceled:
                    raise StoreError(f"etcd {ch.endpoint}: watch canceled: {reply.cancel_reason}")
                if reply.events:
                    yield int(reply.header.revision)
        raise StoreError(f"etcd {ch.endpoint}: watch stream ended")

    async def watch_events(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncIterator[list[Event]]:
        ch = await self._channel()
        create = rpc.WatchCreateRequest(key=start, range_end=end, start_revision=start_revision)
        call = ch.watch.Watch(iter([rpc.WatchRequest(create_request=create)]), metadata=ch.metadata)
        async with contextlib.aclosing(self._replies(call, ch)) as replies:
            async for reply in replies:
                if reply.canceled:
                    raise StoreError(f"etcd {ch.endpoint}: watch canceled: {reply.cancel_reason}")
                if reply.events:
                    yield [
                        Event(e.kv.key, None if e.type == rpc.Event.DELETE else e.kv.value, int(e.kv.mod_revision))
                        for e in reply.events
                    ]
        raise StoreError(f"etcd {ch.endpoint}: watch stream ended")

    async def _replies(self, call: Any, ch: _Channel) -> AsyncGenerator[Any, None]:
        """The replies of a streaming call, its failures as StoreError; the call ends with the iteration."""
        try:
            with self._on(ch):
                async for reply in call:
                    yield reply
        finally:
            call.cancel()

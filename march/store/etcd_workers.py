"""Worker records on etcd (``march.keyspace.worker_ids``): one key per (namespace, id), and the retired UPTO.

``<prefix>/workers/<n>:<namespace>/<id>`` holds one ``WorkerRecord`` as JSON with sorted keys, so
that equal records are equal bytes and a write can compare the value it read (``encode_worker``);
``<prefix>/workers-retired`` holds the highest ``upto_ms`` of every deleted record, in the digits of
``etcd_guard``. Every write is guarded by leadership like a ceiling write, and a delete raises the
retired UPTO in the same transaction, so no holder's time is forgotten when its record goes. The
JSON keeps ``upto_ms`` under its old name, ``floor_ms``: records written by any version read alike.
``EtcdStore`` hands its worker calls here. Nothing here may write without the guard.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from march.errors import GuardFailed, StoreError
from march.etcd.api import Delete, Etcd, Get, Put, Request, created_at, value_is
from march.etcd.keypath import KeyPaths, prefix_end
from march.store.contract import Guard, WorkerRecord
from march.store.etcd_guard import encode_ceiling, guard_compares, holds, leader_key

_WORKER_ATTEMPTS = 32  # a delete reads the retired UPTO again each time another delete raised it meanwhile


def encode_worker(record: WorkerRecord) -> bytes:
    """A worker record's value: JSON with sorted keys, so equal records are equal bytes (the CAS compares values)."""
    data = {
        "token": record.token.decode("latin-1"),
        "expires_ms": record.expires_ms,
        "floor_ms": record.upto_ms,  # (the stored name, kept: see the module docstring)
        "ttl": record.ttl,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def decode_worker(namespace: bytes, worker_id: int, value: bytes) -> WorkerRecord:
    data = json.loads(value)
    token = str(data["token"]).encode("latin-1")
    return WorkerRecord(namespace, worker_id, token, int(data["expires_ms"]), int(data["floor_ms"]), int(data["ttl"]))


class EtcdWorkers:
    """The worker records of one etcd store; ``note`` is the store's (how the last write went)."""

    def __init__(
        self,
        etcd: Etcd,
        keys: KeyPaths,
        timeout: float,
        write_timeout: float,
        note: Callable[[BaseException | None], None],
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.timeout = timeout
        self.write_timeout = write_timeout
        self.note = note

    async def load_workers(self, namespace: bytes, worker_id: int | None = None) -> list[WorkerRecord]:
        start = self.keys.worker_namespace(namespace)
        if worker_id is not None:
            one = await self.etcd.get(self.keys.worker(namespace, worker_id), self.timeout)
            return [] if one is None else [decode_worker(namespace, worker_id, one.value)]
        found = await self.etcd.range(Get(start, prefix_end(start)), self.timeout)
        out = []
        for kv in found.kvs:
            suffix = kv.key[len(start) :]
            if len(suffix) == 4 and suffix.isdigit():
                out.append(decode_worker(namespace, int(suffix), kv.value))
        return sorted(out, key=lambda r: r.id)

    async def save_worker(self, record: WorkerRecord, expected: WorkerRecord | None, guard: Guard) -> bool:
        key = self.keys.worker(record.namespace, record.id)
        same = created_at(key, 0) if expected is None else value_is(key, encode_worker(expected))
        try:
            reply = await self.etcd.txn(
                [*guard_compares(self.keys, guard), same],
                [Put(key, encode_worker(record))],
                [Get(leader_key(self.keys, guard))],
                self.write_timeout,
            )
        except StoreError as exc:
            self.note(exc)
            raise
        self.note(None)
        if reply.succeeded:
            return True
        if not holds(reply.ranges[0], guard):
            raise GuardFailed(f"worker {record.id} of {record.namespace!r}: this node no longer holds the leader key")
        return False

    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        """One transaction: the guard, the record exactly as given, and (when the record's UPTO is above
        the retired UPTO just read) the retired UPTO unchanged; then delete the record and raise the
        retired UPTO. A retired UPTO that moved in between is read again."""
        key, retired = self.keys.worker(record.namespace, record.id), self.keys.workers_retired
        value = encode_worker(record)
        for _ in range(_WORKER_ATTEMPTS):
            current = await self.etcd.get(retired, self.timeout)
            compare = [*guard_compares(self.keys, guard), value_is(key, value)]
            ops: list[Request] = [Delete(key)]
            if record.upto_ms > (int(current.value) if current is not None else 0):
                compare.append(value_is(retired, current.value) if current is not None else created_at(retired, 0))
                ops.append(Put(retired, encode_ceiling(record.upto_ms)))
            try:
                reply = await self.etcd.txn(
                    compare, ops, [Get(leader_key(self.keys, guard)), Get(key)], self.write_timeout
                )
            except StoreError as exc:
                self.note(exc)
                raise
            self.note(None)
            if reply.succeeded:
                return True
            if not holds(reply.ranges[0], guard):
                raise GuardFailed(f"worker {record.id} of {record.namespace!r}: this node no longer leads")
            found = reply.ranges[1]
            if found is None or not found.kvs or found.kvs[0].value != value:
                return False
        raise StoreError(f"worker {record.id} of {record.namespace!r}: the retired UPTO kept changing")

    async def retired_worker_upto(self) -> int:
        found = await self.etcd.get(self.keys.workers_retired, self.timeout)
        return 0 if found is None else int(found.value)

    async def worker_namespaces(self, after: bytes | None = None, limit: int = 100) -> list[bytes]:
        """One keys-only read of up to ``limit`` keys; past each namespace's first key the rest of it
        is skipped by the next page (which starts after the last namespace seen)."""
        workers = self.keys.workers
        start = workers if after is None else prefix_end(self.keys.worker_namespace(after))
        found = await self.etcd.range(Get(start, prefix_end(workers), limit=limit, keys_only=True), self.timeout)
        out: list[bytes] = []
        for kv in found.kvs:
            namespace = self.keys.worker_namespace_of(kv.key)
            if not out or out[-1] != namespace:
                out.append(namespace)
        return out

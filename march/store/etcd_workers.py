"""Worker records on etcd (``march.keyspace.worker_ids``): one key per (namespace, id), and the retired floor.

``<prefix>/workers/<n>:<namespace>/<id>`` holds one ``WorkerRecord`` (``etcd_values.encode_worker``:
equal records are equal bytes, so a write can compare the value it read); ``<prefix>/workers-retired``
holds the highest floor of every deleted record, in the digits of ``etcd_values``. Every write is
one guarded transaction (``etcd_guard.GuardedTxn``), like a ceiling write, and a delete raises the
retired floor in the same transaction, so no holder's time is forgotten when its record goes.
``EtcdStore`` hands its worker calls here. Nothing here may write without the guard.
"""

from __future__ import annotations

from march.errors import StoreError
from march.etcd.api import Delete, Etcd, Get, Put, Request, created_at, value_is
from march.etcd.keypath import KeyPaths, prefix_end
from march.store.contract import Guard, WorkerRecord
from march.store.etcd_guard import GuardedTxn
from march.store.etcd_values import decode_worker, encode_ceiling, encode_worker

_WORKER_ATTEMPTS = 32  # a delete reads the retired floor again each time another delete raised it meanwhile


class EtcdWorkers:
    """The worker records of one etcd store; ``guarded`` is the store's guarded transaction."""

    def __init__(self, etcd: Etcd, keys: KeyPaths, timeout: float, guarded: GuardedTxn) -> None:
        self.etcd = etcd
        self.keys = keys
        self.timeout = timeout
        self.guarded = guarded

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
        what = f"worker {record.id} of {record.namespace!r}"
        return (await self.guarded(guard, [same], [Put(key, encode_worker(record))], [], what)).written

    async def delete_worker(self, record: WorkerRecord, guard: Guard) -> bool:
        """One transaction: the guard, the record exactly as given, and (when the record's floor is above
        the retired floor just read) the retired floor unchanged; then delete the record and raise the
        retired floor. A retired floor that moved in between is read again."""
        key, retired = self.keys.worker(record.namespace, record.id), self.keys.workers_retired
        value = encode_worker(record)
        for _ in range(_WORKER_ATTEMPTS):
            current = await self.etcd.get(retired, self.timeout)
            compare = [value_is(key, value)]
            ops: list[Request] = [Delete(key)]
            if record.upto_ms > (int(current.value) if current is not None else 0):
                compare.append(value_is(retired, current.value) if current is not None else created_at(retired, 0))
                ops.append(Put(retired, encode_ceiling(record.upto_ms)))
            done = await self.guarded(guard, compare, ops, [Get(key)], f"worker {record.id} of {record.namespace!r}")
            if done.written:
                return True
            found = done.reads[0]
            if found is None or not found.kvs or found.kvs[0].value != value:
                return False
        raise StoreError(f"worker {record.id} of {record.namespace!r}: the retired floor kept changing")

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

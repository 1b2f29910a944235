"""How the etcd store writes each record as a value: the one place that spells those bytes.

- A sequence (``<prefix>/seq/<key>``): its ceiling as ``DIGITS`` zero-padded decimal digits, a
  space, then JSON ``{"kind": ..., "settings": {...}}``. Fixed-width digits make etcd's bytewise
  value compare numeric, so "new ceiling > stored ceiling" is one compare in the transaction that
  writes it (equal digits followed by the JSON compare greater).
- The retired worker floor (``<prefix>/workers-retired``): the same digits alone.
- A worker record (``<prefix>/workers/<n>:<namespace>/<id>``): JSON with sorted keys, so equal
  records are equal bytes and a write can compare the value it read.

Nothing here may do I/O.
"""

from __future__ import annotations

import json

from march.store.contract import SequenceRecord, WorkerRecord

DIGITS = 20  # 2**63 has 19 digits: every ceiling fits, and the compare stays numeric


def encode_ceiling(ceiling: int) -> bytes:
    return b"%020d" % ceiling


def ceiling_of(value: bytes) -> int:
    """The ceiling of a sequence's value (or the retired floor's), without reading its JSON."""
    return int(value[:DIGITS])


def encode_record(record: SequenceRecord) -> bytes:
    meta = json.dumps({"kind": record.kind, "settings": dict(record.settings)}, sort_keys=True)
    return encode_ceiling(record.ceiling) + b" " + meta.encode()


def decode_record(key: bytes, value: bytes) -> SequenceRecord:
    digits, _, meta = value.partition(b" ")
    data = json.loads(meta) if meta else {}
    return SequenceRecord(key, data.get("kind", "sequence"), int(digits), data.get("settings", {}))


def encode_worker(record: WorkerRecord) -> bytes:
    """A worker record's value: JSON with sorted keys, so equal records are equal bytes (the CAS compares values)."""
    data = {
        "token": record.token.decode("latin-1"),
        "expires_ms": record.expires_ms,
        "floor_ms": record.upto_ms,
        "ttl": record.ttl,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def decode_worker(namespace: bytes, worker_id: int, value: bytes) -> WorkerRecord:
    data = json.loads(value)
    token = str(data["token"]).encode("latin-1")
    return WorkerRecord(namespace, worker_id, token, int(data["expires_ms"]), int(data["floor_ms"]), int(data["ttl"]))

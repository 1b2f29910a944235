"""Redis Cluster key slots, as the client routes by them: pure functions, no I/O.

A March cluster runs several leadership groups, each owning a contiguous range of the 16384
Redis Cluster slots with its own primary. The routers (`sync.Router`, `aio.AsyncRouter`) send a
keyed request to the primary of its key's slot, learned from ``MOVED`` and ``CLUSTER SLOTS``.

What this module must never do: compute a slot other than Redis' own (CRC16-XMODEM of the key, or
of the part inside its first non-empty ``{hash tag}``, modulo 16384), or read a malformed
``CLUSTER SLOTS`` reply as a table (it is then no table at all, and routing falls back to
following ``MOVED``).
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from march_client._address import Address

SLOTS = 16384

# Commands whose first argument is their (first) key: every keyed command March knows has its key
# there. A request not listed here (PING, CLUSTER ..., an unknown command) goes to the current node.
KEYED = frozenset(
    {
        b"INCR",
        b"INCRBY",
        b"DECR",
        b"DECRBY",
        b"INCRBYFLOAT",
        b"GET",
        b"SET",
        b"SETNX",
        b"SETEX",
        b"PSETEX",
        b"GETSET",
        b"GETDEL",
        b"GETEX",
        b"APPEND",
        b"SETRANGE",
        b"DEL",
        b"UNLINK",
        b"EXISTS",
        b"TYPE",
        b"TTL",
        b"PTTL",
        b"EXPIRE",
        b"PEXPIRE",
        b"EXPIREAT",
        b"PEXPIREAT",
        b"PERSIST",
        b"MGET",
        b"MSET",
        b"MSETNX",
        b"COPY",
        b"RENAME",
        b"RENAMENX",
        b"SEQ.CREATE",
        b"SEQ.ALTER",
        b"SEQ.INFO",
        b"SEQ.DECODE",
        b"WORKER.ACQUIRE",
        b"WORKER.RENEW",
        b"WORKER.RELEASE",
        b"WORKER.LIST",
    }
)


def key_slot(key: bytes) -> int:
    """The slot of ``key``: only the part inside the first non-empty ``{...}`` counts, if any."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % SLOTS  # crc_hqx with 0 is CRC16-XMODEM, Redis' CRC


def _encoded(value: object) -> bytes | None:
    """An argument as redis-py sends it (str as UTF-8, an int in decimal); None for anything whose
    encoding we would have to guess (then the request is not routed by its key)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    return None


def request_slot(args: Sequence[Any]) -> int | None:
    """The slot of a request's key (``args[0]`` the command), or None for a keyless request."""
    if len(args) < 2:
        return None
    name = _encoded(args[0])
    if name is None or name.upper() not in KEYED:
        return None
    key = _encoded(args[1])
    return None if key is None else key_slot(key)


@dataclass(frozen=True)
class SlotRange:
    """``first..last`` (inclusive) served by the primary at ``primary``."""

    first: int
    last: int
    primary: Address


def slot_ranges(reply: object, asked: Address) -> list[SlotRange] | None:
    """A ``CLUSTER SLOTS`` reply (``[[first, last, [host, port, id], replicas...], ...]``, as Redis
    sends it) -> its ranges; None if the reply is not that shape. An empty host means the node we
    ``asked`` (Redis' convention for an unknown endpoint)."""
    if not isinstance(reply, list):
        return None
    out = []
    for entry in reply:
        if not isinstance(entry, list) or len(entry) < 3 or not isinstance(entry[2], list) or len(entry[2]) < 2:
            return None
        first, last, (host, port, *_) = entry[0], entry[1], entry[2]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (first, last, port)):
            return None
        if not 0 <= first <= last < SLOTS or not isinstance(host, bytes | str):
            return None
        name = host.decode() if isinstance(host, bytes) else host
        out.append(SlotRange(first, last, (name, port) if name and name != "?" else (asked[0], port)))
    return out

"""The etcd client interface March programs against, with its own small value types.

Two implementations stand behind ``Etcd``: ``client.GrpcEtcd`` (a real etcd over gRPC) and
``FakeEtcd`` (in process, on an injected clock; a test double in ``harness/march_harness/fake_etcd.py``,
never imported by March). One set of contract tests runs
against both (``tests/etcd/test_etcd_contract.py``), so the fake cannot drift from etcd.

What every implementation must do, as etcd does:

- Reads are linearizable. ``txn`` applies its ``success`` ops if every compare holds, else its
  ``failure`` ops, atomically; its ``Get`` ops return what the store held at that revision.
- A compare on a key that does not exist sees version, create and mod revision 0, lease 0, and
  never matches a ``VALUE`` compare (etcd's rule: a missing key has no value to compare).
- A key put with a lease goes when the lease expires or is revoked (one delete event each).
- ``keep_alive`` returns the TTL etcd granted again, or a number <= 0 when the lease is gone.
- ``watch`` yields the revision of every batch of changes in its range until it breaks;
  ``watch_events`` yields the changes themselves (``Event``: key, new value or None for a delete,
  revision), in revision order, so a follower applies one changed key instead of reading them all.

Errors (the classes live in ``march.store.contract`` so that stores can raise them too): anything
that may pass (unreachable, timed out, leader change) is ``StoreError``; a request etcd will never
accept (too large, invalid) is ``StoreRejected``; etcd's NOSPACE alarm is ``StoreFull``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol


class Target(Enum):
    """What a compare looks at (etcd's ``Compare.CompareTarget``)."""

    VERSION = "version"
    CREATE = "create"
    MOD = "mod"
    VALUE = "value"
    LEASE = "lease"


class Op(Enum):
    """How a compare compares (etcd's ``Compare.CompareResult``)."""

    EQUAL = "=="
    LESS = "<"
    GREATER = ">"
    NOT_EQUAL = "!="


@dataclass(frozen=True)
class Compare:
    """``target(key) op operand``: operand is bytes for VALUE, an int for every other target.

    With ``end``, etcd compares every key in ``[key, end)``: it holds when every key there
    satisfies it, and over an empty range as over a missing key (``created_at`` 0 holds)."""

    key: bytes
    target: Target
    op: Op
    operand: bytes | int
    end: bytes = b""


def value_is(key: bytes, value: bytes) -> Compare:
    return Compare(key, Target.VALUE, Op.EQUAL, value)


def value_below(key: bytes, value: bytes) -> Compare:
    """``value(key) < value``, bytewise (false when the key does not exist)."""
    return Compare(key, Target.VALUE, Op.LESS, value)


def created_at(key: bytes, revision: int) -> Compare:
    """``create_revision(key) == revision`` (0: the key does not exist)."""
    return Compare(key, Target.CREATE, Op.EQUAL, revision)


def none_in(start: bytes, end: bytes) -> Compare:
    """No key exists in ``[start, end)`` (``create_revision == 0`` over the range)."""
    return Compare(start, Target.CREATE, Op.EQUAL, 0, end)


def lease_is(key: bytes, lease: int) -> Compare:
    """``lease(key) == lease`` (a missing key has lease 0)."""
    return Compare(key, Target.LEASE, Op.EQUAL, lease)


def modified_at(key: bytes, revision: int) -> Compare:
    """``mod_revision(key) == revision`` (0: the key does not exist)."""
    return Compare(key, Target.MOD, Op.EQUAL, revision)


@dataclass(frozen=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True)
class Get:
    """A range read: one key, or ``[key, end)`` when ``end`` is given."""

    key: bytes
    end: bytes = b""
    limit: int = 0  # 0: no limit
    keys_only: bool = False
    count_only: bool = False


@dataclass(frozen=True)
class Delete:
    key: bytes
    end: bytes = b""


Request = Put | Get | Delete


@dataclass(frozen=True)
class KV:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True)
class Range:
    """What a ``Get`` found: the pairs (in key order), how many there are in all, the read's revision."""

    kvs: list[KV] = field(default_factory=list)
    count: int = 0
    more: bool = False
    revision: int = 0


@dataclass(frozen=True)
class Event:
    """One change seen by a watch: ``key`` now holds ``value`` (None: deleted) as of ``revision``."""

    key: bytes
    value: bytes | None
    revision: int


@dataclass(frozen=True)
class TxnResult:
    """``succeeded``: every compare held. ``ranges[i]``: the result of the i-th op that ran if it
    was a ``Get``, else None. ``revision``: the store's revision after the transaction."""

    succeeded: bool
    revision: int
    ranges: list[Range | None] = field(default_factory=list)


class Etcd(Protocol):
    """The calls March makes; ``timeout`` is in seconds (None: the client's default)."""

    @property
    def endpoint(self) -> str:
        """The endpoint in use now (for INFO and error messages)."""
        ...

    async def get(self, key: bytes, timeout: float | None = None) -> KV | None: ...

    async def range(self, get: Get, timeout: float | None = None) -> Range: ...

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Request],
        failure: Sequence[Request] = (),
        timeout: float | None = None,
    ) -> TxnResult: ...

    async def put(self, key: bytes, value: bytes, lease: int = 0, timeout: float | None = None) -> int:
        """Store ``value``; the revision of the write."""
        ...

    async def delete(self, key: bytes, timeout: float | None = None) -> None: ...

    async def grant(self, ttl: int, timeout: float | None = None) -> tuple[int, int]:
        """A new lease: (id, granted TTL in seconds)."""
        ...

    async def keep_alive(self, lease: int, timeout: float) -> int:
        """Renew ``lease`` once: the TTL granted again, <= 0 if the lease is gone."""
        ...

    async def revoke(self, lease: int, timeout: float | None = None) -> None: ...

    def watch(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncIterator[int]:
        """The revision of each batch of changes in ``[start, end)``, until the stream breaks (StoreError)."""
        ...

    def watch_events(self, start: bytes, end: bytes, start_revision: int = 0) -> AsyncIterator[list[Event]]:
        """The changes in ``[start, end)``, a batch at a time in revision order, until the stream breaks."""
        ...

    async def close(self) -> None: ...

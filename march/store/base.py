"""The store interface every backend implements, and the records it keeps.

A store keeps, per sequence, its kind, its settings and its durable *ceiling*: an exclusive bound
below which a generator may hand out IDs. Every ceiling write carries a ``Guard`` (a leadership
token) and must be atomic with two checks: the guard still holds, and the new ceiling is greater
than the stored one. A failed check raises ``GuardFailed``, which means "step down now", never
"retry". Transient trouble (timeouts, lost connections) raises ``StoreError``; the caller may
retry with a strictly greater ceiling.

The embedded store's guard is trivial (one process owns the data dir through a file lock); the
etcd store of cluster mode compares the leader key's value and create revision in the same
transaction as the write.

A store must never be shared by two servers, and must never be called from the event loop thread
in a way that blocks it.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class StoreError(Exception):
    """A store call failed in a way that may pass (I/O error, timeout, lost connection)."""


class GuardFailed(StoreError):
    """The guarded write was refused: leadership is gone or someone else wrote a higher ceiling."""


class StoreLocked(StoreError):
    """Another server already owns this store (for sqlite: the data dir's lock is held)."""


@dataclass(frozen=True)
class Guard:
    """Leadership token carried by every ceiling write.

    ``owner`` is the leader key's value (this node's id) and ``revision`` the key's create revision
    in etcd. The embedded store accepts the trivial guard ``SINGLE_NODE``.
    """

    owner: bytes = b""
    revision: int = 0


SINGLE_NODE = Guard()


@dataclass(frozen=True)
class SequenceRecord:
    """What the store keeps for one sequence."""

    key: bytes
    kind: str  # "sequence"; later kinds ("timestamp") keep their layout in settings
    ceiling: int  # durable exclusive bound: every ID handed out so far is below it
    settings: Mapping[str, Any] = field(default_factory=dict)


class Store(abc.ABC):
    """Durable state of one March deployment."""

    name = "store"

    @abc.abstractmethod
    async def open(self) -> None:
        """Acquire the store (lock, connect, create tables); raise StoreLocked if taken."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything; pending writes have finished or failed by then."""

    @abc.abstractmethod
    async def load(self, key: bytes) -> SequenceRecord | None:
        """Linearizable read of one sequence, or None."""

    @abc.abstractmethod
    async def load_all(self) -> list[SequenceRecord]:
        """Linearizable read of every sequence."""

    @abc.abstractmethod
    async def create(self, record: SequenceRecord, guard: Guard) -> bool:
        """Create ``record`` if its key is absent (guarded); False if it already exists."""

    @abc.abstractmethod
    async def save_ceiling(self, key: bytes, ceiling: int, guard: Guard) -> None:
        """Store ``ceiling`` for ``key`` iff the guard holds and ``ceiling`` > the stored one.

        Raises GuardFailed when either check fails, StoreError on transient trouble.
        """

    def describe(self) -> dict[str, Any]:
        """A few facts for INFO persistence."""
        return {"store": self.name}

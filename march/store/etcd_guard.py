"""The guarded transaction: how a write on etcd proves, in the same step, that this node still leads.

Every guarded write of the etcd store (``etcd_store``: sequence records; ``etcd_workers``: worker
records) is one ``GuardedTxn``: its compares begin with the guard's (the leader key of the guard's
group, ``Guard.leader``, ``<prefix>/leader`` with one group, holds this node's id at the create
revision it won), its failure branch reads that leader key back first, then whatever its caller
wants to see. A guard that no longer holds is ``GuardFailed`` (step down, never retry); a caller's
compare that failed with the guard holding hands the caller its reads (the record changed: look
again). Each transaction's outcome is told to the store's ``note``. No write of the etcd store that
needs leadership may go around it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from march.errors import GuardFailed, StoreError
from march.etcd.api import Compare, Etcd, Get, Range, Request, created_at, value_is
from march.etcd.keypath import KeyPaths
from march.store.contract import Guard


def leader_key(keys: KeyPaths, guard: Guard) -> bytes:
    """The leader key ``guard`` names (its group's; ``<prefix>/leader`` for a guard that names none)."""
    return guard.leader or keys.leader


def guard_compares(keys: KeyPaths, guard: Guard) -> list[Compare]:
    """The guard's leader key holds ``guard.owner`` and was created at ``guard.revision``."""
    leader = leader_key(keys, guard)
    return [value_is(leader, guard.owner), created_at(leader, guard.revision)]


def holds(leader: Range | None, guard: Guard) -> bool:
    """Whether the leader key read back by a failed transaction still matches ``guard``."""
    kvs = leader.kvs if leader is not None else []
    return bool(kvs) and kvs[0].value == guard.owner and kvs[0].create_revision == guard.revision


class Guarded(NamedTuple):
    """How a guarded transaction went with the guard holding: ``written``, or not, with the caller's
    reads (``reads[i]`` what its i-th ``Get`` found, in the same transaction)."""

    written: bool
    reads: list[Range | None]


class GuardedTxn:
    """The guarded transactions of one etcd store (its client, key paths, write deadline and ``note``)."""

    def __init__(
        self, etcd: Etcd, keys: KeyPaths, timeout: float, note: Callable[[BaseException | None], None]
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.timeout = timeout
        self.note = note

    async def __call__(
        self, guard: Guard, compares: Sequence[Compare], ops: Sequence[Request], reads: Sequence[Get], what: str
    ) -> Guarded:
        """``ops`` iff ``guard`` and ``compares`` hold. GuardFailed (``what``: the write, in its message)
        when the guard does not; a StoreError of the call is noted and raised."""
        leader = leader_key(self.keys, guard)
        try:
            reply = await self.etcd.txn(
                [*guard_compares(self.keys, guard), *compares], list(ops), [Get(leader), *reads], self.timeout
            )
        except StoreError as exc:
            self.note(exc)
            raise
        self.note(None)
        if reply.succeeded:
            return Guarded(True, [])
        if not holds(reply.ranges[0], guard):
            raise GuardFailed(f"{what}: this node no longer holds the leader key")
        return Guarded(False, reply.ranges[1:])

"""How a write on etcd proves this node still leads, and the digits guarded numbers are written in.

Every guarded write of the etcd store (``etcd``: sequence records; ``etcd_workers``: worker
records) is one transaction whose compares begin with ``guard_compares``: the leader key of the
guard's group (``Guard.leader``; ``<prefix>/leader`` with one group) holds this node's id at the
create revision it won. When the transaction fails it reads that leader key back (its first read,
``leader_key``), and ``holds`` tells a lost leadership from a record that changed.

Ceilings (and the retired worker UPTO) are written as ``DIGITS`` zero-padded decimal digits, so
that etcd's bytewise value compare is a numeric one. Nothing here may do I/O.
"""

from __future__ import annotations

from march.etcd.api import Compare, Range, created_at, value_is
from march.etcd.keypath import KeyPaths
from march.store.contract import Guard

DIGITS = 20  # 2**63 has 19 digits: every ceiling fits, and the compare stays numeric


def encode_ceiling(ceiling: int) -> bytes:
    return b"%020d" % ceiling


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

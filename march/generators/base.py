"""What every generator is given (a lease, a clock, batch settings) and what it may raise.

A generator hands out an ID only while ``lease.valid()`` is true and only below a ceiling that the
store has confirmed. It never knows a socket or a command; the keyspace wires it to both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..store.base import SINGLE_NODE, Guard

Clock = Callable[[], float]  # monotonic seconds


class NotServing(Exception):
    """This node may not hand out IDs now (lease expired, guard failed, shutting down)."""


class Lease(Protocol):
    """The right to hand out IDs, as the generators see it."""

    @property
    def guard(self) -> Guard: ...

    def valid(self) -> bool:
        """True while the local lease deadline is in the future."""
        ...

    def lost(self, reason: str) -> None:
        """A guarded write failed: leadership is gone; stop serving at once."""
        ...


class SingleNodeLease:
    """The embedded store's lease: the data dir lock is held for the life of the process."""

    guard = SINGLE_NODE

    def __init__(self) -> None:
        self.lost_reason = ""

    def valid(self) -> bool:
        return not self.lost_reason

    def lost(self, reason: str) -> None:
        logging.getLogger("march").critical(
            "a guarded write was refused (%s): no more IDs are handed out until a restart", reason
        )
        self.lost_reason = reason


@dataclass(frozen=True)
class BatchPolicy:
    """How much of a sequence to persist at a time, and how long to wait for the store."""

    min_batch: int = 1000
    max_batch: int = 1_000_000
    interval: float = 1.0  # target seconds one batch lasts: about one store write per second per busy key
    watermark: float = 0.5  # extend when less than this fraction of the batch is left unspent
    max_wait: float = 2.0  # a request waits at most this long for a store write, then TRYAGAIN
    store_timeout: float = 5.0  # one store write is abandoned (and a greater one tried) after this


monotonic: Clock = time.monotonic

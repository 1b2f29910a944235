"""This node's etcd lease and the local deadline it gives (guarantee 4, docs/architecture.md).

One lease per node, whatever the number of leadership groups: it backs the node's registration and
every leader key the node holds, so losing it steps every group down. Granted with TTL
``lease_ttl`` and kept alive every TTL/3 (every 0.1 s after a failed one, so a node notices at once
that etcd answers again) on an etcd client of its own (no data call shares its channel, so none
can cancel or delay a keep-alive). After every
acknowledged keep-alive (or grant) the local deadline is::

    deadline = time the request was *sent* + granted TTL - margin        (margin = max(0.2 s, TTL/6))

Counting from the send time (never from the reply) means the deadline always ends before etcd can
expire the lease, whatever the reply's delay; the margin covers clock-rate differences. The
deadline only moves forward. Listeners hear of every renewal (``on_renewed(deadline)``) and of a
lease etcd says is gone (``on_gone()``); the serving state and the election subscribe. The clock
is injected (``march.clock``).

``out_of_touch()`` says how long ago the lease must have ended in etcd if this node has heard
nothing from etcd since its last answer (a TTL after it, plus etcd's expiry period): what a node
cut off from etcd tells its clients depends on it (``march.cluster.directory``). It is a hint for
what clients are told, never a reason to serve: a keep-alive whose answer was lost may have
renewed the lease later.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from march.clock import Clock
from march.errors import StoreError
from march.etcd.api import Etcd

log = logging.getLogger("march.cluster")

_RETRY = 0.1  # seconds after a failed keep-alive: etcd may answer again any moment, and one is cheap
_EXPIRY_PERIOD = 0.5  # etcd removes expired leases on a timer of this period (its lessor's revoke loop)


class LeaseKeeper:
    def __init__(self, etcd: Etcd, ttl: int, clock: Clock) -> None:
        self.etcd = etcd
        self.ttl = ttl
        self.margin = max(0.2, ttl / 6)  # the local deadline ends this much before etcd's
        self.clock = clock
        self.id = 0  # 0: no lease (yet, or it is gone)
        self.deadline = -math.inf
        self.failures = 0  # keep-alives failed in a row
        self.failures_total = 0  # keep-alives failed since the node started (a metric)
        self.answered = -math.inf  # clock time etcd last answered about the lease (granted, renewed, gone)
        self._renewed: list[Callable[[float], None]] = []
        self._gone: list[Callable[[], None]] = []

    def on_renewed(self, listener: Callable[[float], None]) -> None:
        self._renewed.append(listener)

    def on_gone(self, listener: Callable[[], None]) -> None:
        self._gone.append(listener)

    def remaining(self) -> float:
        return max(0.0, self.deadline - self.clock.now())

    def out_of_touch(self) -> float:
        """Seconds since this node's lease must have ended in etcd, counted from etcd's last answer
        (a TTL, then etcd's expiry period); negative while it may live, -inf before etcd ever answered."""
        if self.answered == -math.inf:
            return -math.inf
        return self.clock.now() - (self.answered + self.ttl + _EXPIRY_PERIOD)

    async def ensure(self) -> None:
        """Grant a lease if there is none."""
        if self.id:
            return
        sent = self.clock.now()
        lease, granted = await self.etcd.grant(self.ttl, self.ttl / 3)
        self.answered = self.clock.now()
        self.id = lease
        self.deadline = -math.inf
        log.info("lease %x granted (ttl %ds)", lease, granted)
        self._renew(sent, granted)

    async def keep_alive(self) -> None:
        """Renew the lease once (if there is one); a lease etcd no longer knows is gone."""
        lease = self.id
        if not lease:
            return
        sent = self.clock.now()
        try:
            remaining = await self.etcd.keep_alive(lease, self.ttl / 3)
        except StoreError as exc:
            self.failures += 1
            self.failures_total += 1
            if self.failures == 1 or self.failures % 10 == 0:
                log.warning("keep-alive failed (%d in a row): %s", self.failures, exc)
            return
        self.failures = 0
        self.answered = self.clock.now()
        if lease != self.id:
            return  # replaced meanwhile
        if remaining <= 0:
            log.warning("lease %x is gone in etcd", lease)
            self.id = 0
            self.deadline = -math.inf
            for gone in list(self._gone):
                gone()
            return
        self._renew(sent, remaining)

    async def run(self) -> None:
        """Keep the lease alive every TTL/3, for the life of the node."""
        period = self.ttl / 3
        while True:
            started = self.clock.now()
            await self.keep_alive()
            pause = _RETRY if self.failures else period
            await self.clock.sleep(started + pause - self.clock.now())

    async def revoke(self, timeout: float) -> None:
        lease, self.id = self.id, 0
        self.deadline = -math.inf
        if lease:
            await self.etcd.revoke(lease, timeout)

    def _renew(self, sent: float, granted: int) -> None:
        deadline = sent + min(self.ttl, granted) - self.margin
        if deadline <= self.deadline:
            return
        self.deadline = deadline
        for renewed in list(self._renewed):
            renewed(deadline)

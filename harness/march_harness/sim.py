"""An in-process March cluster on a fake etcd and a manual clock: deterministic, no process, no sleep.

``Sim(size)`` builds ``size`` nodes exactly as ``march serve --etcd ...`` does (``march.node.Node``:
store, group, lease, election, directory, failover), except that their etcd clients are views of
one ``FakeEtcd`` and every clock is one ``ManualClock``. Time moves only in ``advance``; a
node's link to etcd breaks with ``cut`` (unreachable) or ``freeze`` (calls hang until their
timeout), and heals with ``heal``.

Requests go through the node's keyspace the way INCR does (``incr``), or through the dispatcher's
routing too (``request``: serve here, wait while a promotion or FAILOVER is under way, or
redirect), so what is tested is what the server runs, minus the sockets. Every node records its
serving-state changes with the clock time (``changes``); ``EtcdLog`` records what reaches the fake
etcd. Every node is stopped by ``close`` (fixtures call it), with the clock moving meanwhile so
that a call slowed or hung on the clock cannot hold the shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from march import errors
from march.commands.table import COMMANDS
from march.config import Config
from march.errors import CommandError
from march.etcd.api import Request, TxnResult
from march.etcd.keypath import KeyPaths
from march.generators.bound import NotServing
from march.keyspace.serving import Change, Phase
from march.node import Node
from march_harness.fake_etcd import FakeEtcd, FakeEtcdClient
from march_harness.manual_clock import ManualClock

TTL = 3
PREFIX = "/sim"


class SimNode:
    def __init__(self, sim: Sim, index: int, **settings: Any) -> None:
        self.sim = sim
        self.name = f"n{index}"
        self.addr = f"127.0.0.1:{7001 + index}"
        self.clients: dict[str, FakeEtcdClient] = {}
        options: dict[str, Any] = {
            "etcd": "fake:2379",
            "etcd_prefix": PREFIX,
            "node_id": self.name,
            "advertise": self.addr,
            "data_dir": str(sim.data / self.name),  # where it records its cluster (cluster.json)
            "lease_ttl": TTL,
            "max_wait": 2.0,
            "store_timeout": 2.0,
        }
        options.update(settings)
        self.config = Config(**options)
        self.node = Node(self.config, COMMANDS, clock=sim.clock, etcd=self._client)
        self.group = self.node.groups[0]
        self.state = self.group.state
        self.keyspace = self.group.keyspace
        self.running = False
        self.changes: list[tuple[float, Change]] = []  # (clock time, change) of its serving state
        self.state.subscribe(self._observe)

    def _observe(self, change: Change) -> None:
        now = self.sim.clock.now()
        self.changes.append((now, change))
        if change.phase is Phase.SERVING:  # nobody else may hand out IDs from now on
            others = [n.name for n in self.sim.nodes if n is not self and n.state.valid()]
            if others:
                self.sim.overlaps.append(f"at {now:.3f} {self.name} serves while {others} may hand out IDs")

    def _client(self, purpose: str) -> FakeEtcdClient:
        client = self.sim.etcd.client(f"{self.name}-{purpose}", timeout=self.config.store_timeout)
        self.clients[purpose] = client
        return client

    @property
    def member(self) -> Any:
        assert self.group.member is not None
        return self.group.member

    @property
    def serving(self) -> bool:
        return self.state.phase is Phase.SERVING

    async def start(self) -> None:
        await self.node.open()
        self.node.join(7001)
        self.running = True

    async def stop(self) -> None:
        if self.running:
            self.running = False
            await self.node.stop()

    def cut(self) -> None:
        """Its link to etcd breaks: every call fails at once."""
        for client in self.clients.values():
            client.unreachable = True

    def freeze(self) -> None:
        """Its link to etcd hangs: calls fail only when their timeout passes."""
        for client in self.clients.values():
            client.hang = True

    def heal(self) -> None:
        """Every switch of its links off: reachable, not hung, not slow, no reply lost."""
        for client in self.clients.values():
            client.unreachable = False
            client.hang = False
            client.delay = 0.0
            client.lose_replies = 0

    def calls(self) -> dict[str, int]:
        """Calls made so far on each of its etcd clients, as ``"<purpose>.<method>"``."""
        return {f"{p}.{m}": n for p, c in self.clients.items() for m, n in c.calls.items()}

    async def incr(self, key: bytes, n: int = 1) -> int:
        """What INCRBY does on this node: the fast path, else activate or create, and wait."""
        gen = self.keyspace.get(key)
        if gen is not None:
            value = gen.take(n)
            if value is not None:
                return value
        gen = await self.keyspace.ensure(key)
        result: int = await gen.take_wait(n)
        return result

    async def try_incr(self, key: bytes, n: int = 1) -> int | None:
        """``incr``, or None if this node may not hand out IDs now."""
        try:
            return await asyncio.wait_for(self.incr(key, n), 5.0)
        except NotServing:
            return None

    async def request(self, key: bytes, n: int = 1) -> int | CommandError:
        """An INCRBY routed as ``march.commands.dispatch`` routes a key command: served here; held
        while a promotion or a FAILOVER is under way (``settled``, bounded by ``max_wait``) and then
        run again or redirected; redirected (``MOVED``/``CLUSTERDOWN``/...) by a node that does not
        serve. The reply: the ID, or the error the client would see."""
        group = self.group
        rerun = False
        if not group.serving:
            if not group.in_transition:
                return group.redirect(key)
            await group.settled(self.config.max_wait)
            if not group.serving:
                return group.redirect(key)
            rerun = True
        try:
            return await self.incr(key, n)
        except NotServing:
            return group.redirect(key) if rerun else CommandError(errors.NOT_SERVING)
        except CommandError as exc:
            return exc


class Sim:
    def __init__(self, size: int = 3, **settings: Any) -> None:
        self.clock = ManualClock()
        self.etcd = FakeEtcd(self.clock)
        self.data = Path(tempfile.mkdtemp(prefix="march-sim-"))  # the nodes' data dirs, removed by close
        self.keys = KeyPaths.of(PREFIX)
        self.overlaps: list[str] = []  # a node began serving while another's term was still valid
        self.nodes = [SimNode(self, i, **settings) for i in range(size)]

    async def start(self) -> None:
        for node in self.nodes:
            await node.start()
        await self.clock.settle()

    async def close(self) -> None:
        """Stop every node, moving the clock meanwhile (a call slowed on the clock must end)."""
        for node in self.nodes:
            self.heal_all()
            stopping = asyncio.ensure_future(node.stop())
            for _ in range(1200):  # at most a minute of clock time
                if stopping.done():
                    break
                await self.clock.advance(0.05)
            await asyncio.wait_for(stopping, 10.0)
        shutil.rmtree(self.data, ignore_errors=True)

    def heal_all(self) -> None:
        self.etcd.unreachable = False
        self.etcd.hang = False
        self.etcd.delay = 0.0
        self.etcd.lose_replies = 0
        self.etcd.full = False
        for node in self.nodes:
            node.heal()

    def jump(self, seconds: float) -> None:
        """Move the clock with no timer fired and no loop turn run: what a busy loop sees when time
        passes before its timers run (a late deadline timer, a paused process)."""
        self.clock._now += seconds

    def node(self, name: str) -> SimNode:
        return next(n for n in self.nodes if n.name == name)

    async def advance(self, seconds: float, step: float = 0.05) -> None:
        """Let ``seconds`` of clock time pass, in small steps (each plays out what it woke)."""
        end = self.clock.now() + seconds
        while self.clock.now() < end - 1e-9:
            await self.clock.advance(min(step, end - self.clock.now()))

    async def until(self, cond: Callable[[], bool], what: str, within: float, step: float = 0.05) -> float:
        """Advance the clock until ``cond()`` holds; the clock seconds it took. Fails after ``within``."""
        start = self.clock.now()
        await self.clock.settle()
        while not cond():
            if self.clock.now() - start >= within:
                raise AssertionError(f"{what}: not within {within} s of clock time")
            await self.clock.advance(step)
        return self.clock.now() - start

    def serving(self) -> list[SimNode]:
        return [n for n in self.nodes if n.running and n.serving]

    @property
    def primary(self) -> SimNode:
        serving = self.serving()
        assert len(serving) == 1, f"{len(serving)} nodes serve: {[n.name for n in serving]}"
        return serving[0]

    def leader_key(self) -> tuple[str, int] | None:
        kv = self.etcd.peek(self.keys.leader)
        return None if kv is None else (kv.value.decode(), kv.create_revision)


SimFactory = Callable[..., Awaitable[Sim]]


@contextlib.asynccontextmanager
async def sims() -> AsyncIterator[SimFactory]:
    """``make(size=3, start=True, **config)`` -> a ``Sim`` (started unless ``start=False``); every
    one made is closed on the way out (a fixture's teardown)."""
    made: list[Sim] = []

    async def make(size: int = 3, start: bool = True, **settings: Any) -> Sim:
        sim = Sim(size, **settings)
        made.append(sim)
        if start:
            await sim.start()
        return sim

    try:
        yield make
    finally:
        for sim in made:
            await sim.close()


@dataclass(frozen=True)
class Sent:
    """One request as it reached the fake etcd: every KV call of a client (get, range, txn, put,
    delete) is applied through ``FakeEtcd.txn``; lease calls (grant, keep-alive, revoke) and watches
    are not recorded."""

    at: float  # clock time
    endpoint: str  # "fake:<node>-<purpose>", or "fake" for the server's own scene-setting
    keys: tuple[bytes, ...]  # every key its compares and ops name
    returned: int  # the most keys one of its ranges returned


class EtcdLog:
    """Records every request reaching ``sim.etcd`` while installed (``with EtcdLog(sim) as log``)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.sent: list[Sent] = []

    def __enter__(self) -> EtcdLog:
        server = self.sim.etcd
        real = type(server).txn

        def txn(compare: Any, success: Any, failure: Any = (), endpoint: str = "fake", quota: bool = True) -> TxnResult:
            result = real(server, compare, success, failure, endpoint, quota)
            ops: list[Request] = [*success, *failure]
            keys = tuple(c.key for c in compare) + tuple(op.key for op in ops)
            returned = max((len(r.kvs) for r in result.ranges if r is not None), default=0)
            self.sent.append(Sent(self.sim.clock.now(), endpoint, keys, returned))
            return result

        server.txn = txn  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.sim.etcd.txn

    def by(self, node: SimNode, since: float = -1.0) -> list[Sent]:
        """The requests ``node`` sent (any of its clients) at or after clock time ``since``."""
        return [s for s in self.sent if s.endpoint.startswith(f"fake:{node.name}-") and s.at >= since]

    def touching(self, prefix: bytes, sent: list[Sent] | None = None) -> list[Sent]:
        return [s for s in (self.sent if sent is None else sent) if any(k.startswith(prefix) for k in s.keys)]

"""Two nodes racing for one identity, round after round, against a real etcd (issue 20).

Each round records what each contender did and saw, then checks invariants over the round, the
way the history checker checks IDs: a round passes only if every invariant holds, and one broken
round is a violation. Shared by tests/cluster/test_races.py (a few rounds) and scripts/drill
(``race-node-id``, ``race-failover``: ``--rounds``, 100 by default; ``march_harness.drills`` wraps them).

- ``race_node_id``: two in-process contenders built from March's own parts (``ClusterIdentity``,
  ``LeaseKeeper``, ``Directory``, ``Election``, each with its own gRPC clients) with one node id, started
  in the same event-loop turn on a fresh prefix, run two election steps side by side. They race
  three times: to bootstrap the cluster id, to register the node id, and (the one that registered)
  to campaign. Invariants: one cluster id, in etcd and in both data dirs; exactly one contender
  holds the node id, and etcd's record is under its lease; the leader key exists and is under that
  same lease, and the holder serves; the other contender never promoted.
- ``race_failover`` (processes): on a running three-node cluster, two clients send ``FAILOVER
  TO`` each standby to the primary at once, while a third client asks the standby that wins to
  hand straight back (``FAILOVER TO <old primary>``, retried until that standby leads). Invariants:
  exactly one of the two FAILOVERs is ``OK`` and the other is refused as in progress (or as not
  the primary, if it came after); the OK's target leads; the hand-back is ``OK`` and the old
  primary leads again; the hand-off key is gone once both ended. Load clients record every ID
  meanwhile and the history checker runs over them (``march_harness.drills``).

Every round uses a fresh prefix (``race_node_id``) and deletes it; every contender's lease is
revoked and its clients closed. Bounded in rounds and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from march import errors
from march.clock import SYSTEM
from march.cluster.directory import Directory, NodeInfo
from march.cluster.election import Election
from march.cluster.identity import ClusterIdentity
from march.cluster.lease import LeaseKeeper
from march.etcd.api import Delete, Etcd
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths, prefix_end
from march.keyspace.serving import Cause, Phase, ServingState
from march.store.membership import read_mark
from march_harness.resp import RespConn, RespError

RACE_ROUNDS = 100  # rounds per race in scripts/drill (the bar)
RACE_TTL = 2  # seconds of lease for the in-process contenders: etcd's shortest that March accepts
STEPS = 2  # election steps each contender makes per round
ROUND_TIMEOUT = 15.0  # seconds one round may take before it counts as a violation


@dataclass
class RaceResult:
    race: str
    rounds: int = 0
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, round_no: int, problems: list[str]) -> None:
        self.rounds += 1
        self.violations += [f"round {round_no}: {p}" for p in problems]


# --- two processes, one node id ----------------------------------------------------------------


class Contender:
    """One would-be node: March's identity, lease, directory and election on clients of its own."""

    def __init__(self, endpoints: list[str], keys: KeyPaths, data_dir: Path, node_id: str, port: int) -> None:
        self.control: Etcd = GrpcEtcd(endpoints, name=f"race control {port}")
        self.lease_etcd: Etcd = GrpcEtcd(endpoints, name=f"race lease {port}")
        self.data_dir = data_dir
        self.lease = LeaseKeeper(self.lease_etcd, RACE_TTL, SYSTEM)
        self.directory = Directory(
            self.control, keys, NodeInfo(node_id, f"127.0.0.1:{port}"), SYSTEM, RACE_TTL / 3, RACE_TTL
        )
        self.identity = ClusterIdentity(self.control, keys, str(data_dir), ",".join(endpoints), False, RACE_TTL / 3)
        self.state = ServingState(SYSTEM, name=f"race {port}")
        self.election = Election(self.control, keys, self.state, self.lease, self.directory, self.identity, SYSTEM)
        self.lease.on_renewed(self.state.renewed)  # wired as ClusterMember wires them
        self.lease.on_gone(self.state.lease_gone)
        self.promoted = False
        self.state.subscribe(self._seen)

    def _seen(self, change: object) -> None:
        if self.state.phase is not Phase.STANDBY:
            self.promoted = True

    async def close(self) -> None:
        self.election.closing = True
        self.state.step_down(Cause.SHUTDOWN)  # cancels its deadline timer
        with contextlib.suppress(Exception):  # else the lease expires by itself
            await self.lease.revoke(RACE_TTL / 3)
        for client in (self.control, self.lease_etcd):
            await client.close()


async def _node_id_round(endpoints: list[str], prefix: str, base: Path) -> list[str]:
    keys = KeyPaths.of(prefix)
    a = Contender(endpoints, keys, base / "a", "dup", 1)
    b = Contender(endpoints, keys, base / "b", "dup", 2)
    contenders = (a, b)
    problems: list[str] = []
    try:
        for _ in range(STEPS):
            results = await asyncio.gather(*(c.election.step() for c in contenders), return_exceptions=True)
            for c, r in zip(contenders, results, strict=True):
                if r is not None:
                    problems.append(f"{c.directory.me.addr}: step failed: {r!r}")
        etcd = a.control
        cluster = await etcd.get(keys.cluster)
        record = await etcd.get(keys.node("dup"))
        leader = await etcd.get(keys.leader)
        ids = {c.identity.id for c in contenders}
        marks = {m.cluster_id if (m := read_mark(c.data_dir)) else None for c in contenders}
        stored = cluster.value.decode() if cluster is not None else None
        if len(ids) != 1 or ids != marks or ids != {stored}:
            problems.append(f"cluster ids: confirmed {ids}, data dirs {marks}, etcd {stored}")
        holders = [c for c in contenders if c.directory.registered]
        if len(holders) != 1:
            problems.append(f"{len(holders)} contenders hold node id 'dup'")
        elif record is None or record.lease != holders[0].lease.id:
            problems.append(f"etcd's record is not under the holder's lease: {record}")
        else:
            holder = holders[0]
            other = b if holder is a else a
            if leader is None or leader.lease != holder.lease.id:
                problems.append(f"the leader key is not the holder's: {leader}")
            if other.promoted:
                problems.append(f"{other.directory.me.addr} promoted without holding the node id")
            if holder.state.phase is not Phase.SERVING:
                problems.append(f"the holder does not serve: {holder.state.phase.value}")
        if sum(c.promoted for c in contenders) > 1:
            problems.append("both contenders promoted")
    finally:
        for c in contenders:
            await c.close()
        cleaner = GrpcEtcd(endpoints, name="race cleanup")
        try:
            await cleaner.txn([], [Delete(keys.prefix + b"/", prefix_end(keys.prefix + b"/"))], [], 5.0)
        finally:
            await cleaner.close()
    return problems


def race_node_id(endpoints: str, rounds: int, out: Callable[[str], None] | None = None) -> RaceResult:
    """``rounds`` rounds of two contenders with one node id on fresh prefixes of the etcd at ``endpoints``."""
    result = RaceResult("race-node-id")
    started = time.monotonic()
    run = uuid.uuid4().hex[:8]
    base = Path(tempfile.mkdtemp(prefix="march-race-"))
    try:
        for i in range(rounds):
            where = base / f"r{i}"
            try:
                problems = asyncio.run(
                    asyncio.wait_for(_node_id_round(endpoints.split(","), f"/race-{run}-{i}", where), ROUND_TIMEOUT)
                )
            except Exception as e:  # a round that hangs or breaks is a violation, not a crash of the drill
                problems = [f"round did not finish: {e!r}"]
            result.add(i, problems)
            if out is not None and (problems or (i + 1) % 25 == 0):
                out(f"  race-node-id round {i + 1}/{rounds}: {problems if problems else 'ok'}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result.seconds = time.monotonic() - started
    result.notes.append(f"{result.rounds} rounds in {result.seconds:.1f}s")
    return result


# --- two FAILOVERs at once, and a hand-back ------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """What a race needs of a node: its address, and a way to ask it something."""

    node_id: str
    address: str

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    def call(self, *args: str | int, timeout: float = 10.0) -> object:
        try:
            with RespConn(self.port, timeout=timeout) as c:
                return c.call(*args)
        except OSError as e:
            return e


def _failover_to(node: Member, target: Member, timeout_ms: int = 10_000) -> object:
    host, _, port = target.address.rpartition(":")
    return node.call("FAILOVER", "TO", host, port, "TIMEOUT", timeout_ms, timeout=timeout_ms / 1000 + 5)


@dataclass(frozen=True)
class Reply:
    to: str  # the target's node id
    reply: object
    at: float  # monotonic time the reply arrived


def failover_round(
    primary: Member, standbys: list[Member], handoff_present: Callable[[], bool]
) -> tuple[list[str], str | None]:
    """One round on a settled cluster led by ``primary``: the problems seen (none: passed) and the
    node id that must lead once the round settles (None if the replies do not say).

    The replies must be linearizable: each FAILOVER is OK or refused (in progress, or not the
    primary); at least one of the two is OK; the hand-back is OK and went to an OK's target. Both may
    be OK only one after the other with the hand-back between them (P -> X, X -> P, P -> Y): then
    the later one's target leads, else the old primary does."""
    replies: list[Reply] = []
    back: list[Reply] = []
    done = threading.Event()

    def send(target: Member) -> None:
        reply = _failover_to(primary, target)
        replies.append(Reply(target.node_id, reply, time.monotonic()))

    not_yet = (errors.FAILOVER_NOT_PRIMARY, errors.FAILOVER_IN_PROGRESS)

    def hand_back() -> None:
        # Whichever standby leads first gets FAILOVER TO the old primary, as soon as it accepts one.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not done.is_set():
            for s in standbys:
                reply = _failover_to(s, primary)
                # Not the primary yet, or still promoting: ask again.
                if not (isinstance(reply, RespError) and reply.message in not_yet):
                    back.append(Reply(s.node_id, reply, time.monotonic()))
                    return
            time.sleep(0.001)  # a polling interval: the next standby to lead is not known yet

    threads = [threading.Thread(target=send, args=(s,)) for s in standbys]
    threads.append(threading.Thread(target=hand_back))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    done.set()
    problems: list[str] = []
    ok = sorted((r for r in replies if r.reply == "OK"), key=lambda r: r.at)
    refused = (errors.FAILOVER_IN_PROGRESS, errors.FAILOVER_NOT_PRIMARY)
    wrong = [
        r for r in replies if r.reply != "OK" and not (isinstance(r.reply, RespError) and r.reply.message in refused)
    ]
    if not ok or wrong or len(replies) != len(standbys):
        problems.append(f"two FAILOVERs at once: {[(r.to, r.reply) for r in replies]}")
    if len(back) != 1 or back[0].reply != "OK" or (ok and back[0].to != ok[0].to):
        problems.append(f"the hand-back from the first new primary ({[r.to for r in ok]}): {back}")
    elif len(ok) == 2 and not ok[0].at < back[0].at < ok[1].at + 1:  # the later OK ran after the hand-back
        problems.append(f"two FAILOVERs OK without the hand-back between them: {ok}, {back}")
    if handoff_present():
        problems.append("the hand-off key is still there after every FAILOVER ended")
    expected = None if problems else (ok[1].to if len(ok) == 2 else primary.node_id)
    return problems, expected

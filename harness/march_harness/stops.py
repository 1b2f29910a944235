"""SIGTERM at random moments around a change of the cluster's layout (issue 25, item 6).

A layout change (``march groups N``) makes every node step down, give its leader keys back and
start again in the same process (it executes its own command line again). A SIGTERM may land at
any moment of that: while the node still serves the old layout, while it steps down, during the
exec, while the new image imports and opens its ports, once it serves the new layout. Whatever
the moment, the node must end with the orderly stop: exit status 0 (never the default action of
the signal, -15, and never a node that goes on serving), having said so in its log.

``sigterm_round`` is one round on a running ``MarchCluster``: change the layout (in-process, one
etcd transaction, so the moment is known to the millisecond), SIGTERM one node at a random offset
from it (``OFFSETS``: from just before to well after), wait for its exit (bounded), check it, then
start it again and wait for the cluster to settle in the new layout. ``paused=True`` is the other
reproduction: the node is SIGSTOPped across the change, then gets SIGCONT and, 0-0.5 s later, SIGTERM
(``offset`` is then from the SIGCONT).
tests/cluster/test_groups_change.py runs a handful of rounds; scripts/drill's ``sigterm`` drill
runs ``--rounds`` (50 by default: the issue's bar).
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from dataclasses import dataclass, field

from march.cluster.layout import change_layout
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths
from march_harness.cluster import ClusterNode, MarchCluster

SIGTERM_ROUNDS = 50  # rounds of the drill (the bar: 50 SIGTERMs, 50 orderly exits)
OFFSETS = (-0.3, 1.5)  # seconds from the change to the SIGTERM: just before it to after the restart
EXIT_TIMEOUT = 30.0  # seconds a node may take to end after SIGTERM (a hand-over, then shutdown_timeout)
SETTLE_TIMEOUT = 60.0  # seconds for the cluster to settle in the new layout (every node restarts)
PAUSED_OFFSETS = (0.0, 0.5)  # seconds from SIGCONT to SIGTERM for a node paused across the change
ORDERLY = "received SIGTERM"  # what the node logs when it acts on the signal


@dataclass
class StopRound:
    victim: str = ""
    offset: float = 0.0  # seconds from the layout change to the SIGTERM (negative: before it)
    groups: tuple[int, int] = (0, 0)  # the layout before and after
    code: int | None = None  # the victim's exit status
    took: float = 0.0  # seconds from the SIGTERM to its exit
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        verdict = "ok" if not self.problems else "; ".join(self.problems)
        return (
            f"{self.victim}: {self.groups[0]} -> {self.groups[1]} groups, SIGTERM {self.offset * 1000:+.0f} ms "
            f"from the change, exit {self.code} after {self.took:.2f}s: {verdict}"
        )


def change(cluster: MarchCluster, endpoints: str, groups: int) -> float:
    """Change the layout to ``groups`` (what ``march groups N --yes`` writes); the monotonic time it
    was written (the transaction's reply)."""

    async def write() -> None:
        client = GrpcEtcd(endpoints.split(","), name="layout change")
        try:
            await change_layout(client, KeyPaths.of(cluster.prefix), groups, 5.0)
        finally:
            await client.close()

    asyncio.run(write())
    cluster.groups = groups
    return time.monotonic()


def settle_layout(cluster: MarchCluster, timeout: float) -> None:
    """Every node answers and every group of the layout has an agreed primary."""
    if cluster.groups == 1:
        cluster.wait_settled(timeout)
    else:
        cluster.wait_leaders(timeout)


def _log_since(node: ClusterNode, mark: int) -> str:
    try:
        return node.log_path.read_bytes()[mark:].decode(errors="replace")
    except FileNotFoundError:
        return ""


def sigterm_round(cluster: MarchCluster, endpoints: str, rng: random.Random, *, paused: bool = False) -> StopRound:
    """One round (module docstring): the victim's exit must be orderly; it is started again and the
    cluster settles in the new layout before this returns (a problem is reported, not raised, for
    the SIGTERM itself; a cluster that does not settle raises AssertionError)."""
    r = StopRound()
    settle_layout(cluster, SETTLE_TIMEOUT)
    victim = rng.choice(cluster.nodes)
    before = cluster.groups
    after = 2 if before != 2 else 3
    r.victim, r.groups = victim.node_id, (before, after)
    r.offset = rng.uniform(*(PAUSED_OFFSETS if paused else OFFSETS))
    mark = victim.log_path.stat().st_size if victim.log_path.exists() else 0
    sent = threading.Event()
    sent_at: list[float] = []

    def terminate() -> None:
        victim.send_signal(signal.SIGTERM)
        sent_at.append(time.monotonic())
        sent.set()

    if paused:
        victim.pause()
        change(cluster, endpoints, after)
        # the others start again and serve the new layout while the victim sleeps through the change
        cluster.wait_leaders(SETTLE_TIMEOUT, exclude=[victim])
        victim.resume()
        time.sleep(r.offset)  # the moment the fault is injected at, not a synchronisation
        terminate()
    elif r.offset < 0:
        terminate()
        time.sleep(-r.offset)  # the moment the fault is injected at, not a synchronisation
        change(cluster, endpoints, after)
    else:
        timer = threading.Timer(r.offset, terminate)
        change(cluster, endpoints, after)
        timer.start()
        sent.wait(r.offset + 5)
        timer.join(5)
    assert victim.proc is not None
    try:
        r.code = victim.proc.wait(EXIT_TIMEOUT)
    except Exception:  # subprocess.TimeoutExpired: still running (the signal was lost)
        r.problems.append(f"still running {EXIT_TIMEOUT:.0f}s after SIGTERM (the signal was lost)")
        victim.stop()
    r.took = time.monotonic() - sent_at[0] if sent_at else 0.0
    if r.code not in (0, None):
        r.problems.append(f"exit status {r.code}, not 0 (" + ("killed by the signal" if r.code < 0 else "failed") + ")")
    log = _log_since(victim, mark)
    if r.code == 0 and ORDERLY not in log:
        r.problems.append(f"no {ORDERLY!r} in its log")
    if r.problems:
        r.problems.append("log since the round began:\n" + log[-3000:])
    cluster.restart(victim)
    settle_layout(cluster, SETTLE_TIMEOUT)
    return r

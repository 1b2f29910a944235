"""`scripts/cluster`, run as a user runs it (moved to free ports and a temporary data dir by its
two test variables, against the test's etcd through `MARCH_ETCD`):

- each node counts as started only when its port answers with that node's own pid and node id: with
  another process already answering on n2's port, the script reports n2 as exited (address already
  in use) and stops the others, instead of listing it beside a cluster it is not part of;
- every node's forwarding port answers keys of every group, the links proving a secret the first
  node wrote to `cluster-secret` (random, mode 0600) beside the data dirs;
- with `MARCH_ETCD`, the nodes' data dirs are the etcd's own, so a run against another etcd (as a
  plain run against the local etcd after one against an existing cluster) starts as well, instead
  of refusing the data dirs that recorded the first cluster.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from march_harness.etcd import EtcdCluster
from march_harness.ports import free_port
from march_harness.servers import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "cluster"
READY = "Ctrl-C stops everything."
NODE_LINE = re.compile(r"^n(\d+)\s+127\.0\.0\.1:(\d+)\s+pid (\d+)\s+\(confirmed\)")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (REPO_ROOT / ".venv" / "bin" / "python").exists(),
        reason="scripts/cluster uses .venv, which scripts/test creates",
    ),
]


def _first_of_free_ports(count: int) -> int:
    """A port p such that p .. p+count-1 were all free a moment ago (the script numbers its nodes)."""
    for _ in range(200):
        base = free_port()
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


class Impostor:
    """Another process's server on a port: answers every line with +PONG (as any Redis would a PING)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    while conn.recv(4096):
                        conn.sendall(b"+PONG\r\n")
                except OSError:
                    pass

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.sock.close()


class Run:
    """scripts/cluster in its own session, its output read line by line; stopped with SIGINT (Ctrl-C)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", str(SCRIPT)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, text: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            if self.proc.poll() is not None:
                self.reader.join(timeout=5)
                return any(text in line for line in self.lines)
            time.sleep(0.1)
        return False

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # the script stops its nodes and etcd in order
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def _env(tmp_path: Path, etcd: EtcdCluster, first_port: int, first_forward: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    env.update(
        MARCH_ETCD=etcd.endpoints,
        MARCH_CLUSTER_FIRST_PORT=str(first_port),
        MARCH_CLUSTER_FIRST_FORWARD_PORT=str(first_forward or _first_of_free_ports(3)),
        MARCH_CLUSTER_DIR=str(tmp_path / "cluster"),
        MARCH_LEASE_TTL="2",
    )
    return env


def _port_free(port: int) -> bool:
    """Nobody listens on ``port``: it can be listened on as a server does (SO_REUSEADDR: the
    connections a stopped node closed, its forwarding links among them, may linger in TIME_WAIT)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError:
            return False
    return True


@pytest.fixture
def second_etcd(tmp_path: Path, etcd_bin: str) -> Iterator[EtcdCluster]:
    other = EtcdCluster(tmp_path / "etcd-other", size=1, binary=etcd_bin)
    try:
        other.start()
        yield other
    finally:
        other.stop()


@pytest.mark.timeout(120)
def test_another_process_on_a_nodes_port_is_not_taken_for_the_node(tmp_path: Path, etcd: EtcdCluster) -> None:
    first = _first_of_free_ports(3)
    impostor = Impostor(first + 1)
    run = Run(_env(tmp_path, etcd, first))
    try:
        run.proc.wait(timeout=60)  # it must give up by itself: n2 could not start
    except subprocess.TimeoutExpired:
        pass
    finally:
        rc = run.stop()
        impostor.stop()
    out = run.output
    assert rc == 1, out
    assert "march n2 (pid" in out and "exited" in out, out
    assert "address already in use" in out.lower() and "another process listens there" in out, out
    assert READY not in out, out  # no summary listing a node that is not there
    for port in (first, first + 2):
        assert _port_free(port), f"n{port - first + 1} was left running:\n{out}"


@pytest.mark.timeout(180)
def test_nodes_are_confirmed_and_another_etcd_gets_data_dirs_of_its_own(
    tmp_path: Path, etcd: EtcdCluster, second_etcd: EtcdCluster
) -> None:
    first, forward = _first_of_free_ports(3), _first_of_free_ports(3)
    for attempt, store in enumerate((etcd, second_etcd)):
        run = Run(_env(tmp_path, store, first, forward))
        try:
            assert run.wait_for_line(READY, 90), run.output
            nodes = [m.groups() for line in run.lines if (m := NODE_LINE.match(line))]
            assert [(n, int(p)) for n, p, _ in nodes] == [(str(i), first + i - 1) for i in (1, 2, 3)], run.output
            for _, port, pid in nodes:
                info = subprocess.run(
                    ["redis-cli", "-p", port, "INFO", "server"], capture_output=True, text=True, timeout=15
                ).stdout
                assert f"process_id:{pid}" in info, run.output
            got = subprocess.run(
                ["redis-cli", "-c", "-p", str(first), "INCR", "orders"], capture_output=True, text=True, timeout=15
            )
            assert got.stdout.strip().isdigit(), (got, run.output)
            # every node's forwarding port serves every key (a key of each group: no MOVED)
            assert all(f"forwarding port {forward + i}" in run.output for i in range(3)), run.output
            for i, key in enumerate(("orders", "payments", "invoices")):
                got = subprocess.run(
                    ["redis-cli", "-p", str(forward + i), "INCR", key], capture_output=True, text=True, timeout=15
                )
                assert got.stdout.strip().isdigit(), (got, run.output)
        finally:
            rc = run.stop()
        assert rc in (0, 130), run.output
        assert all(_port_free(p + i) for p in (first, forward) for i in range(3)), f"run {attempt}: nodes left running"
    dirs = sorted(p.name for p in (tmp_path / "cluster").iterdir() if p.name.startswith("etcd-"))
    assert len(dirs) == 2, dirs  # one set of data dirs per etcd
    secret = tmp_path / "cluster" / "cluster-secret"  # the links' secret: made at the first start, for the owner only
    assert len(secret.read_text().strip()) == 64 and secret.stat().st_mode & 0o777 == 0o600

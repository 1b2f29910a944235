"""Sentinel discovery (``march.commands.sentinel``) with real clients and a real Redis Sentinel.

- Reply shapes and error texts: the same requests sent to a real ``redis-server --sentinel``
  (monitoring a real redis-server under the name ``march``) and to a March node; the field names
  and their order, the null array for an unknown name, the errors for an unknown name, a wrong
  arity and an unknown subcommand must be the same.
- Failover: redis-py ``Sentinel(...).master_for("march")`` and ioredis with ``sentinels`` (the
  script is ``docs/clients/node/ioredis-sentinel.js``, run as the doc shows it; the cluster-mode
  example ``ioredis-cluster.js`` too) draw IDs from a
  three-node cluster while its primary is killed with ``kill -9``: they reach the new primary
  through the sentinels, and every ID is new and above the one before (one client, one request at
  a time: each reply arrives before the next request is sent, so guarantee 2 says increasing).
- ``+switch-master``: redis-py PubSub on a standby, one SUBSCRIBEd to the channel and one
  PSUBSCRIBEd to ``*``, each get Sentinel's message naming the new primary after a ``kill -9``.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.node import node_binary
from march_harness.ports import free_port
from march_harness.resp import RespConn, wait_until
from march_harness.servers import MarchServer, RedisServer, serving
from march_harness.tls import Certs, make_certs, openssl_binary, wait_listening
from redis.sentinel import Sentinel

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NODE_EXAMPLES = REPO / "docs" / "clients" / "node"
NODE_PACKAGES = ("ioredis@5", "redis@4")  # what docs/clients/README.md says the examples use
PASSWORD = "s3cret-example"
AFTER_KILL = 20  # IDs each client must draw from the new primary: enough to show it serves them


class RedisSentinel(RedisServer):
    """A real ``redis-server --sentinel`` monitoring ``master`` under the name ``march``."""

    name = "redis-sentinel"

    def __init__(self, workdir: Path, master: RedisServer, binary: str) -> None:
        super().__init__(workdir, binary=binary)
        self.master = master

    def command(self) -> list[str]:
        conf = self.workdir / "sentinel.conf"
        conf.write_text(f"sentinel monitor march 127.0.0.1 {self.master.port} 1\n")
        return [self.binary, str(conf), "--sentinel", "--port", str(self.port), "--bind", "127.0.0.1"]


@pytest.fixture(scope="module")
def real_sentinel(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[RedisSentinel]:
    base = tmp_path_factory.mktemp("sentinel")
    master = RedisServer(base / "master", binary=redis_binary)
    with serving(master), serving(RedisSentinel(base / "sentinel", master, redis_binary)) as sentinel:
        yield sentinel


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, etcd_bin: str) -> Iterator[MarchCluster]:
    base = tmp_path_factory.mktemp("sentinel-cluster")
    etcd = EtcdCluster(base / "etcd", size=1, binary=etcd_bin)
    etcd.start()
    try:
        with MarchCluster(base / "march", etcd.endpoints) as c:
            c.wait_settled()
            yield c
    finally:
        etcd.stop()


def raw(port: int, *requests: list[str]) -> list[object]:
    with RespConn(port) as c:
        return [c.call(*r) for r in requests]


def wire(port: int, *args: str) -> bytes:
    with RespConn(port) as c:
        return c.call_raw(*args)


# --- reply shapes against a real Sentinel ---------------------------------------------------------


ERROR_CASES = [
    ["SENTINEL", "MASTER", "nope"],
    ["SENTINEL", "REPLICAS", "nope"],
    ["SENTINEL", "SLAVES", "nope"],
    ["SENTINEL", "SENTINELS", "nope"],
    ["SENTINEL", "GET-MASTER-ADDR-BY-NAME"],
    ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "march", "extra"],
    ["SENTINEL", "MASTERS", "x"],
    ["SENTINEL", "SENTINELS"],
    ["SENTINEL", "REPLICAS"],
    ["SENTINEL", "nosuch"],
    ["SENTINEL"],
    ["ROLE", "x"],
]


def test_errors_are_sentinels_own(real_sentinel: RedisSentinel, march_server: MarchServer) -> None:
    theirs = raw(real_sentinel.port, *ERROR_CASES)
    ours = raw(march_server.port, *ERROR_CASES)
    assert ours == theirs
    assert all(type(r).__name__ == "RespError" for r in ours)


def test_unknown_name_is_a_null_array_in_both_protocols(
    real_sentinel: RedisSentinel, march_server: MarchServer
) -> None:
    for port in (real_sentinel.port, march_server.port):
        assert wire(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "nope") == b"*-1\r\n"
    r3 = redis.Redis(port=march_server.port, protocol=3)
    assert r3.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "nope") is None
    r3.close()


def _keys(entry: object) -> list[str]:
    assert isinstance(entry, list)
    return [k.decode() for k in entry[0::2]]


def test_fields_and_their_order_are_sentinels(real_sentinel: RedisSentinel, cluster: MarchCluster) -> None:
    """MASTERS/MASTER entries list real Sentinel's fields in its order, every value a bulk string;
    REPLICAS and SENTINELS entries the fields real Sentinel gives a replica and a sentinel."""
    node = cluster.nodes[0]
    theirs = raw(real_sentinel.port, ["SENTINEL", "MASTERS"], ["SENTINEL", "MASTER", "march"])
    ours = raw(node.port, ["SENTINEL", "MASTERS"], ["SENTINEL", "MASTER", "march"])
    assert isinstance(theirs[0], list) and isinstance(ours[0], list)
    assert _keys(ours[0][0]) == _keys(theirs[0][0]) == _keys(ours[1]) == _keys(theirs[1])
    assert all(isinstance(v, bytes) for v in ours[1][1::2])  # type: ignore[index]
    instance_fields = [  # what every entry starts with
        "name",
        "ip",
        "port",
        "runid",
        "flags",
        "link-pending-commands",
        "link-refcount",
        "last-ping-sent",
        "last-ok-ping-reply",
        "last-ping-reply",
        "down-after-milliseconds",
    ]
    # Real Sentinel's replica and sentinel fields (7.0, from `SENTINEL REPLICAS/SENTINELS` of a
    # sentinel watching a master with one replica, beside another sentinel).
    replica_fields = [
        *instance_fields,
        "info-refresh",
        "role-reported",
        "role-reported-time",
        "master-link-down-time",
        "master-link-status",
        "master-host",
        "master-port",
        "slave-priority",
        "slave-repl-offset",
        "replica-announced",
    ]
    sentinel_fields = [
        *instance_fields,
        "last-hello-message",
        "voted-leader",
        "voted-leader-epoch",
    ]
    replicas, sentinels = raw(node.port, ["SENTINEL", "REPLICAS", "march"], ["SENTINEL", "SENTINELS", "march"])
    assert isinstance(replicas, list) and isinstance(sentinels, list)
    assert len(replicas) == 2 and len(sentinels) == 2  # two standbys; the two other nodes
    assert all(_keys(r) == replica_fields for r in replicas)
    assert all(_keys(s) == sentinel_fields for s in sentinels)


def test_every_node_names_the_primary(cluster: MarchCluster) -> None:
    primary = cluster.wait_settled()
    for node in cluster.nodes:
        addr, role = raw(node.port, ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "march"], ["ROLE"])
        assert addr == [b"127.0.0.1", str(primary.port).encode()]
        assert isinstance(role, list)
        if node is primary:
            assert role[0] == b"master" and sorted(int(r[1]) for r in role[2]) == sorted(
                n.port for n in cluster.nodes if n is not primary
            )
        else:
            assert role == [b"slave", b"127.0.0.1", primary.port, b"connected", 0]
    masters = Sentinel([("127.0.0.1", cluster.nodes[1].port)], sentinel_kwargs={"protocol": 3})
    state = masters.sentinels[0].sentinel_master("march")
    assert state["is_master"] and not state["is_sdown"] and state["num-other-sentinels"] == 2
    standbys = {("127.0.0.1", n.port) for n in cluster.nodes if n is not primary}
    assert set(masters.discover_slaves("march")) == standbys  # slave_for's SENTINEL SLAVES


# --- clients through a kill -9 of the primary -----------------------------------------------------


class Draws:
    """IDs one client drew, in order, and when the first one after a point was drawn."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def add(self, value: int) -> None:
        with self.lock:
            self.ids.append(value)

    def count(self) -> int:
        with self.lock:
            return len(self.ids)

    def check(self) -> None:
        assert len(set(self.ids)) == len(self.ids), "an ID was handed out twice"
        assert all(a < b for a, b in zip(self.ids, self.ids[1:], strict=False)), "an ID went backwards"


def _kill_primary_and_wait(cluster: MarchCluster, draws: Draws) -> None:
    old = cluster.wait_settled()
    wait_until(lambda: draws.count() >= 20, 20, message="20 IDs before the kill")
    cluster.kill(old)
    before = draws.count()
    new = cluster.wait_primary(15, exclude=[old])
    try:
        wait_until(lambda: draws.count() >= before + AFTER_KILL, 30, message=f"{AFTER_KILL} IDs after the kill")
    except AssertionError as e:
        raise AssertionError(f"{e}; the client's last errors: {draws.errors[-5:]}") from None
    cluster.restart(old)  # back as a standby: the next test starts from three nodes again
    assert new.alive


def test_redis_py_sentinel_follows_a_killed_primary(cluster: MarchCluster) -> None:
    ports = [n.port for n in cluster.nodes]
    sentinel = Sentinel([("127.0.0.1", p) for p in ports], socket_timeout=1.0, sentinel_kwargs={"socket_timeout": 0.5})
    master = sentinel.master_for("march", socket_timeout=1.0)
    draws = Draws()
    stop = threading.Event()

    def draw() -> None:
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                draws.add(master.incr("orders:sentinel:py"))
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
                draws.errors.append(repr(e))  # no ID was handed out: try again
                stop.wait(0.05)

    thread = threading.Thread(target=draw)
    thread.start()
    try:
        _kill_primary_and_wait(cluster, draws)
    finally:
        stop.set()
        thread.join(10)
    draws.check()
    primary = cluster.wait_settled()
    assert sentinel.discover_master("march") == ("127.0.0.1", primary.port)
    master.close()


def _next_message(pubsub: redis.client.PubSub, timeout: float) -> dict[str, object]:
    """The next message (not a subscription confirmation) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
        if message is not None:
            return dict(message)
    raise AssertionError(f"no message within {timeout}s")


def test_standbys_announce_switch_master(cluster: MarchCluster) -> None:
    """What Jedis and go-redis (SUBSCRIBE +switch-master) and Lettuce (PSUBSCRIBE *) listen for: a
    standby sends ``march <old-ip> <old-port> <new-ip> <new-port>`` once it sees the new primary."""
    old = cluster.wait_settled()
    standby = next(n for n in cluster.nodes if n is not old)
    conn = redis.Redis(port=standby.port)
    channel, everything = conn.pubsub(), conn.pubsub()
    channel.subscribe("+switch-master")
    everything.psubscribe("*")
    for p in (channel, everything):  # confirmed: the subscriptions are in place before the kill
        assert p.get_message(timeout=5) is not None
    try:
        cluster.kill(old)
        new = cluster.wait_primary(15, exclude=[old])
        expected = f"march 127.0.0.1 {old.port} 127.0.0.1 {new.port}".encode()
        assert _next_message(channel, 15) == {
            "type": "message", "pattern": None, "channel": b"+switch-master", "data": expected
        }  # fmt: skip
        assert _next_message(everything, 5) == {
            "type": "pmessage", "pattern": b"*", "channel": b"+switch-master", "data": expected
        }  # fmt: skip
    finally:
        channel.close()
        everything.close()
        conn.close()
        cluster.restart(old)  # back as a standby: the next test starts from three nodes again


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ioredis and node-redis, installed by npm into a temporary directory (the examples find
    them through NODE_PATH)."""
    if node_binary() is None:
        pytest.skip("node is not installed")
    npm = shutil.which("npm")
    assert npm is not None, "node is installed but npm is not"
    directory = tmp_path_factory.mktemp("node")
    proc = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(directory), *NODE_PACKAGES],
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"npm install failed:\n{proc.stdout.decode()}\n{proc.stderr.decode()}"
    return directory / "node_modules"


def run_example(node_modules: Path, example: str, **env: str) -> subprocess.CompletedProcess[str]:
    node = node_binary()
    assert node is not None
    return subprocess.run(
        [node, str(NODE_EXAMPLES / example)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "NODE_PATH": str(node_modules), **env},
    )


@pytest.mark.parametrize(
    ("example", "variable"),
    [
        ("ioredis-sentinel.js", "MARCH_SENTINELS"),
        ("ioredis-cluster.js", "MARCH_NODES"),
        ("node-redis-cluster.js", "MARCH_NODES"),
    ],
)
def test_node_examples_follow_a_killed_primary(
    cluster: MarchCluster, node_modules: Path, example: str, variable: str
) -> None:
    """The Node examples of docs/clients, run as they are: Sentinel discovery and cluster mode."""
    node = node_binary()
    assert node is not None
    addresses = ",".join(n.address for n in cluster.nodes)
    draws = Draws()
    reached: list[str] = []
    with subprocess.Popen(
        [node, str(NODE_EXAMPLES / example)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # (the Sentinel example draws MARCH_KEYS in turn: one key here, so its IDs must increase)
        env={"PATH": "/usr/bin:/bin", "NODE_PATH": str(node_modules), variable: addresses, "MARCH_KEYS": "orders"},
        text=True,
    ) as proc:

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                kind, _, value = line.strip().partition(" ")
                if kind == "id":  # `id N`, or `id KEY N` (the Sentinel example)
                    draws.add(int(value.split()[-1]))
                elif kind == "reached":
                    reached.append(value)
                else:
                    draws.errors.append(value)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            _kill_primary_and_wait(cluster, draws)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # the example stops at the end of its input
            try:
                proc.wait(15)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                reader.join(5)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, stderr
    draws.check()
    if example == "ioredis-sentinel.js":  # it says which node it reached: one of the cluster's
        assert len(reached) == 1 and reached[0].split(",")[0] in addresses.split(","), reached


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MarchServer, int, Certs]]:
    """One node with a password, a plain port and a TLS port (client certificates required)."""
    if openssl_binary() is None:
        pytest.skip("openssl is not installed")
    base = tmp_path_factory.mktemp("single")
    certs = make_certs(base / "certs")
    tls_port = free_port()
    server = MarchServer(base / "data", requirepass=PASSWORD, extra_args=certs.server_args("yes", tls_port))
    with serving(server):
        wait_listening(tls_port)
        yield server, tls_port, certs


@pytest.mark.parametrize("example", ["ioredis-single.js", "node-redis-single.js"])
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_node_single_node_examples(
    tls_node: tuple[MarchServer, int, Certs], node_modules: Path, example: str, tls: bool
) -> None:
    """The single-node examples of docs/clients, as they are: a password, plain and over TLS."""
    server, tls_port, certs = tls_node
    env = {"MARCH_PORT": str(tls_port if tls else server.port), "MARCH_PASSWORD": PASSWORD, "COUNT": "3"}
    if tls:
        env |= {"MARCH_TLS_CA": certs.ca, "MARCH_TLS_CERT": certs.client_cert, "MARCH_TLS_KEY": certs.client_key}
    out = run_example(node_modules, example, **env)
    assert out.returncode == 0, out.stderr
    ids = [int(line.split()[1]) for line in out.stdout.splitlines()]
    assert len(ids) == 3 and ids == sorted(set(ids))
    wrong = run_example(node_modules, example, **{**env, "MARCH_PASSWORD": "wrong"})
    assert wrong.returncode != 0 and "WRONGPASS" in wrong.stdout + wrong.stderr


def test_the_sentinel_example_refuses_a_single_node(
    tls_node: tuple[MarchServer, int, Certs], node_modules: Path
) -> None:
    """A single node answers the Sentinel commands too, naming itself: listed by mistake among the
    sentinels (docs/clients once gave the single node's ports), the example must say so and stop,
    not hand out the single node's IDs as if they were the cluster's."""
    server, _, _ = tls_node
    out = run_example(
        node_modules,
        "ioredis-sentinel.js",
        MARCH_SENTINELS=f"127.0.0.1:{server.port}",
        MARCH_PASSWORD=PASSWORD,
        COUNT="3",
    )
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "id " not in out.stdout and f"127.0.0.1:{server.port}, a single node" in out.stderr, out.stderr

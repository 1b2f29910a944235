"""Two nodes changing one user at once, on a real etcd and three march processes (issue 20 item 1).

Every change applies to the *stored* user (read with its revision, written with a compare on it),
never to the lagging copy of the node that got the command. Each test races two nodes for
``MARCH_ACL_RACE_ROUNDS`` rounds (default 10; the drill runs 100), a fresh user each round, and
waits until every node agrees before it checks:

- A: ``SETUSER u on >secret1 ~* +@read``; (B knows u) A: ``SETUSER u resetpass off``; at once B:
  ``SETUSER u +incr``. Then u is off, has no password, and has ``+incr``: ``AUTH u secret1``
  fails on every node.
- A: ``DELUSER u``; at once B: ``SETUSER u -debug``. Then u is a *new* user (off, no password,
  no keys, no old rights): the deleted one never comes back.
- B: ``SETUSER v on >pw``; at once A: ``ACL LOAD`` (a file without v). Then v is gone everywhere:
  LOAD makes the stored users the file's, whatever A's copy knew.
- ``requirepass`` on every node, then ``ACL SETUSER default resetpass >new`` on one: the new
  password holds on every node, also after every node restarted with the old ``requirepass``
  (the stored user wins; the node logs that they differ).

Every process is stopped by its fixture; waits are conditions with deadlines.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.resp import RespConn, RespError, wait_until

from march import errors

pytestmark = pytest.mark.e2e

ROUNDS = int(os.environ.get("MARCH_ACL_RACE_ROUNDS", "10"))
WRONGPASS = RespError(errors.WRONGPASS)
THROTTLED = RespError(errors.AUTH_THROTTLED)
CLUSTERDOWN = RespError(errors.CLUSTERDOWN)


@pytest.fixture
def aclfile(tmp_path: Path) -> Path:
    path = tmp_path / "users.acl"
    path.write_text("user default on nopass ~* &* +@all\n")  # (the cluster fixtures read INFO without AUTH)
    return path


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdCluster, aclfile: Path) -> Iterator[MarchCluster]:
    c = MarchCluster(tmp_path / "march", etcd.endpoints, extra_args=["--aclfile", str(aclfile)])
    try:
        c.start()
        yield c
    finally:
        c.stop()


def admin(node: ClusterNode) -> RespConn:
    return RespConn(node.port)


def getuser(conn: RespConn, name: str) -> dict[bytes, object] | None:
    reply = conn.call("ACL", "GETUSER", name)
    if reply is None:
        return None
    assert isinstance(reply, list), reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def authenticates(node: ClusterNode, user: str, password: str, timeout: float = 30.0) -> bool:
    """One AUTH, checked: failed AUTHs are throttled per address (they all come from 127.0.0.1), so
    an attempt refused unchecked is made again once its turn may have come (and one made before
    the node has read its users)."""
    replies: list[object] = []

    def checked() -> bool:
        with RespConn(node.port) as c:  # a fresh connection each time
            replies.append(c.call("AUTH", user, password))
        return replies[-1] not in (THROTTLED, CLUSTERDOWN)  # (CLUSTERDOWN: the node has not read its users yet)

    wait_until(checked, timeout, 0.5, f"a checked AUTH of {user} on {node.name}")
    assert replies[-1] in ("OK", WRONGPASS), replies[-1]
    return replies[-1] == "OK"


def accepts(conn: RespConn, name: str, password: str) -> bool:
    """Whether the node's copy of ``name`` takes ``password`` (on, and the password's hash stored):
    what AUTH would answer there, asked without failing an AUTH (those are throttled)."""
    user = getuser(conn, name)
    if user is None or b"on" not in user[b"flags"]:  # type: ignore[operator]
        return False
    digest = hashlib.sha256(password.encode()).hexdigest().encode()
    return b"nopass" in user[b"flags"] or digest in user[b"passwords"]  # type: ignore[operator]


def agreed(conns: list[RespConn], name: str, timeout: float = 10.0) -> dict[bytes, object] | None:
    """Wait until every node reports the same ``name``; that user (None: none has it)."""
    seen: list[dict[bytes, object] | None] = []

    def same() -> bool:
        seen[:] = [getuser(c, name) for c in conns]
        return all(s == seen[0] for s in seen)

    wait_until(same, timeout, 0.005, f"every node to agree on user {name!r}")
    return seen[0]


def test_a_revoked_password_never_comes_back(cluster: MarchCluster) -> None:
    a_node, b_node, c_node = cluster.nodes
    conns = [admin(n) for n in cluster.nodes]
    a, b, _ = conns
    try:
        for i in range(ROUNDS):
            u = f"u{i}"
            assert a.call("ACL", "SETUSER", u, "on", ">secret1", "~*", "+@read") == "OK"
            wait_until(lambda u=u: getuser(b, u) is not None, 10, 0.002, f"{u} to reach B")
            assert a.call("ACL", "SETUSER", u, "resetpass", "off") == "OK"
            assert b.call("ACL", "SETUSER", u, "+incr") == "OK"  # at once, on the other node
            user = agreed(conns, u)
            assert user is not None
            assert user[b"flags"] == [b"off"], (i, user)
            assert user[b"passwords"] == [], (i, user)
            commands = user[b"commands"]
            assert isinstance(commands, bytes) and b"+incr" in commands.split(), (i, user)
            for n, conn in zip(cluster.nodes, conns, strict=True):
                assert not accepts(conn, u, "secret1"), f"round {i}: the revoked password works on {n.name}"
        for n in (a_node, b_node, c_node):  # and AUTH itself says so
            assert not authenticates(n, u, "secret1"), f"the revoked password works on {n.name}"
    finally:
        for c in conns:
            c.close()


def test_a_deleted_user_stays_deleted_unless_created_anew(cluster: MarchCluster) -> None:
    conns = [admin(n) for n in cluster.nodes]
    a, b, _ = conns
    try:
        for i in range(ROUNDS):
            u = f"d{i}"
            assert a.call("ACL", "SETUSER", u, "on", ">secret1", "~*", "+@all") == "OK"
            wait_until(lambda u=u: getuser(b, u) is not None, 10, 0.002, f"{u} to reach B")
            assert a.call("ACL", "DELUSER", u) == 1
            assert b.call("ACL", "SETUSER", u, "-debug") == "OK"  # at once: creates a new user
            user = agreed(conns, u)
            assert user is not None
            assert user[b"flags"] == [b"off"] and user[b"passwords"] == [], (i, user)
            assert user[b"keys"] == b"" and user[b"commands"] == b"-@all -debug", (i, user)
            for n, conn in zip(cluster.nodes, conns, strict=True):
                assert not accepts(conn, u, "secret1"), f"round {i}: the deleted user came back on {n.name}"
        for n in cluster.nodes:
            assert not authenticates(n, u, "secret1"), f"the deleted user came back on {n.name}"
    finally:
        for c in conns:
            c.close()


def test_acl_load_applies_to_the_stored_users(cluster: MarchCluster) -> None:
    conns = [admin(n) for n in cluster.nodes]
    a, b, _ = conns
    try:
        for i in range(ROUNDS):
            v = f"v{i}"
            assert b.call("ACL", "SETUSER", v, "on", ">pw", "~*", "+@read") == "OK"
            assert a.call("ACL", "LOAD") == "OK"  # at once, on the other node: the file has no v
            assert agreed(conns, v) is None, f"round {i}: {v} survived ACL LOAD"
        for n in cluster.nodes:
            assert not authenticates(n, v, "pw")
    finally:
        for c in conns:
            c.close()


def test_a_new_default_password_holds_on_every_node_and_across_restarts(tmp_path: Path, etcd: EtcdCluster) -> None:
    c = MarchCluster(tmp_path / "march", etcd.endpoints, extra_args=["--requirepass", "old-pass"])
    try:
        c.start_nodes(c.nodes)  # (not start(): it finds the primary through INFO, which needs the password here)
        for n in c.nodes:  # each has read (or seeded) the users
            wait_until(lambda n=n: authenticates(n, "default", "old-pass"), 10, 0.01, f"old password on {n.name}")
        with RespConn(c.nodes[0].port) as adm:
            assert adm.call("AUTH", "old-pass") == "OK"
            assert adm.call("ACL", "SETUSER", "default", "resetpass", ">new-pass") == "OK"
        for n in c.nodes:
            wait_until(lambda n=n: authenticates(n, "default", "new-pass"), 10, 0.01, f"new password on {n.name}")
            assert not authenticates(n, "default", "old-pass")
        # stays so: a node that reloads its users (here: all of them, restarted) keeps the stored one
        for n in c.nodes:
            c.restart(n)
        for n in c.nodes:
            wait_until(lambda n=n: authenticates(n, "default", "new-pass"), 20, 0.02, f"new password on {n.name}")
            assert not authenticates(n, "default", "old-pass")
            assert "requirepass differs from the stored default user's password" in n.log_tail(20000)
        # CONFIG SET requirepass is stored too: every node, at once
        with RespConn(c.nodes[1].port) as adm:
            assert adm.call("AUTH", "new-pass") == "OK"
            assert adm.call("CONFIG", "SET", "requirepass", "third-pass") == "OK"
        for n in c.nodes:
            wait_until(lambda n=n: authenticates(n, "default", "third-pass"), 10, 0.01, f"third password on {n.name}")
            assert not authenticates(n, "default", "new-pass")
    finally:
        c.stop()

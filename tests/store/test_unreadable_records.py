"""Stored records this version cannot read fail closed (issue 25, item 4), against real processes.

The store may hold such records already: written by an older version's ``march restore`` (which
stored whatever a file said) or by hand. So every test here writes the bad record straight into
the store, SQLite file or etcd, never through a command, and then looks from outside:

- a ``default`` user whose rules do not parse (``on #zz +@all ~*``) never becomes the built-in
  open ``default``: the user is off, an unauthenticated ``INCR`` gets ``NOAUTH`` (before: ``1``),
  at start and when the etcd watch brings such a record to a running node; an admin repairs it
  with ``ACL SETUSER``, and with no admin left ``march restore`` of a valid record brings it back;
- a sequence whose settings do not read (``{"min_batch": "x"}``, a timestamp sequence without a
  layout) answers ``SEQ_UNREADABLE`` on every command (before: ``ERR internal error:
  ValueError(...)``, ``KeyError('time_bits')``, and nothing could repair it), and ``SEQ.ALTER``
  repairs it: the key then hands out IDs above its stored ceiling.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError, wait_until
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.servers import REPO_ROOT

from march import errors
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths
from march.store.contract import SequenceRecord
from march.store.etcd_values import encode_record

pytestmark = pytest.mark.e2e

BAD_DEFAULT = "on #zz +@all ~*"
ADMIN = "on #" + "a" * 64 + " >admin-pw-31 ~* &* +@all"  # (a second password, hashed: the rules stay valid)
SNOWFLAKE_ID_ABOVE = 1 << 40  # any snowflake ID of today is far above this
HEAD = '{"format":"march-backup","version":1}'


def ok(*args: str, stdin: str | None = None) -> str:
    """``march <args>`` as an operator types it: exit status 0, its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "march", *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def sqlite_user(data_dir: Path, name: str, rules: str) -> None:
    """Write a user record into a stopped node's SQLite store as the store itself does (a new revision)."""
    with sqlite3.connect(data_dir / "march.sqlite3") as db:
        db.execute("UPDATE users_revision SET revision = revision + 1")
        (revision,) = db.execute("SELECT revision FROM users_revision").fetchone()
        db.execute(
            "INSERT INTO users (name, rules, revision) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET rules = excluded.rules, revision = excluded.revision",
            (name, rules, revision),
        )
    db.close()


def sqlite_sequence(data_dir: Path, key: bytes, kind: str, settings: object) -> None:
    with sqlite3.connect(data_dir / "march.sqlite3") as db:
        changed = db.execute(
            "UPDATE sequences SET kind = ?, settings = ? WHERE key = ?", (kind, json.dumps(settings), key)
        ).rowcount
    db.close()
    assert changed == 1


def new_store(data_dir: Path) -> None:
    """A SQLite store with three sequences (next IDs 6) and one user, made by the tools themselves."""
    ok("import-floors", "--csv", "-", "--apply", "--data-dir", str(data_dir), stdin="k1,5\nts,5\nplain,5\n")
    user = '{"type":"user","name":"seed","rules":"off"}'
    (data_dir.parent / "seed.jsonl").write_text(
        f'{HEAD}\n{user}\n{{"type":"end","sequences":0,"users":1,"workers":0}}\n'
    )
    ok("restore", str(data_dir.parent / "seed.jsonl"), "--data-dir", str(data_dir))


def noauth(port: int) -> bool:
    with RespConn(port) as c:
        reply = c.call("INCR", "probe")
    return isinstance(reply, RespError) and reply.prefix == "NOAUTH"


# --- users ---------------------------------------------------------------------------------------


def test_a_stored_default_that_cannot_be_read_keeps_everyone_out(tmp_path: Path) -> None:
    data = tmp_path / "data"
    new_store(data)
    sqlite_user(data, "default", BAD_DEFAULT)
    sqlite_user(data, "admin", ADMIN)
    node = MarchServer.in_dir(tmp_path / "node", requirepass="secret", extra_args=["--data-dir", str(data)])
    node.start()
    try:
        with RespConn(node.port) as c:
            reply = c.call("INCR", "x")
            assert isinstance(reply, RespError) and reply.prefix == "NOAUTH", reply  # before: 1
            assert c.call("AUTH", "secret").prefix == "WRONGPASS"  # requirepass does not replace it
        admin = redis.Redis(port=node.port, username="admin", password="admin-pw-31", decode_responses=True)
        assert admin.acl_getuser("default")["flags"] == ["off"]
        assert int(admin.incr("x")) == 1
        log = node.log_path.read_text()
        assert "the stored user 'default' cannot be read by this version" in log
        assert "Traceback" not in log and "#zz" not in log

        admin.acl_setuser("default", enabled=True, passwords=["+fixed-pw"], keys=["*"], commands=["+@all"])
        fixed = redis.Redis(port=node.port, password="fixed-pw")
        assert int(fixed.incr("x")) == 2
        assert noauth(node.port)  # a password again, and no way in without it
    finally:
        node.stop()


def test_restore_brings_back_a_default_that_cannot_be_read(tmp_path: Path) -> None:
    """No admin can log in (``default`` was the only one): ``march restore`` of a file with a valid
    ``default`` replaces the unreadable record (and only such a record: a readable one is kept)."""
    data = tmp_path / "data"
    new_store(data)
    sqlite_user(data, "default", BAD_DEFAULT)
    node = MarchServer.in_dir(tmp_path / "node", extra_args=["--data-dir", str(data)])
    node.start()
    try:
        assert noauth(node.port)  # before: the built-in default, no password
    finally:
        node.stop()
    fix = tmp_path / "fix.jsonl"
    default = '{"type":"user","name":"default","rules":"on >back-in-9 ~* &* +@all"}'
    fix.write_text(f'{HEAD}\n{default}\n{{"type":"end","sequences":0,"users":1,"workers":0}}\n')
    assert "users: 0 would be created, 0 kept as stored, 1 would be replaced" in ok(
        "restore", str(fix), "--dry-run", "--data-dir", str(data)
    )
    assert "users: 0 created, 0 kept as stored, 1 replaced (stored unreadable)" in ok(
        "restore", str(fix), "--data-dir", str(data)
    )
    assert "users: 0 created, 1 kept as stored" in ok("restore", str(fix), "--data-dir", str(data))  # readable now
    node.start()
    try:
        assert noauth(node.port)
        assert int(redis.Redis(port=node.port, password="back-in-9").incr("x")) == 1
    finally:
        node.stop()


async def etcd_put(endpoints: str, key: bytes, value: bytes) -> None:
    client = GrpcEtcd(endpoints.split(","), timeout=5.0)
    try:
        await client.put(key, value)
    finally:
        await client.close()


def test_a_default_that_cannot_be_read_fails_closed_in_a_cluster(tmp_path: Path, etcd: EtcdCluster) -> None:
    """On etcd: written while two nodes serve, the watch brings it to both, and each turns
    ``default`` off (before: each kept the open built-in ``default``); a node started afterwards
    reads it off too. An admin's ACL SETUSER repairs it on every node."""
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, size=2)
    keys = KeyPaths.of(cluster.prefix)
    try:
        cluster.start()
        for n in cluster.nodes:
            assert not noauth(n.port)  # no password yet: the built-in default, as in Redis
        with RespConn(cluster.nodes[0].port) as c:
            assert c.call("ACL", "SETUSER", "admin", *ADMIN.split()) == "OK"
        asyncio.run(etcd_put(etcd.endpoints, keys.user("default"), BAD_DEFAULT.encode()))
        for n in cluster.nodes:
            wait_until(lambda n=n: noauth(n.port), message=f"default off on {n.node_id}")  # type: ignore[misc]
        assert "cannot be read by this version" in cluster.nodes[1].log_path.read_text()

        restarted = cluster.nodes[1]
        restarted.stop()
        restarted.start()  # reads the users at start (until then nobody gets in): default stays off

        def admin_in() -> bool:
            with RespConn(restarted.port) as c:
                return c.call("AUTH", "admin", "admin-pw-31") == "OK"

        wait_until(admin_in, message="the restarted node has read the users")
        assert noauth(restarted.port)
        with RespConn(restarted.port) as c:
            assert c.call("AUTH", "admin", "admin-pw-31") == "OK"
            assert c.call("ACL", "SETUSER", "default", "on", ">fixed-pw", "~*", "&*", "+@all") == "OK"
        for n in cluster.nodes:
            wait_until(lambda n=n: redis.Redis(port=n.port, password="fixed-pw").ping(), message="repaired")  # type: ignore[misc]
            assert noauth(n.port)
    finally:
        cluster.stop()


# --- sequences -----------------------------------------------------------------------------------


def test_a_sequence_whose_settings_cannot_be_read_answers_an_error_until_repaired(tmp_path: Path) -> None:
    data = tmp_path / "data"
    new_store(data)
    sqlite_sequence(data, b"k1", "sequence", {"min_batch": "x"})
    sqlite_sequence(data, b"ts", "timestamp", {})
    node = MarchServer.in_dir(tmp_path / "node", extra_args=["--data-dir", str(data)])
    node.start()
    try:
        with RespConn(node.port) as c:
            for key in ("k1", "ts"):  # before: ERR internal error: ValueError(...) / KeyError('time_bits')
                reply = c.call("INCR", key)
                assert isinstance(reply, RespError) and "internal error" not in reply.message, reply
            unreadable = errors.SEQ_UNREADABLE.format("k1", "min_batch 'x' is not an integer")
            missing = "no layout (time_bits, node_bits, seq_bits, order, epoch, unit missing)"
            lost = errors.SEQ_LAYOUT_UNREADABLE.format("ts", missing)
            for command in (
                ["INCR", "k1"],
                ["INCRBY", "k1", "5"],
                ["GET", "k1"],
                ["SEQ.INFO", "k1"],
                ["SET", "k1", "9"],
            ):
                assert c.call(*command) == RespError(unreadable), command  # before: ERR internal error: ValueError
            for command in (["INCR", "ts"], ["SEQ.INFO", "ts"], ["SEQ.DECODE", "ts", "1"]):
                assert c.call(*command) == RespError(lost), command  # before: ERR internal error: KeyError
            assert c.call("INCR", "plain") == 6  # the others serve

            # the repair: the unreadable setting is dropped, the given one stored
            assert c.call("SEQ.ALTER", "k1", "MAXLEAD", "1000").prefix == "WRONGTYPE"  # SEQ.ALTER's own rules hold
            assert c.call("SEQ.ALTER", "k1", "MINBATCH", "10") == "OK"
            assert c.call("INCR", "k1") == 6  # above the stored ceiling
            assert c.call("SEQ.ALTER", "ts", "MAXLEAD", "1000") == RespError(lost)  # a layout is needed
            assert c.call("SEQ.ALTER", "plain", "PRESET", "snowflake") == RespError(errors.ALTER_LAYOUT.format("plain"))
            assert c.call("SEQ.ALTER", "ts", "PRESET", "snowflake", "MAXLEAD", "2000") == "OK"
            first = c.call("INCR", "ts")
            assert isinstance(first, int) and first > SNOWFLAKE_ID_ABOVE
            assert c.call("SEQ.ALTER", "ts", "PRESET", "js53") == RespError(errors.ALTER_LAYOUT.format("ts"))
        log = node.log_path.read_text()
        assert "Traceback" not in log and "internal error" not in log
    finally:
        node.stop()
    node.start()  # the repairs are durable
    try:
        with RespConn(node.port) as c:
            assert c.call("INCR", "k1") > 6
            assert c.call("INCR", "ts") > first
            info = dict(zip(*[iter(c.call("SEQ.INFO", "k1"))] * 2, strict=True))
            assert info[b"min_batch"] == 10
    finally:
        node.stop()


def test_a_sequence_whose_settings_cannot_be_read_on_etcd(tmp_path: Path, etcd: EtcdCluster) -> None:
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, size=1)
    keys = KeyPaths.of(cluster.prefix)
    bad = SequenceRecord(b"k1", "sequence", 100, {"min_batch": "x", "max_batch": 50})
    asyncio.run(etcd_put(etcd.endpoints, keys.seq(b"k1"), encode_record(bad)))
    try:
        primary = cluster.start()
        with RespConn(primary.port) as c:
            reply = c.call("INCR", "k1")  # before: ERR internal error: ValueError(...)
            assert isinstance(reply, RespError) and "internal error" not in reply.message, reply
            unreadable = errors.SEQ_UNREADABLE.format("k1", "min_batch 'x' is not an integer")
            assert reply == RespError(unreadable)
            assert c.call("SEQ.ALTER", "k1", "MINBATCH", "20") == "OK"  # max_batch 50 is kept
            assert c.call("INCR", "k1") == 100
            info = dict(zip(*[iter(c.call("SEQ.INFO", "k1"))] * 2, strict=True))
            assert (info[b"min_batch"], info[b"max_batch"]) == (20, 50)
    finally:
        cluster.stop()

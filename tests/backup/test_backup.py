"""``march backup``, ``march restore`` and ``march import-floors`` (``march.backup``), run as the
command an operator types, against real stores: a real march node on SQLite, a real etcd with
real march cluster nodes, a real PostgreSQL, a real redis-server.

The case the issue names: a backup taken while IDs are handed out, more IDs handed out after
it, then the old backup restored; no ID may repeat (SQLite and etcd). Restore while a node owns
the store is refused (the SQLite lock; an etcd primary), and through the primary raises floors.
Bad input is refused with the line and changes nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.invoke import march, ok, refused
from march_harness.postgres import postgres  # noqa: F401 - a throwaway PostgreSQL (import-floors --dsn)
from march_harness.servers import REPO_ROOT, RedisServer

from march.backup.checks import BackupError
from march.backup.format import Backup
from march.backup.operations import restore, writing
from march.config import MAX_ID, load
from march.etcd.grpc_etcd import GrpcEtcd
from march.etcd.keypath import KeyPaths
from march.store.contract import SequenceRecord, WorkerRecord
from march.store.etcd_values import encode_ceiling, encode_record

pytestmark = pytest.mark.e2e

MANY = 20_000  # sequences in the scale tests: a realistic size that still runs in a few seconds


def draw(client: redis.Redis, key: str, n: int) -> list[int]:
    return [int(client.incr(key)) for _ in range(n)]


def sqlite_rows(data_dir: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(data_dir / "march.sqlite3") as db:
        rows = db.execute("SELECT key, kind, ceiling, settings FROM sequences ORDER BY key").fetchall()
    db.close()
    return rows


# --- SQLite ------------------------------------------------------------------------------------


def test_sqlite_old_backup_restored_after_more_ids_never_repeats(tmp_path: Path) -> None:
    node = MarchServer.in_dir(tmp_path / "a")
    data = node.data_dir
    backup = tmp_path / "old.jsonl"
    node.start()
    try:
        c = redis.Redis(port=node.port)
        issued = draw(c, "orders", 50) + draw(c, "invoices", 5)
        c.execute_command("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all")
        ok("backup", str(backup), "--data-dir", str(data))  # while the node serves
        issued += draw(c, "orders", 3000)  # more IDs after the backup: past the old ceiling
        assert "in use by another March server" in refused("restore", str(backup), "--data-dir", str(data))
    finally:
        node.stop()
    lines = [json.loads(line) for line in backup.read_text().splitlines()]
    assert lines[0]["format"] == "march-backup" and lines[0]["version"] == 1
    assert {(x["key"], x["kind"]) for x in lines if x.get("type") == "sequence"} == {
        ("orders", "sequence"),
        ("invoices", "sequence"),
    }
    assert any(x.get("type") == "user" and x["name"] == "app" for x in lines)
    assert lines[-1] == {"type": "end", "sequences": 2, "users": 1, "workers": 0}

    before = sqlite_rows(data)
    out = ok("restore", str(backup), "--data-dir", str(data))
    assert "0 created, 0 raised, 2 unchanged" in out
    assert sqlite_rows(data) == before  # the newer ceilings stay: nothing lowered
    node.start()
    try:
        later = draw(redis.Redis(port=node.port), "orders", 100)
    finally:
        node.stop()
    assert not set(later) & set(issued) and min(later) > max(issued)

    fresh = MarchServer.in_dir(tmp_path / "b")  # into an empty store: every backed-up ID stays below
    out = ok("restore", str(backup), "--data-dir", str(fresh.data_dir))
    assert "2 created" in out and "users: 1 created" in out
    fresh.start()
    try:
        c = redis.Redis(port=fresh.port)
        first = int(c.incr("orders"))
        assert first > 50
        c.execute_command("AUTH", "app", "secret")  # the user came back, its password only hashed
    finally:
        fresh.stop()


def test_sqlite_backup_restore_at_scale(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rows = "".join(f"seq:{i},{i * 7}\n" for i in range(MANY))
    dry = ok("import-floors", "--csv", "-", "--data-dir", str(data), stdin=rows)
    assert f"{MANY} would be created" in dry and "dry run" in dry
    assert not data.exists()  # a dry run writes nothing, not even an empty store
    out = ok("import-floors", "--csv", "-", "--apply", "--data-dir", str(data), stdin=rows)
    assert f"sequences: {MANY} created, 0 raised, 0 unchanged" in out
    backup = tmp_path / "b.jsonl"
    ok("backup", str(backup), "--data-dir", str(data))
    copy = tmp_path / "copy"
    assert f"{MANY} created" in ok("restore", str(backup), "--data-dir", str(copy))
    assert sqlite_rows(copy) == sqlite_rows(data)
    assert dict((r[0], int(r[2])) for r in sqlite_rows(copy))[b"seq:123"] == 123 * 7 + 1
    again = ok("import-floors", "--csv", "-", "--apply", "--data-dir", str(data), stdin=rows)
    assert f"0 created, 0 raised, {MANY} unchanged" in again


HEAD = '{"format":"march-backup","version":1}'


def seq_line(key: str, ceiling: object) -> str:
    return json.dumps({"type": "sequence", "key": key, "kind": "sequence", "ceiling": ceiling, "settings": {}})


BAD_BACKUPS = {
    "not json": [HEAD, "{oops"],
    "wrong version": ['{"format":"march-backup","version":99}'],
    "not a backup": ['{"hello":1}'],
    "non-integer": [HEAD, seq_line("a", "12")],
    "above the maximum": [HEAD, seq_line("a", 2**64)],
    "truncated": [HEAD, seq_line("a", 5)],
    "counts": [HEAD, seq_line("zz", 5), '{"type":"end","sequences":3,"users":0,"workers":0}'],
}


@pytest.mark.parametrize("case", sorted(BAD_BACKUPS))
def test_bad_backup_is_refused_and_changes_nothing(tmp_path: Path, case: str) -> None:
    data = tmp_path / "data"
    ok("import-floors", "--csv", "-", "--apply", "--data-dir", str(data), stdin="a,3\n")
    before = sqlite_rows(data)
    bad = tmp_path / "bad.jsonl"
    # a good first record, so a restore that wrote as it read would leave a trace
    good = '{"type":"sequence","key":"first","kind":"sequence","ceiling":99,"settings":{}}'
    lines = BAD_BACKUPS[case]
    bad.write_text("\n".join([*lines[:1], good, *lines[1:]]) + "\n")
    err = refused("restore", str(bad), "--data-dir", str(data))
    assert err.startswith("march: ")
    assert sqlite_rows(data) == before


def _line(record: dict[str, object]) -> str:
    return json.dumps(record, separators=(",", ":"))


def _seq(settings: object, kind: str = "sequence", **name: str) -> dict[str, object]:
    return {"type": "sequence", **(name or {"key": "bad"}), "kind": kind, "ceiling": 10, "settings": settings}


SNOWFLAKE = {"preset": "snowflake", "time_bits": 41, "node_bits": 10, "seq_bits": 12, "order": "time,node,seq",
             "epoch": 1288834974657, "unit": 1, "node": 0}  # fmt: skip
WORKER = {"type": "worker", "namespace": "app", "id": 0, "token": "", "expires_ms": 0, "floor_ms": 5, "ttl": 30}

# Records the live commands refuse (ACL SETUSER, SEQ.CREATE/SEQ.ALTER, max_key_len, WORKER.ACQUIRE),
# each with what the refusal says. Before this, every one of them was stored.
REFUSED_RECORDS: dict[str, tuple[dict[str, object], str]] = {
    "default user whose rules do not parse": (
        {"type": "user", "name": "default", "rules": "on #zz +@all ~*"},
        "user 'default': Error in ACL SETUSER modifier '#zz': The password hash must be exactly 64 characters",
    ),
    "user rule that is no rule": ({"type": "user", "name": "app", "rules": "on +@nosuch"}, "user 'app': Error in ACL"),
    "user name with a space": ({"type": "user", "name": "a b", "rules": "on"}, "Usernames can't contain spaces"),
    "setting that is a string": (_seq({"min_batch": "x"}), "sequence 'bad': min_batch 'x' is not an integer"),
    "timestamp sequence without a layout": (_seq({}, "timestamp"), "sequence 'bad': no layout (time_bits"),
    "timestamp layout that does not fit": (
        _seq({**SNOWFLAKE, "time_bits": 60}, "timestamp"),
        "layout: a timestamp layout needs TIMEBITS >= 1, NODEBITS >= 0, SEQBITS >= 0 and at most 63 bits",
    ),
    "2,000,000-byte name": (_seq({}, key="n" * 2_000_000), "the key is 2000000 bytes, longer than max_key_len (1024)"),
    "batch below its bounds": (_seq({"min_batch": 0}), "min_batch 0 is out of range (1 .. "),
    "MINBATCH above MAXBATCH": (_seq({"min_batch": 500, "max_batch": 20}), "min_batch 500 is above max_batch 20"),
    "timestamp setting on a plain sequence": (
        _seq({"max_lead": 1000}),
        "max_lead is not a setting of a plain sequence",
    ),
    "batch on a timestamp sequence": (
        _seq({**SNOWFLAKE, "min_batch": 10}, "timestamp"),
        "min_batch is not a setting of a timestamp sequence",
    ),
    "unknown setting": (_seq({"colour": 1}), "unknown setting 'colour'"),
    "worker TTL 0": ({**WORKER, "ttl": 0}, "ttl 0 is out of range (1 .. 86400)"),
    "worker namespace too long": ({**WORKER, "namespace": "w" * 1025}, "worker namespace is 1025 bytes"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_RECORDS))
def test_restore_refuses_what_the_live_commands_refuse(tmp_path: Path, case: str) -> None:
    """Issue 25, item 4: every record goes through the live commands' validators; one bad record
    refuses the whole file, naming its line, and nothing is written (not the good record before it)."""
    data = tmp_path / "data"
    ok("import-floors", "--csv", "-", "--apply", "--data-dir", str(data), stdin="a,3\n")
    before = sqlite_rows(data)
    bad, said = REFUSED_RECORDS[case]
    good = _seq({"min_batch": 10, "max_batch": 100}, key="first")
    counts = {"sequences": 1 + (bad["type"] == "sequence"), "users": int(bad["type"] == "user")}
    end = {"type": "end", **counts, "workers": int(bad["type"] == "worker")}
    backup = tmp_path / "bad.jsonl"
    backup.write_text("\n".join([HEAD, _line(good), _line(bad), _line(end)]) + "\n")
    for dry in ([], ["--dry-run"]):
        err = refused("restore", str(backup), "--data-dir", str(data), *dry)
        assert err.startswith("march: line 3: ") and said in err, err
        assert len(err) < 1000  # a 2 MB name is not echoed back
    assert sqlite_rows(data) == before
    with sqlite3.connect(data / "march.sqlite3") as db:
        assert db.execute("SELECT name FROM users").fetchall() == []
        assert db.execute("SELECT namespace FROM workers").fetchall() == []
    db.close()


def test_restore_stores_users_as_acl_setuser_leaves_them(tmp_path: Path) -> None:
    """A user's rules are parsed as ACL SETUSER parses them and stored as ACL LIST shows them: a
    password written in clear in a hand-made file is stored only as its hash."""
    backup = tmp_path / "users.jsonl"
    user = {"type": "user", "name": "app", "rules": "on >app-secret-77 ~app:* +@read +@write +@create"}
    backup.write_text("\n".join([HEAD, _line(user), '{"type":"end","sequences":0,"users":1,"workers":0}']) + "\n")
    data = tmp_path / "data"
    assert "users: 1 created" in ok("restore", str(backup), "--data-dir", str(data))
    with sqlite3.connect(data / "march.sqlite3") as db:
        ((rules,),) = db.execute("SELECT rules FROM users WHERE name = 'app'").fetchall()
    db.close()
    assert "app-secret-77" not in rules and rules.startswith("on #") and "~app:* " in rules
    node = MarchServer.in_dir(tmp_path / "node", extra_args=["--data-dir", str(data)])
    node.start()
    try:
        c = redis.Redis(port=node.port, username="app", password="app-secret-77")
        assert int(c.incr("app:orders")) == 1
    finally:
        node.stop()


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ("a,1\nb,x\n", "line 2: 'x' is not an integer"),
        ("a,1\n" + "k" * 1025 + ",2\n", "line 2: the key is 1025 bytes, longer than max_key_len (1024)"),
        (f"a,1\nb,{MAX_ID + 1}\n", "out of range"),
        ("a,1\nb,-3\n", "out of range"),
        ("a,1\nb,2,3\n", "expected key,max_id"),
    ],
)
def test_bad_csv_is_refused_and_changes_nothing(tmp_path: Path, rows: str, said: str) -> None:
    data = tmp_path / "data"
    err = refused("import-floors", "--csv", "-", "--apply", "--data-dir", str(data), stdin=rows)
    assert said in err
    assert not (data / "march.sqlite3").exists() or sqlite_rows(data) == []


# --- import-floors sources: a database table, a Redis --------------------------------------------


def test_import_floors_from_sqlite_and_postgres_tables(tmp_path: Path, postgres: object) -> None:  # noqa: F811
    import sqlalchemy as sa

    source = tmp_path / "app.db"
    pg = postgres.dsn(postgres.create_database("floors"))  # type: ignore[attr-defined]
    for dsn in (f"sqlite:///{source}", pg.replace("postgresql://", "postgresql+psycopg://")):
        engine = sa.create_engine(dsn)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE orders (id BIGINT PRIMARY KEY, note TEXT)"))
            conn.execute(sa.text("INSERT INTO orders (id, note) VALUES (5, 'a'), (90210, 'b'), (17, 'c')"))
        engine.dispose()
        data = tmp_path / f"data-{len(dsn)}"
        args = ["import-floors", "--dsn", dsn, "--table", "orders", "--column", "id", "--data-dir", str(data)]
        assert "1 would be created" in ok(*args)
        assert "1 created" in ok(*args, "--apply")
        node = MarchServer.in_dir(data.parent / f"node-{len(dsn)}", extra_args=["--data-dir", str(data)])
        node.start()
        try:
            assert int(redis.Redis(port=node.port).incr("orders")) == 90211
        finally:
            node.stop()
        err = refused("import-floors", "--dsn", dsn, "--table", "nosuch", "--column", "id", "--data-dir", str(data))
        assert "nosuch" in err


def test_import_floors_from_a_running_redis(tmp_path: Path, redis_binary: str) -> None:
    server = RedisServer(tmp_path / "redis", binary=redis_binary)
    server.start()
    try:
        r = redis.Redis(port=server.port)
        pipe = r.pipeline(transaction=False)
        for i in range(MANY):
            pipe.set(f"counter:{i}", i * 3 + 1)
        pipe.set("name", "not a number")
        pipe.rpush("alist", 1)
        pipe.execute()
        data = tmp_path / "data"
        url = f"redis://127.0.0.1:{server.port}"
        out = ok("import-floors", "--from-redis", url, "--apply", "--data-dir", str(data))
        assert f"sequences: {MANY} created" in out and "left out 2 keys" in out
        ceilings = {bytes(k): int(c) for k, _, c, _ in sqlite_rows(data)}
        assert len(ceilings) == MANY and ceilings[b"counter:99"] == 99 * 3 + 2
        r.set("counter:99", 10**6)  # Redis went on counting: a second import raises only that one
        out = ok("import-floors", "--from-redis", url, "--apply", "--data-dir", str(data))
        assert f"0 created, 1 raised, {MANY - 1} unchanged" in out
    finally:
        server.stop()


# --- etcd: a running cluster -------------------------------------------------------------------


@pytest.fixture
def one_node_cluster(tmp_path: Path, etcd: EtcdCluster) -> Iterator[MarchCluster]:
    cluster = MarchCluster(tmp_path / "march", etcd.endpoints, size=1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_etcd_old_backup_restored_after_more_ids_never_repeats(
    tmp_path: Path, etcd: EtcdCluster, one_node_cluster: MarchCluster
) -> None:
    cluster = one_node_cluster
    store = ["--etcd", etcd.endpoints, "--etcd-prefix", cluster.prefix]
    primary = cluster.wait_primary()
    c = redis.Redis(port=primary.port)
    issued = draw(c, "orders", 50)
    c.execute_command("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all")
    wid, token, _, _ = c.execute_command("WORKER.ACQUIRE", "ns", "TTL", "600")
    c.execute_command("WORKER.RENEW", "ns", wid, token, "UPTO", "4102444800000")
    backup = tmp_path / "old.jsonl"
    ok("backup", str(backup), *store)  # while the primary serves
    issued += draw(c, "orders", 3000)
    err = refused("restore", str(backup), *store)  # straight into etcd under a primary: refused
    assert "a primary serves" in err
    out = ok(
        "restore", str(backup), "--through", f"127.0.0.1:{primary.port}", "--user", "app", "--password", "secret"
    )  # through it: the floor is below
    assert "0 created, 0 raised, 1 unchanged" in out
    assert min(draw(c, "orders", 10)) > max(issued)

    cluster.stop()  # no primary: restore writes to etcd itself, each ceiling only raised
    assert "0 created, 0 raised, 1 unchanged" in ok("restore", str(backup), *store)
    cluster.start()
    later = draw(redis.Redis(port=cluster.wait_primary().port), "orders", 100)
    assert not set(later) & set(issued) and min(later) > max(issued)

    other = "/march-restored"  # an empty prefix: a new cluster starts above every backed-up ID
    assert "1 created" in ok("restore", str(backup), "--etcd", etcd.endpoints, "--etcd-prefix", other)
    assert "0 created, 0 raised, 1 unchanged" in ok(
        "restore", str(backup), "--etcd", etcd.endpoints, "--etcd-prefix", other
    )
    new = MarchCluster(tmp_path / "new", etcd.endpoints, size=1, prefix=other)
    with new:
        n = redis.Redis(port=new.wait_primary().port)
        assert int(n.incr("orders")) > 50
        assert int(n.execute_command("WORKER.ACQUIRE", "ns", "TTL", "600")[3]) >= 4102444800000
        n.execute_command("AUTH", "app", "secret")


def test_etcd_import_floors_at_scale_and_through_a_primary(
    tmp_path: Path, etcd: EtcdCluster, one_node_cluster: MarchCluster
) -> None:
    prefix = "/march-import"
    store = ["--etcd", etcd.endpoints, "--etcd-prefix", prefix]
    rows = "".join(f"k{i},{i}\n" for i in range(MANY))
    assert f"{MANY} would be created" in ok("import-floors", "--csv", "-", *store, stdin=rows)
    assert f"{MANY} created" in ok("import-floors", "--csv", "-", "--apply", *store, stdin=rows)
    backup = tmp_path / "b.jsonl"
    ok("backup", str(backup), *store)
    assert sum(1 for line in backup.read_text().splitlines() if '"sequence"' in line) == MANY

    primary = one_node_cluster.wait_primary()  # a serving primary: floors go through it (SET key N)
    c = redis.Redis(port=primary.port)
    draw(c, "k5", 3)
    out = ok(
        "import-floors", "--csv", "-", "--apply", "--through", f"127.0.0.1:{primary.port}", stdin="k5,1000\nnew,77\n"
    )
    assert "1 created, 1 raised, 0 unchanged" in out
    assert int(c.incr("k5")) == 1001 and int(c.incr("new")) == 78


def test_settings_timestamps_and_worker_floors_survive_a_restore(tmp_path: Path) -> None:
    node = MarchServer.in_dir(tmp_path / "a")
    node.start()
    try:
        c = redis.Redis(port=node.port)
        c.execute_command("SEQ.CREATE", "tuned", "MINBATCH", "50")
        c.execute_command("SEQ.CREATE", "ts", "TIMESTAMP")
        stamps = [int(c.incr("ts")) for _ in range(20)]
        wid, token, _, _ = c.execute_command("WORKER.ACQUIRE", "app", "TTL", "600")
        c.execute_command("WORKER.RENEW", "app", wid, token, "UPTO", "4102444800000")  # a floor far ahead
        info = c.execute_command("SEQ.INFO", "tuned")
        backup = tmp_path / "b.jsonl"
        ok("backup", str(backup), "--data-dir", str(node.data_dir))
    finally:
        node.stop()
    fresh = MarchServer.in_dir(tmp_path / "b")
    assert "2 created" in ok("restore", str(backup), "--data-dir", str(fresh.data_dir))
    fresh.start()
    try:
        c = redis.Redis(port=fresh.port)
        moved = (b"next", b"watermark", b"remaining")  # a restored sequence starts at its ceiling
        now = c.execute_command("SEQ.INFO", "tuned")
        assert {k: v for k, v in now.items() if k not in moved} == {k: v for k, v in info.items() if k not in moved}
        assert now[b"next"] == info[b"ceiling"]
        assert int(c.incr("ts")) > max(stamps)
        again = c.execute_command("WORKER.ACQUIRE", "app", "TTL", "600")
        assert again[0] == wid and int(again[3]) >= 4102444800000  # released, its floor kept
    finally:
        fresh.stop()


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("".join(f"p{i},{i}\n" for i in range(MANY)))
    args = [sys.executable, "-m", "march", "import-floors", "--csv", str(rows), "--data-dir", str(tmp_path / "d")]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MARCH_")}, "PYTHONPATH": str(REPO_ROOT)}
    master, slave = os.openpty()
    try:
        done = subprocess.run(args, stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert done.returncode == 0
    assert f"{MANY}/{MANY}".encode() in shown and b"floors [" in shown
    plain = march("import-floors", "--csv", str(rows), "--data-dir", str(tmp_path / "d"))
    assert plain.returncode == 0 and plain.stderr == ""  # not a terminal: no bar


def test_margin_covers_ids_a_lost_store_handed_out_after_the_backup(tmp_path: Path) -> None:
    node = MarchServer.in_dir(tmp_path / "a")
    backup = tmp_path / "b.jsonl"
    node.start()
    try:
        c = redis.Redis(port=node.port)
        draw(c, "orders", 10)
        ok("backup", str(backup), "--data-dir", str(node.data_dir))
        issued = draw(c, "orders", 500)  # then the store is lost
    finally:
        node.stop()
    fresh = MarchServer.in_dir(tmp_path / "b")
    assert "out of range" in refused("restore", str(backup), "--margin", "-1", "--data-dir", str(fresh.data_dir))
    ok("restore", str(backup), "--margin", "100000", "--data-dir", str(fresh.data_dir))
    fresh.start()
    try:
        assert int(redis.Redis(port=fresh.port).incr("orders")) > max(issued)
    finally:
        fresh.stop()


def test_names_that_are_not_utf8_round_trip(tmp_path: Path) -> None:
    data = tmp_path / "data"
    node = MarchServer.in_dir(tmp_path / "a", extra_args=["--data-dir", str(data)])
    node.start()
    try:
        redis.Redis(port=node.port).set(b"\xffraw", 41)
    finally:
        node.stop()
    backup = tmp_path / "b.jsonl"
    ok("backup", str(backup), "--data-dir", str(data))
    assert '"key_hex":"ff726177"' in backup.read_text()
    fresh = MarchServer.in_dir(tmp_path / "b")
    assert "1 created" in ok("restore", str(backup), "--data-dir", str(fresh.data_dir))
    fresh.start()
    try:
        assert int(redis.Redis(port=fresh.port).incr(b"\xffraw")) > 41
    finally:
        fresh.stop()


@pytest.mark.parametrize("leader", ["/leader", "/leader/2-of-4"], ids=["one-group", "group-2-of-4"])
async def test_a_primary_elected_during_a_restore_stops_it_unwritten(etcd: EtcdCluster, leader: str) -> None:
    """The check when the store is opened is not what protects: each write compares the leader keys
    themselves, every group's (one range compare). A leader key appearing after that check fails
    the write, nothing raised or created under the new primary, and restore says why."""
    prefix = "/march-race" + leader.replace("/", "-")
    keys = KeyPaths.of(prefix)
    config = load(None, {}, {"etcd": etcd.endpoints, "etcd_prefix": prefix})
    client = GrpcEtcd(etcd.endpoints.split(","), timeout=5.0)
    wanted = Backup(
        sequences=[SequenceRecord(b"orders", "sequence", 5000, {}), SequenceRecord(b"new", "sequence", 5000, {})],
        users={"app": "on ~* +@all"},
        workers=[WorkerRecord(b"ns", 0, b"", 0, 10**13, 30)],
        workers_retired=10**13,
    )
    try:
        with pytest.raises(BackupError, match="a primary serves this cluster \\(n1\\)"):
            async with writing(config) as store:  # no primary yet
                await client.put(keys.seq(b"orders"), encode_record(SequenceRecord(b"orders", "sequence", 100, {})))
                await client.put(keys.prefix + leader.encode(), b"n1")  # a primary is elected meanwhile
                await restore(store, wanted)
        stored = await client.get(keys.seq(b"orders"))
        assert stored is not None and stored.value.startswith(encode_ceiling(100))
        assert await client.get(keys.seq(b"new")) is None
        assert await client.get(keys.user("app")) is None
        assert await client.get(keys.workers_retired) is None
        assert await client.get(keys.worker(b"ns", 0)) is None
    finally:
        await client.close()


def test_through_a_standby_follows_moved_to_the_primary(march_cluster: MarchCluster) -> None:
    """`--through` given a standby (any node of the cluster, as a user may well pick): the keys go to
    the primary the MOVED names, said once on stderr; no error with a bytes repr and a bare slot."""
    primary = march_cluster.wait_primary()
    standby = next(n for n in march_cluster.nodes if n is not primary)
    c = redis.Redis(port=primary.port)
    draw(c, "invoices", 3)
    done = march(
        "import-floors", "--csv", "-", "--apply", "--through", f"127.0.0.1:{standby.port}",
        stdin="invoices,1000\nfresh,77\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1 created, 1 raised, 0 unchanged" in done.stdout
    assert f"MOVED: sending those keys to 127.0.0.1:{primary.port}" in done.stderr
    assert "b'" not in done.stdout + done.stderr
    assert int(c.incr("invoices")) == 1001 and int(c.incr("fresh")) == 78

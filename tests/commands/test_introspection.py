"""Refused commands, COMMAND, CONFIG, INFO and CLIENT introspection on a real march process.

Refused commands (they would break uniqueness or make no sense for a sequence) must answer an ``ERR``
that names the command and says why, and change nothing.
"""

from __future__ import annotations

import pytest
import redis
from march_harness import MarchServer, RespConn
from march_harness.compare import outcome, raw, same

from march.errors import REFUSAL_REASONS

pytestmark = pytest.mark.e2e

REFUSED = [
    ("DECR", "{k}"),
    ("DECRBY", "{k}", "1"),
    ("INCRBYFLOAT", "{k}", "1.5"),
    ("DEL", "{k}"),
    ("UNLINK", "{k}"),
    ("EXPIRE", "{k}", "10"),
    ("PEXPIRE", "{k}", "10000"),
    ("EXPIREAT", "{k}", "9999999999"),
    ("PERSIST", "{k}"),
    ("APPEND", "{k}", "x"),
    ("SETRANGE", "{k}", "0", "x"),
    ("GETSET", "{k}", "1"),
    ("GETDEL", "{k}"),
    ("GETEX", "{k}", "EX", "10"),
    ("RENAME", "{k}", "{k}:renamed"),
    ("RENAMENX", "{k}", "{k}:renamed"),
    ("COPY", "{k}", "{k}:renamed"),
    ("SETEX", "{k}", "10", "1"),
    ("SETNX", "{k}", "1"),
    ("MSET", "{k}", "1"),
    ("FLUSHDB",),
    ("FLUSHALL",),
    ("flushall", "ASYNC"),
]


@pytest.mark.parametrize("template", REFUSED, ids=lambda t: " ".join(t[:1]))
def test_refused_commands_say_why_and_change_nothing(mc: redis.Redis, key: str, template: tuple[str, ...]) -> None:
    args = [a.format(k=key) for a in template]
    mc.execute_command("INCRBY", key, "10")
    size = mc.dbsize()
    name = args[0].upper()
    err = outcome(mc, *args)
    assert err == ("error", "ResponseError", f"'{name}' is not supported by March: {REFUSAL_REASONS[name.lower()]}")
    assert REFUSAL_REASONS[name.lower()]  # a reason, not an empty string
    assert mc.execute_command("GET", key) == b"10"
    assert mc.ttl(key) == -1
    assert mc.dbsize() == size
    assert mc.exists(f"{key}:renamed") == 0
    assert mc.execute_command("INCR", key) == 11


def test_refused_has_the_err_prefix(march_proc: MarchServer) -> None:
    (err,) = raw(march_proc.port, ("DECR", "cmd:refused-prefix"))
    assert err.message.startswith("ERR 'DECR' is not supported by March: ")


def test_refused_inside_multi_runs_as_an_error(mc: redis.Redis, key: str) -> None:
    with mc.pipeline(transaction=True) as p:
        p.incr(key).execute_command("DEL", key).incr(key)
        first, deleted, second = p.execute(raise_on_error=False)
    assert (first, second) == (1, 2)
    assert isinstance(deleted, redis.ResponseError) and "not supported by March" in str(deleted)


def test_watch_refused(mc: redis.Redis, key: str) -> None:
    err = outcome(mc, "WATCH", key)
    assert err == (
        "error",
        "ResponseError",
        "'WATCH' is not supported by March: sequences never change except forwards, retry the transaction instead",
    )
    assert mc.execute_command("UNWATCH") is True


# --- COMMAND -----------------------------------------------------------------------------------------


def test_command_count_list_and_table_agree(march_proc: MarchServer) -> None:
    count, names, table = raw(march_proc.port, ("COMMAND", "COUNT"), ("COMMAND", "LIST"), ("COMMAND",))
    assert count == len(table) > 40  # COUNT and COMMAND: the commands; LIST: their subcommands too, as Redis 7
    subcommands = {sub[0] for row in table for sub in row[9]}
    assert {row[0] for row in table} | subcommands == set(names) and len(names) == len(set(names))
    assert {b"client|list", b"config|get", b"command|info"} <= subcommands
    for must in (b"incr", b"incrby", b"get", b"mget", b"set", b"seq.create", b"seq.info", b"seq.list", b"decr", b"del"):
        assert must in names, must


def test_command_info(march_proc: MarchServer) -> None:
    ((incr, mget, nothing),) = raw(march_proc.port, ("COMMAND", "INFO", "incr", "MGET", "nosuch"))
    assert incr[0] == b"incr" and incr[1] == 2 and incr[3:6] == [1, 1, 1]
    assert "write" in incr[2] and "@write" in incr[6]
    assert mget[0] == b"mget" and mget[1] == -2 and mget[3:6] == [1, -1, 1]
    assert nothing is None


def test_command_info_for_every_listed_command(march_proc: MarchServer) -> None:
    (names,) = raw(march_proc.port, ("COMMAND", "LIST"))
    (rows,) = raw(march_proc.port, ("COMMAND", "INFO", *names))
    assert [r[0] for r in rows] == names
    for r in rows:
        assert len(r) == 10 and isinstance(r[1], int) and r[1] != 0


def test_command_docs(march_proc: MarchServer) -> None:
    (docs,) = raw(march_proc.port, ("COMMAND", "DOCS", "incr", "seq.create"))
    docs = dict(zip(docs[::2], docs[1::2], strict=True))
    assert set(docs) == {b"incr", b"seq.create"}
    for doc in docs.values():
        fields = dict(zip(doc[::2], doc[1::2], strict=True))
        assert fields[b"summary"] and fields[b"group"]


def test_command_list_filterby(march_proc: MarchServer) -> None:
    seq, writes = raw(
        march_proc.port,
        ("COMMAND", "LIST", "FILTERBY", "PATTERN", "seq.*"),
        ("COMMAND", "LIST", "FILTERBY", "ACLCAT", "write"),
    )
    assert {b"seq.create", b"seq.info", b"seq.list"} <= set(seq)
    assert all(n.startswith(b"seq.") for n in seq)
    assert b"incr" in writes and b"get" not in writes


def test_command_getkeys(march_proc: MarchServer) -> None:
    got = raw(
        march_proc.port,
        ("COMMAND", "GETKEYS", "MGET", "a", "b"),
        ("COMMAND", "GETKEYS", "incrby", "k", "5"),
        ("COMMAND", "GETKEYS", "SEQ.CREATE", "s", "START", "5"),
        ("COMMAND", "GETKEYS", "DEL", "x", "y"),
    )
    assert got == [[b"a", b"b"], [b"k"], [b"s"], [b"x", b"y"]]


def test_redis_py_command_table(mc: redis.Redis) -> None:
    table = mc.command()
    assert table["incr"]["first_key_pos"] == 1 and table["mget"]["last_key_pos"] == -1


# --- CONFIG --------------------------------------------------------------------------------------------


def test_config_get_pattern(mc: redis.Redis) -> None:
    limits = mc.config_get("max-*")
    assert {"max-clients", "max-args", "max-bulk-len", "max-inline-len", "max-output-buffer"} <= set(limits)
    assert all(k.startswith("max-") for k in limits)
    assert limits["max-args"] == "1048576"


def test_config_get_names(mc: redis.Redis) -> None:
    assert mc.config_get("maxclients") == {"maxclients": "10000"}  # what redis-benchmark asks for
    assert mc.config_get("max_clients") == {"max-clients": "10000"}  # underscores match too
    assert mc.execute_command("CONFIG", "GET", "port", "auto-create") == {
        b"port": str(mc.connection_pool.connection_kwargs["port"]).encode(),
        b"auto-create": b"yes",
    }
    assert mc.config_get("no-such-option") == {}
    everything = mc.config_get("*")
    for option in ("bind", "data-dir", "requirepass", "timeout", "min-batch", "max-batch", "watermark", "max-incrby"):
        assert option in everything, option


# The shared servers: only CONFIG SET calls that fail (and change nothing) here; live changes are in
# tests/commands/test_config_live.py, each on its own server.
@pytest.mark.parametrize(
    "args",
    [
        ("CONFIG", "SET", "no-such-option", "1"),
        ("CONFIG", "SET", "maxclients", "10000", "no-such-option", "1"),
        ("CONFIG", "SET", "maxclients", "10000", "maxclients", "10000"),
        ("CONFIG", "SET", "maxclients"),
        ("CONFIG", "SET", "maxclients", "10000", "timeout"),
        ("CONFIG", "REWRITE"),
        ("CONFIG", "REWRITE", "now"),
        ("CONFIG", "RESETSTAT", "now"),
        ("CONFIG", "NOSUCH"),
    ],
    ids=lambda a: " ".join(a[1:3]) + f" ({len(a)})",
)
def test_config_errors_as_redis(mc: redis.Redis, rc: redis.Redis, args: tuple[str, ...]) -> None:
    assert same(mc, rc, *args)[0] == "error"
    assert mc.config_get("maxclients") == {"maxclients": "10000"}


@pytest.mark.parametrize("option", ["bind", "port", "data-dir", "etcd", "node-id", "tls-port", "enable-debug-command"])
def test_config_set_needs_restart(mc: redis.Redis, option: str) -> None:
    before = mc.config_get(option)
    got = outcome(mc, "CONFIG", "SET", option, "1")
    assert got[0] == "error"
    # Redis' text first (tools match it), then why.
    assert got[2].startswith(
        f"CONFIG SET failed (possibly related to argument '{option}') - can't set immutable config"
    )
    assert "needs a restart" in got[2]
    assert mc.config_get(option) == before


def test_config_set_persistence_as_redis_reports_it(mc: redis.Redis) -> None:
    assert mc.execute_command("CONFIG", "SET", "save", "", "appendonly", "no") == b"OK"  # what harnesses set
    got = outcome(mc, "CONFIG", "SET", "appendonly", "yes")
    assert got[0] == "error" and "immutable" in got[2]


def test_config_help(mc: redis.Redis) -> None:
    lines = mc.execute_command("CONFIG", "HELP")  # Redis' shape: usage lines, each followed by indented text
    assert lines[0] == b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert any(line.startswith(b"SET <name> <value>") for line in lines)
    assert lines[-2:] == [b"HELP", b"    Prints this help."]


# --- INFO and CLIENT -------------------------------------------------------------------------------------


def test_info_sections(march_proc: MarchServer) -> None:
    with RespConn(march_proc.port) as c:
        text = c.call("INFO").decode()
    for section in ("Server", "Clients", "Stats", "Persistence", "Replication", "Keyspace", "Sequences"):
        assert f"# {section}\r\n" in text, section


def test_info_fields(mc: redis.Redis, key: str) -> None:
    mc.execute_command("INCR", key)
    info = mc.info("all")
    assert info["redis_version"] and info["tcp_port"] == mc.connection_pool.connection_kwargs["port"]
    assert info["connected_clients"] >= 1
    assert info["total_commands_processed"] > 0
    assert info["role"] == "master"
    assert info["sequences"] == mc.dbsize() and info["ids_issued"] >= 1
    assert info["auto_create"] == "yes"


def test_info_fields_ops_tools_read(mc: redis.Redis) -> None:
    """What redis-cli --stat, redis_exporter and dashboards read, with real values."""
    info = mc.info("everything")
    assert info["used_memory"] > 1 << 20 and info["used_memory_human"][-1] in "KMG"
    assert info["used_memory_peak"] >= info["used_memory_rss"] > 0
    assert info["maxmemory"] == 0 and info["maxmemory_policy"] == "noeviction"
    assert info["used_cpu_user"] > 0 and info["used_cpu_sys"] >= 0
    assert info["instantaneous_ops_per_sec"] >= 0 and info["blocked_clients"] == 0
    for name in ("loading", "rdb_bgsave_in_progress", "aof_rewrite_in_progress", "expired_keys", "evicted_keys"):
        assert info[name] == 0, name
    assert info["total_connections_received"] >= 1


def test_info_one_section(mc: redis.Redis) -> None:
    seq = mc.info("sequences")
    assert {"sequences", "ids_issued", "waits", "wait_timeouts"} <= set(seq)
    assert "redis_version" not in seq
    assert "connected_clients" in mc.info("clients") and "tcp_port" not in mc.info("clients")


def test_client_list_and_info(mc: redis.Redis) -> None:
    mc.client_setname("lister")
    me = mc.client_info()
    assert me["name"] == "lister" and int(me["id"]) == mc.client_id()
    names = [c["name"] for c in mc.client_list()]
    assert "lister" in names

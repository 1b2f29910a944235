"""Server commands: COMMAND, CONFIG GET, INFO, TIME, SHUTDOWN.

``COMMAND`` is generated from the registry in Redis 7's shape (name, arity, flags, first key, last
key, step, ACL categories, tips, key specs, subcommands): cluster clients read key positions from
it. ``CONFIG`` is a read-only view of the Config (``CONFIG SET`` is refused: restart to change).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from typing import TYPE_CHECKING, Any

from .. import errors
from ..app import REDIS_COMPAT_VERSION, VERSION
from ..errors import CommandError
from ..glob import compile_glob
from ..resp import Verbatim
from ..store.base import StoreError
from .registry import REGISTRY, CommandSpec, check_subcommand, command, lookup

if TYPE_CHECKING:
    from ..client import Client

_ADMIN = ("@admin", "@slow", "@dangerous")


def _key_specs(spec: CommandSpec) -> list[Any]:
    first, last, step = spec.keys
    if first == 0:
        return []
    flags = ["RW", "UPDATE"] if "write" in spec.flags else ["RO", "ACCESS"]
    last_key = last - first if last >= 0 else last
    return [
        {
            b"flags": flags,
            b"begin_search": {b"type": b"index", b"spec": {b"index": first}},
            b"find_keys": {b"type": b"range", b"spec": {b"lastkey": last_key, b"keystep": step, b"limit": 0}},
        }
    ]


def _info(spec: CommandSpec) -> list[Any]:
    first, last, step = spec.keys
    subs = [
        [f"{spec.name}|{name}".encode(), arity, [], 0, 0, 0, list(spec.categories_of(name)), [], [], []]
        for name, arity, _ in spec.subcommands
    ]
    return [
        spec.name.encode(),
        spec.arity,
        list(spec.flags),
        first,
        last,
        step,
        list(spec.categories),
        [],
        _key_specs(spec),
        subs,
    ]


def _docs(spec: CommandSpec) -> dict[bytes, Any]:
    doc: dict[bytes, Any] = {b"summary": spec.summary.encode(), b"since": b"0.1.0", b"group": spec.group.encode()}
    if spec.subcommands:
        doc[b"subcommands"] = {
            f"{spec.name}|{name}".encode(): {
                b"summary": text.encode(),
                b"since": b"0.1.0",
                b"group": spec.group.encode(),
            }
            for name, _, text in spec.subcommands
        }
    return doc


@command(
    "command",
    -1,
    ("loading", "stale"),
    ("@slow", "@connection"),
    summary="The command table: COMMAND [COUNT | INFO name... | DOCS name... | LIST | GETKEYS cmd args...].",
    group="server",
    subcommands=(
        ("count", 2, "How many commands."),
        ("info", -2, "Details of commands."),
        ("docs", -2, "Documentation of commands."),
        ("list", -2, "Command names."),
        ("getkeys", -3, "The keys of a full command."),
    ),
)
def command_(client: Client, args: list[bytes]) -> Any:
    if len(args) == 1:
        return [_info(s) for s in REGISTRY.values()]
    sub = check_subcommand("command", args)
    if sub == b"count" and len(args) == 2:
        return len(REGISTRY)
    if sub == b"info":
        if len(args) == 2:
            return [_info(s) for s in REGISTRY.values()]
        found = [lookup(a) for a in args[2:]]
        return [_info(s) if s is not None else None for s in found]
    if sub == b"docs":
        specs = list(REGISTRY.values()) if len(args) == 2 else [s for s in map(lookup, args[2:]) if s is not None]
        return {s.name.encode(): _docs(s) for s in specs}
    if sub == b"list":
        names = [s.name.encode() for s in REGISTRY.values()]
        if len(args) == 2:
            return names
        if len(args) == 5 and args[2].lower() == b"filterby":
            how, what = args[3].lower(), args[4]
            if how == b"pattern":
                glob = compile_glob(what, nocase=True)  # Redis: case-insensitive, like command names
                return [n for n in names if glob.match(n)]
            if how == b"aclcat":
                cat = "@" + what.decode().lower()
                return [s.name.encode() for s in REGISTRY.values() if cat in s.categories]
            if how == b"module":
                return []
        raise CommandError(errors.SYNTAX)
    if sub == b"getkeys" and len(args) >= 3:
        spec = lookup(args[2])
        if spec is None:
            raise CommandError(errors.GETKEYS_NO_COMMAND)
        if not spec.arity_ok(len(args) - 2):
            raise CommandError(errors.GETKEYS_ARITY)
        positions = spec.key_positions(len(args) - 2)
        if not positions:
            raise CommandError(errors.GETKEYS_NO_KEYS)
        return [args[2 + p] for p in positions]
    if sub == b"help":
        return [b"COMMAND [COUNT | INFO name... | DOCS name... | LIST [FILTERBY ...] | GETKEYS cmd args...]"]
    raise CommandError(errors.UNKNOWN_SUBCOMMAND.format(args[1].decode("utf-8", "replace"), "COMMAND"))


@command(
    "config",
    -2,
    ("admin", "noscript", "loading", "stale"),
    _ADMIN,
    summary="CONFIG GET pattern...: the running configuration (read-only).",
    group="server",
    subcommands=(("get", -3, "Options matching glob patterns."),),
)
def config(client: Client, args: list[bytes]) -> Any:
    sub = args[1].lower()
    if sub not in (b"set", b"rewrite", b"resetstat"):
        sub = check_subcommand("config", args)
    if sub == b"get":
        if len(args) < 3:
            raise errors.wrong_arity("config|get")
        items = client.app.config.public_items()
        items["maxclients"] = items["max-clients"]
        items["save"] = ""  # tools such as redis-benchmark ask; persistence is always on, per write
        items["appendonly"] = "no"
        out: dict[bytes, bytes] = {}
        for pattern in args[2:]:
            glob = compile_glob(pattern, nocase=True)  # Redis matches option names without case
            for name, value in items.items():
                if glob.match(name.encode()) or glob.match(name.replace("-", "_").encode()):
                    out[name.encode()] = value.encode()
        return out
    if sub in (b"set", b"rewrite", b"resetstat"):
        raise CommandError(errors.CONFIG_READONLY.format(sub.decode().upper()))
    raise CommandError(errors.UNKNOWN_SUBCOMMAND.format(args[1].decode("utf-8", "replace"), "CONFIG"))


@command(
    "time", 1, ("loading", "stale", "fast"), ("@fast",), summary="Server time: [seconds, microseconds].", group="server"
)
def time_(client: Client, args: list[bytes]) -> Any:
    now = time.time_ns() // 1000
    return [b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)]


@command(
    "shutdown",
    -1,
    ("admin", "noscript", "loading", "stale", "no_multi", "allow_busy"),
    _ADMIN,
    queued=False,
    summary="Stop the server gracefully (state is always durable; NOSAVE/SAVE are accepted).",
    group="server",
)
def shutdown(client: Client, args: list[bytes]) -> Any:
    for a in args[1:]:
        if a.lower() not in (b"nosave", b"save", b"now", b"force", b"abort"):
            raise CommandError(errors.SYNTAX)
        if a.lower() == b"abort":
            raise CommandError(errors.NO_SHUTDOWN)
    client.app.request_shutdown()
    client.close_after = True
    return _NO_REPLY


class _NoReply:
    """SHUTDOWN sends no reply when it succeeds: the connection just closes, as in Redis."""


_NO_REPLY = _NoReply()
NO_REPLY = _NO_REPLY

_SECTIONS = ("server", "clients", "stats", "persistence", "replication", "keyspace", "sequences", "cluster")


@command(
    "info",
    -1,
    ("loading", "stale"),
    ("@slow", "@dangerous"),
    summary="INFO [section...]: server, clients, stats, persistence, replication, keyspace, sequences.",
    group="server",
)
def info(client: Client, args: list[bytes]) -> Any:
    wanted = [a.decode("utf-8", "replace").lower() for a in args[1:]]
    if not wanted or any(w in ("all", "everything", "default") for w in wanted):
        wanted = list(_SECTIONS)
    sections = [s for s in _SECTIONS if s in wanted]
    if "keyspace" in sections or "sequences" in sections:
        return _info_counting(client, sections)  # these read the number of sequences from the store
    return _info_text(client, sections, None)


async def _info_counting(client: Client, sections: list[str]) -> Any:
    try:
        count: int | None = await asyncio.wait_for(client.app.keyspace.count(), client.app.config.max_wait)
    except (StoreError, TimeoutError):
        count = None  # the store did not answer: INFO still answers, without the count
    return _info_text(client, sections, count)


def _info_text(client: Client, sections: list[str], count: int | None) -> Verbatim:
    parts = []
    for section in sections:
        lines = _section(client, section, count)
        parts.append(f"# {section.capitalize()}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in lines.items()))
    return Verbatim("\r\n".join(parts))


def _section(client: Client, section: str, count: int | None) -> dict[str, Any]:
    app = client.app
    state = app.group.state
    if section == "server":
        up = time.monotonic() - app.started_mono
        return {
            "redis_version": REDIS_COMPAT_VERSION,
            "march_version": VERSION,
            "redis_mode": "cluster" if app.cluster else "standalone",
            "os": f"{platform.system()} {platform.release()} {platform.machine()}",
            "arch_bits": 64,
            "process_id": os.getpid(),
            "python_version": sys.version.split()[0],
            "run_id": app.run_id,
            "tcp_port": app.port,
            "uptime_in_seconds": int(up),
            "uptime_in_days": int(up // 86400),
            "executable": sys.argv[0],
            "config_file": app.config.config_file,
        }
    if section == "clients":
        return {
            "connected_clients": len(app.clients),
            "maxclients": app.max_clients,
            "blocked_clients": 0,
            "client_output_limit_disconnections": app.stats.output_closed,
        }
    if section == "stats":
        s = app.stats
        return {
            "total_connections_received": s.connections,
            "total_commands_processed": s.commands,
            "rejected_connections": s.rejected,
            "total_error_replies": s.errors,
            "protocol_errors": s.protocol_errors,
            "idle_timeouts": s.timeouts_closed,
            "acl_access_denied_auth": s.denied_auth,
            "acl_access_denied_cmd": s.denied_command,
            "acl_access_denied_key": s.denied_key,
            "acl_access_denied_channel": 0,
        }
    if section == "persistence":
        gens = list(app.keyspace.generators.values())
        out: dict[str, Any] = {"loading": 0}
        out.update(app.store.describe())
        out["store_writes"] = sum(g.writes for g in gens)
        out["store_write_failures"] = sum(g.write_failures for g in gens)
        out["aof_enabled"] = 0
        out["rdb_changes_since_last_save"] = 0
        return out
    if section == "replication":
        return _replication(client)
    if section == "keyspace":
        return {"db0": f"keys={count},expires=0,avg_ttl=0"} if count else {}
    if section == "sequences":
        gens = list(app.keyspace.generators.values())
        return {
            "sequences": count if count is not None else "?",
            "active_sequences": len(gens),
            "ids_issued": sum(g.issued for g in gens),
            "waits": sum(g.waits for g in gens),
            "wait_timeouts": sum(g.wait_timeouts for g in gens),
            "auto_create": "yes" if app.config.auto_create else "no",
            "min_batch": app.config.min_batch,
            "max_batch": app.config.max_batch,
        }
    if section == "cluster":
        member = app.group.member
        if member is None:
            return {"cluster_enabled": 0}
        return {
            "cluster_enabled": 1,
            "march_node_id": member.me.id,
            "march_advertise": member.me.addr,
            "march_role": member.election.role,
            "march_phase": state.phase.value,
            "etcd_prefix": app.config.etcd_prefix,
            "lease_ttl": member.ttl,
            "lease_remaining_ms": int(state.remaining() * 1000),
            "promotions": state.promotions,
            "demotions": state.demotions,
            "last_change": state.last_change,
        }
    return {}


def _replication(client: Client) -> dict[str, Any]:
    """Redis' shape: role:master with its standbys as slaves, or role:slave with the primary's address."""
    member = client.app.group.member
    state = client.app.group.state
    if member is None:
        return {"role": "master", "connected_slaves": 0}
    me = member.me
    if state.leading:
        standbys = [n for n in member.registry.topology.standbys() if n.id != me.id]
        out: dict[str, Any] = {"role": "master", "connected_slaves": len(standbys)}
        for i, n in enumerate(standbys):
            out[f"slave{i}"] = f"ip={n.host},port={n.port},state=online,offset=0,lag=0"
        out["lease_remaining_ms"] = int(state.remaining() * 1000)
        return out
    primary = member.registry.topology.primary
    return {
        "role": "slave",
        "master_host": primary.host if primary else "",
        "master_port": primary.port if primary else 0,
        "master_link_status": "up" if primary and primary.id != me.id else "down",
        "march_role": member.election.role,
    }

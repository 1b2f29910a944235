"""Server commands: COMMAND, CONFIG, INFO, TIME, SHUTDOWN.

``COMMAND`` is generated from the command table in Redis 7's shape (name, arity, flags, first key, last
key, step, ACL categories, tips, key specs, subcommands): cluster clients read key positions from
it.

``CONFIG SET`` changes only the options ``config.OPTIONS`` declares live, all or none, on this node
only (a cluster's nodes are each set, or share a config file); it never changes what is persisted
(no option can lower a stored ceiling). ``CONFIG REWRITE`` writes what it changed into the config
file. ``INFO`` has the fields ``redis-cli --stat`` and monitoring tools read, with true values
(never made-up figures): what March does not have (expiry, eviction, replication offsets) is 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import errors
from ..config import Config, ConfigError, find_option, parse_value, rewrite_file
from ..counters import CommandCounts
from ..errors import CommandError
from ..glob import compile_glob
from ..resp import Verbatim
from ..store.base import StoreError
from ..version import REDIS_COMPAT_VERSION, VERSION
from .args import Args
from .forward import readiness
from .table import COMMANDS, CommandSpec, Secrets, Subcommand, command, container, lookup

if TYPE_CHECKING:
    from ..app import App
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
        [
            f"{spec.name}|{sub.name}".encode(),
            sub.arity,
            list(spec.flags_of(sub.name)),
            0,
            0,
            0,
            list(spec.categories_of(sub.name)),
            [],
            [],
            [],
        ]
        for sub in spec.subcommands
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
            f"{spec.name}|{sub.name}".encode(): {
                b"summary": sub.summary.encode(),
                b"since": b"0.1.0",
                b"group": spec.group.encode(),
            }
            for sub in spec.subcommands
        }
    return doc


def _command_all(client: Client, args: list[bytes]) -> Any:
    return [_info(s) for s in COMMANDS.values()]


def _command_count(client: Client, args: list[bytes]) -> Any:
    return len(COMMANDS)


def _command_info(client: Client, args: list[bytes]) -> Any:
    names = Args(args, 2).rest()
    if not names:
        return _command_all(client, args)
    return [_info(s) if s is not None else None for s in map(lookup, names)]


def _command_docs(client: Client, args: list[bytes]) -> Any:
    names = Args(args, 2).rest()
    specs = [s for s in map(lookup, names) if s is not None] if names else list(COMMANDS.values())
    return {s.name.encode(): _docs(s) for s in specs}


def _command_list(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    if not cursor.more():
        return [s.name.encode() for s in COMMANDS.values()]
    cursor.choice(b"filterby")
    how = cursor.choice(b"pattern", b"aclcat", b"module")
    what = cursor.next()
    cursor.finish()
    if how == b"pattern":
        glob = compile_glob(what, nocase=True)  # Redis: case-insensitive, like command names
        return [s.name.encode() for s in COMMANDS.values() if glob.match(s.name.encode())]
    if how == b"aclcat":
        cat = "@" + what.decode("utf-8", "replace").lower()
        return [s.name.encode() for s in COMMANDS.values() if cat in s.categories]
    return []


def _command_getkeys(client: Client, args: list[bytes]) -> Any:
    carried = Args(args, 2).rest()
    spec = lookup(carried[0])
    if spec is None:
        raise CommandError(errors.GETKEYS_NO_COMMAND)
    if not spec.arity_ok(len(carried)):
        raise CommandError(errors.GETKEYS_ARITY)
    positions = spec.key_positions(len(carried))
    if not positions:
        raise CommandError(errors.GETKEYS_NO_KEYS)
    return [carried[p] for p in positions]


container(
    "command",
    ("loading", "stale"),
    ("@slow", "@connection", "@app"),
    (
        Subcommand("count", 2, "How many commands.", _command_count),
        Subcommand("info", -2, "Details of commands.", _command_info, "INFO [<command-name> ...]"),
        Subcommand("docs", -2, "Documentation of commands.", _command_docs, "DOCS [<command-name> ...]"),
        Subcommand(
            "list",
            -2,
            "Command names.",
            _command_list,
            "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
        ),
        # COMMAND GETKEYS AUTH pw: the carried command's own secrets
        Subcommand(
            "getkeys",
            -3,
            "The keys of a full command.",
            _command_getkeys,
            "GETKEYS <full-command>",
            secrets=Secrets(command=2),
        ),
    ),
    summary="The command table: COMMAND [COUNT | INFO name... | DOCS name... | LIST | GETKEYS cmd args...].",
    group="server",
    bare=_command_all,
)


def _secret_option(name: bytes) -> bool:
    """Whether CONFIG SET's value for ``name`` is a password (MONITOR and SLOWLOG show it redacted):
    an option declared ``secret``, or any name that looks like one (a mistyped ``requirepas`` too)."""
    option = find_option(name.decode("utf-8", "replace"))
    low = name.lower()
    return (option is not None and option.secret) or b"pass" in low or b"auth" in low


def _config_resetstat(client: Client, args: list[bytes]) -> Any:
    reset_stats(client.app)
    return "OK"


_CONFIG_FLAGS = ("admin", "noscript", "loading", "stale")


def _config_get(client: Client, args: list[bytes]) -> dict[bytes, bytes]:
    items = client.app.config.public_items()
    items["maxclients"] = items["max-clients"]
    items["save"] = ""  # tools such as redis-benchmark ask; persistence is always on, per write
    items["appendonly"] = "no"
    out: dict[bytes, bytes] = {}
    for pattern in Args(args, 2).rest():
        glob = compile_glob(pattern, nocase=True)  # Redis matches option names without case
        for name, value in items.items():
            if glob.match(name.encode()) or glob.match(name.replace("-", "_").encode()):
                out[name.encode()] = value.encode()
    return out


# Redis' persistence options, as CONFIG GET reports them: setting that value (test harnesses set
# ``save ""``) is accepted and changes nothing; any other value is refused.
_PERSISTENCE = {b"save": b"", b"appendonly": b"no"}


def _config_set(client: Client, args: list[bytes]) -> Any:
    """All or nothing, as in Redis 7: every name known, live and given once, every value parsed,
    the whole new Config validated (``Config.__post_init__``) before anything is applied."""
    cursor = Args(args, 2)
    pairs: list[tuple[bytes, bytes]] = []
    while cursor.more():
        pairs.append((cursor.next(), cursor.next()))  # a name without its value: Redis 7.0's syntax error
    for raw, _ in pairs:  # an unknown name is reported first, wherever it is (Redis' order)
        if raw.lower() not in _PERSISTENCE and find_option(raw.decode("utf-8", "replace")) is None:
            raise CommandError(errors.CONFIG_SET_UNKNOWN.format(raw.decode("utf-8", "replace")))
    changes: dict[str, Any] = {}
    given: dict[str, str] = {}  # option name -> the name as the client wrote it (for errors)
    for raw, raw_value in pairs:
        name = raw.decode("utf-8", "replace")
        if raw.lower() in _PERSISTENCE:
            if raw_value.lower() != _PERSISTENCE[raw.lower()]:
                raise CommandError(errors.CONFIG_SET_PERSISTENCE.format(name))
            continue
        option = find_option(name)
        assert option is not None
        if option.name in changes:
            raise CommandError(errors.CONFIG_SET_DUPLICATE.format(name))
        if not option.live:
            raise CommandError(errors.CONFIG_SET_RESTART.format(name, option.restart))
        try:
            text = raw_value.decode("utf-8")  # CONFIG REWRITE writes it into a UTF-8 file
            changes[option.name] = parse_value(option, text, "value")
        except UnicodeDecodeError:
            raise CommandError(errors.CONFIG_SET_INVALID.format(name, errors.CONFIG_NOT_UTF8)) from None
        except ConfigError as exc:
            raise CommandError(errors.CONFIG_SET_INVALID.format(name, exc)) from None
        given[option.name] = name
    if not changes:
        return "OK"
    try:
        new = dataclasses.replace(client.app.config, **changes)
    except ConfigError as exc:  # e.g. min_batch above max_batch: blame the option the message names
        blamed = next((g for n, g in given.items() if n in str(exc)), next(iter(given.values())))
        raise CommandError(errors.CONFIG_SET_INVALID.format(blamed, exc)) from None
    if "requirepass" in changes:  # the stored default user's password, first: what OK reports holds on every node
        return _set_requirepass(client, new)
    client.app.reconfigure(new)
    return "OK"


async def _set_requirepass(client: Client, new: Config) -> str:
    await client.app.node.shared_users.set_default_password(new.requirepass)
    client.app.reconfigure(new)
    return "OK"


_rewriting = asyncio.Lock()  # one CONFIG REWRITE at a time: the last one started is the file's


def _config_rewrite(client: Client, args: list[bytes]) -> Any:
    app = client.app
    if not app.config.config_file:
        raise CommandError(errors.CONFIG_NO_FILE)
    return _rewrite(client)


async def _rewrite(client: Client) -> str:
    """Only what CONFIG SET changed is written (not the flags or MARCH_* variables the server was
    started with): a restart from the file then has the live changes, and nothing else moved."""
    async with _rewriting:
        app = client.app
        values = {name: getattr(app.config, name) for name in sorted(app.config_changed)}
        try:
            await asyncio.to_thread(rewrite_file, app.config.config_file, values)
        except OSError as exc:  # Redis' wording: "Rewriting config file: Permission denied"
            raise CommandError(errors.CONFIG_REWRITE_FAILED.format(exc.strerror or exc)) from None
        except ConfigError as exc:
            raise CommandError(errors.CONFIG_REWRITE_FAILED.format(exc)) from None
    return "OK"


container(
    "config",
    (),
    ("@slow",),
    (
        Subcommand(
            "get",
            -3,
            "Options matching glob patterns.",
            _config_get,
            "GET <pattern> [<pattern> ...]",
            categories=_ADMIN,
            flags=_CONFIG_FLAGS,
        ),
        Subcommand(
            "set",
            -4,
            "Change live options, all or none (this node only).",
            _config_set,
            "SET <name> <value> [<name> <value> ...]",
            categories=_ADMIN,
            flags=_CONFIG_FLAGS,
            secrets=Secrets(start=2, pairs=_secret_option),
        ),
        Subcommand(
            "rewrite",
            2,
            "Write the options changed by CONFIG SET into the config file.",
            _config_rewrite,
            categories=_ADMIN,
            flags=_CONFIG_FLAGS,
        ),
        Subcommand(
            "resetstat",
            2,
            "Reset the statistics of INFO (stats, commandstats, errorstats) and LATENCY HISTOGRAM.",
            _config_resetstat,
            categories=_ADMIN,
            flags=_CONFIG_FLAGS,
        ),
    ),
    summary="CONFIG GET pattern... / SET name value... / REWRITE / RESETSTAT: the running configuration.",
    group="server",
    help_categories=("@slow",),
)


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
    for option in Args(args).options(b"nosave", b"save", b"now", b"force", b"abort"):
        if option == b"abort":
            raise CommandError(errors.NO_SHUTDOWN)
    client.app.request_shutdown()
    client.close_after = True
    return _NO_REPLY


class _NoReply:
    """SHUTDOWN sends no reply when it succeeds: the connection just closes, as in Redis."""


_NO_REPLY = _NoReply()
NO_REPLY = _NO_REPLY

# Redis' order, then March's own. INFO, INFO default: all but commandstats (as in Redis).
_SECTIONS = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "commandstats",
    "errorstats",
    "keyspace",
    "sequences",
    "cluster",
)
_DEFAULT = tuple(s for s in _SECTIONS if s != "commandstats")


@command(
    "info",
    -1,
    ("loading", "stale"),
    ("@slow", "@dangerous"),
    summary="INFO [section...]: server, clients, memory, persistence, stats, replication, cpu, keyspace, "
    "sequences, cluster.",
    group="server",
)
def info(client: Client, args: list[bytes]) -> Any:
    wanted = [a.decode("utf-8", "replace").lower() for a in Args(args).rest()]
    if any(w in ("all", "everything") for w in wanted):
        wanted = list(_SECTIONS)
    elif not wanted or "default" in wanted:
        wanted += _DEFAULT
    sections = [s for s in _SECTIONS if s in wanted]
    if "keyspace" in sections or "sequences" in sections:
        return _info_counting(client, sections)  # these read the number of sequences from the store
    return _info_text(client, sections, None)


async def _info_counting(client: Client, sections: list[str]) -> Any:
    """The count is in memory while this node serves (``Keyspace.count``); a standby asks the store,
    at most once a second, and waits at most ``max_wait``."""
    try:
        count: int | None = await client.app.keyspace.count()
    except (StoreError, CommandError):
        count = None  # the store did not answer: INFO still answers, without the count
    return _info_text(client, sections, count)


def _info_text(client: Client, sections: list[str], count: int | None) -> Verbatim:
    parts = []
    for section in sections:
        lines = _section(client, section, count)
        parts.append(f"# {section.capitalize()}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in lines.items()))
    return Verbatim("\r\n".join(parts))


def _section(client: Client, section: str, count: int | None) -> dict[str, Any]:
    return _SECTION_FIELDS[section](client, count)


def _server(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
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
        "multiplexing_api": "uvloop",
    }


def _clients(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
    return {
        "connected_clients": len(app.clients),
        "maxclients": app.max_clients,
        "blocked_clients": 0,
        "client_output_limit_disconnections": app.stats.output_closed,
        "client_query_buffer_budget_disconnections": app.stats.input_closed,
    }


def _cpu(client: Client, count: int | None) -> dict[str, Any]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "used_cpu_sys": f"{own.ru_stime:.6f}",
        "used_cpu_user": f"{own.ru_utime:.6f}",
        "used_cpu_sys_children": f"{children.ru_stime:.6f}",
        "used_cpu_user_children": f"{children.ru_utime:.6f}",
    }


def _commandstats(client: Client, count: int | None) -> dict[str, Any]:
    return {
        f"cmdstat_{name}": f"calls={c.calls},usec={c.usec},usec_per_call={c.usec / c.calls if c.calls else 0:.2f},"
        f"rejected_calls={c.rejected},failed_calls={c.failed}"
        for name, c in _command_counts(client.app).items()
        if c.calls or c.rejected
    }


def _errorstats(client: Client, count: int | None) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for counts in _command_counts(client.app).values():
        for kind, n in counts.errors.items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {f"errorstat_{kind}": f"count={n}" for kind, n in sorted(kinds.items()) if n}


def _stats(client: Client, count: int | None) -> dict[str, Any]:
    s = client.app.stats
    return {
        "total_connections_received": s.connections,
        "total_commands_processed": s.commands,
        "instantaneous_ops_per_sec": client.app.ops_rate.rate(),
        "rejected_connections": s.rejected,
        "total_error_replies": s.errors,
        "protocol_errors": s.protocol_errors,
        "idle_timeouts": s.timeouts_closed,
        "acl_access_denied_auth": s.denied_auth,
        "acl_access_denied_cmd": s.denied_command,
        "acl_access_denied_key": s.denied_key,
        "acl_access_denied_channel": s.denied_channel,
        "expired_keys": 0,  # sequences never expire
        "evicted_keys": 0,  # nor are they evicted
        **_forwarding(client.app),
    }


def _forwarding(app: App) -> dict[str, Any]:
    """Requests relayed to other primaries (redirect forward, ``commands.forward``)."""
    f = app.links.stats
    return {
        "forwarded_requests": f.forwarded,
        "forward_lost_replies": f.lost,
        "forward_link_failures": f.failed,
        "forward_links_opened": f.opened,
        "forward_link_peers_unproven": f.unproven,
        "forward_link_proofs_failed": f.proofs_failed,
    }


def _persistence(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
    gens = list(app.keyspace.generators.values())
    out: dict[str, Any] = {"loading": 0, "async_loading": 0}
    out.update(app.store.describe())
    out["store_writes"] = sum(g.writes for g in gens)
    out["store_write_failures"] = sum(g.write_failures for g in gens)
    out["rdb_changes_since_last_save"] = 0  # every write is durable before its reply
    out["rdb_bgsave_in_progress"] = 0  # redis-cli --stat reads these two
    out["aof_enabled"] = 0
    out["aof_rewrite_in_progress"] = 0
    return out


def _keyspace(client: Client, count: int | None) -> dict[str, Any]:
    return {"db0": f"keys={count},expires=0,avg_ttl=0"} if count else {}


def _sequences(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
    gens = list(app.keyspace.generators.values())
    return {
        "sequences": count if count is not None else "?",
        "active_sequences": len(gens),
        "ids_issued": sum(g.issued for g in gens),
        "waits": sum(g.waits for g in gens),
        "wait_timeouts": sum(g.wait_timeouts for g in gens),
        "idle_dropped": sum(g.keyspace.idle.dropped for g in app.groups),  # idle sequences gone from memory
        "auto_create": "yes" if app.config.auto_create else "no",
        "min_batch": app.config.min_batch,
        "max_batch": app.config.max_batch,
    }


def _cluster(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
    member, state = app.group.member, app.group.state
    ready = readiness(app)  # (forwarding: ``commands.forward``; for a Redis-only health check)
    if member is None:
        return {"cluster_enabled": 0, "march_ready": int(ready is None)}
    return {
        "cluster_enabled": 1,
        "march_redirect": app.config.redirect,
        "march_ready": int(ready is None),
        "march_not_ready_because": ready or "",
        "march_node_id": member.me.id,
        "march_advertise": member.me.addr,
        "march_forward_address": member.me.forward_addr,  # what Sentinel replies name ("": no forward_port)
        "march_role": member.node.loop.describe()[0],  # primary if it leads any group
        "march_phase": state.phase.value,
        "etcd_prefix": app.config.etcd_prefix,
        "lease_ttl": member.ttl,
        "lease_remaining_ms": int(state.remaining() * 1000),
        "promotions": state.promotions,
        "demotions": state.demotions,
        "last_change": state.last_change,
        **_groups_led(app),
    }


def _groups_led(app: App) -> dict[str, Any]:
    """Several leadership groups: how many, and which ones this node leads (INFO cluster)."""
    if len(app.groups) == 1:
        return {}
    return {
        "march_groups": len(app.groups),
        "march_groups_led": ",".join(str(g.index) for g in app.groups if g.state.leading),
    }


def _command_counts(app: App) -> dict[str, CommandCounts]:
    """Per command, since the last CONFIG RESETSTAT (the counters /metrics exports are never reset:
    Prometheus wants them monotonic; ``CommandStats.since_reset`` subtracts the snapshot)."""
    return {stats.name: stats.since_reset() for stats in app.metrics.commands.all()}


def reset_stats(app: App) -> None:
    """CONFIG RESETSTAT, as Redis: INFO's counters (stats, commandstats with rejected and failed
    calls, errorstats) and the LATENCY HISTOGRAM latencies from zero."""
    app.stats.reset()
    app.ops_rate.reset()
    app.metrics.commands.reset_view()


def _memory() -> dict[str, Any]:
    """The process's memory, as Redis names it. ``used_memory`` is the resident set (Python has no
    cheap count of its own allocations): what the machine gives this process, the figure to watch."""
    rss = _rss_bytes()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    peak = max(peak, rss)
    return {
        "used_memory": rss,
        "used_memory_human": _human(rss),
        "used_memory_rss": rss,
        "used_memory_rss_human": _human(rss),
        "used_memory_peak": peak,
        "used_memory_peak_human": _human(peak),
        "maxmemory": 0,
        "maxmemory_human": "0B",
        "maxmemory_policy": "noeviction",
        "mem_allocator": "libc",
    }


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:  # Linux: pages, the second field resident
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _human(n: int) -> str:
    """Redis' bytesToHuman: 100B, 4.00K, 2.50M, 1.00G."""
    for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def _replication(client: Client) -> dict[str, Any]:
    """Redis' shape: role:master with its standbys as slaves, or role:slave with the primary's address."""
    member = client.app.group.member
    state = client.app.group.state
    if member is None:
        return {"role": "master", "connected_slaves": 0}
    me = member.me
    if any(g.state.leading for g in client.app.groups):  # several groups: master of at least one
        standbys = [n for n in member.directory.topology.standbys() if n.id != me.id]
        out: dict[str, Any] = {"role": "master", "connected_slaves": len(standbys)}
        for i, n in enumerate(standbys):
            out[f"slave{i}"] = f"ip={n.host},port={n.port},state=online,offset=0,lag=0"
        out["lease_remaining_ms"] = int(state.remaining() * 1000)
        return out
    primary = member.directory.topology.primary
    return {
        "role": "slave",
        "master_host": primary.host if primary else "",
        "master_port": primary.port if primary else 0,
        "master_link_status": "up" if primary and primary.id != me.id else "down",
        "march_role": member.node.loop.describe()[0],  # primary if it leads any group
    }


# INFO's sections: each one's fields, from the client (and the number of sequences, when counted)
_SECTION_FIELDS: dict[str, Callable[[Client, int | None], dict[str, Any]]] = {
    "server": _server,
    "clients": _clients,
    "memory": lambda client, count: _memory(),
    "persistence": _persistence,
    "stats": _stats,
    "replication": lambda client, count: _replication(client),
    "cpu": _cpu,
    "commandstats": _commandstats,
    "errorstats": _errorstats,
    "keyspace": _keyspace,
    "sequences": _sequences,
    "cluster": _cluster,
}

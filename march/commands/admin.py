"""Server commands: COMMAND, CONFIG, INFO, TIME, SHUTDOWN.

``COMMAND`` is generated from the command table in Redis 7's shape (name, arity, flags, first key, last
key, step, ACL categories, tips, key specs, subcommands; RESP3 sets where Redis sends sets): cluster
clients read key positions from it. ``COMMAND LIST`` names subcommands too (``client|list``), and
``COMMAND INFO`` / ``DOCS`` take them, as Redis 7.0.

``CONFIG SET`` changes only the options ``config.OPTIONS`` declares live, all or none, on this node
only (a cluster's nodes are each set, or share a config file); it never changes what is persisted
(no option can lower a stored ceiling). ``CONFIG REWRITE`` writes what it changed into the config
file. ``INFO`` has Redis 7.0's sections, titles and order (then March's ``sequences``) and the
fields ``redis-cli --stat`` and monitoring tools read, with true values (never made-up figures):
what March does not have (expiry, eviction, a replication stream) is 0; ``replication`` has every
field of Redis 7.0's (``_replication`` says what each means here). Every check of these shapes is
against a real redis-server (tests/commands/test_redis_fields.py, tests/cluster/test_info_replication.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import os
import platform
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from march import build, errors
from march.commands.args import Args
from march.commands.table import (
    COMMANDS,
    NO_REPLY,
    CommandSpec,
    Secrets,
    Subcommand,
    command,
    container,
    lookup,
    lookup_full,
)
from march.config import Config, ConfigError, ConfigTypeError, find_option, parse_value, rewrite_file
from march.errors import CommandError, StoreError
from march.glob import compile_glob
from march.keyspace.serving import Phase
from march.resp import SetReply, Verbatim
from march.stats.counters import CommandCounts
from march.version import REDIS_COMPAT_VERSION, VERSION

if TYPE_CHECKING:
    from march.app import App
    from march.client import Client

_ADMIN = ("@admin", "@slow", "@dangerous")
_ANY_ORDER = ("nondeterministic_output_order",)  # Redis' tip: the same items, in no set order


def _key_specs(spec: CommandSpec) -> SetReply:
    first, last, step = spec.keys
    if first == 0:
        return SetReply()
    last_key = last - first if last >= 0 else last
    return SetReply(
        [
            {
                b"flags": SetReply(spec.key_flags),
                b"begin_search": {b"type": b"index", b"spec": {b"index": first}},
                b"find_keys": {b"type": b"range", b"spec": {b"lastkey": last_key, b"keystep": step, b"limit": 0}},
            }
        ]
    )


def _info(spec: CommandSpec, sub: Subcommand | None = None) -> list[Any]:
    """COMMAND INFO's entry of a command or of one of its subcommands, in Redis 7.0's shape (sets
    where Redis sends sets, in RESP3)."""
    if sub is not None:
        return [
            f"{spec.name}|{sub.name}".encode(),
            sub.arity,
            SetReply(spec.flags_of(sub.name)),
            0,
            0,
            0,
            SetReply(spec.categories_of(sub.name)),
            SetReply(t.encode() for t in sub.tips),
            SetReply(),
            SetReply(),
        ]
    first, last, step = spec.keys
    return [
        spec.name.encode(),
        spec.arity,
        SetReply(spec.flags),
        first,
        last,
        step,
        SetReply(spec.categories),
        SetReply(t.encode() for t in spec.tips),
        _key_specs(spec),
        [_info(spec, s) for s in spec.subcommands] if spec.subcommands else SetReply(),
    ]


def _docs(spec: CommandSpec, sub: Subcommand | None = None) -> dict[bytes, Any]:
    """COMMAND DOCS' entry, in Redis 7.0's shape: summary, since, group, then complexity, arguments
    and subcommands where there are some."""
    summary = sub.summary if sub is not None else spec.summary
    doc: dict[bytes, Any] = {b"summary": summary.encode(), b"since": b"0.1.0", b"group": spec.group.encode()}
    if sub is None:
        if spec.complexity:
            doc[b"complexity"] = spec.complexity.encode()
        if spec.arguments:
            doc[b"arguments"] = [a.docs() for a in spec.arguments]
        if spec.subcommands:
            doc[b"subcommands"] = {f"{spec.name}|{s.name}".encode(): _docs(spec, s) for s in spec.subcommands}
    return doc


def _full_names() -> list[tuple[bytes, tuple[str, ...]]]:
    """Every command and subcommand by its full name, with its ACL categories (COMMAND LIST's order:
    a command, then its subcommands)."""
    out: list[tuple[bytes, tuple[str, ...]]] = []
    for spec in COMMANDS.values():
        out.append((spec.name.encode(), spec.categories))
        out += [(f"{spec.name}|{s.name}".encode(), spec.categories_of(s.name)) for s in spec.subcommands]
    return out


def _command_all(client: Client, args: list[bytes]) -> Any:
    return [_info(s) for s in COMMANDS.values()]


def _command_count(client: Client, args: list[bytes]) -> Any:
    return len(COMMANDS)


def _command_info(client: Client, args: list[bytes]) -> Any:
    names = Args(args, 2).rest()
    if not names:
        return _command_all(client, args)
    found = [lookup_full(n) for n in names]
    return [_info(*f) if f is not None else None for f in found]


def _command_docs(client: Client, args: list[bytes]) -> Any:
    names = Args(args, 2).rest()
    if not names:
        return {s.name.encode(): _docs(s) for s in COMMANDS.values()}
    found = [f for f in map(lookup_full, names) if f is not None]
    return {(f"{spec.name}|{sub.name}" if sub else spec.name).encode(): _docs(spec, sub) for spec, sub in found}


def _command_list(client: Client, args: list[bytes]) -> Any:
    """Every command and subcommand (``client|list``), as Redis 7.0's COMMAND LIST, or those a filter keeps."""
    cursor = Args(args, 2)
    if not cursor.more():
        return [name for name, _ in _full_names()]
    cursor.choice(b"filterby")
    how = cursor.choice(b"pattern", b"aclcat", b"module")
    what = cursor.next()
    cursor.finish()
    if how == b"pattern":
        glob = compile_glob(what, nocase=True)  # Redis: case-insensitive, like command names
        return [name for name, _ in _full_names() if glob.match(name)]
    if how == b"aclcat":
        cat = "@" + what.decode("utf-8", "replace").lower()
        return [name for name, categories in _full_names() if cat in categories]
    return []


def _command_getkeys(client: Client, args: list[bytes]) -> Any:
    """Redis 7.0's checks, in its order: the command known (a container's subcommand too), it has
    keys, then its arity."""
    carried = Args(args, 2).rest()
    spec = lookup(carried[0])
    if spec is None or (spec.subcommands and len(carried) > 1 and spec.find(carried[1]) is None):
        raise CommandError(errors.GETKEYS_NO_COMMAND)
    if spec.keys[0] == 0:
        raise CommandError(errors.GETKEYS_NO_KEYS)
    if not spec.arity_ok(len(carried)):
        raise CommandError(errors.GETKEYS_ARITY)
    return [carried[p] for p in spec.key_positions(len(carried))]


container(
    "command",
    ("loading", "stale"),
    ("@slow", "@connection", "@app"),
    (
        Subcommand("count", 2, "How many commands.", _command_count),
        Subcommand("info", -2, "Details of commands.", _command_info, "INFO [<command-name> ...]", tips=_ANY_ORDER),
        Subcommand(
            "docs", -2, "Documentation of commands.", _command_docs, "DOCS [<command-name> ...]", tips=_ANY_ORDER
        ),
        Subcommand(
            "list",
            -2,
            "Command and subcommand names.",
            _command_list,
            "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
            tips=_ANY_ORDER,
        ),
        # COMMAND GETKEYS AUTH pw: the carried command's own secrets
        Subcommand(
            "getkeys",
            -4,
            "The keys of a full command.",
            _command_getkeys,
            "GETKEYS <full-command>",
            secrets=Secrets(command=2),
        ),
    ),
    summary="The command table: COMMAND [COUNT | INFO name... | DOCS name... | LIST | GETKEYS cmd args...].",
    group="server",
    bare=_command_all,
    tips=_ANY_ORDER,
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


_NOT_OF_TYPE = {int: errors.CONFIG_NOT_INTEGER, bool: errors.CONFIG_NOT_YES_NO, float: errors.CONFIG_NOT_NUMBER}

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
        except ConfigTypeError:
            raise CommandError(errors.CONFIG_SET_INVALID.format(name, _NOT_OF_TYPE[option.type])) from None
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
            tips=("request_policy:all_nodes", "response_policy:all_succeeded"),  # (each node's own settings)
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
    "time",
    1,
    ("loading", "stale", "fast"),
    ("@fast",),
    summary="Server time: [seconds, microseconds].",
    group="server",
    tips=("nondeterministic_output",),
    complexity="O(1)",
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
    return NO_REPLY  # the connection closes, as in Redis


# Redis 7.0's sections in Redis' order and with its titles, then March's own. INFO and INFO default:
# all but commandstats and latencystats (as in Redis); ``all`` and ``everything``: every one.
_TITLES = {
    "server": "Server",
    "clients": "Clients",
    "memory": "Memory",
    "persistence": "Persistence",
    "stats": "Stats",
    "replication": "Replication",
    "cpu": "CPU",
    "modules": "Modules",
    "commandstats": "Commandstats",
    "errorstats": "Errorstats",
    "latencystats": "Latencystats",
    "cluster": "Cluster",
    "keyspace": "Keyspace",
    "sequences": "Sequences",
}
_SECTIONS = tuple(_TITLES)
_DEFAULT = tuple(s for s in _SECTIONS if s not in ("commandstats", "latencystats"))
_ALIASES = {"module_list": "modules"}  # Redis' name of the Modules section in its default list


@command(
    "info",
    -1,
    ("loading", "stale"),
    ("@slow", "@dangerous"),
    summary="INFO [section...]: server, clients, memory, persistence, stats, replication, cpu, modules, "
    "commandstats, errorstats, latencystats, cluster, keyspace, sequences.",
    group="server",
    tips=("nondeterministic_output", "request_policy:all_shards", "response_policy:special"),
)
def info(client: Client, args: list[bytes]) -> Any:
    wanted = [a.decode("utf-8", "replace").lower() for a in Args(args).rest()]
    wanted = [_ALIASES.get(w, w) for w in wanted]
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
        parts.append(f"# {_TITLES[section]}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in lines.items()))
    return Verbatim("\r\n".join(parts))


def _section(client: Client, section: str, count: int | None) -> dict[str, Any]:
    return _SECTION_FIELDS[section](client, count)


def _server(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
    up = time.monotonic() - app.started_mono
    return {
        "redis_version": REDIS_COMPAT_VERSION,
        "march_version": VERSION,
        "march_build": build.summary(),  # compiled, or pure-python (docs/compiled.md)
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
    out = {
        "used_cpu_sys": f"{own.ru_stime:.6f}",
        "used_cpu_user": f"{own.ru_utime:.6f}",
        "used_cpu_sys_children": f"{children.ru_stime:.6f}",
        "used_cpu_user_children": f"{children.ru_utime:.6f}",
    }
    if _RUSAGE_THREAD is not None and threading.current_thread() is threading.main_thread():
        main = resource.getrusage(_RUSAGE_THREAD)  # the event loop's thread (store calls run on others)
        out["used_cpu_sys_main_thread"] = f"{main.ru_stime:.6f}"
        out["used_cpu_user_main_thread"] = f"{main.ru_utime:.6f}"
    return out


_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)  # Linux only, as in Redis


def _commandstats(client: Client, count: int | None) -> dict[str, Any]:
    """Per command and per subcommand (``cmdstat_client|list``) that ran or was refused, as Redis."""
    return {
        f"cmdstat_{name}": f"calls={c.calls},usec={c.usec},usec_per_call={c.usec / c.calls if c.calls else 0:.2f},"
        f"rejected_calls={c.rejected},failed_calls={c.failed}"
        for name, c in _command_counts(client.app).items()
        if c.calls or c.rejected or c.failed
    }


_PERCENTILES = (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))  # Redis' latency-tracking-info-percentiles


def _latencystats(client: Client, count: int | None) -> dict[str, Any]:
    """Redis' ``latency_percentiles_usec_<command>``, from the same histograms as LATENCY HISTOGRAM:
    each percentile is the upper bound of the power-of-two bucket it falls in (Redis' own histograms
    report a bucket's upper bound too, at a finer resolution)."""
    out: dict[str, Any] = {}
    for name, c in _command_counts(client.app).items():
        calls = sum(c.hist)
        if not calls:
            continue
        values = []
        for label, fraction in _PERCENTILES:
            need, running = max(1, math.ceil(fraction * calls)), 0
            for k, n in enumerate(c.hist):
                running += n
                if running >= need:
                    values.append(f"{label}={float(1 << max(0, k - 10)):.3f}")  # as LATENCY HISTOGRAM's buckets
                    break
        out[f"latency_percentiles_usec_{name}"] = ",".join(values)
    return out


def _errorstats(client: Client, count: int | None) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for stats in client.app.metrics.commands.all():  # (unknown commands' errors too, as Redis)
        for kind, n in stats.since_reset().errors.items():
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
        "active_sequences": len(gens),  # with a generator: in use
        "parked_sequences": sum(len(g.keyspace.table) for g in app.groups),  # rows of the table: not in use
        "ids_issued": sum(g.issued for g in gens) + sum(g.keyspace.table.issued for g in app.groups),
        "waits": sum(g.waits for g in gens),
        "wait_timeouts": sum(g.wait_timeouts for g in gens),
        "idle_dropped": sum(g.keyspace.idle.dropped for g in app.groups),  # idle generators gone from memory
        "idle_parked": sum(g.keyspace.idle.parked for g in app.groups),  # of which kept as rows of the table
        "auto_create": "yes" if app.config.auto_create else "no",
        "min_batch": app.config.min_batch,
        "max_batch": app.config.max_batch,
    }


def _cluster(client: Client, count: int | None) -> dict[str, Any]:
    app = client.app
    member, state = app.groups.member, app.groups[0].state  # (the first group's state: dashboards keep working)
    ready = app.readiness()  # (``march.cluster.readiness``; for a Redis-only health check)
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
        "march_role": member.loop.describe()[0],  # primary if it leads any group
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
    listed = app.groups.listed
    if not listed:
        return {}
    return {
        "march_groups": len(listed),
        "march_groups_led": ",".join(str(g.index) for g in listed if g.state.leading),
    }


def _command_counts(app: App) -> dict[str, CommandCounts]:
    """Per command and subcommand, since the last CONFIG RESETSTAT (the counters /metrics exports are
    never reset: Prometheus wants them monotonic; ``CommandStats.since_reset`` subtracts the
    snapshot). Not ``unknown``: Redis counts unknown commands nowhere but in errorstats."""
    table = app.metrics.commands
    return {stats.name: stats.since_reset() for stats in table.all() if stats is not table.unknown}


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


_NO_REPLID = "0" * 40  # Redis' master_replid2 when there is no previous history


def _replication(client: Client) -> dict[str, Any]:
    """Redis 7.0's fields, in its order, with March's truth: a node that leads a group (any group) is
    ``role:master`` with the other nodes as its replicas; a standby is ``role:slave`` of the primary
    (as ROLE, SENTINEL REPLICAS and CLUSTER NODES say: it serves no key command, and a Sentinel-
    aware client that finds ``slave`` where it expected the primary asks again, as it should).

    Nothing is replicated (a standby reads what it needs from the store when it takes over), so the
    offsets, the backlog and the sync are 0; ``master_replid`` names the primary's term (the leader
    key it holds: its id and create revision), the same on every node that follows it, and new at
    each failover as Redis' replication id is; a single node's is its run id."""
    app = client.app
    member = app.groups.member
    if member is None:
        return {"role": "master", "connected_slaves": 0, **_repl_tail(app.run_id, "no-failover")}
    primary, standbys = member.directory.members(client.tls)
    topology = member.directory.topology
    replid = _term_id(app, topology.leader, topology.leader_revision) if topology.leader else app.run_id
    stepping_down = any(g.state.phase is Phase.STEPPING_DOWN for g in app.groups)
    failover = "failover-in-progress" if stepping_down else "no-failover"
    me = member.me
    if any(g.state.leading for g in app.groups):  # several groups: master of at least one
        others = [n for n in ([primary] if primary else []) + standbys if n.id != me.id]
        out: dict[str, Any] = {"role": "master", "connected_slaves": len(others)}
        for i, n in enumerate(others):
            out[f"slave{i}"] = f"ip={n.host},port={n.port},state=online,offset=0,lag=0"
        return {**out, **_repl_tail(replid, failover)}
    up = primary is not None and primary.id != me.id
    out = {
        "role": "slave",
        "master_host": primary.host if up and primary else "?",
        "master_port": primary.port if up and primary else 0,
        "master_link_status": "up" if up else "down",
        "master_last_io_seconds_ago": 0 if up else -1,  # its lease is watched continuously
        "master_sync_in_progress": 0,
        "slave_read_repl_offset": 0,
        "slave_repl_offset": 0,
    }
    if not up:
        out["master_link_down_since_seconds"] = -1  # (when it went is in INFO cluster: last_change)
    out.update({"slave_priority": 100, "slave_read_only": 1, "replica_announced": 1, "connected_slaves": 0})
    return {**out, **_repl_tail(replid, failover)}


def _repl_tail(replid: str, failover: str) -> dict[str, Any]:
    """The fields every role ends with: no replication stream, no backlog, no second history."""
    return {
        "master_failover_state": failover,
        "master_replid": replid,
        "master_replid2": _NO_REPLID,
        "master_repl_offset": 0,
        "second_repl_offset": -1,
        "repl_backlog_active": 0,
        "repl_backlog_size": 0,
        "repl_backlog_first_byte_offset": 0,
        "repl_backlog_histlen": 0,
    }


def _term_id(app: App, leader: str, revision: int) -> str:
    """A primary's term as a Redis replication id: 40 hex digits, the same on every node of the
    cluster, new whenever another leader key is created (a failover)."""
    return hashlib.sha1(f"{app.config.etcd_prefix}|{leader}|{revision}".encode()).hexdigest()


# INFO's sections: each one's fields, from the client (and the number of sequences, when counted)
_SECTION_FIELDS: dict[str, Callable[[Client, int | None], dict[str, Any]]] = {
    "server": _server,
    "clients": _clients,
    "memory": lambda client, count: _memory(),
    "persistence": _persistence,
    "stats": _stats,
    "replication": lambda client, count: _replication(client),
    "cpu": _cpu,
    "modules": lambda client, count: {},  # March has no modules (HELLO says ``modules: []``)
    "commandstats": _commandstats,
    "errorstats": _errorstats,
    "latencystats": _latencystats,
    "cluster": _cluster,
    "keyspace": _keyspace,
    "sequences": _sequences,
}

"""Operations commands: SLOWLOG, MONITOR, LATENCY, in Redis' shapes and ACL categories.

Every node answers about itself (none of these is served by the primary only): a standby's
SLOWLOG holds the requests it answered (MOVED replies included), the primary's its INCRs.

- ``SLOWLOG GET [count] | LEN | RESET | HELP``: requests that took at least
  ``slowlog_log_slower_than`` µs (-1: none, 0: all), the newest ``slowlog_max_len``; each entry is
  id, unix time, µs, arguments (at most 32, each at most 128 bytes, passwords redacted), client
  address, client name. A request that waited for the store (a first INCR, a TRYAGAIN) shows
  with its whole wait.
- ``MONITOR``: the connection is sent every request that runs, as Redis does
  (``+<unix time> [0 <addr>] "INCR" "orders"``), passwords redacted; not admin commands or
  subcommands, not a refused request, not one queued by MULTI until EXEC runs it
  (``dispatch.monitored``). It stays a monitor until RESET or until it closes, and meanwhile
  takes no command that reads or writes the keyspace (Redis' ``ERR Replica can't interact with
  the keyspace``); MONITOR again is ignored (no reply, as in Redis). Nothing costs anything while
  nobody monitors.
- ``LATENCY LATEST | HISTORY event | RESET [event...] | DOCTOR | HISTOGRAM [command...] | HELP``:
  events ``store-write`` and ``store-read`` (every store transaction) and ``command-wait``
  (every request that had to wait), in milliseconds, the worst of each second, the last 160;
  HISTOGRAM gives each command's request latencies in power-of-two µs buckets, as Redis.

What the handlers never do: touch a transport (MONITOR returns ``MONITOR_STARTED`` and the
server attaches its connection) or show a password.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.args import Args
from march.commands.table import MONITOR_STARTED, NO_REPLY, Subcommand, command, container, lookup_full
from march.resp import Verbatim
from march.stats.diagnostics import COMMAND_WAIT, STORE_READ, STORE_WRITE

if TYPE_CHECKING:
    from march.client import Client

# ACL categories and flags as Redis 7 has them: MONITOR and every subcommand but HELP are @admin
# @slow @dangerous and flagged admin; the SLOWLOG and LATENCY containers themselves have no flags,
# and they and their HELP are only @slow.
_ADMIN = ("@admin", "@slow", "@dangerous")
_FLAGS = ("admin", "noscript", "loading", "stale")
_SUB_FLAGS = ("admin", "loading", "stale")  # SLOWLOG's subcommands (no noscript, as Redis)
# Redis' tips: each node answers for itself (a cluster client asks every node), reports vary
_ALL_NODES, _ALL_SUCCEEDED, _NONDET = (
    "request_policy:all_nodes",
    "response_policy:all_succeeded",
    "nondeterministic_output",
)
_REPORT = (_NONDET, _ALL_NODES, "response_policy:special")


def _syntax(args: list[bytes], name: str) -> str:
    return errors.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), name)


# --- SLOWLOG --------------------------------------------------------------------------------------


def _slowlog_get(client: Client, args: list[bytes]) -> Any:
    cursor = Args(args, 2)
    count = cursor.integer(errors.SLOWLOG_COUNT, low=-1) if cursor.more() else 10
    cursor.finish(_syntax(args, "SLOWLOG"))
    entries = client.app.slowlog.get(count)
    return [[e.id, e.time, e.duration_us, list(e.args), e.addr.encode(), e.name.encode()] for e in entries]


def _slowlog_len(client: Client, args: list[bytes]) -> Any:
    return len(client.app.slowlog.entries)


def _slowlog_reset(client: Client, args: list[bytes]) -> Any:
    client.app.slowlog.reset()
    return "OK"


container(
    "slowlog",
    (),
    ("@slow",),
    (
        Subcommand(
            "get",
            -2,
            "The newest entries (default 10, -1: all).",
            _slowlog_get,
            "GET [<count>]",
            (
                "Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "Entries are made of:",
                "id, timestamp, time in microseconds, arguments array, client IP and port,",
                "client name",
            ),
            categories=_ADMIN,
            flags=_SUB_FLAGS,
            tips=(_ALL_NODES, _NONDET),
        ),
        Subcommand(
            "len",
            2,
            "How many entries.",
            _slowlog_len,
            help=("Return the length of the slowlog.",),
            categories=_ADMIN,
            flags=_SUB_FLAGS,
            tips=(_ALL_NODES, "response_policy:agg_sum", _NONDET),
        ),
        Subcommand(
            "reset",
            2,
            "Forget every entry.",
            _slowlog_reset,
            help=("Reset the slowlog.",),
            categories=_ADMIN,
            flags=_SUB_FLAGS,
            tips=(_ALL_NODES, _ALL_SUCCEEDED),
        ),
    ),
    summary="SLOWLOG GET [count] | LEN | RESET | HELP: this node's slowest requests (slowlog_log_slower_than).",
    group="server",
)


# --- MONITOR --------------------------------------------------------------------------------------


@command(
    "monitor",
    1,
    _FLAGS,
    _ADMIN,
    summary="Stream every request this node runs (passwords redacted), until RESET.",
    group="server",
)
def monitor(client: Client, args: list[bytes]) -> Any:
    if client.id in client.app.monitors.feeds:
        return NO_REPLY  # already a monitor: Redis ignores it, with no reply
    return MONITOR_STARTED  # (inside MULTI it is queued; EXEC answers it with MONITOR_DENIED)


# --- LATENCY --------------------------------------------------------------------------------------

_ADVICE = {
    STORE_WRITE: "Store writes make the INCRs that need a new range wait; above a second, check the disk "
    "(single node) or etcd's health, disk and network latency (cluster).",
    STORE_READ: "Reads happen on a key's first request in a term (after a start or a failover).",
    COMMAND_WAIT: "Requests waited for the store or a promotion; a few after a start or a failover are "
    "expected (each key persists a range before its first ID). Many: raise min_batch, or see store-write.",
}


def _latency_latest(client: Client, args: list[bytes]) -> Any:
    return [[name.encode(), at, ms, worst] for name, at, ms, worst in client.app.latency.latest()]


def _latency_history(client: Client, args: list[bytes]) -> Any:
    return [[at, ms] for at, ms in client.app.latency.history(Args(args, 2).text())]


def _latency_reset(client: Client, args: list[bytes]) -> Any:
    names = [a.decode("utf-8", "replace") for a in Args(args, 2).rest()]
    return client.app.latency.reset(names or None)


def _latency_doctor(client: Client, args: list[bytes]) -> Any:
    return Verbatim(_doctor(client))


def _latency_histogram(client: Client, args: list[bytes]) -> Any:
    return _histograms(client, Args(args, 2).rest())


container(
    "latency",
    (),
    ("@slow",),
    (
        Subcommand(
            "doctor",
            2,
            "A short report.",
            _latency_doctor,
            help=("Return a human readable latency analysis report.",),
            categories=_ADMIN,
            flags=_FLAGS,
            tips=_REPORT,
        ),
        Subcommand(
            "history",
            3,
            "An event's samples: the worst of each second.",
            _latency_history,
            "HISTORY <event>",
            ("Return time-latency samples for the <event> class.",),
            categories=_ADMIN,
            flags=_FLAGS,
            tips=_REPORT,
        ),
        Subcommand(
            "latest",
            2,
            "The latest sample of every event.",
            _latency_latest,
            help=("Return the latest latency samples for all events.",),
            categories=_ADMIN,
            flags=_FLAGS,
            tips=_REPORT,
        ),
        Subcommand(
            "reset",
            -2,
            "Forget events (all by default).",
            _latency_reset,
            "RESET [<event> ...]",
            (
                "Reset latency data of one or more <event> classes.",
                "(default: reset all data for all event classes)",
            ),
            categories=_ADMIN,
            flags=_FLAGS,
            tips=(_ALL_NODES, _ALL_SUCCEEDED),
        ),
        Subcommand(
            "histogram",
            -2,
            "Request latency histograms by command (since CONFIG RESETSTAT).",
            _latency_histogram,
            "HISTOGRAM [COMMAND ...]",
            (
                "Return a cumulative distribution of latencies in the format of a histogram for the specified "
                "command names.",
                "If no commands are specified then all histograms are replied.",
                f"Events: {STORE_WRITE}, {STORE_READ} (one per store transaction), {COMMAND_WAIT} (a request "
                "that waited).",
            ),
            categories=_ADMIN,
            flags=_FLAGS,
            tips=_REPORT,
        ),
    ),
    summary="LATENCY LATEST | HISTORY event | RESET [event...] | DOCTOR | HISTOGRAM [command...] | HELP: "
    "store and wait latency events of this node.",
    group="server",
)


def _doctor(client: Client) -> str:
    events = client.app.latency.events
    if not events:
        return (
            "No latency event recorded since the start (or the last LATENCY RESET). March records "
            f"{STORE_WRITE} and {STORE_READ} for every store transaction and {COMMAND_WAIT} for every "
            "request that had to wait.\n"
        )
    lines = ["Latency events of this node (milliseconds; the worst sample of each second, the last 160):", ""]
    for name, e in sorted(events.items()):
        if not e.samples:
            continue
        ms = [m for _, m in e.samples]
        at, last = e.samples[-1]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
        lines.append(
            f"{name}: {len(ms)} samples, latest {last} ms at {when} UTC, average {sum(ms) / len(ms):.1f} ms, "
            f"worst {e.max_ms} ms since the start."
        )
        lines.append(f"  {_ADVICE.get(name, '')}")
    return "\n".join(lines) + "\n"


def _histograms(client: Client, names: list[bytes]) -> dict[bytes, Any]:
    """Each command's and subcommand's (``client|list``) latencies since CONFIG RESETSTAT, as Redis:
    the calls only (not the requests refused before they ran), every command with calls, or those
    named (a container named: each of its subcommands)."""
    table = client.app.metrics.commands
    if names:
        wanted: list[str] = []
        for found in filter(None, map(lookup_full, names)):
            spec, sub = found
            wanted += (
                [f"{spec.name}|{sub.name}"]
                if sub
                else [spec.name, *(f"{spec.name}|{s.name}" for s in spec.subcommands)]
            )
        chosen = [table.by_name[name] for name in wanted if name in table.by_name]
    else:
        chosen = [stats for stats in table.all() if stats is not table.unknown]
    out: dict[bytes, Any] = {}
    for stats in chosen:
        counts = stats.since_reset()  # CONFIG RESETSTAT starts them again, as in Redis
        calls = sum(counts.hist)
        if not calls:
            continue
        buckets: dict[int, int] = {}
        running = 0
        for k, count in enumerate(counts.hist):
            running += count
            if count:  # slot k: under 2**k ns, shown as 2**(k-10) µs (a µs taken as 1024 ns, as Redis' powers of two)
                buckets[1 << max(0, k - 10)] = running
        out[stats.name.encode()] = {b"calls": calls, b"histogram_usec": buckets}
    return out

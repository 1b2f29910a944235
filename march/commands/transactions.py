"""MULTI / EXEC / DISCARD (redis-py pipelines use them by default); WATCH is refused.

EXEC runs the queued commands in order and replies with an array of their results (errors in
place, as Redis does). A queued command that must wait for a store write lets other connections
run meanwhile; that changes nothing for the guarantees (IDs stay unique and increasing), only
"nothing else runs between them", which an ID service does not need.

Redis' rules, as Redis 7.0 applies them (``tests/commands/test_redis_rules.py`` runs each against a real
redis-server):

- a command flagged ``no_multi`` (SHUTDOWN) is refused inside MULTI with ``ERR Command not allowed
  inside a transaction`` and dooms the transaction (``commands.dispatch``); WATCH inside MULTI gets
  ``ERR WATCH inside MULTI is not allowed`` and does not; MONITOR is queued and answered at EXEC
  with ``ERR MONITOR isn't allowed for DENY BLOCKING client`` (a transaction has one reply per command);
- with ``redirect forward``, a transaction whose keys belong to a group served elsewhere is sent
  whole to that group's primary, or refused at EXEC if it mixes groups (``commands.forward``);
- each command EXEC runs is counted, timed and, past ``slowlog_log_slower_than``, put in SLOWLOG
  on its own (EXEC itself is ``skip_slowlog``: never there); MONITOR shows each as it runs, then EXEC.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.dispatch import as_error, call, monitored, show
from march.commands.forward import elsewhere, forwards, transaction
from march.commands.table import MONITOR_STARTED, NO_REPLY, Relayed, command, lookup, redacted, waits
from march.errors import CommandError, Rejected
from march.stats.counters import error_kind

if TYPE_CHECKING:
    from march.client import Client

_transaction = partial(
    command,
    flags=("noscript", "loading", "stale", "fast", "allow_busy"),
    categories=("@fast", "@transaction", "@app"),
    group="transactions",
)


@_transaction("multi", 1, queued=False, summary="Start a transaction.")
def multi(client: Client, args: list[bytes]) -> Any:
    if client.multi is not None:
        raise CommandError(errors.MULTI_NESTED)
    client.multi = []
    client.multi_error = False
    client.multi_mem = 0
    return "OK"


@_transaction("discard", 1, queued=False, summary="Discard a transaction.")
def discard(client: Client, args: list[bytes]) -> Any:
    if client.multi is None:
        raise CommandError(errors.DISCARD_WITHOUT_MULTI)
    client.multi = None
    client.multi_error = False
    return "OK"


@command(
    "exec",
    1,
    ("noscript", "loading", "stale", "skip_slowlog"),
    ("@slow", "@transaction", "@app"),
    queued=False,
    summary="Execute the queued commands of a transaction.",
    group="transactions",
)
def exec_(client: Client, args: list[bytes]) -> Any:
    queued, failed = client.multi, client.multi_error
    client.multi = None
    client.multi_error = False
    if queued is None or failed:
        _show_exec(client, args)
        raise CommandError(errors.EXEC_WITHOUT_MULTI if queued is None else errors.EXECABORT)
    if forwards(client):
        remote, _ = elsewhere(client, queued)
        if remote:  # forwarded whole to one primary, or refused (``commands.forward``)
            _show_exec(client, args)
            return transaction(client, queued, remote, partial(_run, client, queued, args))
    return _run(client, queued, args)


async def _run(client: Client, queued: list[list[bytes]], exec_args: list[bytes]) -> list[Any]:
    """Run the queued requests in order, each counted as Redis counts the calls EXEC makes: a call
    (INFO commandstats, ``total_commands_processed``, LATENCY HISTOGRAM, SLOWLOG), an error in its
    place counted in ``total_error_replies`` and errorstats; one refused when EXEC reaches it (its
    permission revoked meanwhile, its group moved) is no call, no rejection and no failure of its
    command, only an error in errorstats (Redis' ``execCommand``). While they run, the client shows as
    Redis shows it inside EXEC (CLIENT LIST ``flags=x multi=<n> cmd=exec``, ACL LOG context ``multi``)."""
    app = client.app
    results: list[Any] = []
    client.executing = len(queued)
    try:
        for args in queued:
            _show(client, args)
            began = time.perf_counter_ns()
            try:
                value = call(client, args)
                if waits(value) or isinstance(value, Relayed):  # (Relayed: forwarded, its group moved)
                    value = await value
                if value is MONITOR_STARTED or value is NO_REPLY:
                    # MONITOR (and MONITOR again on a monitor) inside a transaction: one reply per command
                    raise CommandError(errors.MONITOR_DENIED)
            except Exception as exc:  # in place, as Redis reports errors inside EXEC
                value = as_error(client, exc)
            took = time.perf_counter_ns() - began
            refused = isinstance(value, Rejected)
            # a refused one is counted apart from its command (``unknown``: errorstats only), as Redis
            stats = app.metrics.commands.unknown if refused else app.metrics.commands.of_request(args)
            stats.observe(took)
            if isinstance(value, CommandError):
                app.stats.errors += 1
                stats.error(error_kind(value.message))
            if refused:
                stats.skip(took)
            else:
                app.stats.commands += 1
                if lookup(args[0]) is not None and 0 <= app.config.slowlog_log_slower_than * 1000 <= took:
                    app.slowlog.add(redacted(args), took // 1000, client.addr, client.name, app.config.slowlog_max_len)
            results.append(value)
    finally:
        client.executing = 0
    _show_exec(client, exec_args)
    return results


def _show(client: Client, args: list[bytes]) -> None:
    """MONITOR shows a queued command when EXEC runs it (unless it will not run, or is admin)."""
    if client.app.monitors.feeds and monitored(client, args):
        show(client, args)


def _show_exec(client: Client, args: list[bytes]) -> None:
    """EXEC shows itself once it has run (after the commands it ran), or failed, as in Redis."""
    if client.app.monitors.feeds:
        show(client, args)


@_transaction(
    "watch", -2, keys=(1, -1, 1), queued=False, summary="Refused: sequences only move forwards; retry instead."
)
def watch(client: Client, args: list[bytes]) -> Any:
    if client.multi is not None:  # answered at once, and the transaction goes on, as in Redis
        raise CommandError(errors.WATCH_IN_MULTI)
    raise CommandError(errors.WATCH_UNSUPPORTED)


@_transaction("unwatch", 1, summary="Forget watched keys (there are none).")
def unwatch(client: Client, args: list[bytes]) -> Any:
    return "OK"

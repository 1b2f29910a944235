"""Request timing: each connection's requests counted and timed by command (``INFO commandstats``,
the Prometheus latency histograms), the slow ones put into SLOWLOG, the waits into LATENCY.

One clock reading per read, not per request (the connection takes two around a read's requests):
each request answered in a read is taken to have lasted an equal share of it (for a pipeline,
that share is what a request costs; a read of one request, the common case, is timed exactly).
A request that waits is timed alone when it is done (``RequestTimer.waited``). Nothing is
allocated per request on the common paths (one request, or a run of one command).

As in Redis: a request refused before it ran (wrong arity, NOAUTH, NOPERM, MOVED...: the
connection passes their indexes as ``skipped``) or queued by MULTI is no call: INFO commandstats
and LATENCY HISTOGRAM leave it out (``CommandStats.skip``; Prometheus still sees its time), and it
is never slow. An AUTH held back by the failed-AUTH throttle counts as a call that took no time;
SLOWLOG takes only commands that exist, not EXEC (``skip_slowlog``: the commands it ran are logged
one by one). A container's requests count in their subcommand's counters (``client|list``), found
once per run of one command. ``slowlog_log_slower_than`` and ``slowlog_max_len`` follow CONFIG SET
(which replaces the config object): the threshold is read again when the config is another object.

The client's last command (CLIENT LIST ``cmd``) is set once per read: the counters of the read's
last request (``Requester.cmd``), written only when they change (nothing else sets it).

This module never runs a request nor writes a reply: it is told what was answered and how long it took.
"""

from __future__ import annotations

from typing import Protocol

from march.commands import lookup, redacted
from march.stats.counters import CommandStats, CommandTable
from march.stats.diagnostics import COMMAND_WAIT, LatencyMonitor, SlowLog
from march.transport.flow import Configured

# Compiled (docs/compiled.md), ``_bits`` counts a duration's bits in a C loop; interpreted,
# ``int.bit_length`` is faster. Tests set it both ways.
_FAST = not __file__.endswith(".py")


def _bits(n: int) -> int:
    """``n.bit_length()`` (the histogram's slot of a duration of ``n`` ns, below 2**63)."""
    if not _FAST:
        return n.bit_length()
    if n < 0:
        n = -n
    bits = 0
    while n:
        n >>= 1
        bits += 1
    return bits


class Requester(Protocol):
    """What SLOWLOG shows of the client that sent a request (the server's ``Client``)."""

    addr: str
    name: str
    cmd: CommandStats | None  # the last request's counters (CLIENT LIST ``cmd``), set here


class RequestTimer:
    """One connection's request accounting (see the module docstring)."""

    __slots__ = (
        "_cmd",
        "_config",
        "_name",
        "_slower",
        "_stats",
        "client",
        "commands",
        "latency",
        "limits",
        "slowlog",
        "spellings",
    )

    def __init__(
        self, client: Requester, commands: CommandTable, slowlog: SlowLog, latency: LatencyMonitor, limits: Configured
    ) -> None:
        self.client = client
        self.commands = commands
        self.spellings = commands.spellings  # (the same dict for the server's life)
        self.slowlog = slowlog
        self.latency = latency
        self.limits = limits
        self._config: object = None  # the config ``_slower`` was read from (CONFIG SET replaces it)
        self._slower = -1  # its slowlog_log_slower_than, in ns
        # The last spelling counted by ``read`` and its counters: a registered spelling's counters are
        # the same object for the server's life (``CommandTable.spellings``), so a read of the same
        # command as the one before finds them with a compare of the name instead of a dict lookup.
        self._name = b""
        self._stats: CommandStats | None = None
        self._cmd: CommandStats | None = None  # what ``client.cmd`` was set to last (only this timer sets it)

    def read(
        self, requests: list[list[bytes]], start: int, end: int, ns: int, alike: int, skipped: list[int] | None
    ) -> None:
        """``requests[start:end]`` were answered at once in ``ns``; ``alike`` of them in runs of
        identical requests (``Connection.run``), ``skipped`` (indexes): refused before they ran, or
        queued by MULTI."""
        count = end - start
        if skipped is None and (count == 1 or count == alike > 0):
            # One request, or runs of identical ones (pipelines of INCRs): the common cases.
            args = requests[start]
            name = args[0]
            stats = self._stats
            if stats is None or name != self._name:
                stats = self.spellings.get(name)
                if stats is None:
                    stats = self.commands.of(name)
                else:
                    self._name, self._stats = name, stats
            if stats.subs is not None:  # a container: its subcommand's counters
                stats = self.commands.sub(stats, args)
            share = ns // count
            stats.hist[_bits(share)] += count
            stats.total_ns += ns
            if stats is not self._cmd:
                self._cmd = self.client.cmd = stats
            config = self.limits.config
            if config is not self._config:
                self._config, self._slower = config, config.slowlog_log_slower_than * 1000
            if share >= self._slower >= 0:
                for k in range(start, end):
                    self.slow(requests[k], share)
        else:
            self.mixed(requests, start, end, ns, skipped)

    def mixed(self, requests: list[list[bytes]], start: int, end: int, ns: int, skipped: list[int] | None) -> None:
        """Count any mix of requests, each with an equal share of ``ns``: those in a row with the same
        command at once. ``skipped`` (indexes into ``requests``): requests that did not run, refused
        before they ran or queued by MULTI; counted with their share (``CommandStats.skip``), never slow."""
        count = end - start
        if count <= 0:
            return
        share = ns // count
        slot = _bits(share)
        table, spellings = self.commands, self.spellings
        stats: CommandStats | None = None
        name, plain, same = b"", False, 0  # plain: ``name`` is no container (the name alone says its counters)
        for k in range(start, end):
            args = requests[k]
            if plain and args[0] == name:
                same += 1
                continue
            top = spellings.get(args[0]) or table.of(args[0])
            found = top if top.subs is None else table.sub(top, args)
            if found is not stats:
                if stats is not None:
                    stats.hist[slot] += same
                    stats.total_ns += share * same
                stats, same = found, 0
            name, plain = args[0], top.subs is None
            same += 1
        assert stats is not None
        stats.hist[slot] += same
        stats.total_ns += share * same if same != count else ns  # (one command: its exact total)
        if stats is not self._cmd:
            self._cmd = self.client.cmd = stats
        if skipped:
            for k in skipped:
                if start <= k < end:
                    table.of_request(requests[k]).skip(share)
        if share >= self.limits.config.slowlog_log_slower_than * 1000 >= 0:
            skip = set(skipped) if skipped else ()
            for k in range(start, end):
                if k not in skip:
                    self.slow(requests[k], share)

    def waited(self, args: list[bytes], took: int, throttled: bool, skipped: bool = False) -> None:
        """A request that waited, done after ``took`` ns; ``throttled``: an AUTH (or HELLO) the
        failed-AUTH throttle held back on purpose, a call that took no time (never a wait, a slow
        command or a latency event); ``skipped``: refused once its wait was over (MOVED after a
        promotion went elsewhere), no call."""
        stats = self.commands.of_request(args)
        if stats is not self._cmd:
            self._cmd = self.client.cmd = stats
        if throttled:
            stats.observe(0)
            return
        stats.observe(took)
        stats.waits += 1
        if skipped:
            stats.skip(took)
        elif 0 <= self.limits.config.slowlog_log_slower_than * 1000 <= took:
            self.slow(args, took)
        self.latency.add(COMMAND_WAIT, took // 1_000_000)

    def slow(self, args: list[bytes], ns: int) -> None:
        """A request that ran, at least ``slowlog_log_slower_than`` long: into SLOWLOG (redacted,
        truncated), unless it is no command or ``skip_slowlog`` (EXEC). (A queued one is skipped by
        the callers: EXEC logs it when it runs it.)"""
        spec = lookup(args[0])
        client = self.client
        if spec is None or "skip_slowlog" in spec.flags:
            return
        self.slowlog.add(redacted(args), ns // 1000, client.addr, client.name, self.limits.config.slowlog_max_len)

"""Request timing: each connection's requests counted and timed by command (``INFO commandstats``,
the Prometheus latency histograms), the slow ones put into SLOWLOG, the waits into LATENCY.

One clock reading per read, not per request (the connection takes two around a read's requests):
each request answered in a read is taken to have lasted an equal share of it (for a pipeline,
that share is what a request costs; a read of one request, the common case, is timed exactly).
A request that waits is timed alone when it is done (``RequestTimer.waited``). Nothing is
allocated per request on the common paths (one request, or a run of one command).

As in Redis: requests refused with NOAUTH are no calls (their errors are counted elsewhere, they
take no time and are never slow); an AUTH held back by the failed-AUTH throttle counts as a call
that took no time; SLOWLOG takes only commands that exist, not EXEC (``skip_slowlog``: the commands
it ran are logged one by one) nor a request MULTI queued. ``slowlog_log_slower_than`` and
``slowlog_max_len`` are read at use time (CONFIG SET).

This module never runs a request nor writes a reply: it is told what was answered and how long it took.
"""

from __future__ import annotations

from typing import Protocol

from .commands.table import lookup, redacted
from .counters import CommandStats, CommandTable
from .diagnostics import COMMAND_WAIT, LatencyMonitor, SlowLog
from .flow import Configured


class Requester(Protocol):
    """What SLOWLOG shows of the client that sent a request (the server's ``Client``)."""

    addr: str
    name: str

    @property
    def multi(self) -> object | None: ...


class RequestTimer:
    """One connection's request accounting (see the module docstring)."""

    __slots__ = ("client", "commands", "latency", "limits", "slowlog", "spellings")

    def __init__(
        self, client: Requester, commands: CommandTable, slowlog: SlowLog, latency: LatencyMonitor, limits: Configured
    ) -> None:
        self.client = client
        self.commands = commands
        self.spellings = commands.spellings  # (the same dict for the server's life)
        self.slowlog = slowlog
        self.latency = latency
        self.limits = limits

    def stats(self, name: bytes) -> CommandStats:
        return self.spellings.get(name) or self.commands.of(name)

    def read(
        self, requests: list[list[bytes]], start: int, end: int, ns: int, alike: int, refused: list[int] | None
    ) -> None:
        """``requests[start:end]`` were answered at once in ``ns``; ``alike`` of them in runs of
        identical requests (``Connection.run``), ``refused`` (indexes) with NOAUTH."""
        count = end - start
        if refused is None and (count == 1 or count == alike > 0):
            # One request, or runs of identical ones (pipelines of INCRs): the common cases.
            stats = self.spellings.get(requests[start][0]) or self.commands.of(requests[start][0])
            share = ns // count
            stats.hist[share.bit_length()] += count
            stats.total_ns += ns
            if share >= self.limits.config.slowlog_log_slower_than * 1000 >= 0:
                for k in range(start, end):
                    self.slow(requests[k], share)
        else:
            self.mixed(requests, start, end, ns, refused)

    def mixed(self, requests: list[list[bytes]], start: int, end: int, ns: int, refused: list[int] | None) -> None:
        """Count any mix of requests: those in a row with the same command at once.

        ``refused``: requests refused with NOAUTH, left out as Redis leaves them out: a command that
        never ran is no call (``dispatch.reject`` counts it as rejected, its error is counted), takes
        no time, is never slow. It is answered, so it is counted as one (``CommandStats.hist``'s first
        slot, no time): calls are the answered requests less the rejected and queued ones."""
        count = end - start
        if count <= 0:
            return
        if refused:
            skip = set(refused)
            for k in refused:
                self.stats(requests[k][0]).hist[0] += 1
            kept = [requests[k] for k in range(start, end) if k not in skip]
            if kept:
                self.mixed(kept, 0, len(kept), ns * len(kept) // count, None)
            return
        share = ns // count
        slot = share.bit_length()
        batch = requests if start == 0 and end == len(requests) else requests[start:end]
        name = batch[0][0]
        same = 0
        for args in batch:
            if args[0] == name:
                same += 1
                continue
            stats = self.stats(name)
            stats.hist[slot] += same
            stats.total_ns += share * same
            name = args[0]
            same = 1
        stats = self.stats(name)
        stats.hist[slot] += same
        stats.total_ns += share * same if same != count else ns  # (one command: its exact total)
        if share >= self.limits.config.slowlog_log_slower_than * 1000 >= 0:
            for args in batch:
                self.slow(args, share)

    def waited(self, args: list[bytes], took: int, throttled: bool) -> None:
        """A request that waited, done after ``took`` ns; ``throttled``: an AUTH (or HELLO) the
        failed-AUTH throttle held back on purpose, a call that took no time (never a wait, a slow
        command or a latency event)."""
        stats = self.commands.of(args[0])
        if throttled:
            stats.observe(0)
            return
        stats.observe(took)
        stats.waits += 1
        if 0 <= self.limits.config.slowlog_log_slower_than * 1000 <= took:
            self.slow(args, took)
        self.latency.add(COMMAND_WAIT, took // 1_000_000)

    def slow(self, args: list[bytes], ns: int) -> None:
        """A request at least ``slowlog_log_slower_than`` long: into SLOWLOG (redacted, truncated),
        unless it is no command, ``skip_slowlog`` (EXEC) or queued by MULTI (a pipelined MULTI ...
        EXEC read at once is the exception: its queued requests are accounted once EXEC has
        started, and may show at threshold 0)."""
        spec = lookup(args[0])
        client = self.client
        if spec is None or "skip_slowlog" in spec.flags or (client.multi is not None and spec.queued):
            return  # (queued by MULTI: logged when EXEC runs it)
        self.slowlog.add(redacted(args), ns // 1000, client.addr, client.name, self.limits.config.slowlog_max_len)

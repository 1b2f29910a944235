"""The counters the server bumps for metrics: per command (latency histogram, errors, rejections)
and per store operation. Plain ints and preallocated lists, turned into Prometheus families only
when scraped (``march.metrics.collector``).

**Cost on the hot path.** The INCR fast path must not get slower: the server reads the clock
twice per read of the socket (not per request), and counts the requests answered in that read by
command (``Connection.account``): a dict lookup by the name as sent and one slot of a preallocated
list, ``duration.bit_length()``, bumped (a power-of-two histogram in nanoseconds, as Redis' LATENCY
HISTOGRAM; cheaper than a bisect). A read of one request, the common case, is timed exactly; the
requests of a pipelined read each get an equal share of its time; a request that waits (a store
write, a promotion) is timed alone when it is done. Counts, errors and waits are plain ints;
nothing here allocates per request.

**Label cardinality.** Commands are counted by their registered name, a container's
subcommands each by its full name as Redis counts them (``client|list``, ``config|resetstat``;
unknown names and unknown subcommands share ``unknown``), errors by their Redis kind (``err``,
``tryagain``, ``moved``...). The command names come from the table the node was assembled with
(``CommandTable(commands)``): this module imports no command, so the server-wide state
(``march.app``) that owns these counters stays below the commands. A container's subcommands are
found once, when its counters are made (``CommandStats.subs``): a request to a container costs one
more dict lookup, a request to any other command one attribute test.

**Calls, as Redis counts them.** A request refused before it ran (wrong arity, NOAUTH, NOPERM,
MOVED...) or queued by MULTI is answered, and counted with its time like any other (``hist``: what
Prometheus shows), and also in ``skipped`` / ``skipped_ns``: INFO commandstats and LATENCY
HISTOGRAM leave it out, as Redis, whose calls are only the commands that ran.

What this module must never do: allocate per request, or keep anything from a command's arguments.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

# Request latency: slot k of ``CommandStats.hist`` counts durations of k bits (2**(k-1) <= ns <
# 2**k). Exposed from 2**12 ns (4.1 µs: a fast-path INCR takes a few) to 2**34 ns (17 s: past
# max_wait, 2 s by default, and store_timeout); the slots below are folded into the first bucket.
LATENCY_SLOTS = 64  # an int from perf_counter_ns differences has fewer bits
LATENCY_FIRST_BIT = 12
LATENCY_LAST_BIT = 34
# Store transaction buckets (seconds): a local SQLite commit is ~1 ms, an etcd one a few ms.
STORE_BOUNDS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RECORD_BOUNDS: tuple[int, ...] = (1, 2, 5, 10, 25, 50, 100)  # records per store transaction (etcd: at most 100)
_MAX_ERROR_KINDS = 32  # error kinds come from errors.py's prefixes; past this they count as "other"


@dataclass(frozen=True, slots=True)
class CommandCounts:
    """One command's counts since the last CONFIG RESETSTAT (INFO commandstats and errorstats, LATENCY
    HISTOGRAM), kept apart as Redis keeps them: a request refused before it ran (wrong arity, NOAUTH,
    NOPERM, MOVED, not allowed in a transaction...) is ``rejected``, not a call; one queued by MULTI is
    no call either until EXEC runs it; a call answered with an error is ``failed``."""

    calls: int
    usec: int
    rejected: int
    failed: int
    errors: dict[str, int]  # error kind -> replies, rejected and failed alike
    hist: list[int]  # as ``CommandStats.hist``, the calls only (LATENCY HISTOGRAM)


class CommandStats:
    """One command's (or one subcommand's) counters, never reset (Prometheus wants them monotonic).
    ``hist[k]``: requests whose duration in ns has k bits (the server bumps it inline), every
    answered request, refused and queued ones too; ``skipped[k]`` (and ``skipped_ns``): those of
    them that did not run, refused (``rejected``, ``commands.dispatch.reject``) or queued by MULTI
    (EXEC counts them again when it runs them), which Redis' views leave out. CONFIG
    RESETSTAT takes a snapshot (``reset_view``) that ``since_reset`` subtracts. ``subs``: a
    container's subcommands' own counters, by the subcommand as sent (lower and upper case)."""

    __slots__ = (
        "_base",
        "errors",
        "hist",
        "name",
        "rejected",
        "skipped",
        "skipped_ns",
        "subs",
        "total_ns",
        "waits",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.hist = [0] * LATENCY_SLOTS
        self.total_ns = 0
        self.skipped = [0] * LATENCY_SLOTS  # of ``hist``: the requests that did not run (refused or queued)
        self.skipped_ns = 0
        self.errors: dict[str, int] = {}  # error kind ("ERR", "TRYAGAIN", ...) -> replies
        self.waits = 0  # requests that had to wait (a store write or read, a promotion)
        self.rejected = 0  # requests refused before they ran (also counted in ``hist``, ``skipped`` and ``errors``)
        self.subs: dict[bytes, CommandStats] | None = None  # a container's subcommands (``CommandTable``)
        self._base: _Snapshot | None = None  # the counters at the last CONFIG RESETSTAT

    def observe(self, ns: int, count: int = 1) -> None:
        """``count`` requests that took ``ns`` each (the server inlines this on its fast path)."""
        self.hist[ns.bit_length()] += count
        self.total_ns += ns * count

    def skip(self, ns: int, count: int = 1) -> None:
        """``count`` of the requests ``observe`` counted, each ``ns`` long, did not run (refused or queued)."""
        self.skipped[ns.bit_length()] += count
        self.skipped_ns += ns * count

    def error(self, kind: str) -> None:
        errors = self.errors
        if kind not in errors and len(errors) >= _MAX_ERROR_KINDS:
            kind = "OTHER"
        errors[kind] = errors.get(kind, 0) + 1

    @property
    def calls(self) -> int:
        """Every answered request (Prometheus' count), refused and queued ones too."""
        return sum(self.hist)

    def _snapshot(self) -> _Snapshot:
        hist = [n - s for n, s in zip(self.hist, self.skipped, strict=True)]
        return _Snapshot(hist, self.total_ns - self.skipped_ns, self.rejected, dict(self.errors))

    def reset_view(self) -> None:
        """CONFIG RESETSTAT: ``since_reset`` counts from now."""
        self._base = self._snapshot()

    def since_reset(self) -> CommandCounts:
        now, base = self._snapshot(), self._base or _ZERO
        hist = [n - b for n, b in zip(now.hist, base.hist, strict=True)]
        errors = {k: d for k, n in now.errors.items() if (d := n - base.errors.get(k, 0))}
        rejected = now.rejected - base.rejected
        return CommandCounts(
            calls=sum(hist),
            usec=(now.total_ns - base.total_ns) // 1000,
            rejected=rejected,
            failed=max(0, sum(errors.values()) - rejected),
            errors=errors,
            hist=hist,
        )


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A ``CommandStats``' counters at one moment (CONFIG RESETSTAT): the calls' histogram and time."""

    hist: list[int]
    total_ns: int
    rejected: int
    errors: dict[str, int]


_ZERO = _Snapshot([0] * LATENCY_SLOTS, 0, 0, {})


class Named(Protocol):
    @property
    def name(self) -> str: ...


class Counted(Protocol):
    """What the counters read of a registered command (``commands.table.CommandSpec`` is one)."""

    @property
    def subcommands(self) -> tuple[Named, ...]: ...


class CommandTable:
    """``CommandStats`` per registered command, found by the name as sent (``spellings``, read on
    the fast path: the lower- and upper-case spellings of each registered name); other spellings
    are looked up case-insensitively each time, so no client can grow this table. ``commands``: the
    registered commands by name (lower case), read at lookup time; a container's subcommands get
    their own counters (``CommandStats.subs``), found by ``of_request``."""

    def __init__(self, commands: Mapping[str, Counted]) -> None:
        self.commands = commands
        self.spellings: dict[bytes, CommandStats] = {}
        self.by_name: dict[str, CommandStats] = {}
        self.unknown = CommandStats("unknown")

    def of(self, spelled: bytes) -> CommandStats:
        """The counters of the command named ``spelled`` (a container's own: ``of_request`` finds its subcommand's)."""
        found = self.spellings.get(spelled)
        if found is not None:
            return found
        name = spelled.lower().decode("utf-8", "replace")
        spec = self.commands.get(name)
        if spec is None:
            return self.unknown
        stats = self.by_name.get(name)
        if stats is None:
            stats = self.by_name[name] = CommandStats(name)
            if spec.subcommands:
                stats.subs = {}
                for sub in spec.subcommands:
                    full = f"{name}|{sub.name}"
                    stats.subs[sub.name.encode()] = stats.subs[sub.name.upper().encode()] = self.by_name[full] = (
                        CommandStats(full)
                    )
        if spelled == name.encode() or spelled == name.upper().encode():  # (the registered spellings)
            self.spellings[spelled] = stats
        return stats

    def of_request(self, args: list[bytes]) -> CommandStats:
        """The counters a request counts in: its command's, or its subcommand's for a container (the
        container's own when it has no subcommand; ``unknown`` for a subcommand it does not have,
        which Redis counts nowhere)."""
        stats = self.spellings.get(args[0]) or self.of(args[0])
        return stats if stats.subs is None else self.sub(stats, args)

    def sub(self, stats: CommandStats, args: list[bytes]) -> CommandStats:
        """``of_request`` for a container's ``stats``."""
        if len(args) < 2 or stats.subs is None:
            return stats
        found = stats.subs.get(args[1])
        if found is None:
            found = stats.subs.get(args[1].lower())
        return self.unknown if found is None else found

    def all(self) -> list[CommandStats]:
        return [*self.by_name.values(), self.unknown]

    def reset_view(self) -> None:
        """CONFIG RESETSTAT: INFO commandstats, errorstats and LATENCY HISTOGRAM count from now."""
        for stats in self.all():
            stats.reset_view()


class StoreStats:
    """Store transactions by operation (``save``, ``create``, ``load``...), from the batcher's reports."""

    __slots__ = ("calls", "failures", "hist", "records", "records_hist", "total_s")

    def __init__(self) -> None:
        self.calls = 0
        self.failures = 0
        self.hist = [0] * (len(STORE_BOUNDS_S) + 1)
        self.total_s = 0.0
        self.records = 0
        self.records_hist = [0] * (len(RECORD_BOUNDS) + 1)

    def observe(self, items: int, seconds: float, failed: bool) -> None:
        self.calls += 1
        self.failures += failed
        self.hist[bisect_left(STORE_BOUNDS_S, seconds)] += 1
        self.total_s += seconds
        self.records += items
        self.records_hist[bisect_left(RECORD_BOUNDS, items)] += 1


class NodeMetrics:
    """Everything the server counts for metrics, beside ``App.stats`` (which INFO shows too).
    ``commands``: the registered commands (``CommandTable``)."""

    def __init__(self, commands: Mapping[str, Counted]) -> None:
        self.commands = CommandTable(commands)
        self.store: dict[str, StoreStats] = {}

    def store_chunk(self, operation: str, items: int, seconds: float, failure: BaseException | None) -> None:
        stats = self.store.get(operation)
        if stats is None:
            stats = self.store[operation] = StoreStats()
        stats.observe(items, seconds, failure is not None)


def error_kind(message: str) -> str:
    """The Redis error kind of a reply text: its first word (``ERR``, ``TRYAGAIN``, ``MOVED``...)."""
    return message.split(" ", 1)[0] or "ERR"

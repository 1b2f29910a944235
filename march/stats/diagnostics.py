"""What SLOWLOG, LATENCY and MONITOR show, kept per node: the slow log, latency events, the monitors.

The server records into these (a slow request, a request that waited, a store write) and feeds
the monitors; ``commands/ops.py`` answers the commands from them. Every node keeps its own: they
describe this process, not the cluster.

What this module must never do: keep or show a secret. It takes a request only as ``Redacted``
arguments: ``commands.table.redacted(args)`` has replaced the arguments each command declares
secret (AUTH, HELLO ... AUTH, ACL SETUSER password rules, CONFIG SET of a password option, and the
same inside a command carried by another: ACL DRYRUN, COMMAND GETKEYS) with ``(redacted)``, as
Redis does, before an entry is kept or a monitor line is written.

Costs: nothing here runs on the INCR fast path unless a request is slower than
``slowlog_log_slower_than`` or someone runs MONITOR (the server checks one attribute).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NewType, Protocol

from march.log import event

log = logging.getLogger("march.store")

REDACTED = b"(redacted)"
MAX_ARGS = 32  # Redis' SLOWLOG_ENTRY_MAX_ARGC: more become "... (N more arguments)"
MAX_STRING = 128  # Redis' SLOWLOG_ENTRY_MAX_STRING: longer ones become "<128 bytes>... (N more bytes)"
HISTORY = 160  # Redis' LATENCY_TS_LEN: samples kept per latency event (one per second at most)

# A request's arguments with every password replaced by ``(redacted)``. Only
# ``commands.table.redacted`` makes one (from each command's declared secrets); SLOWLOG and
# MONITOR take nothing else, so mypy refuses a request that did not go through it.
Redacted = NewType("Redacted", list[bytes])


def capped(text: str, limit: int = MAX_STRING) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were (as SLOWLOG cuts arguments)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more bytes)"


def _trimmed(args: list[bytes]) -> list[bytes]:
    """Redis' SLOWLOG truncation: at most 32 arguments, each at most 128 bytes (then a note)."""
    n = len(args)
    shown = args if n <= MAX_ARGS else args[: MAX_ARGS - 1]
    out = [
        a if len(a) <= MAX_STRING else a[:MAX_STRING] + b"... (%d more bytes)" % (len(a) - MAX_STRING) for a in shown
    ]
    if n > MAX_ARGS:
        out.append(b"... (%d more arguments)" % (n - MAX_ARGS + 1))
    return out


# --- SLOWLOG ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlowEntry:
    id: int
    time: int  # unix seconds
    duration_us: int
    args: list[bytes]  # redacted and truncated
    addr: str
    name: str


class SlowLog:
    """The newest ``slowlog_max_len`` requests that took at least ``slowlog_log_slower_than`` µs."""

    def __init__(self) -> None:
        self.entries: deque[SlowEntry] = deque()
        self._next_id = 0

    def add(self, args: Redacted, duration_us: int, addr: str, name: str, max_len: int) -> None:
        """Keep one entry (``max_len``: the current ``slowlog_max_len``, read by the caller at use time)."""
        entry = SlowEntry(self._next_id, int(time.time()), duration_us, _trimmed(args), addr, capped(name))
        self._next_id += 1
        self.entries.appendleft(entry)
        self.resize(max_len)

    def get(self, count: int) -> list[SlowEntry]:
        """The newest ``count`` entries, newest first (-1: all)."""
        entries = list(self.entries)
        return entries if count < 0 else entries[:count]

    def resize(self, max_len: int) -> None:
        """Drop the oldest entries past ``max_len`` now (they would go at the next entry anyway)."""
        while len(self.entries) > max_len:
            self.entries.pop()

    def reset(self) -> None:
        self.entries.clear()


# --- LATENCY ------------------------------------------------------------------------------------

STORE_WRITE = "store-write"  # one store transaction that writes ceilings or creates sequences
STORE_READ = "store-read"  # one store transaction that reads sequences
COMMAND_WAIT = "command-wait"  # a request that had to wait (for a store write, a read, a promotion)


@dataclass(slots=True)
class _Event:
    samples: deque[tuple[int, int]]  # (unix seconds, milliseconds), one per second at most: the worst
    max_ms: int = 0


class LatencyMonitor:
    """Latency events in Redis' shape: per event, the worst sample of each second, the last 160."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.events: dict[str, _Event] = {}
        self._clock = clock

    def add(self, event: str, ms: int) -> None:
        now = int(self._clock())
        found = self.events.get(event)
        if found is None:
            found = self.events[event] = _Event(deque(maxlen=HISTORY))
        samples = found.samples
        if samples and samples[-1][0] == now:
            if ms > samples[-1][1]:
                samples[-1] = (now, ms)
        else:
            samples.append((now, ms))
        found.max_ms = max(found.max_ms, ms)

    def latest(self) -> list[tuple[str, int, int, int]]:
        """(event, time of the latest sample, its latency, the all-time max), as LATENCY LATEST."""
        return [(name, e.samples[-1][0], e.samples[-1][1], e.max_ms) for name, e in self.events.items() if e.samples]

    def history(self, event: str) -> list[tuple[int, int]]:
        found = self.events.get(event)
        return list(found.samples) if found is not None else []

    def reset(self, names: list[str] | None = None) -> int:
        """Forget the named events (all when None); how many were forgotten."""
        if names is None:
            count = len(self.events)
            self.events.clear()
            return count
        return sum(1 for n in set(names) if self.events.pop(n, None) is not None)


# --- MONITOR ------------------------------------------------------------------------------------

_ESCAPES = {ord("\\"): b"\\\\", ord('"'): b'\\"', 10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b"}


def quoted(arg: bytes) -> bytes:
    """Redis' ``sdscatrepr``: a double-quoted string, escapes for quotes, backslashes and control bytes."""
    if arg.isascii() and arg.isalnum():
        return b'"' + arg + b'"'
    out = bytearray(b'"')
    for c in arg:
        esc = _ESCAPES.get(c)
        if esc is not None:
            out += esc
        elif 32 <= c < 127:
            out.append(c)
        else:
            out += b"\\x%02x" % c
    out += b'"'
    return bytes(out)


class Monitors:
    """The connections in MONITOR mode: client id -> how to send them a line.

    ``feeds`` is empty while nobody monitors: the server checks it once per request.
    """

    def __init__(self) -> None:
        self.feeds: dict[int, Callable[[bytes], None]] = {}

    def add(self, client_id: int, send: Callable[[bytes], None]) -> None:
        self.feeds[client_id] = send

    def remove(self, client_id: int) -> None:
        self.feeds.pop(client_id, None)

    def feed(self, args: Redacted, addr: str, but: int = 0) -> None:
        """Send every monitor (but the client whose id is ``but``) the request ``args`` of a client at
        ``addr``, in Redis' format."""
        now = time.time()
        line = b"+%d.%06d [0 %s] %s\r\n" % (
            int(now),
            int(now % 1 * 1_000_000),
            addr.encode(),
            b" ".join(map(quoted, args)),
        )
        for client_id, send in list(self.feeds.items()):
            if client_id != but:
                send(line)


# --- the store's health, as the log and LATENCY tell it -------------------------------------------

SLOW_STORE = 1.0  # seconds: a store transaction this slow is worth a line (requests wait max_wait, 2 s)


class StoreCounts(Protocol):
    """What ``StoreWatch`` counts into (``march.stats.counters.NodeMetrics`` is one)."""

    def store_chunk(self, operation: str, items: int, seconds: float, failure: BaseException | None) -> None: ...


class StoreWatch:
    """Hears of every store transaction (``march.store.batch.listeners``): counts it for metrics,
    records a LATENCY event, and logs what an operator must know: the first failure of a streak,
    the recovery (with how many failed and for how long), and transactions over ``SLOW_STORE``."""

    def __init__(
        self, metrics: StoreCounts, latency: LatencyMonitor, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.metrics = metrics
        self.latency = latency
        self.clock = clock
        self.failures = 0  # in the current streak
        self.failing_since = 0.0

    def chunk(self, operation: str, items: int, seconds: float, failure: BaseException | None) -> None:
        self.metrics.store_chunk(operation, items, seconds, failure)
        self.latency.add(STORE_READ if operation == "load" else STORE_WRITE, int(seconds * 1000))
        if failure is not None:
            if not self.failures:
                self.failing_since = self.clock()
                event(
                    log,
                    logging.WARNING,
                    "store_failing",
                    "store %s failed: %s",
                    operation,
                    failure or repr(failure),
                    operation=operation,
                    records=items,
                )
            self.failures += 1
            return
        if self.failures:
            event(
                log,
                logging.WARNING,
                "store_recovered",
                "store transactions succeed again after %d failures in %.1fs",
                self.failures,
                self.clock() - self.failing_since,
                failures=self.failures,
            )
            self.failures = 0
        if seconds > SLOW_STORE:
            event(
                log,
                logging.WARNING,
                "store_slow",
                "slow store %s: %.2fs for %d records",
                operation,
                seconds,
                items,
                operation=operation,
                seconds=round(seconds, 3),
                records=items,
            )

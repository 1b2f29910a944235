"""Flow control of the connections: how much a client's replies and unfinished requests may hold.

- ``Backpressure`` (one per connection): the replies made for a client and not sent yet. Replies
  are written once per read, or as soon as the unsent ones (those in the transport's buffer and
  those made in this read, ``unsent``) pass ``HIGH_WATER``: then, if the transport is full
  (``pause_writing``), the rest of the read waits (``Stalled``) until they drain; replies that
  would pass ``max_output_buffer`` drop the client before they are written. So a client that
  pipelines large replies and reads none holds about one reply beyond the mark. A connection also
  takes at most ``TURN_REQUESTS`` requests per turn of the event loop (``pass_turn``): the rest of
  its read waits (``Stalled``, reading paused) for its next turn, after every other connection's,
  so a deep pipeline costs the others one budget a turn, not its whole read.
- ``Intake`` (one per connection): its parser, the memory its unfinished request holds and the
  protocol error that ends it (the requests before the bad bytes still run, then the error is
  answered and the connection closes).
- ``InputBudget`` (one per server): the memory the unfinished requests of all clients hold
  together. Each connection reports its own (``RequestParser.held``, bounded per client by
  ``client_query_buffer_limit``); past ``query_buffer_budget`` the largest holders are closed,
  largest first, until the rest fit.

Limits are read from ``config`` at use time (CONFIG SET changes them live). This module never
writes a reply of its own nor closes a connection itself: it says what must happen (``DROP``,
``STALL``) or asks the holder to go (``Holder.evict``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from march.config import Config
from march.resp import ProtocolError, RequestParser

HIGH_WATER = 256 << 10  # a client's unsent replies past this: its requests wait (and reading pauses) until they drain

# What ``Backpressure.add`` says about the read's replies so far.
KEEP = 0  # go on (the replies may have been written)
STALL = 1  # written, and the transport is full: the rest of the read waits for it to drain
DROP = 2  # they would pass max_output_buffer: close the client, unwritten
# Calls one connection makes per turn of the event loop before the rest of its read waits for its
# next turn (a run of identical requests answered by one call counts as one). A new key's INCR needs
# about three turns (read, store write, reply); under 20 connections pipelining DBSIZE / SCAN by
# 5,000 (tests/transport/test_fair_under_floods.py) its p50 / p99 was 63 / 135 ms at 256, 17 / 33-80
# ms at 64, 10 / 24-56 ms at 32. The price: a pipeline deeper than 32 writes its replies and yields
# every 32 requests (PING by 1,000: 2.1 µs of CPU a request against 1.8 without the budget); reads of
# up to 32 requests (-P 16) never reach it.
TURN_REQUESTS = 32


class Configured(Protocol):
    """What holds the live configuration (the server's ``App``)."""

    config: Config


class Owner(Protocol):
    """The connection as its back-pressure sees it."""

    @property
    def busy(self) -> bool: ...  # a request's handler is running (``march.transport.waiting``)

    @property
    def closing(self) -> bool: ...

    def run(self, requests: list[list[bytes]], start: int, same_until: int, out: list[bytes] | None = None) -> None: ...

    def drop(self, why: str) -> None: ...


@dataclass(slots=True)
class Stalled:
    """Requests of a read left to run once the client's unsent replies drain below ``HIGH_WATER``."""

    requests: list[list[bytes]]
    at: int  # the next one to run
    same_until: int  # requests[at - 1 : same_until] are known to be identical (see ``Connection.run``)


class Backpressure:
    """One connection's unsent replies (see the module docstring). ``paused`` follows the
    transport's ``pause_writing``/``resume_writing``; ``made`` counts the bytes of replies made in
    this read and not written yet; ``room`` what they may take before being written (-1: not
    looked at yet in this read, most reads never need to)."""

    __slots__ = ("limits", "made", "owner", "paused", "room", "stalled", "transport")

    def __init__(self, transport: asyncio.Transport, limits: Configured, owner: Owner) -> None:
        self.transport = transport
        self.limits = limits
        self.owner = owner
        self.paused = False
        self.stalled: Stalled | None = None  # requests waiting for the unsent replies to drain
        self.made = 0
        self.room = -1
        transport.set_write_buffer_limits(high=HIGH_WATER)

    def unsent(self) -> int:
        """Bytes of replies made for this client and not sent yet (``Client.reply_room``)."""
        return self.transport.get_write_buffer_size() + self.made

    def add(self, out: list[bytes], reply: bytes) -> int:
        """Append ``reply`` to ``out`` (the read's replies not written yet); past the room left
        below ``HIGH_WATER``, write them: ``KEEP``, ``STALL`` or ``DROP`` (see the constants)."""
        out.append(reply)
        made = self.made = self.made + len(reply)
        room = self.room
        if room < 0:
            room = self.room = HIGH_WATER - self.transport.get_write_buffer_size()
        if made <= room:
            return KEEP
        if made + self.transport.get_write_buffer_size() > self.limits.config.max_output_buffer:
            return DROP
        self.write(out)
        if self.paused:
            return STALL
        self.room = HIGH_WATER - self.transport.get_write_buffer_size()
        return KEEP

    def write(self, out: list[bytes]) -> None:
        """Write the replies in ``out`` (emptied) and start counting again."""
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
        self.made = 0
        self.room = -1

    def over_limit(self) -> bool:
        """The transport holds more unsent replies than ``max_output_buffer``."""
        return self.transport.get_write_buffer_size() > self.limits.config.max_output_buffer

    def pause(self) -> None:
        """The transport's buffer passed ``HIGH_WATER`` (``pause_writing``): stop reading too."""
        self.paused = True
        self.transport.pause_reading()

    def resume(self) -> None:
        """The transport's buffer drained (``resume_writing``): read again, or first run what stalled."""
        self.paused = False
        if self.owner.busy or self.owner.closing:
            return
        if self.stalled is not None:
            # Not from inside the transport's own callback: the requests run in a turn of their own.
            asyncio.get_running_loop().call_soon(self.go_on)
        else:
            self.transport.resume_reading()

    def go_on(self) -> None:
        """Run the requests left when the unsent replies passed the high-water mark (they have drained)."""
        owner, stalled = self.owner, self.stalled
        if stalled is None or owner.busy or owner.closing or self.paused:
            return  # (dropped, or paused again meanwhile: ``resume`` comes back)
        self.stalled = None
        self.transport.resume_reading()
        owner.run(stalled.requests, stalled.at, stalled.same_until)

    def pass_turn(self, requests: list[list[bytes]], at: int, same_until: int) -> None:
        """The connection ran its ``TURN_REQUESTS`` for this turn (its replies are written): the rest of
        the read, ``requests[at:]``, runs on its next turn, after the other connections' (reading
        paused until then, so its order stays exact)."""
        self.stalled = Stalled(requests, at, same_until)
        self.transport.pause_reading()
        asyncio.get_running_loop().call_soon(self.go_on)

    def then(self, requests: list[list[bytes]], at: int, same_until: int, reply: bytes = b"") -> None:
        """A waiting request is answered with ``reply``: run the rest of its read now (the reply goes
        out in one write with theirs), or write it and run them once the replies drain
        (``Stalled``), or drop the client if they pass ``max_output_buffer``."""
        if not self.paused:
            self.transport.resume_reading()
            if reply:
                self.made += len(reply)
                self.owner.run(requests, at, same_until, [reply])
            else:
                self.owner.run(requests, at, same_until)
            return
        if reply:
            self.transport.write(reply)
        if self.over_limit():
            self.owner.drop("unread replies over max_output_buffer")
        else:
            self.stalled = Stalled(requests, at, same_until)


class Holder(Protocol):
    """A connection's input as the input budget sees it."""

    held: int  # bytes of its unfinished request, as counted in ``InputBudget.held``

    def evict(self, held: int, budget: int) -> None: ...


class Evicted(Protocol):
    """The connection as its intake sees it."""

    def evicted(self, mine: int, held: int, budget: int) -> None: ...


class Intake:
    """One connection's input (see the module docstring): ``held`` is what its unfinished request
    holds as counted in the node's budget, ``error`` the protocol error that ends it ("": none)."""

    __slots__ = ("budget", "error", "held", "owner", "parser")

    def __init__(self, parser: RequestParser, budget: InputBudget, owner: Evicted) -> None:
        self.parser = parser
        self.budget = budget
        self.owner = owner
        self.held = 0
        self.error = ""

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The complete requests in ``data`` (and before it); past a protocol error, those before it
        (``error`` is set). Past the node's budget, the largest holders are closed: this one too, maybe."""
        parser = self.parser
        try:
            requests = parser.feed(data)
        except ProtocolError as exc:
            self.error = str(exc)
            parser.discard()
            requests = exc.requests
        if parser.held != self.held:
            self.budget.hold(self, parser.held)
        return requests

    def evict(self, held: int, budget: int) -> None:
        """Its unfinished request is among the largest and all together (``held``) pass ``budget``:
        its memory goes now, and so does its connection (``Evicted.evicted``)."""
        mine = self.held
        self.release()
        self.owner.evicted(mine, held, budget)

    def release(self) -> None:
        """Give back what the unfinished request holds (the connection is gone, or going)."""
        if self.held:
            self.parser.discard()
            self.budget.hold(self, 0)


class InputBudget:
    """The unfinished requests of all connections together (see the module docstring)."""

    def __init__(self, limits: Configured) -> None:
        self.limits = limits
        self.held = 0  # bytes of unfinished requests, all connections together
        self.holders: set[Holder] = set()  # the connections holding some

    def hold(self, conn: Holder, held: int) -> None:
        """``conn`` now holds ``held`` bytes of unfinished input; past the budget, close the largest holders."""
        grown = held > conn.held
        self.held += held - conn.held
        conn.held = held
        if held:
            self.holders.add(conn)
        else:
            self.holders.discard(conn)
        budget = self.limits.config.query_buffer_budget  # (read at use time: CONFIG SET)
        if grown and 0 < budget < self.held:
            for c in sorted(self.holders, key=_held, reverse=True):
                if self.held <= budget:
                    break
                c.evict(self.held, budget)


def _held(conn: Holder) -> int:
    return conn.held

"""Flow control (march/transport/flow.py) on real uvloop transports over socket pairs: when a connection's
replies are written, when the rest of a read stalls and goes on, when a client is dropped; the
intake (parser, protocol errors, held bytes) and the node's budget of unfinished requests.

The connection is stood for by ``Owner`` below (what ``Backpressure`` and ``Intake`` call back);
the transport, the parser, the budget and the configuration are the real ones.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import uvloop

from march import config as config_module
from march.config import Config
from march.resp import RequestParser
from march.transport.flow import DROP, HIGH_WATER, KEEP, STALL, Backpressure, InputBudget, Intake, Stalled

OUTPUT_LIMIT = 1 << 20  # max_output_buffer in these tests (bytes)
BUDGET = 3_000_000  # query_buffer_budget in these tests (bytes)
K = 10_000  # (the holders' sizes below, in units of BUDGET / 300)


@dataclass
class Limits:
    config: Config = field(
        default_factory=lambda: config_module.load(
            None,
            {},
            {"max_output_buffer": OUTPUT_LIMIT, "query_buffer_budget": BUDGET, "client_query_buffer_limit": BUDGET},
        )
    )


class Owner(asyncio.Protocol):
    """The connection's side: records what flow control asks of it."""

    def __init__(self) -> None:
        self.busy = False
        self.closing = False
        self.runs: list[tuple[list[list[bytes]], int, int]] = []
        self.drops: list[str] = []
        self.evictions: list[tuple[int, int, int]] = []
        self.flow: Backpressure | None = None

    def run(self, requests: list[list[bytes]], start: int, same_until: int) -> None:
        self.runs.append((requests, start, same_until))

    def drop(self, why: str) -> None:
        self.drops.append(why)

    def evicted(self, mine: int, held: int, budget: int) -> None:
        self.evictions.append((mine, held, budget))

    def pause_writing(self) -> None:
        assert self.flow is not None
        self.flow.pause()

    def resume_writing(self) -> None:
        assert self.flow is not None
        self.flow.resume()


@dataclass
class Pair:
    flow: Backpressure
    owner: Owner
    peer: socket.socket  # the client's end: reads nothing unless a test reads it


def on_uvloop(test: Callable[[Pair], Awaitable[None]]) -> Callable[[], None]:
    """Run ``test`` in a uvloop loop (the server's: its transports' pause/resume and buffer sizes)
    with a connected pair: a real transport on our end of a socket pair, the client's end raw."""

    async def connected() -> None:
        limits, owner = Limits(), Owner()
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        try:
            transport, _ = await asyncio.get_running_loop().connect_accepted_socket(lambda: owner, ours)
            owner.flow = Backpressure(transport, limits, owner)
            try:
                await asyncio.wait_for(test(Pair(owner.flow, owner, theirs)), timeout=30)
            finally:
                transport.abort()
        finally:
            theirs.close()

    def run() -> None:
        uvloop.run(connected())

    run.__name__ = test.__name__
    return run


def received(peer: socket.socket) -> bytes:
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


@on_uvloop
async def test_replies_below_the_high_water_mark_wait_for_the_end_of_the_read(pair: Pair) -> None:
    out: list[bytes] = []
    assert pair.flow.add(out, b"+OK\r\n") == KEEP
    assert pair.flow.add(out, b"$3\r\nabc\r\n") == KEEP
    assert out == [b"+OK\r\n", b"$3\r\nabc\r\n"] and pair.flow.made == 14
    assert pair.flow.unsent() == 14  # (CLIENT LIST omem, reply_room: those made in this read count)
    await asyncio.sleep(0)
    assert received(pair.peer) == b""  # nothing written yet
    pair.flow.write(out)
    assert out == [] and pair.flow.made == 0 and pair.flow.room == -1
    await asyncio.sleep(0)
    assert received(pair.peer) == b"+OK\r\n$3\r\nabc\r\n"


@on_uvloop
async def test_replies_past_the_high_water_mark_are_written_at_once(pair: Pair) -> None:
    out: list[bytes] = []
    big = b"x" * (HIGH_WATER // 2)
    assert pair.flow.add(out, big) == KEEP and out == [big]
    assert pair.flow.add(out, big + b"y") == KEEP  # past the mark: written (the socket takes it all)
    assert out == [] and pair.flow.made == 0
    got = b""
    while len(got) < len(big) * 2 + 1:
        await asyncio.sleep(0)
        got += received(pair.peer)
    assert got == big + big + b"y"


@on_uvloop
async def test_a_full_transport_stalls_the_rest_of_the_read_until_it_drains(pair: Pair) -> None:
    out: list[bytes] = []
    chunk = b"z" * (HIGH_WATER + 1)
    statuses = []
    for _ in range(64):  # a client that reads nothing: the socket fills, then the transport's buffer
        statuses.append(pair.flow.add(out, chunk))
        if statuses[-1] != KEEP:
            break
    assert statuses[-1] == STALL and pair.flow.paused
    pair.flow.stalled = Stalled([[b"INCR", b"k"]] * 3, 1, 3)
    while pair.flow.paused:  # the client reads: the buffer drains, resume_writing comes
        received(pair.peer)
        await asyncio.sleep(0)
    assert pair.owner.runs == []  # (not from inside the transport's callback: a turn of its own)
    await asyncio.sleep(0)
    assert pair.owner.runs == [([[b"INCR", b"k"]] * 3, 1, 3)] and pair.flow.stalled is None


@on_uvloop
async def test_replies_that_would_pass_max_output_buffer_drop_the_client_unwritten(pair: Pair) -> None:
    out: list[bytes] = []
    assert pair.flow.add(out, b"a" * (OUTPUT_LIMIT + 1)) == DROP
    await asyncio.sleep(0)
    assert received(pair.peer) == b""


@on_uvloop
async def test_after_a_wait_the_read_goes_on_stalls_or_drops(pair: Pair) -> None:
    requests = [[b"INCR", b"k"]] * 2
    pair.flow.then(requests, 1, 0)
    assert pair.owner.runs == [(requests, 1, 0)]
    pair.flow.paused = True  # (as the transport's pause_writing leaves it)
    pair.flow.then(requests, 2, 0)
    assert pair.flow.stalled == Stalled(requests, 2, 0) and pair.owner.drops == []
    pair.flow.stalled = None
    pair.flow.transport.write(b"b" * (OUTPUT_LIMIT * 8))  # the client reads none of it
    assert pair.flow.over_limit()
    pair.flow.then(requests, 2, 0)
    assert pair.owner.drops == ["unread replies over max_output_buffer"] and pair.flow.stalled is None


@on_uvloop
async def test_a_busy_connection_does_not_run_stalled_requests_when_the_transport_drains(pair: Pair) -> None:
    pair.flow.paused = True
    pair.flow.stalled = Stalled([[b"PING"]], 0, 0)
    pair.owner.busy = True  # a handler runs: its reply comes first (``Waiting.finish`` goes on)
    pair.flow.resume()
    await asyncio.sleep(0)
    assert pair.owner.runs == [] and pair.flow.stalled is not None


@on_uvloop
async def test_a_spent_turn_runs_the_rest_of_the_read_on_the_next_turn_with_reading_paused(pair: Pair) -> None:
    requests = [[b"PING"]] * 3
    pair.flow.pass_turn(requests, 1, 0)
    assert pair.flow.stalled == Stalled(requests, 1, 0) and not pair.flow.transport.is_reading()  # type: ignore[attr-defined]
    assert pair.owner.runs == []  # not in this turn: the other connections' reads come first
    await asyncio.sleep(0)
    assert pair.owner.runs == [(requests, 1, 0)] and pair.flow.stalled is None
    assert pair.flow.transport.is_reading()  # type: ignore[attr-defined]


@on_uvloop
async def test_a_spent_turn_waits_for_unsent_replies_to_drain_if_they_passed_the_mark(pair: Pair) -> None:
    requests = [[b"PING"]] * 3
    pair.flow.paused = True  # (pause_writing came: the client does not read)
    pair.flow.pass_turn(requests, 2, 0)
    await asyncio.sleep(0)
    assert pair.owner.runs == [] and pair.flow.stalled == Stalled(requests, 2, 0)
    pair.flow.resume()  # (resume_writing: they drained)
    await asyncio.sleep(0)
    assert pair.owner.runs == [(requests, 2, 0)] and pair.flow.stalled is None


class Holding:
    """A connection's input as the budget sees it."""

    def __init__(self, budget: InputBudget, name: str, evicted: list[str]) -> None:
        self.budget, self.name, self.evicted_log = budget, name, evicted
        self.held = 0

    def evict(self, held: int, budget: int) -> None:
        self.evicted_log.append(self.name)
        self.budget.hold(self, 0)


def test_past_the_input_budget_the_largest_holders_are_closed_first() -> None:
    budget = InputBudget(Limits())  # query_buffer_budget 300 K
    evicted: list[str] = []
    small, large, middle = (Holding(budget, n, evicted) for n in ("small", "large", "middle"))
    budget.hold(small, 50 * K)
    budget.hold(large, 150 * K)
    budget.hold(middle, 100 * K)
    assert evicted == [] and budget.held == BUDGET  # (at the budget is within it)
    budget.hold(small, 120 * K)  # 370 K: the largest goes, and that is enough
    assert evicted == ["large"] and budget.held == 220 * K and budget.holders == {small, middle}
    budget.hold(middle, 90 * K)  # shrinking never evicts
    budget.hold(small, 0)
    assert evicted == ["large"] and budget.holders == {middle} and budget.held == 90 * K


def test_intake_keeps_the_requests_before_a_protocol_error_and_counts_what_it_holds() -> None:
    budget = InputBudget(Limits())
    owner = Owner()
    intake = Intake(RequestParser(1024, 1 << 20, 1 << 16, max_held=200), budget, owner)
    intake.parser.authenticated = True
    assert intake.feed(b"*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n*2\r\n$4\r\nINCR\r\n$3\r\nab") == [[b"INCR", b"k"]]
    assert intake.held > 0 and budget.held == intake.held and intake.error == ""
    requests = intake.feed(b"c\r\n*1\r\n$x\r\n")
    assert requests == [[b"INCR", b"abc"]]
    assert intake.error.startswith("invalid bulk length") and budget.held == intake.held


def test_an_evicted_intake_gives_its_memory_back_and_closes_its_connection() -> None:
    budget = InputBudget(Limits())
    owner = Owner()
    intake = Intake(RequestParser(1024, 4 << 20, 1 << 16, max_held=4 << 20), budget, owner)
    intake.parser.authenticated = True
    other = Holding(budget, "other", [])
    budget.hold(other, 1_000_000)
    intake.feed(b"*2\r\n$4\r\nINCR\r\n$3000000\r\n" + b"k" * 1_500_000)
    before = intake.held
    assert owner.evictions == [] and before >= 1_500_000 and budget.held == 1_000_000 + before
    intake.feed(b"k" * 1_000_000)  # past the budget: the largest holder (this one) goes, and that is enough
    [(mine, held, limit)] = owner.evictions
    assert mine >= before + 1_000_000 and held == 1_000_000 + mine and limit == BUDGET
    assert intake.held == 0 and budget.holders == {other} and budget.held == 1_000_000
    assert intake.feed(b"*1\r\n$4\r\nPING\r\n") == [[b"PING"]]  # (its parser starts afresh)

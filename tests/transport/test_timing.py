"""Request timing (march/transport/timing.py): how a read's requests are counted and timed by command
(commandstats, the latency histograms), which go to SLOWLOG and which waits to LATENCY, with the
server's own counters, SLOWLOG, LATENCY monitor, command table and configuration.

The client is stood for by ``Sender`` (what SLOWLOG shows of it: address, name; and its last command).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import march.commands  # noqa: F401  (registers the commands: the stats are found by registered name)
from march import config as config_module
from march.commands.table import COMMANDS
from march.config import Config
from march.stats.counters import CommandStats, CommandTable
from march.stats.diagnostics import COMMAND_WAIT, LatencyMonitor, SlowLog
from march.transport import timing
from march.transport.timing import RequestTimer

MS = 1_000_000  # ns


@dataclass
class Sender:
    addr: str = "127.0.0.1:5000"
    name: str = "app"
    cmd: CommandStats | None = None


@dataclass
class Limits:
    config: Config


@dataclass
class Timed:
    timer: RequestTimer
    commands: CommandTable
    slowlog: SlowLog
    latency: LatencyMonitor
    sender: Sender = field(default_factory=Sender)

    def calls(self, name: str) -> int:
        return self.commands.by_name[name].calls if name in self.commands.by_name else 0

    def total_ns(self, name: str) -> int:
        return self.commands.by_name[name].total_ns


def timed(slower_than_us: int = 10_000) -> Timed:
    config = config_module.load(None, {}, {"slowlog_log_slower_than": slower_than_us})
    sender, commands, slowlog, latency = Sender(), CommandTable(COMMANDS), SlowLog(), LatencyMonitor()
    return Timed(RequestTimer(sender, commands, slowlog, latency, Limits(config)), commands, slowlog, latency, sender)


INCR = [b"INCR", b"k"]
GET = [b"GET", b"k"]


def test_one_request_is_timed_exactly() -> None:
    t = timed()
    t.timer.read([INCR], 0, 1, 1234, 0, None)
    stats = t.commands.by_name["incr"]
    assert stats.calls == 1 and stats.total_ns == 1234 and stats.hist[(1234).bit_length()] == 1
    assert list(t.slowlog.entries) == []


def test_a_run_of_identical_requests_shares_the_read_time() -> None:
    t = timed()
    t.timer.read([INCR] * 10, 2, 10, 800, 8, None)  # the last 8, all answered in runs
    stats = t.commands.by_name["incr"]
    assert stats.calls == 8 and stats.total_ns == 800 and stats.hist[(100).bit_length()] == 8


def test_a_mixed_read_is_counted_by_command_each_with_its_share() -> None:
    t = timed()
    t.timer.read([INCR, INCR, GET, b"incr k".split()], 0, 4, 4000, 0, None)
    assert t.calls("incr") == 3 and t.total_ns("incr") == 3000
    assert t.calls("get") == 1 and t.total_ns("get") == 1000


def test_requests_refused_before_they_ran_are_answered_but_no_calls() -> None:
    t = timed(0)  # every request is slow: the refused one still is not
    t.timer.read([GET, INCR, INCR], 0, 3, 3000, 0, [0])
    get, incr = t.commands.by_name["get"], t.commands.by_name["incr"]
    assert get.calls == 1 and get.total_ns == 1000  # answered, with its share (Prometheus sees it)
    counts = get.since_reset()
    assert counts.calls == 0 and counts.usec == 0 and sum(counts.hist) == 0  # but no call (INFO, LATENCY)
    assert incr.calls == 2 and incr.total_ns == 2000 and incr.since_reset().calls == 2
    assert [e.args[0] for e in t.slowlog.entries] == [b"INCR", b"INCR"]


def test_slow_requests_go_to_slowlog_with_their_share() -> None:
    t = timed(1000)  # 1 ms
    t.timer.read([INCR] * 4, 0, 4, 8 * MS, 4, None)  # 2 ms each
    entries = list(t.slowlog.entries)
    assert len(entries) == 4 and {e.duration_us for e in entries} == {2000}
    assert entries[0].addr == "127.0.0.1:5000" and entries[0].name == "app"
    t.timer.read([INCR] * 4, 0, 4, 2 * MS, 4, None)  # 0.5 ms each: not slow
    assert len(t.slowlog.entries) == 4


def test_slowlog_skips_unknown_commands_exec_and_requests_multi_queued() -> None:
    t = timed(0)
    t.timer.read([[b"NOSUCH"], [b"EXEC"]], 0, 2, 2 * MS, 0, None)
    assert list(t.slowlog.entries) == []
    t.timer.read([[b"MULTI"], INCR], 0, 2, MS, 0, [1])  # INCR queued: logged when EXEC runs it
    assert [e.args for e in t.slowlog.entries] == [[b"MULTI"]]
    assert t.commands.by_name["incr"].since_reset().calls == 0
    t.timer.read([INCR], 0, 1, MS, 0, None)
    assert [e.args for e in t.slowlog.entries] == [INCR, [b"MULTI"]]


def test_reads_one_after_another_count_each_in_its_own_commands_counters() -> None:
    """One-request reads in a row (the timer keeps the last spelling and its counters, and sets the
    client's ``cmd`` only when it changes): each read counts where a lookup of its own would."""
    t = timed()
    reads = [INCR, [b"INCR", b"j"], GET, [b"incr", b"k"], [b"InCr", b"k"], [b"NOSUCH"], [b"NOSUCH"], INCR]
    reads += [[b"CLIENT", b"LIST"], [b"CLIENT", b"SETNAME", b"x"], [b"CLIENT", b"LIST"], GET]
    for args in reads:
        t.timer.read([[bytes(a) for a in args]], 0, 1, 1000, 0, None)  # (a new name object each read)
        assert t.sender.cmd is t.commands.of_request(args), args
    assert t.calls("incr") == 5 and t.calls("get") == 2 and t.commands.unknown.calls == 2
    assert t.calls("client|list") == 2 and t.calls("client|setname") == 1 and t.calls("client") == 0
    t.timer.waited(INCR, 1000, False)  # (a request that waited: counted alone, the client's last command)
    assert t.sender.cmd is t.commands.by_name["incr"] and t.calls("incr") == 6
    t.timer.read([GET], 0, 1, 1000, 0, None)
    assert t.sender.cmd is t.commands.by_name["get"] and t.calls("get") == 3


def test_a_containers_requests_count_in_their_subcommands() -> None:
    t = timed()
    listing, name = [b"CLIENT", b"LIST"], [b"client", b"setname", b"x"]
    t.timer.read([listing, name, name, INCR, [b"Client", b"List"]], 0, 5, 5000, 0, None)
    assert t.calls("client|list") == 2 and t.calls("client|setname") == 2 and t.calls("incr") == 1
    assert t.calls("client") == 0
    assert t.sender.cmd is t.commands.by_name["client|list"]  # the read's last request (CLIENT LIST cmd=)
    t.timer.read([[b"CONFIG", b"RESETSTAT"]] * 3, 0, 3, 3000, 3, None)  # a run of one subcommand
    assert t.calls("config|resetstat") == 3 and t.total_ns("config|resetstat") == 3000
    t.timer.read([[b"CLIENT", b"NOSUCH"], [b"CLIENT"]], 0, 2, 2000, 0, None)
    assert t.commands.unknown.calls == 1 and t.calls("client") == 1  # Redis counts an unknown subcommand nowhere
    assert t.sender.cmd is t.commands.by_name["client"]


def test_a_request_that_waited_is_a_wait_and_a_latency_event() -> None:
    t = timed()
    t.timer.waited(INCR, 25 * MS, throttled=False)
    stats = t.commands.by_name["incr"]
    assert stats.calls == 1 and stats.waits == 1 and stats.total_ns == 25 * MS
    assert [e.duration_us for e in t.slowlog.entries] == [25_000]
    [(event, _, ms, worst)] = t.latency.latest()
    assert (event, ms, worst) == (COMMAND_WAIT, 25, 25)


def test_a_request_refused_after_its_wait_is_no_call() -> None:
    t = timed(0)
    t.timer.waited(INCR, 25 * MS, throttled=False, skipped=True)  # MOVED once the promotion went elsewhere
    stats = t.commands.by_name["incr"]
    assert stats.calls == 1 and stats.waits == 1 and stats.since_reset().calls == 0
    assert list(t.slowlog.entries) == []


def test_an_auth_held_back_by_the_throttle_takes_no_time() -> None:
    t = timed(0)
    t.timer.waited([b"AUTH", b"pw"], 300 * MS, throttled=True)
    stats = t.commands.by_name["auth"]
    assert stats.calls == 1 and stats.waits == 0 and stats.total_ns == 0
    assert list(t.slowlog.entries) == [] and t.latency.latest() == []


def test_an_empty_stretch_counts_nothing() -> None:
    t = timed(0)
    t.timer.read([INCR, GET], 1, 1, 5000, 0, None)  # (a read whose first request waited)
    t.timer.read([INCR, GET], 1, 1, 5000, 0, [])
    assert t.commands.by_name == {} and list(t.slowlog.entries) == []


@pytest.mark.parametrize("fast", [True, False], ids=["c-loop", "bit_length"])
def test_a_duration_lands_in_the_slot_of_its_bit_length_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    monkeypatch.setattr(timing, "_FAST", fast)  # (the compiled build's loop, or int.bit_length: both, on both builds)
    t = timed()
    durations = [0, 1, 2, 3, 4095, 4096, 1234, 10**9, 2**40 - 1, 2**40, 2**62]
    for ns in durations:
        t.timer.read([INCR], 0, 1, ns, 0, None)
    t.timer.read([INCR, GET], 0, 2, 2 * 4097, 0, None)  # (``mixed``: each its share, 4097)
    hist = t.commands.by_name["incr"].hist
    expected = [0] * len(hist)
    for ns in [*durations, 4097]:
        expected[ns.bit_length()] += 1
    assert hist == expected
    assert t.commands.by_name["get"].hist[(4097).bit_length()] == 1


def test_the_slowlog_threshold_follows_a_replaced_config() -> None:
    t = timed(slower_than_us=10_000)
    t.timer.read([INCR], 0, 1, 5 * MS, 0, None)
    assert list(t.slowlog.entries) == []
    limits = t.timer.limits
    limits.config = config_module.load(None, {}, {"slowlog_log_slower_than": 1000})  # (as CONFIG SET replaces it)
    t.timer.read([INCR], 0, 1, 5 * MS, 0, None)
    assert len(list(t.slowlog.entries)) == 1
    limits.config = config_module.load(None, {}, {"slowlog_log_slower_than": -1})
    t.timer.read([INCR], 0, 1, 5 * MS, 0, None)
    assert len(list(t.slowlog.entries)) == 1

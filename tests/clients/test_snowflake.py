"""march_client.snowflake: the generator's rules with a scripted worker server (bounds, carries,
clock jumps, lost tokens, deadlines), then real processes against a real march: two generators
never share a worker id, also after a kill -9 and the expiry of the dead one's lease, and their
IDs stay unique through a 10 s clock jump back in one of them.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from array import array
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions as rex
from march_client import Sequencer, Unavailable, WorkerLost
from march_client.snowflake import EPOCH_MS, MAX_SEQ, SnowflakeGenerator, compose, decode, wall_ms
from march_harness import MarchServer, wait_until

pytestmark = pytest.mark.e2e

# -- with a scripted server ------------------------------------------------------------------------


class FakeWorkers:
    """WORKER.ACQUIRE/RENEW/RELEASE of one holder, recording what the generator declared."""

    def __init__(self, floor_ms: int = 0, ttl: int = 3) -> None:
        self.floor_ms = floor_ms
        self.ttl = ttl
        self.uptos: list[int] = []
        self.released: list[int] = []
        self.renew_error: BaseException | None = None
        self.renews = 0

    def execute(self, *args: Any, retry_for: float | None = None) -> Any:
        command = args[0]
        if command == "WORKER.ACQUIRE":
            return [7, b"token", self.ttl, self.floor_ms]
        assert args[2:4] == (7, b"token")
        if command == "WORKER.RENEW":
            if self.renew_error is not None:
                raise self.renew_error
            self.renews += 1
            self.uptos.append(args[5])
            return self.ttl
        if command == "WORKER.RELEASE":
            self.released.append(args[5])
            return b"OK"
        raise AssertionError(args)

    def close(self) -> None:
        pass


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def fake() -> FakeWorkers:
    return FakeWorkers()


def make(fake: FakeWorkers, **kwargs: Any) -> SnowflakeGenerator:
    seq = Sequencer("redis://127.0.0.1:1")  # never connects: its router is replaced
    seq.router = fake  # type: ignore[assignment]
    return SnowflakeGenerator(seq, "ns", fake.ttl, **kwargs)


@pytest.fixture
def gen_factory(fake: FakeWorkers) -> Iterator[Callable[..., SnowflakeGenerator]]:
    made: list[SnowflakeGenerator] = []

    def new(**kwargs: Any) -> SnowflakeGenerator:
        made.append(make(fake, **kwargs))
        return made[-1]

    yield new
    for g in made:
        g.close()


def test_layout_round_trip() -> None:
    value = compose(EPOCH_MS + 123_456, 1023, 4095)
    assert decode(value) == (EPOCH_MS + 123_456, 1023, 4095)
    assert compose(EPOCH_MS + 2**41 - 1, 1023, 4095) == 2**63 - 1  # the whole layout fits a signed 64-bit


def test_first_id_is_above_the_floor_and_a_bound_is_declared_first(
    fake: FakeWorkers, gen_factory: Callable[..., SnowflakeGenerator]
) -> None:
    now = wall_ms()
    fake.floor_ms = now + 5_000  # an earlier holder declared it may have used the next 5 s
    g = gen_factory()
    assert fake.uptos and fake.uptos[0] > fake.floor_ms  # declared before any ID
    first = g.decode(g.next())
    assert first.unix_ms == fake.floor_ms + 1 and first.worker == 7 and first.sequence == 0


def test_ids_increase_through_a_clock_jump_back(gen_factory: Callable[..., SnowflakeGenerator]) -> None:
    clock = Clock(wall_ms())
    g = gen_factory(clock=clock)
    before = [g.next() for _ in range(10)]
    clock.ms -= 10_000
    after = [g.next() for _ in range(10)]
    assert before + after == sorted(set(before + after))
    assert {g.decode(i).unix_ms for i in after} == {g.decode(before[-1]).unix_ms}  # held at the last time


def test_a_full_millisecond_carries_into_the_next(gen_factory: Callable[..., SnowflakeGenerator]) -> None:
    clock = Clock(wall_ms())
    g = gen_factory(clock=clock)
    ids = [g.next() for _ in range(3 * (MAX_SEQ + 1))]
    assert ids == sorted(set(ids))
    times = [g.decode(i).unix_ms for i in ids]
    assert times[0] == clock.ms and times[-1] == clock.ms + 2


def test_never_past_the_declared_bound(fake: FakeWorkers, gen_factory: Callable[..., SnowflakeGenerator]) -> None:
    fake.ttl = 1  # the wait below lasts until the local deadline: ~0.9 s
    clock = Clock(wall_ms())
    g = gen_factory(clock=clock)
    fake.renew_error = Unavailable("down")  # no bound beyond the first
    bound = g.upto_ms
    clock.ms = bound + 60_000  # the wall clock runs far ahead of what the server confirmed
    issued = []
    with pytest.raises(WorkerLost, match="no renew in time"):
        for _ in range(2 * (MAX_SEQ + 1)):
            issued.append(g.next())
    assert len(issued) == MAX_SEQ + 1  # the bound's last millisecond, then it waited until the deadline
    assert max(g.decode(i).unix_ms for i in issued) == bound


def test_a_refused_token_ends_the_generator(fake: FakeWorkers, gen_factory: Callable[..., SnowflakeGenerator]) -> None:
    g = gen_factory()
    g.next()
    fake.renew_error = rex.ResponseError("worker id 7 in namespace 'ns' is not held with this token")
    g._wake.set()  # renew now instead of in ttl/3

    def refused() -> str | None:
        try:
            g.next()
        except WorkerLost as e:
            return str(e)
        return None

    assert "not held" in wait_until(refused, 5.0, message="the renew thread sees the refusal")
    fake.renew_error = None
    with pytest.raises(WorkerLost):
        g.next()  # for good: the id may be someone else's now


def test_the_deadline_stops_it_and_a_late_renew_resumes_it(
    fake: FakeWorkers, gen_factory: Callable[..., SnowflakeGenerator]
) -> None:
    mono = [1000.0]
    g = gen_factory(monotonic=lambda: mono[0])
    last = g.next()
    fake.renew_error = Unavailable("down")
    mono[0] += fake.ttl  # past the deadline (send time + ttl - safety)
    with pytest.raises(WorkerLost, match="no renew in time"):
        g.next()
    fake.renew_error = None  # the server answers again and still knows our token

    def resumed() -> int | None:
        g._wake.set()
        try:
            return g.next()
        except WorkerLost:
            return None

    assert wait_until(resumed, 5.0, message="a renew lets it go on") > last


def test_close_releases_with_the_last_time(fake: FakeWorkers) -> None:
    g = make(fake)
    last = g.decode(g.next()).unix_ms
    g.close()
    assert fake.released == [last]
    with pytest.raises(rex.RedisError, match="closed"):
        g.next()
    g.close()  # idempotent


# -- real processes against a real march ------------------------------------------------------------

NS = "orders"


def _hold(url: str, ttl: int, count: int, jump_after: int | None, out: str, stop: Connection) -> None:
    """A process with a generator: ``count`` IDs (the clock jumps back 10 s after ``jump_after``),
    written to ``out`` as [worker, ids...]; then holds its id (renewing) until ``stop``."""
    offset = [0]

    def clock() -> int:
        return wall_ms() - offset[0]

    with SnowflakeGenerator(url, NS, ttl, clock=clock) as g:
        values = array("q", [g.worker_id])
        for i in range(count):
            if i == jump_after:
                offset[0] = 10_000
            values.append(g.next())
        tmp = out + ".tmp"
        Path(tmp).write_bytes(values.tobytes())
        os.rename(tmp, out)  # the test reads only a complete file
        stop.poll(60)  # until the test closes its end of the pipe (bounded either way)


def _read(out: Path) -> tuple[int, list[int]]:
    values = array("q")
    values.frombytes(out.read_bytes())
    return values[0], list(values[1:])


def _held_ids(r: redis.Redis) -> set[int]:
    return {int(entry[0]) for entry in r.execute_command("WORKER.LIST", NS)}


def test_processes_never_share_a_worker_id_through_kill_and_expiry(
    march_factory: Callable[..., MarchServer], tmp_path: Path
) -> None:
    server = march_factory(extra_args=["--worker-margin", "0.2"])
    url = server.url
    ctx = multiprocessing.get_context("spawn")
    procs: list[multiprocessing.process.BaseProcess] = []
    stops: list[Connection] = []  # one pipe per process: a killed child cannot block the others' stop

    def start(name: str, ttl: int, count: int, jump_after: int | None = None) -> Path:
        out = tmp_path / name
        theirs, ours = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_hold, args=(url, ttl, count, jump_after, str(out), theirs), name=name)
        p.start()
        procs.append(p)
        stops.append(ours)
        return out

    def finished(out: Path) -> Path:
        wait_until(out.exists, 60, 0.02, f"{out.name} wrote its IDs")
        return out

    try:
        with redis.Redis(port=server.port) as r:
            out1 = start("p1", 3, 20_000)
            out2 = start("p2", 3, 20_000, jump_after=10_000)  # its clock goes back 10 s halfway
            w1, ids1 = _read(finished(out1))
            w2, ids2 = _read(finished(out2))
            assert w1 != w2
            assert ids1 == sorted(set(ids1)) and ids2 == sorted(set(ids2)), "each generator's IDs increase"
            assert not set(ids1) & set(ids2)

            procs[0].kill()  # kill -9: p1 never releases; its lease runs out on the server
            procs[0].join(10)
            reply = r.execute_command("WORKER.ACQUIRE", NS, "TTL", 5)  # while p1's holding still lives
            assert int(reply[0]) not in (w1, w2)
            r.execute_command("WORKER.RELEASE", NS, reply[0], reply[1])

            wait_until(lambda: w1 not in _held_ids(r), 30, 0.05, "p1's id expires and rests")
            out3 = start("p3", 3, 20_000)
            w3, ids3 = _read(finished(out3))
            assert w3 == w1  # the lowest free id: the dead process's
            assert min(decode(i).unix_ms for i in ids3) > max(decode(i).unix_ms for i in ids1)  # above its floor
            assert len(set(ids1) | set(ids2) | set(ids3)) == len(ids1) + len(ids2) + len(ids3)
            assert w2 in _held_ids(r)  # p2 kept renewing all along
    finally:
        for s in stops:
            s.close()  # the child's poll() returns: end of file
        for p in procs:
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs[1:]] == [0, 0]


def test_generator_on_a_real_server_releases_on_close(march_url: str) -> None:
    with Sequencer(march_url) as seq:
        with SnowflakeGenerator(seq, "solo", 2) as g:
            first = g.next()
            worker = g.worker_id
        with SnowflakeGenerator(seq, "solo", 2) as again:
            assert again.worker_id == worker  # released: free at once
            assert again.floor_ms >= decode(first).unix_ms
            assert again.next() > first


def test_wall_clock_helper_is_unix_ms() -> None:
    assert abs(wall_ms() - time.time() * 1000) < 1000

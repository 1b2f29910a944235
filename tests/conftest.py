"""Shared fixtures for process-level tests (tests/e2e, tests/fault).

- `march_server`: a started march process on a free loopback port with a fresh data dir.
- `march_factory`: start more march processes (e.g. a second one on the same data dir).
- `server_pair`: one march and one redis-server shared by a test module (comparison tests).
- `redis_server`: a started real redis-server (no persistence) for tests that take their
  expected value from Redis. Skipped only if the binary is missing on a developer machine;
  under CI (CI=true) a missing binary is a failure, since scripts/test installs it.

Every process started here is stopped and reaped at teardown; if the test failed, the tail
of each server's log is printed with the failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support import MarchServer, RedisServer, serving

S = TypeVar("S", MarchServer, RedisServer)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by directory so `-m "not fault"` and `-m e2e` work without decorating each test."""
    root = Path(__file__).parent
    for item in items:
        try:
            first = Path(item.path).relative_to(root).parts[0]
        except ValueError:
            continue
        if first in ("e2e", "fault"):
            item.add_marker(getattr(pytest.mark, first))


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


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """Path of redis-server; skips the test where it is missing, except under CI where that is a failure."""
    path = shutil.which("redis-server")
    if path is None:
        msg = "redis-server not found on PATH (scripts/test installs it with apt)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


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
def server_pair(
    tmp_path_factory: pytest.TempPathFactory, redis_binary: str
) -> Iterator[tuple[MarchServer, RedisServer]]:
    """One march and one redis-server shared by a module of comparison tests (use unique keys).

    March must still be alive at the end and exit 0 on SIGTERM: no test in the module may
    have crashed it.
    """
    base = tmp_path_factory.mktemp("pair")
    with (
        serving(RedisServer(base / "redis", binary=redis_binary)) as redis,
        serving(MarchServer.in_dir(base), during="the module", clean_exit=True) as march,
    ):
        yield march, redis

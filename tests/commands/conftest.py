"""Fixtures for command tests: one march and one redis-server process for the whole package.

- ``march_proc`` / ``redis_proc``: the processes (free loopback ports; redis-server without
  persistence). March must still be alive at the end and exit 0 on SIGTERM.
- ``mc`` / ``rc``: a redis-py client (RESP3, redis-py's default) on one connection to each.
- ``key``: a key name no other test uses (both servers live for the whole package).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from support import MarchServer, RedisServer

from .helpers import client


@pytest.fixture(scope="package")
def march_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    base = tmp_path_factory.mktemp("commands-march")
    server = MarchServer(base / "data", log_path=base / "march.log")
    try:
        server.start()
        yield server
        assert server.running, f"march died during the command tests\n{server.describe()}"
    finally:
        code = server.stop()
    assert code == 0, f"march exited with {code} on SIGTERM\n{server.describe()}"


@pytest.fixture(scope="package")
def redis_proc(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("commands-redis"), binary=redis_binary)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def mc(march_proc: MarchServer) -> Iterator[redis.Redis]:
    c = client(march_proc.port)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def rc(redis_proc: RedisServer) -> Iterator[redis.Redis]:
    c = client(redis_proc.port)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    return "cmd:" + request.node.name

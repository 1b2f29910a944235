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
from march_harness import MarchServer, RedisServer, serving
from march_harness.compare import client


@pytest.fixture(scope="package")
def march_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    server = MarchServer.in_dir(tmp_path_factory.mktemp("commands-march"))
    with serving(server, during="the command tests", clean_exit=True):
        yield server


@pytest.fixture(scope="package")
def redis_proc(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[RedisServer]:
    with serving(RedisServer(tmp_path_factory.mktemp("commands-redis"), binary=redis_binary)) as server:
        yield server


@pytest.fixture
def mc(march_proc: MarchServer) -> Iterator[redis.Redis]:
    with client(march_proc.port) as c:  # closed at the end of the block
        yield c


@pytest.fixture
def rc(redis_proc: RedisServer) -> Iterator[redis.Redis]:
    with client(redis_proc.port) as c:
        yield c


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    return "cmd:" + request.node.name

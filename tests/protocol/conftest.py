"""Fixtures for protocol tests: one march and one redis-server process on free loopback ports.

- ``march`` / ``redis``: one of each for the whole package (default settings; tests use their own
  keys). March must still be alive at the end and exit 0 on SIGTERM.
- ``march_locked`` / ``redis_locked``: one of each started with ``requirepass`` ``raw.PASSWORD``;
  ``locked`` runs a test against both.
- ``march_factory`` (from tests/conftest.py): a march with other flags, stopped after the test.

Nothing here sleeps to synchronise: every wait polls a condition with a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from march_harness import MarchServer, RedisServer, serving
from march_harness.raw import PASSWORD


@pytest.fixture(scope="package")
def march(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    server = MarchServer.in_dir(tmp_path_factory.mktemp("protocol-march"))
    with serving(server, during="the protocol tests", clean_exit=True):
        yield server


@pytest.fixture(scope="package")
def redis(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[RedisServer]:
    with serving(RedisServer(tmp_path_factory.mktemp("protocol-redis"), binary=redis_binary)) as server:
        yield server


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A key no other test uses (both servers live for the whole package)."""
    return "proto:" + request.node.name


@pytest.fixture(params=["march", "redis"])
def server(request: pytest.FixtureRequest) -> MarchServer | RedisServer:
    """The test runs against march and against a real redis-server, with the same expected bytes."""
    s: MarchServer | RedisServer = request.getfixturevalue(request.param)
    return s


@pytest.fixture(scope="package")
def march_locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    server = MarchServer.in_dir(tmp_path_factory.mktemp("locked-march"), requirepass=PASSWORD)
    with serving(server):
        yield server


@pytest.fixture(scope="package")
def redis_locked(tmp_path_factory: pytest.TempPathFactory, redis_binary: str) -> Iterator[RedisServer]:
    workdir = tmp_path_factory.mktemp("locked-redis")
    with serving(RedisServer(workdir, binary=redis_binary, extra_args=["--requirepass", PASSWORD])) as server:
        yield server


@pytest.fixture(params=["march_locked", "redis_locked"])
def locked(request: pytest.FixtureRequest) -> MarchServer | RedisServer:
    """The test runs against march and redis-server, both with ``requirepass`` ``raw.PASSWORD``."""
    s: MarchServer | RedisServer = request.getfixturevalue(request.param)
    return s

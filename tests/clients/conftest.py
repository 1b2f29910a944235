"""Fixtures for the Python client's tests (tests/clients): a running march and clients on it.

- `march_url`: ``redis://127.0.0.1:<port>`` of a fresh march process (tests/conftest.py's
  `march_server`, stopped at teardown).
- `sequencer`: a `march_client.Sequencer` on it, closed at teardown.
- `prefetch_sequencer`: the same with ``prefetch=True``.

The client package is `clients/python`, installed editable by scripts/_env.sh.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from march_client import Sequencer
from march_harness import MarchServer
from march_harness.postgres import postgres  # noqa: F401 - one throwaway PostgreSQL per session (ORM tests)


@pytest.fixture
def march_url(march_server: MarchServer) -> str:
    return march_server.url


@pytest.fixture
def sequencer(march_url: str) -> Iterator[Sequencer]:
    with Sequencer(march_url, retry_for=5.0) as seq:
        yield seq


@pytest.fixture
def prefetch_sequencer(march_url: str) -> Iterator[Sequencer]:
    with Sequencer(march_url, prefetch=True, retry_for=5.0) as seq:
        yield seq

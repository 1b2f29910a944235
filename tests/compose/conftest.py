"""The `compose` marker: tests that bring up docker-compose.yml with podman (minutes on a cold
machine: the images are built first). Deselect them with `-m "not compose"`."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "compose: brings up docker-compose.yml for real with podman (slow)")

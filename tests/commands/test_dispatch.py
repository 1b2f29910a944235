"""What a client sees when a handler fails: Redis-shaped, retryable where it got no ID."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from march import errors
from march.commands.dispatch import as_error
from march.errors import CommandError, GuardFailed, StoreError
from march.generators.bound import NotServing


def _client(shutting_down: bool = False) -> Any:
    event = asyncio.Event()
    if shutting_down:
        event.set()
    return SimpleNamespace(app=SimpleNamespace(shutdown_requested=event))


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (CommandError("ERR custom"), "ERR custom"),
        (NotServing("lease expired"), errors.NOT_SERVING),
        (StoreError("timeout"), errors.TRYAGAIN_STORE_DOWN),
        (GuardFailed("lost leadership"), errors.TRYAGAIN_STORE_DOWN),
    ],
)
def test_failures_map_to_redis_errors(exc: Exception, expected: str) -> None:
    assert as_error(_client(), exc).message == expected


def test_a_bug_is_one_error_reply() -> None:
    message = as_error(_client(), ZeroDivisionError("boom")).message
    assert message.startswith("ERR internal error: ZeroDivisionError")


def test_shutting_down_says_so() -> None:
    assert as_error(_client(shutting_down=True), NotServing("stopped")).message == errors.SHUTTING_DOWN
    assert as_error(_client(shutting_down=True), CommandError("ERR x")).message == "ERR x"


def test_retryable_errors_use_redis_prefixes() -> None:
    # redis-py maps these prefixes to TryAgainError / ClusterDownError: the client knows to retry.
    assert errors.TRYAGAIN_STORE_DOWN.startswith("TRYAGAIN ")
    assert errors.NOT_SERVING.startswith("CLUSTERDOWN ")
    assert errors.SHUTTING_DOWN.startswith("TRYAGAIN ")

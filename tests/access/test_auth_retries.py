"""A mistyped password through redis-py 8, which retries a failed AUTH by itself, against a real
march process (``auth.AuthThrottle``).

redis-py 8 takes ``WRONGPASS`` for a connection error (``AuthenticationError`` is a
``ConnectionError``) and connects again, ten more times, each time sending the same password, with
a jittered backoff of its own between tries (1 to ~5.3 s in all, 4.3 s measured against Redis
itself). Each of those tries must get ``WRONGPASS`` at once, and none may count as a new guess:

- with redis-py's retries and no backoff of its own, the wrong password fails in well under a
  second (it took 7 s and more when each try waited its turn in the throttle);
- with redis-py's defaults it fails within redis-py's own backoff;
- the throttle did not deepen: another wrong password right after is answered at once, and the
  right one logs in at once;
- a guesser from another address (127.0.0.2) trying a different password each time is still held
  to a few tries per second.

Every server is stopped by its fixture.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError
from march_harness.cluster import parse_info
from redis.backoff import NoBackoff
from redis.retry import Retry

from march import errors

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]
PASSWORD = "the-Right-0ne"
ATTACKER = "127.0.0.2"


class StrangerConn(RespConn):
    """A ``RespConn`` from ``ATTACKER``."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((ATTACKER, 0))
            sock.settimeout(timeout)
            sock.connect(("127.0.0.1", port))
        except BaseException:
            sock.close()
            raise
        self.sock, self.timeout, self.buf, self.raw_log = sock, timeout, b"", b""


def fails_in(**kwargs: object) -> float:
    """Seconds a redis-py 8 client with ``kwargs`` takes to fail its first command (AuthenticationError)."""
    started = time.monotonic()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(**kwargs).incr("x")  # type: ignore[arg-type]
    return time.monotonic() - started


def test_a_mistyped_password_fails_at_once_and_guessing_stays_throttled(march_factory: Factory) -> None:
    server = march_factory(requirepass=PASSWORD)
    took = fails_in(port=server.port, password="typo", retry=Retry(NoBackoff(), 10))  # 11 tries at once
    assert took < 1.0, f"a mistyped password took {took:.2f} s to fail through redis-py (11 tries)"
    with_defaults = fails_in(port=server.port, password="typo2")  # redis-py's own backoff between tries
    assert with_defaults < 6.5, f"{with_defaults:.2f} s with redis-py's defaults (its own backoff: at most ~5.3 s)"
    with RespConn(server.port) as c:
        started = time.monotonic()
        assert c.call("AUTH", "another-typo") == RespError(errors.WRONGPASS)  # the throttle did not deepen
        assert c.call("AUTH", PASSWORD) == "OK"
        assert time.monotonic() - started < 0.5
        assert int(parse_info(c.call("INFO", "stats"))["acl_access_denied_auth"]) == 23  # (each counted, as Redis)
    with redis.Redis(port=server.port, password=PASSWORD) as r:
        assert int(r.incr("x")) == 1
    # A guesser: a new password each time, on a new connection each time, from another address.
    started, answers = time.monotonic(), []
    for i in range(8):
        with StrangerConn(server.port) as guesser:
            answers.append(guesser.call("AUTH", f"guess-{i}"))
    guessing = time.monotonic() - started
    assert all(a in (RespError(errors.WRONGPASS), RespError(errors.AUTH_THROTTLED)) for a in answers), answers
    assert guessing > 2.0, f"8 different guesses in {guessing:.2f} s: not throttled"  # a few a second at most
    print(f"a mistyped password fails in {took:.2f} s (11 tries), {with_defaults:.2f} s with redis-py's defaults;")
    print(f"8 different guesses from {ATTACKER} took {guessing:.2f} s")

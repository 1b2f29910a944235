"""``MARCH.LINK``, the forwarding links' internal command (``commands.forward``), on a real
single-node march process (the receiving side needs no cluster).

- Without ``cluster_secret`` it does not exist: ``ERR unknown command``, and COMMAND does not list it.
- With one: a right proof of the secret over a fresh nonce makes the connection a link (named
  ``march-link:<node>`` in CLIENT LIST) even with a password set; a link runs requests as the user
  it announces (``AS``) and as nobody before that, or after naming an unknown user; a wrong proof is
  WRONGPASS, counted and recorded as a failed AUTH, and leaves the connection what it was; a nonce
  answers once; a normal client can never announce a user.
- Wrong proofs count in the AUTH throttle: many at once from one address get some refused unchecked.
- A link is not closed for idling (``timeout``), where a plain client idle as long is.

Every server is stopped by its fixture.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from support import MarchServer, RespConn, RespError
from support.cluster import parse_info
from support.resp import encode

from march import errors
from march.links import proof

Factory = Callable[..., MarchServer]

SECRET = "link-secret"
PASSWORD = "adm1n-Pa55"

pytestmark = pytest.mark.e2e


def _unknown(reply: object) -> bool:
    return isinstance(reply, RespError) and reply.prefix == "ERR" and "unknown command" in str(reply)


def test_without_a_secret_there_is_no_such_command(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as c:
        assert _unknown(c.call("MARCH.LINK", "HELLO"))
        assert c.call("COMMAND", "INFO", "march.link") == [None]
        assert "march.link" not in str(c.call("COMMAND", "LIST")).lower()


def test_a_link_proves_the_secret_and_runs_as_its_user(march_factory: Factory) -> None:
    server = march_factory(requirepass=PASSWORD, extra_args=["--cluster-secret", SECRET])
    with RespConn(server.port) as admin:
        assert admin.call("AUTH", PASSWORD) == "OK"
        assert admin.call("ACL", "SETUSER", "drawer", "on", ">pw", "~*", "+incr") == "OK"
        assert admin.call("INCR", "known") == 1
        with RespConn(server.port) as intruder:
            assert _unknown(intruder.call("MARCH.LINK", "AS", "default"))  # not a link: no such command
            nonce = intruder.call("MARCH.LINK", "HELLO")
            assert isinstance(nonce, bytes)
            assert intruder.call("MARCH.LINK", "AUTH", "x", "0" * 64) == RespError(errors.WRONGPASS)
            assert _unknown(intruder.call("MARCH.LINK", "AUTH", "x", proof(SECRET.encode(), nonce)))  # used up
            assert _unknown(intruder.call("MARCH.LINK", "AS", "default"))
            assert intruder.call("INCR", "known") == RespError(errors.NOAUTH)
        stats = parse_info(admin.call("INFO", "stats"))  # type: ignore[arg-type]
        assert stats["acl_access_denied_auth"] == "1"
        assert b"MARCH.LINK" in str(admin.call("ACL", "LOG")).encode()

        with RespConn(server.port) as link:
            nonce = link.call("MARCH.LINK", "HELLO")
            assert link.call("MARCH.LINK", "AUTH", "n9", proof(SECRET.encode(), nonce)) == "OK"  # type: ignore[arg-type]
            assert link.call("INCR", "known") == RespError(errors.NOPERM_COMMAND.format("incr"))  # nobody yet
            assert link.call("MARCH.LINK", "AS", "default") == "OK"
            assert link.call("INCR", "known") == 2
            assert link.call("MARCH.LINK", "AS", "drawer") == "OK"
            assert link.call("INCR", "known") == 3
            refused = link.call("INCR", "new-key")  # drawer may not create a sequence
            assert isinstance(refused, RespError) and refused.prefix == "NOPERM"
            assert link.call("MARCH.LINK", "AS", "ghost") == "OK"
            assert link.call("INCR", "known") == RespError(errors.NOPERM_COMMAND.format("incr"))
            listed = [line for line in str(admin.call("CLIENT", "LIST")).splitlines() if "name=march-link:n9 " in line]
            assert len(listed) == 1 and "lib-name=march-link " in listed[0] and "user=march-link " in listed[0]
    _guesses_are_throttled(server)  # (last: the address's failures slow its later attempts)


def test_a_link_is_never_closed_for_idling(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--cluster-secret", SECRET, "--timeout", "1"])
    with RespConn(server.port) as link, RespConn(server.port) as plain:
        nonce = link.call("MARCH.LINK", "HELLO")
        assert link.call("MARCH.LINK", "AUTH", "n9", proof(SECRET.encode(), nonce)) == "OK"  # type: ignore[arg-type]
        assert plain.call("PING") == "PONG"  # active after the link: closed no later than the link would be
        assert plain.is_closed_by_peer(timeout=10)
        assert link.call("MARCH.LINK", "AS", "default") == "OK"
        assert link.call("PING") == "PONG"


def _guesses_are_throttled(server: MarchServer) -> None:
    """Guesses at once from one address: after a few, an attempt is refused unchecked (AuthThrottle)."""
    conns = [RespConn(server.port, timeout=0.5) for _ in range(12)]
    try:
        for c in conns:
            c.send(encode("MARCH.LINK", "HELLO") + encode("MARCH.LINK", "AUTH", "x", "0" * 64))
        answered = []
        for c in conns:
            assert isinstance(c.read_reply(), bytes)  # the nonce
            with contextlib.suppress(TimeoutError):  # (queued for its turn: not answered yet)
                answered.append(c.read_reply())
        assert RespError(errors.WRONGPASS) in answered and RespError(errors.LINK_THROTTLED) in answered
        assert all(reply in (RespError(errors.WRONGPASS), RespError(errors.LINK_THROTTLED)) for reply in answered)
    finally:
        for c in conns:
            c.close()

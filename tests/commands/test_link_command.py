"""``MARCH.LINK``, the forwarding links' internal command (``commands.forward``), and the lanes of a
proven link (``waiting.Lanes``), on a real single-node march process (the receiving side needs no
cluster; the node's id is its address).

- Without ``cluster_secret`` it does not exist: ``ERR unknown command``, and COMMAND does not list it.
- With one: a right proof (over both nonces, both node ids and the direction) makes the connection a
  link (named ``march-link:<node>`` in CLIENT LIST) even with a password set, and the node proves
  the secret back; every request on the link then names its lane and its user and runs as that
  user (an unknown one may run nothing), key commands and MULTI/EXEC only; replies come tagged with
  their lane. A wrong proof is WRONGPASS, counted (INFO, Prometheus) and recorded as a failed AUTH,
  and leaves the connection what it was; a nonce answers once; a proof for another node, or one
  replayed over a new nonce, is wrong; an old-style ``AUTH node proof`` is no command at all.
  Deleting a user leaves the link open (it carries other clients' requests).
- Wrong proofs are throttled: many at once from one address get some refused unchecked.
- A link is not closed for idling (``timeout``), where a plain client idle as long is.
- With ``tls_cluster_required`` the plain port takes no link; the TLS port does.

Every server is stopped by its fixture.
"""

from __future__ import annotations

import contextlib
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from march_harness import MarchServer, RespConn, RespError
from march_harness.cluster import parse_info
from march_harness.ports import free_port
from march_harness.resp import encode
from march_harness.tls import TlsRespConn, make_certs, openssl_binary, wait_listening

from march import errors
from march.cluster.links import INITIATOR, RESPONDER, proof, proof_ok

Factory = Callable[..., MarchServer]

SECRET = "link-secret"
PASSWORD = "adm1n-Pa55"

pytestmark = pytest.mark.e2e


def _unknown(reply: object) -> bool:
    return isinstance(reply, RespError) and reply.prefix == "ERR" and "unknown command" in str(reply)


def node_of(server: MarchServer) -> str:
    """A single node's id: its address."""
    return f"127.0.0.1:{server.port}"


def link_auth(
    c: RespConn, to: str, node: str = "n9", secret: str = SECRET, nonce: bytes | None = None
) -> tuple[object, bytes, bytes]:
    """HELLO, then AUTH as ``node`` to the node ``to``: (the reply, the node's nonce, ours)."""
    theirs = nonce if nonce is not None else c.call("MARCH.LINK", "HELLO")
    assert isinstance(theirs, bytes), theirs
    mine = os.urandom(16).hex().encode()
    answer = proof(secret.encode(), INITIATOR, node.encode(), to.encode(), mine, theirs)
    return c.call("MARCH.LINK", "AUTH", node, to, mine, answer, 2), theirs, mine


def test_without_a_secret_there_is_no_such_command(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as c:
        assert _unknown(c.call("MARCH.LINK", "HELLO"))
        assert c.call("COMMAND", "INFO", "march.link") == [None]
        assert "march.link" not in str(c.call("COMMAND", "LIST")).lower()


def test_a_link_proves_the_secret_both_ways_and_runs_each_request_as_its_user(march_factory: Factory) -> None:
    metrics = free_port()
    server = march_factory(
        requirepass=PASSWORD, extra_args=["--cluster-secret", SECRET, "--metrics-port", str(metrics)]
    )
    me = node_of(server)
    with RespConn(server.port) as admin:
        assert admin.call("AUTH", PASSWORD) == "OK"
        assert admin.call("ACL", "SETUSER", "drawer", "on", ">pw", "~*", "+incr") == "OK"
        assert admin.call("INCR", "known") == 1
        with RespConn(server.port) as intruder:
            assert _unknown(intruder.call("MARCH.LINK", "AS", "default"))  # no such thing
            nonce = intruder.call("MARCH.LINK", "HELLO")
            assert isinstance(nonce, bytes)
            assert intruder.call("MARCH.LINK", "AUTH", "x", me, "a" * 32, "0" * 64, 2) == RespError(errors.WRONGPASS)
            reply, _, _ = link_auth(intruder, me, nonce=nonce)  # the right proof, but the nonce is used up
            assert _unknown(reply)
            assert _unknown(intruder.call("1", "default", "INCR", "known"))  # no link: no lanes
            assert intruder.call("INCR", "known") == RespError(errors.NOAUTH)
            assert _unknown(intruder.call("MARCH.LINK", "AUTH", "x", "0" * 64))  # the old form is no command
        with RespConn(server.port) as other:  # a proof made for another node is worth nothing here
            assert link_auth(other, "127.0.0.1:1")[0] == RespError(errors.WRONGPASS)
        with RespConn(server.port) as link:
            reply, theirs, mine = link_auth(link, me)
            assert isinstance(reply, bytes)  # the node's own proof, as node ``me``, for this link only
            assert proof_ok(SECRET.encode(), RESPONDER, b"n9", me.encode(), mine, theirs, reply)
            with RespConn(server.port) as replay:  # the same AUTH again, over the nonce of a new HELLO
                assert isinstance(replay.call("MARCH.LINK", "HELLO"), bytes)
                again = proof(SECRET.encode(), INITIATOR, b"n9", me.encode(), mine, theirs)
                assert replay.call("MARCH.LINK", "AUTH", "n9", me, mine, again, 2) == RespError(errors.WRONGPASS)
            stats = parse_info(admin.call("INFO", "stats"))  # type: ignore[arg-type]
            assert stats["acl_access_denied_auth"] == "3" and stats["forward_link_proofs_failed"] == "3"
            assert b"MARCH.LINK" in str(admin.call("ACL", "LOG")).encode()
            scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5).read().decode()
            assert 'march_link_proof_failures_total{side="incoming"} 3.0' in scraped
            assert link.call("1", "ghost", "INCR", "known") == [1, RespError(errors.NOPERM_COMMAND.format("incr"))]
            assert link.call("1", "default", "INCR", "known") == [1, 2]
            assert link.call("2", "drawer", "INCR", "known") == [2, 3]
            refused = link.call("2", "drawer", "INCR", "new-key")  # drawer may not create a sequence
            assert isinstance(refused[1], RespError) and refused[1].prefix == "NOPERM"
            assert _unknown(link.call("1", "default", "ACL", "SETUSER", "pwned", "on")[1])  # key commands only
            link.send(encode("MARCH.LINK", "HELLO"))  # a request on no lane: not the link protocol, closed
            assert link.is_closed_by_peer()
        with RespConn(server.port) as link:
            assert isinstance(link_auth(link, me)[0], bytes)
            link.send(
                b"".join(encode("3", "default", *command) for command in (["MULTI"], ["INCR", "known"], ["EXEC"]))
            )
            assert [link.read_reply() for _ in range(3)] == [[3, "OK"], [3, "QUEUED"], [3, [4]]]
            mixed = (["MULTI"], ["INCR", "known"], ["PING"], ["EXEC"])  # no key command: refused, EXEC aborts
            link.send(b"".join(encode("4", "default", *command) for command in mixed))
            replies = [link.read_reply() for _ in range(4)]
            assert replies[:2] == [[4, "OK"], [4, "QUEUED"]] and _unknown(replies[2][1]), replies
            assert replies[3][0] == 4 and replies[3][1].prefix == "EXECABORT", replies
            assert admin.call("ACL", "DELUSER", "drawer") == 1  # the link stays; drawer's requests run nothing
            assert link.call("2", "drawer", "INCR", "known") == [2, RespError(errors.NOPERM_COMMAND.format("incr"))]
            listed = [line for line in str(admin.call("CLIENT", "LIST")).splitlines() if "name=march-link:n9 " in line]
            assert len(listed) == 1 and "lib-name=march-link " in listed[0] and "user=march-link " in listed[0]
            assert "ghost" not in str(admin.call("ACL", "USERS"))
    _guesses_are_throttled(server)  # (last: the address's failures slow its later attempts)


def test_a_link_is_never_closed_for_idling(march_factory: Factory) -> None:
    server = march_factory(extra_args=["--cluster-secret", SECRET, "--timeout", "1"])
    with RespConn(server.port) as link, RespConn(server.port) as plain:
        assert isinstance(link_auth(link, node_of(server))[0], bytes)
        assert plain.call("PING") == "PONG"  # active after the link: closed no later than the link would be
        assert plain.is_closed_by_peer(timeout=10)
        assert link.call("0", "", "PING") == [0, "PONG"]  # the control lane


def test_links_over_tls_only(march_factory: Factory, tmp_path: Path) -> None:
    if openssl_binary() is None:
        pytest.skip("openssl not found on PATH")
    certs = make_certs(tmp_path / "certs")
    tls_port = free_port()
    args = ["--cluster-secret", SECRET, "--tls-cluster", "yes", "--tls-cluster-required", "yes"]
    server = march_factory(extra_args=args + certs.server_args("optional", tls_port))
    wait_listening(tls_port)
    with RespConn(server.port) as plain:
        assert plain.call("MARCH.LINK", "HELLO") == RespError(errors.LINK_NEEDS_TLS)
        assert plain.call("CONFIG", "GET", "tls-cluster-required") == [b"tls-cluster-required", b"yes"]
    with TlsRespConn(tls_port, certs.client_context()) as tls:
        assert isinstance(link_auth(tls, node_of(server))[0], bytes)  # type: ignore[arg-type]
        assert tls.call("1", "default", "INCR", "t") == [1, 1]


def _guesses_are_throttled(server: MarchServer) -> None:
    """Guesses at once from one address: after a few, an attempt is refused unchecked (AuthThrottle)."""
    conns = [RespConn(server.port, timeout=0.5) for _ in range(12)]
    me = node_of(server).encode()
    try:
        for c in conns:
            c.send(encode("MARCH.LINK", "HELLO") + encode("MARCH.LINK", "AUTH", "x", me, "a" * 32, "0" * 64, 2))
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

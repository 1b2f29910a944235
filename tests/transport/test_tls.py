"""TLS for clients on a single node (Redis' options: ``--tls-port``, ``--tls-cert-file``,
``--tls-key-file``, ``--tls-ca-cert-file``, ``--tls-auth-clients yes|optional|no``), with
certificates made by ``openssl`` for the test (``march_harness.tls``).

- ``yes``: redis-cli ``--tls`` and redis-py ``ssl=True`` with a client certificate get IDs; a client
  without a certificate, or with one another CA signed, is refused; the plain port still serves.
- ``optional``: a client without a certificate is served, one with a bad certificate is not.
- ``no``: no CA is needed; any TLS client is served.
- A misconfigured TLS port stops the server at start with a message, not a traceback.
- An idle TLS client does not hold a graceful shutdown back.
- AUTH and ACL users work over TLS as over the plain port.
"""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError
from march_harness.ports import free_port
from march_harness.servers import REPO_ROOT
from march_harness.tls import Certs, TlsRespConn, make_certs, openssl_binary, wait_listening
from redis.backoff import NoBackoff
from redis.retry import Retry

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if openssl_binary() is None:
        pytest.skip("openssl not found on PATH")
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_server(factory: Factory, certs: Certs, mode: str, *extra: str) -> tuple[MarchServer, int]:
    """A started server with a TLS port; ready once the TLS port accepts too (it opens after the plain one)."""
    tls_port = free_port()
    server = factory(extra_args=[*certs.server_args(mode, tls_port), *extra])
    wait_listening(tls_port)
    return server, tls_port


def refused(port: int, context: ssl.SSLContext) -> bool:
    """The TLS port does not serve this client (the handshake, or the first reply, fails).

    With TLS 1.3 the client's handshake completes before the server has checked its certificate:
    the refusal shows as an alert or a close on the first read.
    """
    try:
        with TlsRespConn(port, context, timeout=5) as c:
            reply = c.call("PING")
    except (ssl.SSLError, OSError, ConnectionError):
        return True
    return bool(reply != "PONG")


def redis_cli(port: int, certs: Certs, *args: str, cert: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["redis-cli", "--tls", "--cacert", certs.ca, "-p", str(port)]
    if cert:
        cmd += ["--cert", certs.client_cert, "--key", certs.client_key]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=20)


def redis_py(port: int, certs: Certs, cert: bool = True) -> redis.Redis:
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0), **certs.redis_py_kwargs(cert))  # type: ignore[arg-type]


def test_client_certificates_required(march_factory: Factory, certs: Certs) -> None:
    server, tls_port = tls_server(march_factory, certs, "yes")
    with TlsRespConn(tls_port, certs.client_context()) as c:
        assert c.call("INCR", "k") == 1
        assert c.call("PING") == "PONG"
    out = redis_cli(tls_port, certs, "INCR", "k")
    assert (out.returncode, out.stdout) == (0, "2\n"), out
    client = redis_py(tls_port, certs)
    try:
        assert client.incr("k") == 3
        assert client.incrby("k", 7) == 10
    finally:
        client.close()
    with RespConn(server.port) as plain:
        assert plain.call("INCR", "k") == 11  # the plain port still serves, the same sequences

    assert refused(tls_port, certs.client_context(with_cert=False))
    assert refused(tls_port, certs.client_context(stranger=True))
    out = redis_cli(tls_port, certs, "INCR", "k", cert=False)
    assert out.stdout.strip() != "12", out
    bare = redis_py(tls_port, certs, cert=False)
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            bare.incr("k")
    finally:
        bare.close()
    # a plain-text client on the TLS port gets no service (and the server goes on)
    with RespConn(tls_port, timeout=5) as wrong:
        try:
            wrong.send(b"*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n")
            got = wrong.read_available(timeout=1)
        except OSError:
            got = b""
        assert b":12" not in got
    with RespConn(server.port) as plain:
        assert plain.call("INCR", "k") == 12  # nothing refused above got an ID


def test_client_certificates_optional(march_factory: Factory, certs: Certs) -> None:
    _, tls_port = tls_server(march_factory, certs, "optional")
    with TlsRespConn(tls_port, certs.client_context(with_cert=False)) as c:
        assert c.call("INCR", "k") == 1
    with TlsRespConn(tls_port, certs.client_context()) as c:
        assert c.call("INCR", "k") == 2
    assert refused(tls_port, certs.client_context(stranger=True))
    out = redis_cli(tls_port, certs, "INCR", "k", cert=False)
    assert (out.returncode, out.stdout) == (0, "3\n"), out


def test_client_certificates_not_asked_for(march_factory: Factory, certs: Certs) -> None:
    server, tls_port = tls_server(march_factory, certs, "no")
    assert "--tls-ca-cert-file" not in server.extra_args  # no CA needed
    for context in (certs.client_context(with_cert=False), certs.client_context(stranger=True)):
        with TlsRespConn(tls_port, context) as c:
            assert isinstance(c.call("INCR", "k"), int)
    client = redis_py(tls_port, certs, cert=False)
    try:
        assert client.incr("k") == 3
    finally:
        client.close()


def march_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "march", "serve", "--bind", "127.0.0.1", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
    )


def test_a_misconfigured_tls_port_stops_the_server_with_a_message(certs: Certs, tmp_path: Path) -> None:
    base = ["--port", str(free_port()), "--tls-port", str(free_port())]
    no_ca = march_serve(*base, "--data-dir", str(tmp_path / "a"), "--tls-cert-file", certs.server_cert,
                        "--tls-key-file", certs.server_key)  # fmt: skip
    assert no_ca.returncode != 0 and "tls_ca_cert_file" in no_ca.stderr, no_ca
    missing = march_serve(*base, "--data-dir", str(tmp_path / "b"), "--tls-auth-clients", "no")
    assert missing.returncode != 0 and "tls_cert_file" in missing.stderr, missing
    swapped = march_serve(*base, "--data-dir", str(tmp_path / "c"), "--tls-auth-clients", "no",
                          "--tls-cert-file", certs.server_key, "--tls-key-file", certs.server_cert)  # fmt: skip
    assert swapped.returncode != 0 and "TLS" in swapped.stderr, swapped
    for out in (no_ca, missing, swapped):
        assert "Traceback" not in out.stderr, out.stderr


def test_an_idle_tls_client_does_not_hold_shutdown_back(march_factory: Factory, certs: Certs) -> None:
    shutdown_timeout = 4.0
    server, tls_port = tls_server(march_factory, certs, "yes", "--shutdown-timeout", str(shutdown_timeout))
    with TlsRespConn(tls_port, certs.client_context()) as idle:
        assert idle.call("PING") == "PONG"
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=shutdown_timeout + 10)
        took = time.monotonic() - started
    assert code == 0, server.describe()
    # A plain idle client lets the server exit in a fraction of a second.
    assert took < shutdown_timeout / 2, f"SIGTERM took {took:.2f}s with one idle TLS client"


def test_tls_and_acl_together(march_factory: Factory, certs: Certs) -> None:
    _, tls_port = tls_server(march_factory, certs, "yes", "--requirepass", "tls-admin-pw")
    with TlsRespConn(tls_port, certs.client_context()) as c:
        assert c.call("INCR", "k") == RespError("NOAUTH Authentication required.")
        assert c.call("AUTH", "tls-admin-pw") == "OK"
        assert c.call("ACL", "SETUSER", "app", "on", ">app-pw", "~k*", "+@read", "+@write", "+@create") == "OK"
    client = redis.Redis(
        port=tls_port,
        username="app",
        password="app-pw",
        protocol=3,
        retry=Retry(NoBackoff(), 0),
        **certs.redis_py_kwargs(),  # type: ignore[arg-type]
    )
    try:
        assert client.incr("k") == 1
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.incr("other")
    finally:
        client.close()

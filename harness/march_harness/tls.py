"""Certificates for TLS tests, made with the ``openssl`` command line in a directory the test owns.

`make_certs(dir)` -> `Certs`: a CA, a server certificate for 127.0.0.1 and localhost, and a client
certificate, all signed by that CA (EC P-256 keys: quick to make), plus a second CA that signed
nothing here (a client certificate it did not sign must be refused). `Certs.server_args(mode)` are
march's flags for a TLS port; `client_context()` is an `ssl.SSLContext` for a client with or
without its certificate, `redis_py_kwargs()` the same for redis-py; `TlsRespConn` is `RespConn` over TLS.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from march_harness.resp import RespConn, wait_until

_DAYS = "2"
_CA_EXT = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\n"
_LEAF_EXT = (
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
)


def openssl_binary() -> str | None:
    return shutil.which("openssl")


def _run(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")


def _key(name: str, cwd: Path) -> None:
    _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name, cwd=cwd)


def _ca(name: str, cn: str, cwd: Path) -> None:
    _key(f"{name}.key", cwd)
    (cwd / f"{name}.ext").write_text(_CA_EXT)
    _run("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={cn}", "-out", f"{name}.csr", cwd=cwd)
    _run(
        "x509", "-req", "-in", f"{name}.csr", "-signkey", f"{name}.key", "-days", _DAYS,
        "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=cwd,
    )  # fmt: skip


def _leaf(name: str, cn: str, ca: str, extra_ext: str, cwd: Path) -> None:
    _key(f"{name}.key", cwd)
    (cwd / f"{name}.ext").write_text(_LEAF_EXT + extra_ext)
    _run("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={cn}", "-out", f"{name}.csr", cwd=cwd)
    _run(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-days", _DAYS, "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=cwd,
    )  # fmt: skip


@dataclass(frozen=True)
class Certs:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)

    @property
    def ca(self) -> str:
        return self.path("ca.crt")

    @property
    def server_cert(self) -> str:
        return self.path("server.crt")

    @property
    def server_key(self) -> str:
        return self.path("server.key")

    @property
    def client_cert(self) -> str:
        return self.path("client.crt")

    @property
    def client_key(self) -> str:
        return self.path("client.key")

    @property
    def stranger_cert(self) -> str:
        """A client certificate signed by another CA (the server must not accept it)."""
        return self.path("stranger.crt")

    @property
    def stranger_key(self) -> str:
        return self.path("stranger.key")

    def server_args(self, auth_clients: str = "yes", tls_port: int = 0) -> list[str]:
        """march's TLS flags (``tls_port`` 0: a free port picked by the caller must be passed)."""
        args = ["--tls-port", str(tls_port), "--tls-cert-file", self.server_cert, "--tls-key-file", self.server_key]
        args += ["--tls-auth-clients", auth_clients]
        if auth_clients != "no":
            args += ["--tls-ca-cert-file", self.ca]
        return args

    def redis_py_kwargs(self, with_cert: bool = True) -> dict[str, object]:
        """redis-py's TLS arguments (``redis.Redis`` and ``RedisCluster``): trust the test CA, and
        present the client certificate unless ``with_cert`` is False."""
        kwargs: dict[str, object] = {"ssl": True, "ssl_ca_certs": self.ca}
        if with_cert:
            kwargs.update(ssl_certfile=self.client_cert, ssl_keyfile=self.client_key)
        return kwargs

    def client_context(self, with_cert: bool = True, stranger: bool = False) -> ssl.SSLContext:
        """A client context that trusts the test CA and checks the server's name (127.0.0.1)."""
        context = ssl.create_default_context(cafile=self.ca)
        if stranger:
            context.load_cert_chain(self.stranger_cert, self.stranger_key)
        elif with_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate (127.0.0.1, localhost), a client certificate, and a stranger's."""
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", "March test CA", directory)
    _ca("other-ca", "Another CA", directory)
    _leaf(
        "server",
        "localhost",
        "ca",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        directory,
    )
    _leaf("client", "march-client", "ca", "extendedKeyUsage=clientAuth\n", directory)
    _leaf("stranger", "stranger", "other-ca", "extendedKeyUsage=clientAuth\n", directory)
    return Certs(directory)


def wait_listening(port: int, timeout: float = 10.0) -> None:
    """Until a TCP connection to 127.0.0.1:``port`` is accepted (march opens its TLS port just after
    the plain one, which is what a server's readiness check looks at)."""

    def accepts() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True

    wait_until(accepts, timeout, 0.01, f"127.0.0.1:{port} to accept connections")


class TlsRespConn(RespConn):
    """`RespConn` over TLS: the TCP connection is made, then the TLS handshake (which raises
    ``ssl.SSLError`` or ``OSError`` if the server refuses the client)."""

    def __init__(self, port: int, context: ssl.SSLContext, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        super().__init__(port, host, timeout)
        try:
            self.sock: socket.socket = context.wrap_socket(self.sock, server_hostname=host)
        except BaseException:
            self.sock.close()
            raise

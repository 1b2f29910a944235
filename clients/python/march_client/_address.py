"""Where to connect and how: `Options`, every argument of `Sequencer` and `AsyncSequencer` once,
with its default (both are made from it), and `Options.target`: the URL or the list of nodes as
seed addresses plus the keyword arguments every redis-py connection gets (credentials, TLS,
timeouts). Pure: opens nothing.

It must never drop a credential or a TLS setting on the way: a redirect to another node connects
with exactly the same options as the seeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from march_client import errors

Address = tuple[str, int]

DEFAULT_URL = "redis://127.0.0.1:7379"  # March's default port (scripts/serve)
DEFAULT_PORT = 7379
SOCKET_TIMEOUT = 5.0  # above the server's max_wait (2 s), so a slow store answers TRYAGAIN first
CONNECT_TIMEOUT = 2.0  # a node that does not accept in 2 s is down for us: try the next one
RETRY_FOR = 10.0  # seconds a request is retried: a failover (the old primary's lease runs out, an election) fits
MAX_INCRBY = 1_000_000  # the server's default max_incrby; pass yours if the server was configured otherwise


@dataclass(frozen=True)
class Target:
    """Seed addresses and the options of every connection."""

    seeds: list[Address]
    options: dict[str, Any] = field(default_factory=dict)


def parse_node(node: str | Address) -> Address:
    """``"host:port"``, ``"redis://host:port"`` or ``(host, port)`` -> ``(host, port)``."""
    if isinstance(node, tuple):
        return str(node[0]), int(node[1])
    text = node if "://" in node else f"redis://{node}"
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(errors.BAD_ADDRESS.format(value=node)) from None
    if not host:
        raise ValueError(errors.BAD_ADDRESS.format(value=node))
    return str(host), port


@dataclass(eq=False, repr=False)
class Options:
    """The arguments of `Sequencer` and `AsyncSequencer`, each once, with its default: both classes
    are made from this one (they subclass it and start in ``__post_init__``). ``url`` or ``nodes``
    name the seeds (`target`); the README's "Options" describe the rest. No ``repr``: it holds the
    password."""

    url: str | None = None
    _: KW_ONLY
    nodes: Sequence[str | Address] | None = None
    username: str | None = None
    password: str | None = None
    ssl: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    retry_for: float = RETRY_FOR
    socket_timeout: float = SOCKET_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    max_incrby: int = MAX_INCRBY
    prefetch: bool = False
    min_range: int | None = None
    max_range: int | None = None
    target_seconds: float | None = None
    clock: Callable[[], float] = time.monotonic  # monotonic seconds, for the retries' deadline

    def __post_init__(self) -> None:
        """Where a subclass starts, its fields set (the dataclass ``__init__`` calls it)."""

    def target(self) -> Target:
        """The seeds and connection options; explicit arguments win over what the URL says."""
        url, nodes, ssl, username, password = self.url, self.nodes, self.ssl, self.username, self.password
        if url is not None and nodes is not None:
            raise ValueError(errors.NO_ADDRESS)
        if nodes is not None:
            if not nodes:
                raise ValueError(errors.NO_ADDRESS)
            seeds = [parse_node(n) for n in nodes]
        else:
            parts = urlsplit(url or DEFAULT_URL)
            if parts.scheme not in ("redis", "rediss"):
                raise ValueError(errors.BAD_SCHEME.format(scheme=parts.scheme))
            ssl = ssl or parts.scheme == "rediss"
            if username is None and parts.username:
                username = unquote(parts.username)
            if password is None and parts.password:
                password = unquote(parts.password)
            seeds = [(parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORT)]
        options: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.connect_timeout,
            "username": username,
            "password": password,
        }
        if ssl:
            options.update(
                ssl=True, ssl_ca_certs=self.ssl_ca_certs, ssl_certfile=self.ssl_certfile, ssl_keyfile=self.ssl_keyfile
            )
        return Target(seeds, options)

"""Per-connection state that command handlers see (``client``), independent of the transport.

The server's protocol object owns one ``Client`` and closes the connection when ``close_after``
is set. Handlers read and change this state; they never write to the socket.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .app import App


class Client:
    __slots__ = (
        "addr",
        "app",
        "authenticated",
        "close_after",
        "created",
        "generators",
        "id",
        "laddr",
        "last_active",
        "lib_name",
        "lib_ver",
        "multi",
        "multi_error",
        "name",
        "proto",
        "user",
    )

    def __init__(self, app: App, client_id: int, addr: str, laddr: str) -> None:
        self.app = app
        self.generators = app.keyspace.generators  # the INCR hot path reads it through the client
        self.id = client_id
        self.addr = addr
        self.laddr = laddr
        self.created = time.monotonic()
        self.last_active = self.created
        self.reset()

    def reset(self) -> None:
        """Back to a fresh connection's state (RESET; also the initial state)."""
        self.proto = 2
        self.name = ""
        self.lib_name = ""
        self.lib_ver = ""
        self.multi: list[list[bytes]] | None = None
        self.multi_error = False
        self.close_after = False
        self.user = "default"
        self.authenticated = not self.app.config.requirepass

    def info_line(self) -> str:
        """One line of CLIENT LIST / CLIENT INFO, with Redis' field names."""
        now = time.monotonic()
        flags = "x" if self.multi is not None else "N"
        return (
            f"id={self.id} addr={self.addr} laddr={self.laddr} fd=-1 name={self.name} "
            f"age={int(now - self.created)} idle={int(now - self.last_active)} flags={flags} db=0 sub=0 psub=0 "
            f"ssub=0 multi={len(self.multi) if self.multi is not None else -1} "
            f"user={self.user} lib-name={self.lib_name} lib-ver={self.lib_ver} resp={self.proto}"
        )

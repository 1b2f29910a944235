"""One connection's part in MONITOR (and in pub/sub's pushes, which travel the same way).

- ``show``: a request about to run goes to the MONITOR connections, as Redis shows it
  (``commands.monitored``: not admin commands, not refused or queued requests;
  passwords redacted). While nobody monitors, the connection skips this with one truth test of
  ``monitors`` per request.
- ``watched``: this connection monitors or is subscribed: its requests all go through
  ``commands.call``, which makes every check (never the fast path).
- ``start``/``line``: the lines this connection gets as a monitor (or subscriber) are written at
  once and bounded by ``max_output_buffer`` like any reply.

This module never runs a request: it shows them, and writes what others send this connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from march.client import Client
from march.commands import monitored, show
from march.transport.flow import Backpressure


class Sink(Protocol):
    """The connection as its feed sees it."""

    closing: bool
    flow: Backpressure

    def drop(self, why: str) -> None: ...


class MonitorFeed:
    """See the module docstring. ``monitors``/``subscribers``: the server's dicts of MONITOR and
    subscribed connections by client id (the same dicts for the server's life)."""

    __slots__ = ("client", "monitors", "sink", "subscribers")

    def __init__(
        self, client: Client, sink: Sink, monitors: Mapping[int, object], subscribers: Mapping[int, object]
    ) -> None:
        self.client = client
        self.sink = sink
        self.monitors = monitors
        self.subscribers = subscribers

    def show(self, args: list[bytes], times: int = 1) -> None:
        """Show ``args`` (about to run ``times`` times, as in a run of identical requests) to the monitors."""
        if monitored(self.client, args):
            for _ in range(times):
                show(self.client, args)

    def watched(self) -> bool:
        """This connection monitors or is subscribed (its requests are all checked)."""
        cid = self.client.id
        return bool(self.monitors and cid in self.monitors) or bool(self.subscribers and cid in self.subscribers)

    def start(self) -> None:
        """This connection monitors from now on."""
        self.client.app.monitors.add(self.client.id, self.line)

    def line(self, data: bytes) -> None:
        """One line for this connection as a monitor or subscriber (bounded by max_output_buffer)."""
        sink = self.sink
        if not sink.closing:
            flow = sink.flow
            flow.transport.write(data)
            if flow.paused and flow.over_limit():
                sink.drop("unread replies over max_output_buffer")

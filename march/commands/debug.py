"""DEBUG: test-only controls, refused unless ``enable_debug_command`` is on (as in Redis).

- ``DEBUG CLOCK-OFFSET ms``: from now on, timestamp sequences (and the worker ids' wall-clock
  figures: the expiry times shown and stored, the age of a floor) read the wall clock moved by
  ``ms`` milliseconds (negative: into the past). This is how process-level tests jump the clock
  backwards or forwards under load without touching the machine's clock. ``DEBUG CLOCK-OFFSET``
  alone replies the current offset. The offset is not persisted: a restart reads the real clock.

Moving the clock never threatens uniqueness or order (the timestamp generator never goes back and
never passes its durable bound), but it changes the time written into new IDs, so it is off by
default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from march import errors
from march.commands.args import Args
from march.commands.table import Subcommand, container
from march.errors import CommandError

if TYPE_CHECKING:
    from march.client import Client


def _enabled(client: Client) -> None:
    """Everything DEBUG does, HELP included, is refused while it is off (Redis' order)."""
    if not client.app.config.enable_debug_command:
        raise CommandError(errors.DEBUG_DISABLED)


def _clock_offset(client: Client, args: list[bytes]) -> Any:
    keyspace = client.app.keyspace
    cursor = Args(args, 2)
    if not cursor.more():
        return round(keyspace.wall_offset * 1000)
    offset = cursor.integer()
    cursor.finish(errors.WRONG_ARITY.format("debug|clock-offset"))
    keyspace.wall_offset = offset / 1000
    return "OK"


container(
    "debug",
    ("admin", "noscript", "loading", "stale"),
    ("@admin", "@slow", "@dangerous"),
    (
        Subcommand(
            "clock-offset",
            -2,
            "Move (or show) the wall clock offset of timestamp sequences, in ms.",
            _clock_offset,
            "CLOCK-OFFSET [<ms>]",
            ("Move the wall clock of timestamp sequences by <ms> (or show it).",),
        ),
    ),
    summary="DEBUG CLOCK-OFFSET [ms]: move the clock timestamp IDs read (needs enable_debug_command).",
    group="server",
    gate=_enabled,
)

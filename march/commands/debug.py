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

from .. import errors
from ..errors import CommandError
from .args import parse_int
from .registry import check_subcommand, command

if TYPE_CHECKING:
    from ..client import Client


@command(
    "debug",
    -2,
    ("admin", "noscript", "loading", "stale"),
    ("@admin", "@slow", "@dangerous"),
    summary="DEBUG CLOCK-OFFSET [ms]: move the clock timestamp IDs read (needs enable_debug_command).",
    group="server",
    subcommands=(("clock-offset", -2, "Move (or show) the wall clock offset of timestamp sequences, in ms."),),
)
def debug(client: Client, args: list[bytes]) -> Any:
    if not client.app.config.enable_debug_command:
        raise CommandError(errors.DEBUG_DISABLED)
    sub = check_subcommand("debug", args)
    if sub == b"help":
        return [b"DEBUG CLOCK-OFFSET [<ms>]", b"    Move the wall clock of timestamp sequences by <ms> (or show it)."]
    keyspace = client.app.keyspace
    if len(args) == 2:
        return round(keyspace.wall_offset * 1000)
    if len(args) != 3:
        raise errors.wrong_arity("debug|clock-offset")
    keyspace.wall_offset = parse_int(args[2]) / 1000
    return "OK"

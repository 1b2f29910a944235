"""NOPERM: what a user may not do, counted in INFO and recorded in ACL LOG.

The dispatcher refuses a command or a key before it runs (``refuse``); a few handlers check more
than the dispatcher can see: creating a sequence (also by ``INCR`` on an unknown key) needs
``SEQ.CREATE`` on it, raising a floor needs ``SET``, choosing a sequence's own settings needs
``SEQ.ALTER`` (``may_create``, ``may_raise_floor``, ``may_change_settings``). It sits below the
command modules and the dispatcher, which both use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from march import errors
from march.errors import CommandError

if TYPE_CHECKING:
    from march.client import Client


def refuse(client: Client, reason: str, subject: str, command: str = "") -> CommandError:
    """NOPERM for a command, a key or a channel the user may not use: counted, logged in ACL LOG
    (with the client's line showing ``command``, the full name of the command refused). Inside EXEC
    (the user's permissions changed after MULTI queued the command) it is Redis' own text for that,
    logged in context ``multi``, as Redis' ``execCommand``."""
    app = client.app
    context = "multi" if client.multi is not None or client.executing else "toplevel"
    app.acl_log.add(reason, context, subject, client.user.name, client.info_line(command))
    if reason == "command":
        app.stats.denied_command += 1
    elif reason == "channel":
        app.stats.denied_channel += 1
    else:
        app.stats.denied_key += 1
    if client.executing:
        why = {"command": errors.EXEC_NOPERM_COMMAND, "channel": errors.EXEC_NOPERM_CHANNEL}.get(
            reason, errors.EXEC_NOPERM_KEY
        )
        return CommandError(errors.EXEC_NOPERM.format(why))
    if reason == "command":
        return CommandError(errors.NOPERM_COMMAND.format(subject))
    return CommandError(errors.NOPERM_CHANNEL if reason == "channel" else errors.NOPERM_KEY)


def may_create(client: Client, key: bytes) -> None:
    """NOPERM unless the user may create ``key`` (SEQ.CREATE on it): auto-creation by INCR and SET needs it."""
    _may(client, "seq.create", key, errors.NOPERM_CREATE)


def may_raise_floor(client: Client, key: bytes) -> None:
    """NOPERM unless the user may raise floors on ``key`` (SET on it): SEQ.CREATE ... START/FLOOR needs it."""
    _may(client, "set", key, errors.NOPERM_FLOOR)


def may_change_settings(client: Client, key: bytes) -> None:
    """NOPERM unless the user may change ``key``'s settings (SEQ.ALTER on it): SEQ.CREATE with its own
    MINBATCH/MAXBATCH/LOOKAHEAD/MAXLEAD needs it."""
    _may(client, "seq.alter", key, errors.NOPERM_SETTINGS)


def _may(client: Client, command: str, key: bytes, text: str) -> None:
    user = client.user
    if user.unrestricted or (user.may_run(command) and user.may_access(key, write=True)):
        return
    refuse(client, "command", command)  # counted and logged as the command it needed
    if client.multi is not None:
        client.multi_error = True
    raise CommandError(text.format(key.decode("utf-8", "replace")))

"""Only what the live commands accept: the checks every record of a backup file or an import passes
before anything is written, and the one error of the backup tools (``BackupError``).

``Checks`` holds the limits of the config the tool is given (the nodes' own: same options as
``march serve``): a sequence name longer than ``max_key_len`` or more sequences than
``max_sequences``; settings that SEQ.CREATE/SEQ.ALTER would refuse (``policies.settings_problem``,
strict); a user name or rules that ACL SETUSER would refuse (the same parser, with the command
table: rules come back as ACL LIST shows them, a password in clear only as its hash); a worker
namespace longer than ``max_key_len``. ``user_readable`` says whether a node can read a stored
user (one it cannot is off there, and a restore may replace it). Nothing here reads or writes a
store or a file.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from march.access.rules import User, check_username
from march.access.users import Users
from march.commands.table import (
    COMMANDS,  # (importing march.commands registers every command: ACL rules read the table)
)
from march.config import Config
from march.errors import CommandError
from march.keyspace.policies import settings_problem
from march.store.contract import SequenceRecord


class BackupError(Exception):
    """Bad input or a refused write: the message says what and where; nothing was written."""


def shown(name: bytes | str) -> str:
    """A name in a message: its repr, cut at 60 characters (a 2 MB name stays out of the terminal)."""
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."


def user_readable(name: str, rules: str) -> bool:
    """Whether a node can read this stored user (one that cannot is off there: restore may replace it)."""
    try:
        User(name).apply(["reset", *rules.split()], COMMANDS)
    except CommandError:
        return False
    return True


def optional(name: str) -> Any:
    """An optional dependency (``march[migrate]``), imported only by the source that needs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise BackupError(f"this needs the {name} package: pip install 'march[migrate]'") from None


@dataclass(frozen=True)
class Checks:
    """What the live commands accept, for the records of a file or an import (``of(config)``)."""

    max_key_len: int  # sequence names and worker namespaces, as INCR/SEQ.CREATE/WORKER.ACQUIRE
    max_sequences: int  # 0: no limit
    max_bulk_len: int  # one argument: a user name, one ACL rule
    max_args: int  # ACL SETUSER name rule...: at most this many arguments in all
    users: Users = field(default_factory=lambda: Users(COMMANDS))  # the ACL rules' parser, with the command table

    @classmethod
    def of(cls, config: Config) -> Checks:
        return cls(config.max_key_len, config.max_sequences, config.max_bulk_len, config.max_args)

    def key(self, key: bytes, where: str, what: str = "key") -> bytes:
        if len(key) > self.max_key_len:
            raise BackupError(
                f"{where}: the {what} is {len(key)} bytes, longer than max_key_len ({self.max_key_len}); "
                "give the tool the nodes' config if theirs is larger"
            )
        return key

    def sequence(self, record: SequenceRecord, where: str) -> SequenceRecord:
        self.key(record.key, where)
        why = settings_problem(record.kind, record.settings, strict=True)
        if why is not None:
            raise BackupError(f"{where}: sequence {shown(record.key.decode('utf-8', 'replace'))}: {why}")
        return record

    def count(self, sequences: int) -> None:
        if self.max_sequences and sequences > self.max_sequences:
            raise BackupError(f"{sequences} sequences: more than max_sequences ({self.max_sequences})")

    def user(self, name: str, rules: str, where: str) -> str:
        """``rules`` as ACL SETUSER on a new user leaves them (as ACL LIST shows them), or BackupError."""
        try:
            check_username(name)
            if len(name.encode("utf-8", "surrogateescape")) > self.max_bulk_len:
                raise BackupError(f"{where}: the user name is longer than max_bulk_len ({self.max_bulk_len})")
            words = rules.split()
            if len(words) > self.max_args - 3 or any(
                len(w.encode("utf-8", "surrogateescape")) > self.max_bulk_len for w in words
            ):
                raise BackupError(f"{where}: user {shown(name)}: rules longer than one ACL SETUSER may send")
            return self.users.build(name, rules).describe()
        except CommandError as exc:
            raise BackupError(f"{where}: user {shown(name)}: {exc.message.removeprefix('ERR ')}") from None

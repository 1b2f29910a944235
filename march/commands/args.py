"""The one argument parser every handler uses: a cursor over a request's arguments, with Redis'
strictness and error texts (as mini-redis' ``Parse``: ``next_string``, ``next_int``, ``finish``).

``Args(args, start)`` reads forwards from ``args[start]``; each read consumes what it returns:

- typed reads: ``integer`` (a signed 64-bit integer as Redis writes one: no spaces, no ``+``, no leading
  zeros), ``nonneg``, ``double`` (finite only), ``key`` (the bytes as sent), ``text`` (UTF-8, bad
  bytes replaced: for messages and names that are only shown), ``name`` (UTF-8 that round-trips:
  user names, rules), ``choice`` (one of a few tokens, case-insensitive);
- options: ``flag(b"nx")`` takes the next argument if it is that token; ``options(b"count", b"match")``
  walks ``NAME value`` options in any order, refusing any other name; the handler reads each value;
- the end: ``finish()`` raises when arguments are left over; ``rest()`` takes them all.

A read past the end, an unknown option or a left-over argument is ``ERR syntax error`` unless the
caller names another text; a value that is not a number is ``ERR value is not an integer or out
of range`` (``ERR value is not a valid float``) unless the caller names another. Every text is a
constant in ``march.errors``. The arity was checked before the handler ran (``dispatch.call`` for
the command and, for a container, its subcommand), so a handler only reads what its arity allows
and what its options add.

What this module must never do: know a command, or change anything but its own position.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from march import errors
from march.errors import CommandError

_INT = re.compile(rb"(?:0|-?[1-9][0-9]{0,18})\Z")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# Redis' strtod rule: no space before (nor after: the whole argument is the number), no "nan"
_FLOAT = re.compile(rb"[0-9A-Za-z.+-]+\Z")


def parse_int(arg: bytes, message: str = errors.NOT_INTEGER) -> int:
    """A signed 64-bit integer written as Redis accepts it: no spaces, no '+', no leading zeros."""
    if _INT.match(arg) is None:
        raise CommandError(message)
    value = int(arg)
    if not _I64_MIN <= value <= _I64_MAX:
        raise CommandError(message)
    return value


def parse_float(arg: bytes, message: str = errors.NOT_FLOAT) -> float:
    """A finite double as Redis' ``getDoubleFromObject`` reads one, without ``inf`` or ``nan``."""
    if _FLOAT.match(arg) is None:
        raise CommandError(message)
    try:
        value = float(arg)
    except ValueError:
        raise CommandError(message) from None
    if not math.isfinite(value):
        raise CommandError(message)
    return value


def key_text(key: bytes) -> str:
    return key.decode("utf-8", "replace")


class Args:
    """A cursor over ``args`` from position ``start`` (1: after the command's name)."""

    __slots__ = ("args", "pos")

    def __init__(self, args: list[bytes], start: int = 1) -> None:
        self.args = args
        self.pos = start

    def __len__(self) -> int:
        """How many arguments are left."""
        return len(self.args) - self.pos

    def more(self) -> bool:
        return self.pos < len(self.args)

    def next(self, message: str = errors.SYNTAX) -> bytes:
        """The next argument as sent; ``message`` if there is none."""
        if self.pos >= len(self.args):
            raise CommandError(message)
        arg = self.args[self.pos]
        self.pos += 1
        return arg

    def peek(self) -> bytes:
        """The next argument, lower-cased, without consuming it (b"" at the end)."""
        return self.args[self.pos].lower() if self.pos < len(self.args) else b""

    def key(self) -> bytes:
        return self.next()

    def text(self) -> str:
        """The next argument as text to show (bad UTF-8 replaced)."""
        return self.next().decode("utf-8", "replace")

    def name(self) -> str:
        """The next argument as a name kept and given back (bad UTF-8 kept as it was sent)."""
        return self.next().decode("utf-8", "surrogateescape")

    def integer(self, message: str = errors.NOT_INTEGER, low: int | None = None, high: int | None = None) -> int:
        """A signed 64-bit integer; ``message`` too when it is below ``low`` or above ``high``."""
        value = parse_int(self.next(), message)
        if (low is not None and value < low) or (high is not None and value > high):
            raise CommandError(message)
        return value

    def nonneg(self, message: str = errors.NOT_INTEGER) -> int:
        """An integer >= 0 (``message`` for anything else)."""
        return self.integer(message, low=0)

    def double(self, message: str = errors.NOT_FLOAT) -> float:
        return parse_float(self.next(), message)

    def choice(self, *tokens: bytes, message: str = errors.SYNTAX) -> bytes:
        """One of ``tokens`` (lower case), whatever the case it was sent in; ``message`` for another."""
        arg = self.next(message).lower()
        if arg not in tokens:
            raise CommandError(message)
        return arg

    def flag(self, token: bytes) -> bool:
        """Whether the next argument is ``token`` (any case); it is consumed if so."""
        if self.peek() == token:
            self.pos += 1
            return True
        return False

    def options(self, *names: bytes, message: str = errors.SYNTAX) -> Iterator[bytes]:
        """Each option name left (lower case), in the order sent; one not in ``names`` is ``message``.
        The caller reads the option's value (if it has one) before asking for the next name."""
        while self.pos < len(self.args):
            name = self.next().lower()
            if name not in names:
                raise CommandError(message)
            yield name

    def rest(self) -> list[bytes]:
        """Every argument left (consumed)."""
        out = self.args[self.pos :]
        self.pos = len(self.args)
        return out

    def finish(self, message: str = errors.SYNTAX) -> None:
        """``message`` unless every argument has been read."""
        if self.pos < len(self.args):
            raise CommandError(message)

"""Argument parsing shared by command modules, with Redis' strictness and error texts."""

from __future__ import annotations

import re

from .. import errors
from ..errors import CommandError

_INT = re.compile(rb"(?:0|-?[1-9][0-9]{0,18})\Z")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def parse_int(arg: bytes, message: str = errors.NOT_INTEGER) -> int:
    """A signed 64-bit integer written as Redis accepts it: no spaces, no '+', no leading zeros."""
    if _INT.match(arg) is None:
        raise CommandError(message)
    value = int(arg)
    if not _I64_MIN <= value <= _I64_MAX:
        raise CommandError(message)
    return value


def key_text(key: bytes) -> str:
    return key.decode("utf-8", "replace")

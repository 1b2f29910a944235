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


def glob_to_regex(pattern: bytes) -> re.Pattern[bytes]:
    """Redis' glob (``*``, ``?``, ``[abc]``, ``[^a]``, ``[a-z]``, ``\\x``) as a compiled regex."""
    out = bytearray()
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i : i + 1]
        if c == b"*":
            out += b".*"
        elif c == b"?":
            out += b"."
        elif c == b"\\" and i + 1 < n:
            i += 1
            out += re.escape(pattern[i : i + 1])
        elif c == b"[":
            j = i + 1
            cls = bytearray(b"[")
            if j < n and pattern[j : j + 1] == b"^":
                cls += b"^"
                j += 1
            while j < n and pattern[j : j + 1] != b"]":
                ch = pattern[j : j + 1]
                if ch == b"\\" and j + 1 < n:
                    j += 1
                    cls += re.escape(pattern[j : j + 1])
                elif ch == b"-" and len(cls) > 1 and j + 1 < n and pattern[j + 1 : j + 2] != b"]":
                    cls += b"-"
                else:
                    cls += re.escape(ch)
                j += 1
            if j >= n:  # unterminated class: Redis matches the rest literally
                out += re.escape(pattern[i:])
                break
            out += bytes(cls) + b"]"
            i = j
        else:
            out += re.escape(c)
        i += 1
    return re.compile(bytes(out) + rb"\Z", re.DOTALL)


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every name matching the glob ``pattern`` starts with (up to its first wildcard)."""
    out = bytearray()
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c in b"*?[":
            break
        if c == 0x5C:  # backslash: the next byte is literal
            if i + 1 >= len(pattern):
                break
            i += 1
            c = pattern[i]
        out.append(c)
        i += 1
    return bytes(out)

"""Ways to show an ID: base62, fixed-width decimal, a date-prefixed form, prefixes and suffixes,
JavaScript safety, and a keyed reversible permutation that hides how many IDs were issued.

Pure functions, no I/O. Each encoder has a decoder and both are property-tested as exact inverses
(tests/clients/test_formats.py). What this module must never do: lose information (every encoding
decodes to the same integer) or map two IDs to one string or number; an input it cannot encode
exactly is an error, never a truncated or rounded value.

Sorting: base62 with ``width`` and `fixed_width` strings sort (bytewise, as most databases compare
under a binary/"C" collation) exactly like the integers; unpadded base62 and unpadded decimals do
not. A case-insensitive collation breaks base62 ordering (``a`` and ``A`` are different digits).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re

from march_client import errors

# -- base62 ---------------------------------------------------------------------------------

# Digits in ASCII order, so equal-width strings compare like the numbers they encode.
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE62_VALUE = {c: i for i, c in enumerate(BASE62)}
BASE62_WIDTH_64 = 11  # 62**11 > 2**64: every 64-bit ID fits in 11 base62 digits


def _check_id(value: int) -> None:
    if value < 0:
        raise ValueError(errors.NEGATIVE_ID.format(value=value))


def base62_encode(value: int, width: int | None = None) -> str:
    """``value`` in base62 (``0-9A-Za-z``); with ``width``, left-padded with ``0`` to that many
    digits (sortable; a value that needs more digits is an error)."""
    _check_id(value)
    digits = []
    while True:
        value, d = divmod(value, 62)
        digits.append(BASE62[d])
        if value == 0:
            break
    text = "".join(reversed(digits))
    if width is not None:
        if len(text) > width:
            raise ValueError(errors.TOO_WIDE.format(value=base62_decode(text), width=width))
        text = text.rjust(width, "0")
    return text


def base62_decode(text: str) -> int:
    """The integer a base62 string encodes (leading zeros allowed)."""
    if not text:
        raise ValueError(errors.NOT_BASE62.format(text=text))
    value = 0
    for c in text:
        d = _BASE62_VALUE.get(c)
        if d is None:
            raise ValueError(errors.NOT_BASE62.format(text=text))
        value = value * 62 + d
    return value


# -- fixed-width decimal -----------------------------------------------------------------------

MAX_ID_DIGITS = 19  # 2**63 - 1, March's largest ID, has 19 digits


def fixed_width(value: int, width: int = MAX_ID_DIGITS) -> str:
    """``value`` zero-padded to ``width`` decimal digits (sortable as text)."""
    _check_id(value)
    text = str(value)
    if len(text) > width:
        raise ValueError(errors.TOO_WIDE.format(value=value, width=width))
    return text.zfill(width)


def parse_fixed(text: str) -> int:
    """The inverse of `fixed_width`."""
    if not text.isdigit() or not text.isascii():
        raise ValueError(errors.NOT_DECIMAL.format(text=text))
    return int(text)


# -- dated form: 20261123-0000123 --------------------------------------------------------------

DATED_WIDTH = 7  # digits after the date: room for 10 million IDs before the width must grow
_DATED = re.compile(r"^(\d{8})-(\d+)$")


def dated(value: int, day: dt.date | None = None, width: int = DATED_WIDTH) -> str:
    """``YYYYMMDD-NNNNNNN``: a readable date, then the ID zero-padded to ``width`` digits.

    The number part is the ID itself (from one sequence, so unique on its own: the date is only for
    people). Pass the day the ID was issued (default: today, UTC). Such strings sort like the IDs
    as long as every ID fits ``width`` (a wider one is an error, never silently longer) and the
    dates come from a clock that does not go back. For a number that starts again every day, draw
    from a sequence per day instead (``seq.next(f"invoices:{day:%Y%m%d}")``): then the date is part
    of what makes the string unique.
    """
    day = day or dt.datetime.now(dt.UTC).date()
    return f"{day:%Y%m%d}-{fixed_width(value, width)}"


def parse_dated(text: str) -> tuple[dt.date, int]:
    """``"20261123-0000123"`` -> ``(date(2026, 11, 23), 123)``."""
    m = _DATED.match(text)
    if m is None:
        raise ValueError(errors.BAD_DATED.format(text=text))
    try:
        day = dt.datetime.strptime(m.group(1), "%Y%m%d").date()
    except ValueError:
        raise ValueError(errors.BAD_DATED.format(text=text)) from None
    return day, int(m.group(2))


# -- prefixes and suffixes ---------------------------------------------------------------------


def with_affix(
    value: int, prefix: str = "", suffix: str = "", *, base62: bool = False, width: int | None = None
) -> str:
    """``prefix + ID + suffix`` (e.g. ``ord_5Ab3``); the ID in decimal, or base62, padded to
    ``width`` if given."""
    if base62:
        body = base62_encode(value, width)
    elif width is not None:
        body = fixed_width(value, width)
    else:
        _check_id(value)
        body = str(value)
    return f"{prefix}{body}{suffix}"


def strip_affix(text: str, prefix: str = "", suffix: str = "", *, base62: bool = False) -> int:
    """The inverse of `with_affix`: checks the prefix and suffix are there."""
    if not text.startswith(prefix):
        raise ValueError(errors.MISSING_AFFIX.format(text=text, what="prefix", affix=prefix))
    if not text.endswith(suffix) or len(text) < len(prefix) + len(suffix):
        raise ValueError(errors.MISSING_AFFIX.format(text=text, what="suffix", affix=suffix))
    body = text[len(prefix) : len(text) - len(suffix)]
    return base62_decode(body) if base62 else parse_fixed(body)


# -- JavaScript safety -------------------------------------------------------------------------

JS_MAX_SAFE = 2**53 - 1  # Number.MAX_SAFE_INTEGER: above it, JSON.parse rounds and IDs collide


def is_js_safe(value: int) -> bool:
    """Whether a JavaScript number holds ``value`` exactly (0 <= value <= 2**53-1)."""
    return 0 <= value <= JS_MAX_SAFE


def require_js_safe(value: int) -> int:
    """``value``, or `ValueError` if a JavaScript number would round it (send it as a string)."""
    if not is_js_safe(value):
        raise ValueError(errors.NOT_JS_SAFE.format(value=value))
    return value


# -- keyed permutation: hide volume and order ----------------------------------------------------

ROUNDS = 8  # a balanced Feistel network with a pseudorandom round function is a PRP from 4 rounds; 8 for margin
MIN_KEY = 16  # bytes: 128 bits, beyond guessing
DEFAULT_BITS = 63  # March IDs are < 2**63: outputs stay positive signed 64-bit integers
JS_BITS = 53  # outputs stay <= 2**53-1 when inputs do


@functools.lru_cache(maxsize=32)  # derived once per key: most applications use one or two
def _round_keys(key: bytes) -> tuple[bytes, ...]:
    if len(key) < MIN_KEY:
        raise ValueError(errors.BAD_KEY)
    # blake2b takes keys of at most 64 bytes: derive one per round from any key length.
    return tuple(
        hashlib.blake2b(bytes([r]) + key, digest_size=32, person=b"march-feistel").digest() for r in range(ROUNDS)
    )


def _feistel(value: int, half: int, round_keys: tuple[bytes, ...], forward: bool) -> int:
    mask = (1 << half) - 1
    nbytes = (half + 7) // 8
    left, right = value >> half, value & mask
    order = round_keys if forward else round_keys[::-1]
    if forward:
        for k in order:
            f = int.from_bytes(hashlib.blake2b(right.to_bytes(nbytes, "big"), key=k, digest_size=8).digest(), "big")
            left, right = right, left ^ (f & mask)
    else:
        for k in order:
            f = int.from_bytes(hashlib.blake2b(left.to_bytes(nbytes, "big"), key=k, digest_size=8).digest(), "big")
            left, right = right ^ (f & mask), left
    return (left << half) | right


def _permute(value: int, key: bytes, bits: int, forward: bool) -> int:
    if not 8 <= bits <= 64:
        raise ValueError(errors.BAD_BITS.format(bits=bits))
    if not 0 <= value < 1 << bits:
        raise ValueError(errors.OUT_OF_DOMAIN.format(value=value, bits=bits))
    round_keys = _round_keys(bytes(key))
    half = (bits + 1) // 2
    # An odd width runs the network over one bit more and "cycle-walks": applying the permutation
    # again until the result is back inside [0, 2**bits) is still a bijection of that range (the
    # walk from x follows x's cycle to the next element inside the range, and inverts the same way).
    while True:
        value = _feistel(value, half, round_keys, forward)
        if value < 1 << bits:
            return value


def obfuscate(value: int, key: bytes, bits: int = DEFAULT_BITS) -> int:
    """A keyed bijection of ``[0, 2**bits)``: unrelated-looking numbers that hide how many IDs exist
    and in what order they came, reversible only with ``key`` (>= 16 secret bytes).

    ``bits=63`` (default) keeps outputs in a signed 64-bit column; ``bits=53`` keeps JS-safe IDs
    JS-safe. Two different IDs never map to the same number (it is a permutation), but outputs are
    not ordered: index the real ID, show the obfuscated one. Not encryption of the data itself:
    use it to hide counts, not secrets. Changing the key changes every output.
    """
    return _permute(value, key, bits, forward=True)


def deobfuscate(value: int, key: bytes, bits: int = DEFAULT_BITS) -> int:
    """The inverse of `obfuscate` with the same ``key`` and ``bits``."""
    return _permute(value, key, bits, forward=False)

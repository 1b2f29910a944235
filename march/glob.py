"""Redis' glob patterns (``KEYS``, ``SCAN MATCH``, ``CONFIG GET``, ``COMMAND LIST FILTERBY PATTERN``),
matched in polynomial time.

**Semantics** are those of Redis' ``stringmatchlen_impl`` (src/util.c), byte for byte, on x86-64:

- ``*`` any run of bytes, ``?`` any one byte, any other byte itself; ``\\x`` is ``x`` literally (a
  backslash that ends the pattern is a literal backslash).
- ``[...]`` one byte of a set; ``[^...]`` one byte not in it. Inside, ``\\x`` is ``x`` literally and
  ``a-z`` a range, taken either way round (``[z-a]`` is ``[a-z]``). Ranges compare C ``char``\\ s,
  which are signed on x86-64: bytes 0x80-0xff sort *before* 0x00, so ``[\\x00-\\xff]`` is only
  those two bytes and ``[\\x7f-\\x80]`` is every byte. A ``-`` right before the ``]`` makes a
  range ending in ``]`` (``[a-]`` is the bytes 0x5d-0x61, ``]`` to ``a``) and the class goes on.
- ``[`` without its ``]`` is a class of the bytes up to the end of the pattern (``[ab`` is one
  ``a`` or ``b``; ``[`` matches nothing; ``[^`` any one byte). ``[]`` matches nothing, ``[^]``
  any one byte.
- The empty name matches only the empty pattern (not even ``*``: Redis' ``KEYS *`` lists every
  name without matching, so callers special-case the pattern ``*`` as Redis does).
- A pattern with more than 1000 ``*`` runs before its last token never matches: Redis' guard
  against abusive patterns (CVE-2024-31228) stops its recursion 1000 levels deep.
- ``nocase``: ASCII letters compare case-insensitively (Redis' ``tolower`` in the C locale), except
  an escaped byte inside a class, which Redis compares exactly. Redis uses it for ``CONFIG GET``
  and ``COMMAND LIST FILTERBY PATTERN``.

**Complexity.** ``compile_glob`` reads the pattern once into *segments*, the runs of one-byte
tokens between the ``*``\\ s (each token a 256-bit set of the bytes it accepts). A name matches
when the first segment matches at its start, the last at its end, and the segments in between
occur in order, without overlap, in the middle. Every segment has a fixed length, so taking each
middle segment at its leftmost occurrence (after the previous one) is never worse than any other
choice: it ends earliest and leaves the most room to the rest. Nothing is ever retried, so one
match reads each byte of the name at most once per pattern token: O(len(name) x len(pattern)) at
worst, and linear for literal segments (``bytes.find``). Redis' naive recursion was exponential
(``*a*a*a*a*a*a*a*a*b`` against a long name of ``a``\\ s) until CVE-2022-36021 added a pruning
flag; a regex with ``.*`` backtracks the same way, which is what this module replaces.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Glob", "compile_glob", "literal_prefix"]

_STAR, _QUESTION, _OPEN, _CLOSE, _BACKSLASH, _CARET, _DASH = b"*?[]\\^-"
_ANY = (1 << 256) - 1  # the set of every byte: ``?``
_UPPER = ((1 << 26) - 1) << ord("A")  # A-Z
_MAX_NESTING = 1000  # Redis: ``if (nesting > 1000) return 0;`` one level per ``*``


def _signed(b: int) -> int:
    """A byte as x86-64's signed C ``char``."""
    return b - 256 if b >= 128 else b


def _lower(c: int) -> int:
    """C ``tolower`` in the C locale, on a (signed) char."""
    return c + 32 if ord("A") <= c <= ord("Z") else c


def _span(lo: int, hi: int) -> int:
    """The set of bytes whose signed value is in [lo, hi] (both in -128..127), as a bit mask."""
    if lo > hi:
        return 0
    if lo >= 0 or hi < 0:  # no wrap: the same order as unsigned bytes
        return ((1 << (hi - lo + 1)) - 1) << (lo & 0xFF)
    return _span(lo, -1) | _span(0, hi)


def _unfold(folded: int) -> int:
    """The bytes c whose ``tolower(c)`` is in ``folded``: an upper-case letter takes the bit of its lower case."""
    return (folded & ~_UPPER) | ((folded >> 32) & _UPPER)


def _letter(b: int) -> bool:
    return ord("A") <= b <= ord("Z") or ord("a") <= b <= ord("z")


def _class(pattern: bytes, i: int, nocase: bool) -> tuple[int, int]:
    """The class opened by the ``[`` at ``pattern[i]``: (set of bytes it accepts, index of its last byte).

    Mirrors Redis' loop exactly; ``rem`` is Redis' ``patternLen`` (bytes left from ``i``).
    """
    n = len(pattern)
    i += 1
    negate = i < n and pattern[i] == _CARET
    if negate:
        i += 1
    exact = 0  # bytes compared exactly (escapes; everything without nocase)
    folded = 0  # with nocase: lower-cased (signed) values that the lower-cased byte may take
    while True:
        rem = n - i
        if rem >= 2 and pattern[i] == _BACKSLASH:
            i += 1
            exact |= 1 << pattern[i]
        elif rem >= 1 and pattern[i] == _CLOSE:
            break
        elif rem == 0:  # unterminated: the class is what was read; it ends the pattern
            i -= 1
            break
        elif rem >= 3 and pattern[i + 1] == _DASH:
            lo, hi = _signed(pattern[i]), _signed(pattern[i + 2])
            if lo > hi:
                lo, hi = hi, lo
            if nocase:
                folded |= _span(_lower(lo), _lower(hi))
            else:
                exact |= _span(lo, hi)
            i += 2
        elif nocase:
            folded |= 1 << _lower(pattern[i])
        else:
            exact |= 1 << pattern[i]
        i += 1
    accepts = exact | _unfold(folded)
    return (accepts ^ _ANY if negate else accepts), i


def _tokens(pattern: bytes, nocase: bool) -> list[int | None]:
    """The pattern as tokens: None for a run of ``*``, else the set of bytes one byte may be (a bit mask)."""
    out: list[int | None] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == _STAR:
            while i + 1 < n and pattern[i + 1] == _STAR:
                i += 1
            out.append(None)
        elif c == _QUESTION:
            out.append(_ANY)
        elif c == _OPEN:
            accepts, i = _class(pattern, i, nocase)
            out.append(accepts)
        else:
            if c == _BACKSLASH and i + 1 < n:
                i += 1
                c = pattern[i]
            out.append((1 << c) | (1 << (c ^ 0x20)) if nocase and _letter(c) else 1 << c)
        i += 1
    return out


class _Masks(tuple[int, ...]):
    """A segment with a wildcard or a class: the set of bytes each position accepts, and an anchor to
    search for: the offset and byte of its first literal token (-1, -1 if it has none)."""

    anchor: tuple[int, int]

    def __new__(cls, masks: Sequence[int]) -> _Masks:
        self = super().__new__(cls, masks)
        self.anchor = next(((j, m.bit_length() - 1) for j, m in enumerate(masks) if _single(m)), (-1, -1))
        return self


Segment = bytes | _Masks


def _single(mask: int) -> bool:
    """The set holds exactly one byte."""
    return mask != 0 and not mask & (mask - 1)


def _segment(masks: Sequence[int]) -> Segment:
    """Literal bytes if every token is one byte (fast paths: startswith, endswith, find), else the masks."""
    if all(_single(m) for m in masks):
        return bytes(m.bit_length() - 1 for m in masks)
    return _Masks(masks)


def _at(seg: _Masks, key: bytes, i: int) -> bool:
    """``seg`` matches ``key`` at ``i`` (the caller checked there is room)."""
    for j, mask in enumerate(seg):  # noqa: SIM110 - a loop, not all(generator): this is the hot path
        if not (mask >> key[i + j]) & 1:
            return False
    return True


def _find(seg: _Masks, key: bytes, start: int, end: int) -> int:
    """Where ``seg`` first occurs in ``key[start:end]``, or -1. Candidates come from ``bytes.find`` of
    the anchor byte when there is one; each candidate is checked once, so O((end - start) x len(seg))."""
    last = end - len(seg)  # the last place it can start
    offset, byte = seg.anchor
    i = start
    while i <= last:
        if offset >= 0:
            found = key.find(byte, i + offset, last + offset + 1)
            if found < 0:
                return -1
            i = found - offset
        if _at(seg, key, i):
            return i
        i += 1
    return -1


class Glob:
    """A compiled glob pattern; ``match(name)`` for any number of names."""

    __slots__ = ("_head", "_middle", "_min_len", "_never", "_star", "_tail", "nocase", "pattern")

    def __init__(self, pattern: bytes, nocase: bool = False) -> None:
        self.pattern = pattern
        self.nocase = nocase
        tokens = _tokens(pattern, nocase)
        runs: list[list[int]] = [[]]
        for t in tokens:
            if t is None:
                runs.append([])
            else:
                runs[-1].append(t)
        segments = [_segment(r) for r in runs]
        stars = len(runs) - 1
        inner_stars = stars - (1 if tokens and tokens[-1] is None else 0)
        self._star = stars > 0
        self._head = segments[0]
        self._tail = segments[-1] if stars else b""
        self._middle = segments[1:-1]
        self._min_len = sum(len(r) for r in runs)
        # a token that accepts no byte ([] or [) or Redis' nesting limit: no name can match
        self._never = inner_stars > _MAX_NESTING or any(t == 0 for t in tokens)

    def __repr__(self) -> str:
        return f"compile_glob({self.pattern!r}{', nocase=True' if self.nocase else ''})"

    def match(self, key: bytes) -> bool:
        """Whether ``key`` matches the whole pattern."""
        n = len(key)
        if n == 0:
            return not self.pattern
        if self._never or n < self._min_len:
            return False
        head, tail = self._head, self._tail
        if not self._star:
            return n == len(head) and (key == head if isinstance(head, bytes) else _at(head, key, 0))
        if isinstance(head, bytes):
            if not key.startswith(head):
                return False
        elif not _at(head, key, 0):
            return False
        end = n - len(tail)
        if isinstance(tail, bytes):
            if not key.endswith(tail):
                return False
        elif not _at(tail, key, end):
            return False
        pos = len(head)
        for seg in self._middle:
            # the leftmost occurrence in key[pos:end]; see the module docstring for why that is enough
            found = key.find(seg, pos, end) if isinstance(seg, bytes) else _find(seg, key, pos, end)
            if found < 0:
                return False
            pos = found + len(seg)
        return True


def compile_glob(pattern: bytes, *, nocase: bool = False) -> Glob:
    """``pattern`` (Redis glob syntax) ready to match names; see the module docstring."""
    return Glob(pattern, nocase)


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every name matching the glob ``pattern`` starts with (up to its first wildcard)."""
    out = bytearray()
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c in b"*?[":
            break
        if c == _BACKSLASH:  # the next byte is literal
            if i + 1 >= len(pattern):
                break
            i += 1
            c = pattern[i]
        out.append(c)
        i += 1
    return bytes(out)

"""Redis' glob patterns (``KEYS``, ``SCAN MATCH``, ``CONFIG GET``, ``COMMAND LIST FILTERBY PATTERN``,
ACL key patterns), matched in linear time: O(len(pattern)) to compile, O(len(name)) steps per name.

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
tokens between the ``*``\\ s (each token a 256-bit set of the bytes it accepts): O(len(pattern)).
A name matches when the first segment matches at its start, the last at its end, and the segments
in between occur in order, without overlap, in the middle. Every segment has a fixed length, so
taking each middle segment at its leftmost occurrence (after the previous one) is never worse than
any other choice: it ends earliest and leaves the most room to the rest. Nothing is ever retried:
the head and the tail are compared in place (one step per token), and each middle segment is
searched for in the window that starts where the previous one ended and stops where it is found,
so the windows never overlap. A search reads each byte of its window once:

- a segment with a wildcard or a class with Shift-And (Baeza-Yates & Gonnet), the bit-parallel
  form of the segment's automaton: an integer whose bit j says "a match of the segment's first
  j+1 tokens ends here", moved on by one shift, one or and one and per byte (``table``: for each
  byte, the tokens that accept it, built once per segment, lazily, in at most 128 steps per
  distinct class);
- a literal segment with ``bytes.find``, in C (CPython's fastsearch: Horspool on names under
  2,500 bytes, whose worst case compares window x segment bytes at memcmp speed, ~0.1 ms for
  a 1 KiB name; two-way, linear, on longer ones).

So one match costs at most len(name) + segments + 2 Python steps, never len(pattern) x len(name).
A step works on an integer as wide as its segment, which is never longer than the name (shorter
names are refused by length first): up to 1 KiB names (the default ``max_key_len``) that is one
operation on 16 machine words, measured flat at ~0.1 us a byte whatever the pattern (the old
matcher: ~17 ms per 1 KiB name on a 2 KiB glob of classes, this one 0.13 ms). ``Glob.cost`` states
the bound so that long listings can be cut into slices of bounded work. Redis' naive recursion was exponential
(``*a*a*a*a*a*a*a*a*b`` against a long name of ``a``\\ s) until CVE-2022-36021 added a pruning flag
and is still O(len(pattern) x len(name)); a regex with ``.*`` backtracks; RE2 (``google-re2``) was
measured at ~4.5 ms per 1 KiB name on a 2 KiB glob of ``*a???...``, where its DFA cache overflows
and it falls back to an NFA that is O(len(pattern) x len(name)) again: this module replaces both.

**Memory.** A compiled pattern holds a reference per one-byte token (8 bytes) and each distinct
byte set once (every pattern shares the sets of one byte): at most about 9 KB for a 1 KiB pattern
(a run of ``?``), 1-2 KB for most; compiling peaks at a few tens of KB, given back at once.
``matches`` compiles nothing it keeps: one name against one pattern, reading the pattern only as
far as a match of that name could need (pub/sub checks each subscribed pattern this way, once).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

__all__ = ["Glob", "compile_glob", "literal_prefix", "matches"]

_STAR, _QUESTION, _OPEN, _CLOSE, _BACKSLASH, _CARET, _DASH = b"*?[]\\^-"
_ANY = (1 << 256) - 1  # the set of every byte: ``?``
_BIT = tuple(1 << c for c in range(256))  # the set of one byte, shared by every pattern (not one int per token)
_BOTH_CASES = tuple(_BIT[c] | _BIT[c ^ 0x20] for c in range(256))  # a letter in either case (nocase; letters only)
_STARS = re.compile(rb"\*+")  # a run of stars, skipped in C whatever its length
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


def _tokens(pattern: bytes, nocase: bool, limit: int = -1) -> list[int | None] | None:
    """The pattern as tokens: None for a run of ``*``, else the set of bytes one byte may be (a bit mask).

    Equal sets are one object (a compiled pattern holds a reference per token, not an integer). With
    ``limit`` >= 0: None as soon as more than ``limit`` one-byte tokens are read (the pattern needs a
    name longer than that), the rest of the pattern unread.
    """
    out: list[int | None] = []
    shared: dict[int, int] = {}
    i, n, ones = 0, len(pattern), 0
    while i < n:
        c = pattern[i]
        if c == _STAR:
            i = _STARS.match(pattern, i).end()  # type: ignore[union-attr]  # (pattern[i] is a star: it matches)
            out.append(None)
            continue
        if c == _QUESTION:
            token = _ANY
        elif c == _OPEN:
            accepts, i = _class(pattern, i, nocase)
            token = shared.setdefault(accepts, accepts)
        else:
            if c == _BACKSLASH and i + 1 < n:
                i += 1
                c = pattern[i]
            token = _BOTH_CASES[c] if nocase and _letter(c) else _BIT[c]
        ones += 1
        if ones > limit >= 0:
            return None
        out.append(token)
        i += 1
    return out


class _Masks:
    """A segment with a wildcard or a class, ready for a bit-parallel search (Shift-And).

    ``sets[j]``: the bytes position j accepts (a 256-bit mask). ``table[c]``: the positions that accept
    byte c (bit j for position j): the same facts turned sideways, so one byte of a name moves every
    partial match of the segment at once. ``wild``: every position is ``?`` (only a length).
    """

    __slots__ = ("_table", "goal", "sets", "wild")

    def __init__(self, sets: Sequence[int]) -> None:
        self.sets = tuple(sets)
        self.goal = 1 << (len(sets) - 1)  # the bit of a match that reached the segment's last position
        self.wild = all(s == _ANY for s in sets)
        self._table: list[int] | None = None

    def __len__(self) -> int:
        return len(self.sets)

    @property
    def table(self) -> list[int]:
        """Built on the first search (a segment longer than every name is never searched for: its
        integers stay as wide as a name at most, whatever the pattern's length)."""
        if self._table is None:
            self._table = _transpose(self.sets)
        return self._table


def _transpose(sets: Sequence[int]) -> list[int]:
    """For each byte, the positions (bits) whose set holds it. Positions with equal sets are taken
    together, and a set of more than half the bytes through its complement: at most 128 steps per
    distinct set, so O(len(pattern)) steps for any pattern (a class takes at least 3 of its bytes)."""
    by_set: dict[int, int] = {}
    for j, s in enumerate(sets):
        by_set[s] = by_set.get(s, 0) | (1 << j)
    big = 0  # the positions whose set is more than half the bytes: on for every byte, then off where missing
    for s, positions in by_set.items():
        if s.bit_count() > 128:
            big |= positions
    table = [big] * 256
    for s, positions in by_set.items():
        if s.bit_count() > 128:
            clear = ~positions
            for c in _members(s ^ _ANY):
                table[c] &= clear
        else:
            for c in _members(s):
                table[c] |= positions
    return table


def _members(s: int) -> Iterator[int]:
    """The bytes in the set ``s``."""
    while s:
        low = s & -s
        yield low.bit_length() - 1
        s ^= low


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
    """``seg`` matches ``key`` at ``i`` (the caller checked there is room): one step per position."""
    for j, mask in enumerate(seg.sets):  # noqa: SIM110 - a loop, not all(generator): this is the hot path
        if not (mask >> key[i + j]) & 1:
            return False
    return True


def _find(seg: _Masks, key: bytes, start: int, end: int) -> int:
    """Where ``seg`` first occurs in ``key[start:end]``, or -1: Shift-And, one step per byte of the window.

    Bit j of ``d`` says "the window's bytes up to here end with a match of positions 0..j"; a byte moves
    every such partial match one position on at once, and keeps those whose next position accepts it.
    Nothing is ever read twice, whatever the segment: O(end - start) steps on integers of len(seg) bits.
    """
    k = len(seg)
    if end - start < k:
        return -1
    if seg.wild:
        return start
    table, goal = seg.table, seg.goal
    d = 0
    for i in range(start, end):  # indexing, not a slice: a copy of the window would cost its length
        d = ((d << 1) | 1) & table[key[i]]
        if d & goal:
            return i - k + 1
    return -1


class Glob:
    """A compiled glob pattern; ``match(name)`` for any number of names."""

    __slots__ = ("_head", "_middle", "_min_len", "_never", "_segments", "_star", "_tail", "nocase", "pattern")

    def __init__(self, pattern: bytes, nocase: bool = False, tokens: list[int | None] | None = None) -> None:
        self.pattern = pattern
        self.nocase = nocase
        if tokens is None:
            tokens = _tokens(pattern, nocase)
            assert tokens is not None  # (no limit)
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
        self._segments = len(segments)
        self._min_len = sum(len(r) for r in runs)
        # a token that accepts no byte ([] or [) or Redis' nesting limit: no name can match
        self._never = inner_stars > _MAX_NESTING or any(t == 0 for t in tokens)

    def __repr__(self) -> str:
        return f"compile_glob({self.pattern!r}{', nocase=True' if self.nocase else ''})"

    def cost(self, n: int) -> int:
        """Work units (about one Python step each) that matching a name of ``n`` bytes takes at most:
        a step per byte, one per segment, and wider integers past 1 KiB (see the module docstring)."""
        return n * (1 + n // 1024) + self._segments

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


def matches(pattern: bytes, name: bytes) -> bool:
    """Whether ``name`` matches ``pattern``, once, keeping nothing: for one name against many
    patterns (pub/sub), where compiling each whole pattern would cost its length every time.

    A match needs a byte of the name per one-byte token, so the pattern is read only until it has
    more such tokens than the name has bytes (then: no match): O(len(name)) tokens, plus the bytes
    of the ``[...]`` classes among them, at most len(pattern) steps in all.
    """
    if not name:
        return not pattern
    tokens = _tokens(pattern, False, limit=len(name))
    return tokens is not None and Glob(pattern, tokens=tokens).match(name)


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

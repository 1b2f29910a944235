"""march.glob: Redis' glob semantics, checked against a real redis-server, and a bound on the work.

- Semantics: the names a real redis-server lists for ``KEYS pattern`` are exactly those
  ``compile_glob(pattern).match`` accepts (a table of tricky patterns, then hypothesis on random
  ones); ``nocase`` against Redis' ``COMMAND LIST FILTERBY PATTERN``, which matches without case.
- Work: pathological patterns finish (a hang fails through the timeout), and a name that counts
  every byte the matcher reads bounds the work by O(len(name) x len(pattern)) deterministically.
- ``matches`` (one name against a pattern, nothing kept: pub/sub) answers as ``compile_glob`` does,
  and reads no more of a long pattern than a short name can need.
- End to end: march answers ``KEYS``/``SCAN MATCH``/``CONFIG GET``/``COMMAND LIST FILTERBY`` with
  broken classes (``[]``, ``[z-a]``, ``[^]``) as Redis does, never with an internal error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, SupportsIndex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from march_harness import MarchServer, RedisServer, RespConn, RespError

from march.glob import compile_glob, literal_prefix, matches

pytestmark = pytest.mark.e2e

# Names every table pattern is tried on: each byte class the parser treats specially, signed-char
# neighbours (0x7f/0x80, 0x00/0xff) for ranges, letters in both cases, and the empty name.
NAMES = [
    b"", b"a", b"b", b"c", b"z", b"A", b"Z", b"ab", b"abc", b"aXc", b"ba", b"aa", b"aaa", b"abab",
    b"-", b"]", b"[", b"^", b"\\", b"*", b"?", b"_", b"`", b"a]", b"[]", b"a-", b"a\\", b"\\a",
    b"\x00", b"\xff", b"\x7f", b"\x80", b"\x01", b"\xfe", b"a\x00b", b"\xff\x00", b"\x00\x00",
    b"foo:bar", b"foo:baz", b"foo:", b"foo", b"hello", b"hallo", b"hxllo", b"hllo", b"heeeello",
]  # fmt: skip

PATTERNS = [
    # stars and ?
    b"*", b"**", b"***", b"", b"?", b"??", b"?*", b"*?", b"a*", b"*a", b"*a*", b"a*b", b"a**b", b"*b*a*",
    b"a*a", b"*a*a*", b"a?c", b"h?llo", b"h*llo", b"foo:*", b"*:*", b"*:ba?",
    # classes, negation, ranges (reversed: Redis swaps them), signed-char ranges
    b"[ab]", b"[^ab]", b"[a-c]", b"[c-a]", b"[z-a]", b"[^z-a]", b"[A-Z]", b"[a-]", b"[-a]", b"[a-b-c]",
    b"h[ae]llo", b"h[^e]llo", b"h[a-b]llo", b"[\x00-\xff]", b"[\xff-\x00]", b"[\x7f-\x80]", b"[\x80-\x7f]",
    b"[\x00-\x7f]", b"[\x80-\xff]", b"[^\xff-\x01]", b"[\x01-\x00]", b"[!a]", b"[]]", b"[]a]", b"[a]]",
    b"[[]", b"[\\]]", b"[\\-]", b"[a\\-c]", b"[\\a-c]", b"[a-\\]", b"[^-]", b"[*]", b"[?]", b"[*?]*",
    # [] and [^], unterminated [
    b"[]", b"[^]", b"[]*", b"*[]", b"[^]*", b"[", b"[^", b"[a", b"[ab", b"[^a", b"a[", b"a[b", b"[a-",
    b"[a-c", b"[\\", b"[a\\", b"[^\\", b"*[", b"*[a", b"[\\]", b"[[", b"[-", b"[]-a",
    # escapes, a trailing backslash
    b"\\", b"a\\", b"\\a", b"\\*", b"\\?", b"\\[", b"\\]", b"\\\\", b"\\\\*", b"*\\", b"*\\*", b"[\\*]",
    b"a\\-", b"\\[]", b"\\[a]",
    # binary
    b"\x00", b"\xff", b"?\x00?", b"*\x00*", b"\xff*", b"[\x00]", b"[^\x00]", b"a\x00*",
]  # fmt: skip


def expected_names(names: Iterable[bytes], pattern: bytes) -> list[bytes]:
    """What KEYS lists, by our matcher: Redis (and march) answer ``KEYS *`` without matching."""
    glob = compile_glob(pattern)
    return sorted(n for n in names if pattern == b"*" or glob.match(n))


def redis_keys(conn: RespConn, pattern: bytes) -> list[bytes]:
    reply = conn.call("KEYS", pattern)
    assert isinstance(reply, list), f"KEYS {pattern!r}: {reply!r}"
    return sorted(reply)


def load(conn: RespConn, names: Iterable[bytes]) -> None:
    assert conn.call("FLUSHALL") == "OK"
    for name in names:
        assert conn.call("SET", name, "1") == "OK"


@pytest.fixture
def rconn(redis_server: RedisServer) -> Iterator[RespConn]:
    with redis_server.conn() as c:
        yield c


# --- semantics, against redis-server ---------------------------------------------------------------


@pytest.mark.redis
def test_table_of_patterns_matches_redis(rconn: RespConn) -> None:
    load(rconn, NAMES)
    wrong = {}
    for pattern in PATTERNS:
        want, got = redis_keys(rconn, pattern), expected_names(NAMES, pattern)
        if want != got:
            wrong[pattern] = f"redis {want}, ours {got}"
    assert not wrong, wrong


@pytest.mark.redis
def test_quirks_seen_in_redis(rconn: RespConn) -> None:
    """The surprising parts, stated one by one (each also checked against redis-server)."""
    load(rconn, NAMES)
    cases: list[tuple[bytes, set[bytes]]] = [
        (b"**", set(NAMES) - {b""}),  # only KEYS * lists the empty name; no pattern matches it
        (b"", {b""}),
        (b"[\x00-\xff]", {b"\x00", b"\xff"}),  # signed chars: 0xff is -1, the range is -1..0
        (b"[\x7f-\x80]", {n for n in NAMES if len(n) == 1}),  # -128..127: every byte
        (b"[a-]", {b"]", b"^", b"_", b"`", b"a"}),  # a range from ']' to 'a'
        (b"[z-a]", {b"a", b"b", b"c", b"z"}),
        (b"[]", set()),
        (b"[^]", {n for n in NAMES if len(n) == 1}),
        (b"[", set()),
        (b"[^", {n for n in NAMES if len(n) == 1}),
        (b"[ab", {b"a", b"b"}),  # unterminated: a class of the rest
        (b"[a\\", {b"a", b"\\"}),
        (b"\\", {b"\\"}),  # a trailing backslash is itself
    ]
    for pattern, want in cases:
        assert expected_names(NAMES, pattern) == sorted(want), pattern
        assert redis_keys(rconn, pattern) == sorted(want), pattern


PATTERN_BYTES = b"ab*?[]^-\\\x00\xff"
NAME_BYTES = b"ab-]^\\*\x00\xff"


@pytest.mark.redis
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pattern=st.binary(max_size=8).map(lambda b: bytes(PATTERN_BYTES[x % len(PATTERN_BYTES)] for x in b)),
    names=st.sets(st.binary(max_size=6).map(lambda b: bytes(NAME_BYTES[x % len(NAME_BYTES)] for x in b)), max_size=30),
)
def test_random_patterns_match_redis(rconn: RespConn, pattern: bytes, names: set[bytes]) -> None:
    load(rconn, names)  # FLUSHALL first: the redis-server is shared by every example
    assert redis_keys(rconn, pattern) == expected_names(names, pattern), pattern


@pytest.mark.redis
def test_nesting_limit_like_redis(rconn: RespConn) -> None:
    """Redis gives up 1000 ``*`` deep (CVE-2024-31228): more inner stars than that never match."""
    name = b"a" * 1100
    load(rconn, [name])
    for stars in (999, 1000, 1001):
        for pattern in (b"*a" * stars, b"*a" * stars + b"*", b"a*" * stars + b"a"):
            want = redis_keys(rconn, pattern)
            assert want == expected_names([name], pattern), (stars, pattern[:8])
            assert want == ([name] if stars <= 1000 else []), (stars, pattern[:8])


NOCASE_PATTERNS = [
    b"GET", b"get", b"GeT*", b"*SET*", b"[G]et", b"[g-h]ET", b"[H-G]et", b"[^A-F]et", b"g[\\E]t", b"g[\\e]t",
    b"\\G\\E\\T", b"g?t*", b"[A-z]et", b"[Z-a]*", b"[a-Z]*", b"*|*", b"[]", b"[^]et", b"[gG", b"s[E",
]  # fmt: skip


@pytest.mark.redis
def test_nocase_matches_command_list_filterby_pattern(rconn: RespConn) -> None:
    """Redis matches COMMAND LIST FILTERBY PATTERN without case: compare over Redis' own command names."""
    names = rconn.call("COMMAND", "LIST")
    assert isinstance(names, list) and b"get" in names
    wrong = {}
    for pattern in NOCASE_PATTERNS:
        want = sorted(rconn.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern))
        glob = compile_glob(pattern, nocase=True)
        got = sorted(n for n in names if glob.match(n))
        if want != got:
            wrong[pattern] = f"redis {want}, ours {got}"
    assert not wrong, wrong
    assert compile_glob(b"g[\\E]t", nocase=True).match(b"get") is False  # an escape in a class keeps its case
    assert compile_glob(b"g\\Et", nocase=True).match(b"get") is True  # outside a class it does not


@pytest.mark.redis
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=7).map(lambda b: bytes(b"gGeEtTsSxX*?[]^-\\|"[x % 18] for x in b)))
def test_random_nocase_patterns_match_redis(rconn: RespConn, pattern: bytes) -> None:
    names = rconn.call("COMMAND", "LIST")
    glob = compile_glob(pattern, nocase=True)
    want = sorted(rconn.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern))
    assert want == sorted(n for n in names if glob.match(n)), pattern


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.binary(max_size=12).map(lambda b: bytes(PATTERN_BYTES[x % len(PATTERN_BYTES)] for x in b)),
    name=st.binary(max_size=6).map(lambda b: bytes(NAME_BYTES[x % len(NAME_BYTES)] for x in b)),
)
def test_matches_is_compile_glob_match(pattern: bytes, name: bytes) -> None:
    assert matches(pattern, name) == compile_glob(pattern).match(name), (pattern, name)


def test_matches_agrees_on_the_table() -> None:
    for pattern in PATTERNS:
        for name in NAMES:
            assert matches(pattern, name) == compile_glob(pattern).match(name), (pattern, name)


class CountingPattern(bytes):
    """A pattern that counts the bytes the tokenizer indexes (the star runs it skips in C are not counted)."""

    work = 0

    def __getitem__(self, i: Any) -> Any:
        self.work += 1
        return super().__getitem__(i)


@pytest.mark.parametrize(
    "pattern",
    [b"a" * 1024, b"?" * 1024, b"*a" * 512, b"[abc]" * 204, b"*" * 1024 + b"x", b"\\x" * 341, b"+switch-master" * 73],
)
def test_matches_reads_what_a_short_name_can_need(pattern: bytes) -> None:
    """A 14-byte name needs at most 14 one-byte tokens: a kilobyte pattern is read for a few of them
    (a class costs a few reads per byte of it), never whole."""
    counting = CountingPattern(pattern)
    name = b"+switch-master"
    assert matches(counting, name) == compile_glob(pattern).match(name)
    assert counting.work <= 20 * (len(name) + 1), (pattern[:10], counting.work)


def test_literal_prefix() -> None:
    assert literal_prefix(b"user:*") == b"user:"
    assert literal_prefix(b"a\\*b?c") == b"a*b"
    assert literal_prefix(b"ab[c]") == b"ab"
    assert literal_prefix(b"ab\\") == b"ab"  # a trailing backslash: stop (a shorter prefix is still right)
    assert literal_prefix(b"plain") == b"plain"
    assert literal_prefix(b"") == b""
    for pattern in PATTERNS:
        for name in NAMES:
            if compile_glob(pattern).match(name):
                assert name.startswith(literal_prefix(pattern)), (pattern, name)


# --- work --------------------------------------------------------------------------------------------

PATHOLOGICAL = b"*a*a*a*a*a*a*a*a*b"


@pytest.mark.timeout(10)  # a hang fails here instead of blocking the run
@pytest.mark.parametrize("size", [600, 1 << 20])
def test_pathological_pattern_finishes(size: int) -> None:
    glob = compile_glob(PATHOLOGICAL)
    assert glob.match(b"a" * size) is False
    assert glob.match(b"a" * size + b"b") is True
    assert compile_glob(PATHOLOGICAL + b"*").match(b"a" * size) is False
    assert compile_glob(b"*a?a*?a*a[ab]*a*?*a*a*a*b*").match(b"a" * size) is False
    assert compile_glob(b"*a?a*?a*a[ab]*a*?*a*a*a*b*").match(b"a" * size + b"ba") is True


class Budget(Exception):
    pass


class CountingName(bytes):
    """A name that counts the bytes the matcher reads through it, and stops it past a budget.

    Charges: one per indexed byte, the needle's length for startswith/endswith/==, window x needle
    for find up to where it finds (a naive search's worst case, so the bound holds whatever algorithm
    bytes.find uses).
    """

    budget = 0
    work = 0

    def _charge(self, n: int) -> None:
        self.work += n
        if self.work > self.budget:
            raise Budget(f"more than {self.budget} steps")

    def __getitem__(self, i: Any) -> Any:
        got = super().__getitem__(i)
        self._charge(1 if isinstance(got, int) else len(got))
        return got

    def startswith(self, prefix: Any, *args: Any) -> bool:
        self._charge(len(prefix))
        return super().startswith(prefix, *args)

    def endswith(self, suffix: Any, *args: Any) -> bool:
        self._charge(len(suffix))
        return super().endswith(suffix, *args)

    def find(self, sub: Any, start: SupportsIndex | None = None, end: SupportsIndex | None = None) -> int:
        found = super().find(sub, start, end)
        lo = 0 if start is None else int(start)
        hi = len(self) if end is None or found < 0 else found + 1  # a naive search stops where it finds
        self._charge(max(hi - lo, 1) * (1 if isinstance(sub, int) else max(len(sub), 1)))
        return found

    def __eq__(self, other: object) -> bool:
        self._charge(len(self))
        return super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()


def counted(pattern: bytes, name: bytes, factor: int = 2) -> tuple[bool, int]:
    """(match?, work) with the work capped at ``factor`` x (len(name) + 1) x (len(pattern) + 1)."""
    key = CountingName(name)
    key.budget = factor * (len(name) + 1) * (len(pattern) + 1)
    return compile_glob(pattern).match(key), key.work


# (pattern, a tail that makes a long run of "a" match it)
ADVERSARIAL = [
    (PATHOLOGICAL, b"b"),
    (PATHOLOGICAL + b"*", b"b"),
    (b"*?a*?a*?a*?a*?a*?a*?b*", b"ab"),
    (b"*[a]*[a]*[a]*[a]*[a]*[ab]c*", b"bc"),
    (b"a*a*a*a*a*a*a*a*?b?", b"abc"),
    (b"*a" * 30 + b"*b*", b"b"),
    (b"*" + b"a?" * 40 + b"b*", b"b"),
    (b"*[^b]?[^b]*" * 10 + b"b", b"b"),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("pattern", "tail"), ADVERSARIAL, ids=range(len(ADVERSARIAL)))
@pytest.mark.parametrize("size", [600, 5000])
def test_work_is_bounded_by_name_times_pattern(pattern: bytes, tail: bytes, size: int) -> None:
    # counted() raises Budget past 2 x (len(name) + 1) x (len(pattern) + 1) steps
    assert counted(pattern, b"a" * size)[0] is False
    assert counted(pattern, b"a" * size + tail)[0] is True


def test_work_counter_sees_the_scan() -> None:
    """The counter is not vacuous: a middle segment that is not there is searched across the name."""
    for pattern in (b"*?b*", b"*ab*", b"*[bc]*"):
        found, work = counted(pattern, b"a" * 1000)
        assert found is False and work > 900, (pattern, work)
    with pytest.raises(Budget):
        counted(b"*?b*", b"a" * 1000, factor=0)


def test_naive_backtracking_would_exceed_the_budget() -> None:
    """The budget catches an exponential matcher: a naive recursive one runs out on the same input."""

    def naive(p: bytes, s: CountingName, i: int = 0, j: int = 0) -> bool:
        if i == len(p):
            return j == len(s)
        if p[i : i + 1] == b"*":
            return any(naive(p, s, i + 1, k) for k in range(j, len(s) + 1))
        return j < len(s) and s[j] == p[i] and naive(p, s, i + 1, j + 1)

    key = CountingName(b"a" * 600)
    key.budget = 2 * 601 * (len(PATHOLOGICAL) + 1)
    with pytest.raises(Budget):
        naive(PATHOLOGICAL, key)


# --- linear work, and a brute-force reference ------------------------------------------------------


class StepName(bytes):
    """A name that counts the steps the matcher takes over it: one per byte read from Python, the
    needle's length for startswith/endswith/==, and for ``find`` the bytes up to the end of what it
    finds (a search in C that reads its window left to right; its worst case in C is bounded in the
    module docstring, not here)."""

    steps = 0

    def __getitem__(self, i: Any) -> Any:
        got = super().__getitem__(i)
        self.steps += 1 if isinstance(got, int) else len(got)
        return got

    def __iter__(self) -> Iterator[int]:
        raise AssertionError("the matcher reads names by index")

    def startswith(self, prefix: Any, *args: Any) -> bool:
        self.steps += len(prefix)
        return super().startswith(prefix, *args)

    def endswith(self, suffix: Any, *args: Any) -> bool:
        self.steps += len(suffix)
        return super().endswith(suffix, *args)

    def find(self, sub: Any, start: SupportsIndex | None = None, end: SupportsIndex | None = None) -> int:
        found = super().find(sub, start, end)
        lo = 0 if start is None else int(start)
        hi = len(self) if end is None or found < 0 else found + (1 if isinstance(sub, int) else len(sub))
        self.steps += max(hi - lo, 1)  # what a left-to-right search reads: up to the end of what it finds
        return found

    def __eq__(self, other: object) -> bool:
        self.steps += len(self)
        return super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()


def steps(pattern: bytes, name: bytes) -> tuple[bool, int]:
    key = StepName(name)
    return compile_glob(pattern).match(key), key.steps


# A 2 KiB glob of classes with no literal to anchor on: the old matcher tried the segment at every
# offset of a 1 KiB name (~17 ms a name, the ~18 s KEYS of issue 16); linear, it reads each byte once.
CLASSES_2K = b"*" + b"[a-b]" * 400 + b"[^a]*"


@pytest.mark.parametrize(
    "pattern",
    [CLASSES_2K, b"*" + b"?[^b]" * 400 + b"c*", b"*" + b"[ab]?" * 300 + b"*[^a]" * 100, *(p for p, _ in ADVERSARIAL)],
    ids=range(3 + len(ADVERSARIAL)),
)
@pytest.mark.parametrize("size", [100, 1000, 4000])
def test_work_is_linear_in_name_plus_pattern(pattern: bytes, size: int) -> None:
    for name in (b"a" * size, b"ab" * (size // 2), b"a" * (size - 1) + b"b", b"b" * size):
        found, work = steps(pattern, name)
        assert found == reference(pattern, name) if size <= 1000 else True
        assert work <= 2 * (len(name) + len(pattern)), (pattern[:16], len(name), work)


def test_the_step_counter_sees_a_quadratic_matcher() -> None:
    """The linear bound is not vacuous: trying the 2 KiB class segment at every offset passes it."""
    sets = [compile_glob(b"[a-b]") for _ in range(400)] + [compile_glob(b"[^a]")]
    key = StepName(b"a" * 1000)
    for i in range(len(key) - len(sets) + 1):  # the old matcher's search, without its anchors
        for j, one in enumerate(sets):
            if not one.match(key[i + j : i + j + 1]):
                break
    assert key.steps > 2 * (len(key) + len(CLASSES_2K))


def reference(pattern: bytes, name: bytes, nocase: bool = False) -> bool:
    """Redis' ``stringmatchlen_impl`` (src/util.c, 7.x), ported line by line: memoised recursion on
    (pattern, name) offsets, C's signed ``char`` and ``tolower``; ``nesting`` is the number of ``*``
    runs consumed, a function of the pattern offset, so the memo stays exact."""

    def char(c: int) -> int:
        return c - 256 if c >= 128 else c

    def lower(c: int) -> int:
        return c + 32 if ord("A") <= c <= ord("Z") else c

    p = pattern + b"\0"  # C strings end with NUL: Redis reads one byte past patternLen at times
    memo: dict[tuple[int, int, int], bool] = {}

    def impl(pi: int, plen: int, si: int, slen: int, nesting: int) -> bool:
        if nesting > 1000:
            return False
        at = (pi, si, plen)
        if at in memo:
            return memo[at]
        result = run(pi, plen, si, slen, nesting)
        memo[at] = result
        return result

    def run(pi: int, plen: int, si: int, slen: int, nesting: int) -> bool:
        while plen and slen:
            c = p[pi]
            if c == ord("*"):
                while plen and p[pi + 1] == ord("*"):
                    pi, plen = pi + 1, plen - 1
                if plen == 1:
                    return True
                while slen:
                    if impl(pi + 1, plen - 1, si, slen, nesting + 1):
                        return True
                    si, slen = si + 1, slen - 1
                return False
            elif c == ord("?"):
                si, slen = si + 1, slen - 1
            elif c == ord("["):
                pi, plen = pi + 1, plen - 1
                negate = p[pi] == ord("^")
                if negate:
                    pi, plen = pi + 1, plen - 1
                matched = False
                s = char(name[si])
                while True:
                    if p[pi] == ord("\\") and plen >= 2:
                        pi, plen = pi + 1, plen - 1
                        matched |= p[pi] == name[si]
                    elif p[pi] == ord("]"):
                        break
                    elif plen == 0:
                        pi, plen = pi - 1, plen + 1
                        break
                    elif plen >= 3 and p[pi + 1] == ord("-"):
                        lo, hi = sorted((char(p[pi]), char(p[pi + 2])))
                        x = s
                        if nocase:
                            lo, hi, x = lower(lo), lower(hi), lower(x)
                        pi, plen = pi + 2, plen - 2
                        matched |= lo <= x <= hi
                    elif nocase:
                        matched |= lower(char(p[pi])) == lower(s)
                    else:
                        matched |= p[pi] == name[si]
                    pi, plen = pi + 1, plen - 1
                if negate:
                    matched = not matched
                if not matched:
                    return False
                si, slen = si + 1, slen - 1
            else:
                if c == ord("\\") and plen >= 2:
                    pi, plen = pi + 1, plen - 1
                a, b = char(p[pi]), char(name[si])
                if (lower(a) != lower(b)) if nocase else (a != b):
                    return False
                si, slen = si + 1, slen - 1
            pi, plen = pi + 1, plen - 1
            if slen == 0:
                while p[pi] == ord("*"):
                    pi, plen = pi + 1, plen - 1
                break
        return plen == 0 and slen == 0

    return impl(0, len(pattern), 0, len(name), 0)


def test_reference_agrees_with_the_redis_table() -> None:
    """The port itself, on the tricky patterns (each also checked against redis-server above)."""
    wrong = [(p, n) for p in PATTERNS for n in NAMES if reference(p, n) != compile_glob(p).match(n)]
    assert not wrong, wrong[:5]


REF_PATTERN_BYTES = b"abAB*?[]^-\\\x00\x7f\x80\xff"
REF_NAME_BYTES = b"abAB-]^\\*[\x00\x7f\x80\xff"


@settings(max_examples=3000, deadline=None)
@given(
    pattern=st.binary(max_size=12).map(lambda b: bytes(REF_PATTERN_BYTES[x % len(REF_PATTERN_BYTES)] for x in b)),
    name=st.binary(max_size=14).map(lambda b: bytes(REF_NAME_BYTES[x % len(REF_NAME_BYTES)] for x in b)),
    nocase=st.booleans(),
)
def test_random_patterns_match_the_reference(pattern: bytes, name: bytes, nocase: bool) -> None:
    assert compile_glob(pattern, nocase=nocase).match(name) == reference(pattern, name, nocase), (pattern, name)


# --- end to end ------------------------------------------------------------------------------------

BROKEN = [b"[]", b"[z-a]", b"[^]", b"[", b"[^", b"x[", b"[z-a]*", b"*[]*", b"\\", b"[\\", b"[a-]"]
E2E_NAMES = [b"a", b"b", b"m", b"z", b"x", b"xy", b"]", b"^", b"[", b"\\", b"ab", b"za"]


def scan_all(conn: RespConn, pattern: bytes) -> list[bytes]:
    found: list[bytes] = []
    cursor = b"0"
    for _ in range(1000):
        reply = conn.call("SCAN", cursor, "MATCH", pattern, "COUNT", "3")
        assert isinstance(reply, list), f"SCAN MATCH {pattern!r}: {reply!r}"
        cursor, page = reply
        found += page
        if cursor == b"0":
            return sorted(found)
    raise AssertionError("SCAN did not finish")


def config_names(conn: RespConn, pattern: bytes) -> list[bytes]:
    reply = conn.call("CONFIG", "GET", pattern)
    assert isinstance(reply, list | dict), f"CONFIG GET {pattern!r}: {reply!r}"
    return sorted(reply.keys() if isinstance(reply, dict) else reply[0::2])


@pytest.mark.e2e
@pytest.mark.redis
@pytest.mark.timeout(120)
def test_march_answers_like_redis(march_server: MarchServer, redis_server: RedisServer) -> None:
    with march_server.conn() as m, redis_server.conn() as r:
        for name in E2E_NAMES:
            for conn in (m, r):
                assert isinstance(conn.call("INCR", name), int), name
        calls: list[Callable[[RespConn], Any]] = []
        for pattern in BROKEN:
            calls += [lambda c, p=pattern: redis_keys(c, p), lambda c, p=pattern: scan_all(c, p)]
        for pattern in (b"[z-a]", b"[p-o]ort", b"P[O]R?", b"MAXCLIENT[\\S]", b"maxclient[\\s]", b"[]"):
            calls.append(lambda c, p=pattern: config_names(c, p))
        for c_ in calls:
            got, want = c_(m), c_(r)
            assert not isinstance(got, RespError), got
            assert got == want
        # COMMAND LIST: march has its own commands; those both have must be listed alike
        ours, theirs = set(m.call("COMMAND", "LIST")), set(r.call("COMMAND", "LIST"))
        for pattern in (b"[z-a]", b"[]", b"[^]", b"GE[S-U]", b"[h-g]et*", b"inc[", b"\\"):
            got = m.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern)
            want = r.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern)
            assert isinstance(got, list) and isinstance(want, list), (pattern, got, want)
            assert set(got) & theirs == set(want) & ours, pattern
        assert b"get" in m.call("COMMAND", "LIST", "FILTERBY", "PATTERN", "GE[S-U]")
    log = march_server.log_tail(1 << 20)
    assert "Traceback" not in log and "internal error" not in log, log


@pytest.mark.e2e
@pytest.mark.timeout(60)
def test_pathological_keys_does_not_block_march(march_server: MarchServer) -> None:
    with march_server.conn(timeout=10) as m, march_server.conn(timeout=10) as other:
        assert isinstance(m.call("INCR", b"a" * 600), int)
        assert isinstance(m.call("INCR", b"a" * 50), int)
        assert m.call("KEYS", PATHOLOGICAL) == []
        assert m.call("SCAN", "0", "MATCH", PATHOLOGICAL, "COUNT", "100") == [b"0", []]
        assert other.call("PING") == "PONG"
        assert m.call("KEYS", PATHOLOGICAL[:-1] + b"*") == sorted([b"a" * 50, b"a" * 600])
    assert "Traceback" not in march_server.log_tail(1 << 20)

"""RESP2/RESP3 encoding and request parsing. No I/O, no commands.

``RequestParser.feed(data)`` turns bytes from one connection into complete requests (lists of
``bytes``), in order, exactly as Redis reads them (``processInputBuffer``): a request that starts
with ``*`` is a multibulk of ``$`` bulk strings; anything else is an inline command (``PING`` typed
into ``nc``), split by ``split_inline`` with Redis' ``sdssplitargs`` quoting rules. Incomplete input
means "need more": the parser keeps it. Malformed input raises ``ProtocolError`` with Redis' own
text; the server runs the requests that came before it, answers it and closes that one connection.

Two parsers, one behaviour (and, compiled, a shortcut in front of them: ``_whole_requests`` takes a
read made only of whole plain multibulk requests at a request boundary, each request that repeats
the one before it sharing its list, and returns None, changing nothing, for anything else):

- hiredis, the hot path: a read that starts a multibulk (or goes on with one) is fed to hiredis,
  which returns every request the read completes. The result is used as it is only when it is
  plainly right: every request a non-empty array of at most ``max_args`` bulk strings, no argument
  over ``max_bulk``, the read completed at least one request, and no type hiredis passes off as
  another could hide in it (``_may_hide_types``: five ``memchr`` calls rule that out in almost
  every read). hiredis never sees an aggregate count it would have to allocate a large list for
  (``_new_reader``). A read that ends inside a request hands that request to the exact parser at
  once (hiredis' own state says so, ``_probe_cursor``), so hiredis never holds input between reads.
- the exact parser (``_advance``, ``_inline_lines``), a transcription of Redis'
  ``processMultibulkBuffer`` / ``processInlineBuffer`` that knows every byte's position: anything
  else goes through it, from the start of the request hiredis was holding (found in the read that
  left it unfinished, ``_unfinished``): errors (with the byte Redis names, e.g. ``expected '$',
  got '%'``), RESP3 types, ``*0`` / ``*-1`` / ``*-5``, inline commands after multibulk ones, a read
  that completes no request (a large request then stays with this parser until it is complete: its
  headers are checked as they arrive, and the bytes held are bounded), and every read of a client
  that has not authenticated. It hands the rest of a read back to hiredis at the next request
  boundary that starts with ``*``.

Limits, all checked at the header that declares them (as Redis does), so an oversized request is
refused before its body is held: the argument count, each argument's length (``max_bulk``), the
length of an inline line or of a header line (``max_inline``); and the memory one unfinished
request holds (``max_held``, the server's ``client_query_buffer_limit``: its bytes plus
``ARG_OVERHEAD`` per argument), checked as it grows. The argument count is limited by that memory
(no more arguments than ``max_held // ARG_OVERHEAD``), not by a small count; ``max_args`` is a cap
on top. ``held`` says how much memory the unfinished input holds now (0 at a request boundary):
the server adds it up over its connections against a node-wide budget.

Until the connection authenticates (the server says so with ``authenticated`` or
``auth_source``) Redis' stricter limits apply too: more than 10
arguments or an argument over 16384 bytes is refused (``unauthenticated multibulk length`` /
``unauthenticated bulk length``, checked in Redis' order: before March's own ``max_bulk``, after
Redis' 512 MiB), so an unauthenticated client holds at most about 160 KiB.
Requests pipelined behind an ``AUTH`` or ``HELLO`` in the same read are held to the normal limits,
as in Redis when that AUTH succeeds; if the connection is still not authenticated at the next read,
an unfinished one that broke the strict limits is refused then.

The exact parser's cost is linear in what it reads (it skips bulk bodies without looking at them
and searches each header line once), so malformed or split input cannot make it slow.

``encode(value, proto)`` turns a handler's return value into bytes:
int -> integer (past 64 bits, which no client reads as an integer: RESP3 big number, RESP2 bulk, as
Redis does), bytes -> bulk string, str -> simple string, None -> null, bool -> RESP3 boolean
(RESP2: 1/0), float -> RESP3 double (RESP2: bulk), list/tuple -> array, set -> RESP3 set
(RESP2: array), dict -> RESP3 map (RESP2: flat array), ``Verbatim`` -> RESP3 verbatim text
(RESP2: bulk), ``Push`` -> RESP3 push (RESP2: array), ``Replies`` -> each of its items in turn,
``CommandError`` -> error.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from typing import Any

import hiredis

from march import errors
from march.errors import CommandError

CRLF = b"\r\n"

_STAR = 42  # ord("*")
_DOLLAR = 36  # ord("$")
_NOTHING = object()  # hiredis holds no part of a request
# Redis' limits for a client that has not authenticated (networking.c, processMultibulkBuffer).
UNAUTH_MAX_ARGS = 10
UNAUTH_MAX_BULK = 16384
# Redis' proto-max-bulk-len default: a length past it is "invalid" before it is "unauthenticated"
REDIS_MAX_BULK = 512 * 1024 * 1024
_INT64 = 1 << 63
_INT_MAX = (1 << 31) - 1  # Redis refuses a multibulk count above INT_MAX whatever its other limits
# Redis' string2ll: an optional minus, no leading zero, no sign or space; the range is checked after.
_INTEGER = re.compile(rb"(?:-?[1-9][0-9]{0,18}|0)\Z")
_AUTH_COMMANDS = (b"AUTH", b"HELLO")  # the requests that can authenticate a connection


class ProtocolError(Exception):
    """Malformed input: answer ``-ERR Protocol error: <message>`` and close the connection.

    ``requests`` holds the complete requests that came before the bad bytes (Redis runs them).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.requests: list[list[bytes]] = []


class Verbatim(str):
    """Text that RESP3 sends as a verbatim string (``=N\\r\\ntxt:...``), as Redis does for INFO."""


class _NullArray:
    """The null array (``*-1`` in RESP2, ``_`` in RESP3), as Redis' addReplyNullArray: a few
    replies (Sentinel's GET-MASTER-ADDR-BY-NAME for an unknown name) are this, not a null bulk."""

    __slots__ = ()


NULL_ARRAY = _NullArray()


class Push(list):  # type: ignore[type-arg]
    """An out-of-band frame (pub/sub confirmations and messages): RESP3 push (``>``), RESP2 array."""

    __slots__ = ()


class SetReply(list):  # type: ignore[type-arg]
    """A RESP3 set (``~``), RESP2 array, in the order given: what Redis sends as a set even when its
    elements are maps (COMMAND INFO's flags, tips and key specs), which a Python set cannot hold."""

    __slots__ = ()


class Encoded(bytes):
    """A reply already in RESP, written as it is (a reply relayed from another node: ``march.cluster.links``)."""

    __slots__ = ()


class Replies(list):  # type: ignore[type-arg]
    """Several replies to one request, one after the other (SUBSCRIBE a b answers once per channel)."""

    __slots__ = ()


class ExactParser:
    """The exact parser, Redis' ``processMultibulkBuffer`` and ``processInlineBuffer`` in Python:
    one connection's unfinished request (a multibulk in progress or an inline line), parsed byte by
    byte with every limit checked at the header that declares it.

    ``RequestParser`` (below) is this parser plus the hiredis fast path in front of it: reads that
    hiredis can take go there; anything hiredis cannot judge (unauthenticated clients, unfinished
    requests, inline commands, RESP3 types, oversized counts) comes here. The two share one
    object because a read may hand over from one to the other and back (``_parse`` hands the rest
    of a read to ``feed`` at the first request boundary); the state below is the exact side's.
    """

    __slots__ = (
        "_args",
        "_auth_seen",
        "_blen",
        "_held",
        "_inline",
        "_left",
        "_max_args",
        "_max_bulk",
        "_max_held",
        "_max_inline",
        "_part",
        "_provisional",
        "_seen",
        "_slow",
        "_strict",
        "held",
    )

    _args: list[bytes] | None  # the multibulk request in progress (None: none)
    _left: int  # its elements still expected (-1 before its `*` line)
    _blen: int  # the length of the bulk being read (-1 before its `$` line)
    _part: bytearray  # the bytes from where parsing stopped
    _held: int  # the bytes of its arguments so far
    _inline: bytearray | None  # an inline line waiting for its newline
    _seen: int  # how much of the unfinished header (or inline) line was searched already
    _strict: bool  # Redis' limits for unauthenticated clients apply
    _auth_seen: bool  # an AUTH or HELLO came earlier in this read (strict mode only)
    _provisional: str  # the strict limit the request in progress broke behind an AUTH
    _slow: bool  # the next read must go to the exact parser
    _max_args: int
    _max_bulk: int
    _max_inline: int
    _max_held: int
    held: int  # bytes the unfinished input holds now (0 at a request boundary)

    def feed(self, data: bytes) -> list[list[bytes]]:
        """The complete requests in ``data`` (``RequestParser.feed``: hiredis first)."""
        raise NotImplementedError

    def _set_slow(self) -> None:
        """After the exact parser ran: whether the next read must go to it too, and ``held``."""
        if self._args is not None:
            self.held = len(self._part) + self._held + ARG_OVERHEAD * len(self._args)
            self._slow = True
        elif self._inline is not None:
            self.held = len(self._inline)
            self._slow = True
        else:
            self.held = 0
            self._slow = self._strict

    def _parse(self, data: bytes, requests: list[list[bytes]], handoff: bool) -> None:
        """Parse ``data`` exactly, going on with what the last read left unfinished.

        With ``handoff``, the rest of the read goes to hiredis at the first request boundary that
        starts a multibulk (not in strict mode).
        """
        pos, n = 0, len(data)
        if self._inline is not None:  # an inline line waiting for its newline
            line = self._inline
            old = len(line)
            line += data
            nl = line.find(b"\n", old)
            if nl < 0:
                if len(line) > self._max_inline:
                    raise ProtocolError(errors.PROTO_TOO_BIG_INLINE)
                self.held = len(line)
                return
            if nl > self._max_inline:
                raise ProtocolError(errors.PROTO_TOO_BIG_INLINE)
            self._inline = None
            self._inline_request(bytes(line[:nl]), requests)
            pos = nl + 1 - old
        elif self._args is not None:  # a multibulk request in progress
            part = self._part
            old = len(part)
            part += data
            stop = self._advance(part, 0, len(part), requests)
            if self._args is not None:
                del part[:stop]
                self._check_held()
                self._set_slow()
                return
            part.clear()
            pos = stop - old  # the request ended in this read
        while pos < n:
            if data[pos] != _STAR:
                pos = self._inline_lines(data, pos, requests)
                continue
            if handoff and not self._strict:
                self._slow = False
                self.held = 0
                requests += self.feed(data[pos:] if pos else data)
                return
            self._args, self._left, self._blen, self._held, self._seen = [], -1, -1, 0, 0
            pos = self._advance(data, pos, n, requests)
            if self._args is not None:
                self._part = bytearray(memoryview(data)[pos:])
                self._check_held()
                break
        self._set_slow()

    # Longer than 60 lines on purpose: the exact parser's loop over a request's header and bulk
    # arguments (every unauthenticated client's read, and every read hiredis cannot take); split,
    # each argument would cost a call (~67 ns measured, about what parsing a short one costs).
    def _advance(self, buf: bytes | bytearray, pos: int, end: int, requests: list[list[bytes]]) -> int:
        """Go on with the multibulk request in progress from ``buf[pos:end]`` (Redis'
        ``processMultibulkBuffer``). Return where parsing stopped: after the request when it is
        complete (``_args`` is None then; ``*0`` and ``*-1`` are complete and ignored), else at the
        start of the header line or bulk body still incomplete.
        """
        args = self._args
        assert args is not None
        left, blen = self._left, self._blen
        strict = self._strict and not self._auth_seen
        while True:
            if blen >= 0:  # a bulk body and its CRLF
                if end - pos < blen + 2:
                    break
                arg = buf[pos : pos + blen]
                args.append(arg if arg.__class__ is bytes else bytes(arg))
                self._held += blen
                pos += blen + 2  # the two bytes after the body are not checked (nor by Redis)
                blen = -1
                left -= 1
                if left == 0:
                    self._args = None
                    self._provisional = ""
                    requests.append(args)
                    if self._strict and args[0].upper() in _AUTH_COMMANDS:
                        self._auth_seen = True
                    return pos
                continue
            # A header line, up to a '\r' followed by at least one byte (Redis does not check it).
            nl = buf.find(b"\r", pos + self._seen, end)
            if nl < 0 or nl + 1 >= end:
                if end - pos > self._max_inline:
                    raise ProtocolError(
                        errors.PROTO_TOO_BIG_MBULK_COUNT if left < 0 else errors.PROTO_TOO_BIG_BULK_COUNT
                    )
                self._seen = (nl if nl >= 0 else end) - pos
                break
            self._seen = 0
            if left < 0:  # the array's `*N`
                count = _integer(buf, pos + 1, nl)
                if count is None or count > _INT_MAX:
                    raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)
                if count > UNAUTH_MAX_ARGS:  # remembered even when authenticated: RESET may come first
                    if strict:
                        raise ProtocolError(errors.PROTO_UNAUTH_MULTIBULK_LENGTH)
                    self._provisional = errors.PROTO_UNAUTH_MULTIBULK_LENGTH
                if count > self._max_args:
                    raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)
                pos = nl + 2
                if count <= 0:  # `*0`, `*-1`: Redis ignores them
                    self._args = None
                    return pos
                left = count
            else:  # an element's `$N`
                if buf[pos] != _DOLLAR:
                    raise ProtocolError(errors.PROTO_EXPECTED.format("$", chr(buf[pos])))
                length = _integer(buf, pos + 1, nl)
                if length is None or length < 0 or length > max(self._max_bulk, REDIS_MAX_BULK):
                    raise ProtocolError(errors.PROTO_BULK_LENGTH)
                if length > UNAUTH_MAX_BULK:  # before March's own limit, as Redis checks it before its own
                    if strict:
                        raise ProtocolError(errors.PROTO_UNAUTH_BULK_LENGTH)
                    self._provisional = errors.PROTO_UNAUTH_BULK_LENGTH
                if length > self._max_bulk:
                    raise ProtocolError(errors.PROTO_BULK_LENGTH)
                pos = nl + 2
                blen = length
        self._left, self._blen = left, blen
        return pos

    def _check_held(self) -> None:
        """Bound the memory held for the request in progress (its bytes, and ARG_OVERHEAD per argument)."""
        assert self._args is not None
        if len(self._part) + self._held + ARG_OVERHEAD * len(self._args) > self._max_held:
            raise ProtocolError(errors.PROTO_TOO_BIG)

    def _inline_lines(self, data: bytes, pos: int, requests: list[list[bytes]]) -> int:
        """Run the inline lines from ``data[pos:]`` up to one that starts with ``*``; return where
        that one starts (or ``len(data)``, keeping an unfinished last line)."""
        n = len(data)
        max_inline = self._max_inline
        while pos < n and data[pos] != _STAR:
            nl = data.find(b"\n", pos)
            if nl < 0:
                if n - pos > max_inline:
                    raise ProtocolError(errors.PROTO_TOO_BIG_INLINE)
                self._inline = bytearray(memoryview(data)[pos:])
                return n
            if nl - pos > max_inline:
                raise ProtocolError(errors.PROTO_TOO_BIG_INLINE)
            self._inline_request(data[pos:nl], requests)
            pos = nl + 1
        return pos

    def _inline_request(self, line: bytes, requests: list[list[bytes]]) -> None:
        args = split_inline(line.rstrip(b"\r"))
        if args:
            if len(args) > self._max_args:
                raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)
            requests.append(args)
            if self._strict and args[0].upper() in _AUTH_COMMANDS:
                self._auth_seen = True


class RequestParser(ExactParser):
    """Bytes in, requests out, for one connection.

    ``authenticated`` (default True) says whether the connection has authenticated; while it is
    False, Redis' limits for unauthenticated clients apply. The server sets it, or points
    ``auth_source`` at its ``Client`` for the parser to follow.
    """

    __slots__ = (
        "_last_data",
        "_last_req",
        "_pending",
        "_reader",
        "_ridx",
        "_source",
        "_type0",
    )

    def __init__(
        self,
        max_args: int,
        max_bulk: int,
        max_inline: int,
        authenticated: bool = True,
        max_held: int | None = None,
    ) -> None:
        # The memory one unfinished request may hold (the server's client_query_buffer_limit; by
        # default two arguments of max_bulk bytes and a small argument's worth per allowed argument).
        self._max_held = max_bulk * 2 + max_args * ARG_OVERHEAD if max_held is None else max_held
        # Arguments are limited by memory: no request may have more than fit in _max_held (each
        # costs at least ARG_OVERHEAD), nor more than max_args, an explicit cap on top.
        self._max_args = max(1, min(max_args, self._max_held // ARG_OVERHEAD))
        self._max_bulk = max_bulk
        self._max_inline = max_inline
        # Bytes of memory the unfinished input holds now (``held``, see _set_slow): what the server
        # counts against its node-wide budget. 0 whenever the input ends at a request boundary.
        self.held = 0
        self._reader, self._ridx, self._type0 = _new_reader(self._max_args)
        # hiredis' side. How the last read it parsed ended: the last request completed in it (or
        # _NOTHING: hiredis holds nothing) and the read itself, from which _unfinished finds the
        # start of a request hiredis holds. _pending bounds the bytes of that request.
        self._last_req: Any = _NOTHING
        self._last_data = b""
        self._pending = 0
        # The exact parser's side: a request in progress (_args is not None) with the elements
        # still expected (_left, -1 before its `*` line), the length of the bulk being read (_blen,
        # -1 before its `$` line), the bytes from where parsing stopped (_part) and the bytes of
        # its arguments so far (_held); or an inline line waiting for its newline (_inline). _seen:
        # how much of the unfinished header line (or inline line) has been searched already.
        self._args: list[bytes] | None = None
        self._left = -1
        self._blen = -1
        self._part = bytearray()
        self._held = 0
        self._inline: bytearray | None = None
        self._seen = 0
        self._strict = not authenticated  # Redis' limits for unauthenticated clients apply
        self._auth_seen = False  # an AUTH or HELLO came earlier in this read (strict mode only)
        self._provisional = ""  # the strict limit the request in progress broke behind an AUTH
        self._slow = self._strict  # the next read must go to the exact parser
        self._source: Any = None  # see auth_source

    @property
    def authenticated(self) -> bool:
        return not self._strict

    @authenticated.setter
    def authenticated(self, value: bool) -> None:
        self._strict = not value
        if value:
            self._provisional = ""
        self._slow = self._strict or self._args is not None or self._inline is not None

    @property
    def auth_source(self) -> Any:
        return self._source

    @auth_source.setter
    def auth_source(self, source: Any) -> None:
        """Follow ``source.authenticated`` (the server's ``Client``): read now, and again at every
        read that goes to the exact parser, which every read does while it is False. So the limits
        lift at the first read after an AUTH succeeds, however it happened; a return to False
        (RESET) is seen at the next read the exact parser takes, or when ``authenticated`` is set."""
        self._source = source
        if source is not None:
            self.authenticated = bool(source.authenticated)

    # Longer than 60 lines on purpose: one call per read on every connection, its hiredis path
    # inline (the exact parser's paths are methods of their own). Measured (2 cores, loaded): a
    # one-request read costs ~1.3 µs here, an extra Python call ~67 ns (5%); py-spy puts this
    # function at 4-6% of the server's samples under redis-benchmark (docs/performance.md).
    def feed(self, data: bytes) -> list[list[bytes]]:
        """Return the complete requests in ``data`` (plus what came before); keep the rest.

        This runs once per read on every connection: keep the hiredis path lean.
        """
        if _FAST and not self._slow and self._last_req is _NOTHING and type(data) is bytes:
            # At a request boundary, nothing held: a read of whole plain requests needs no hiredis.
            whole = _whole_requests(data, self._max_args, self._max_bulk)
            if whole is not None:
                return whole
        requests: list[list[bytes]] = []
        if not data:
            return requests
        try:
            first = data[0]
            if self._slow or (
                first != _STAR and first != _DOLLAR and not self._reader.has_data() and self._at_boundary()
            ):
                self._feed_exact(data, requests)
                return requests
            # (Without maxelements, see _new_reader, hiredis must not see a large aggregate count.)
            if not _COUNTS_UNCHECKED or _BIG_AGGREGATE.search(data) is None:
                self._reader.feed(data)
                gets = self._reader.gets
                append = requests.append
                plain = True
                try:
                    while (req := gets()) is not False:
                        if req.__class__ is list and (
                            (len(req) == 2 and req[0].__class__ is bytes and req[1].__class__ is bytes)
                            or _all_bulks(req, self._max_args)
                        ):
                            append(req)
                        else:
                            plain = False
                            break
                except Exception:  # hiredis.ProtocolError; TypeError for a RESP3 map with a list key; ...
                    plain = False
                if (
                    plain
                    and requests
                    and not (
                        # memchr for `+`, `(`, `=`, `~` and `|` (see _may_hide_types)
                        (43 in data or 40 in data or 61 in data or 126 in data or 124 in data) and _may_hide_types(data)
                    )
                    and not (len(data) + self._pending > self._max_bulk and _oversized(requests, self._max_bulk))
                ):
                    ridx = self._ridx
                    if ridx is None:  # hiredis' layout is unknown: remember how the read ended (see _at_boundary)
                        self._pending = len(data)  # bounds the request hiredis may hold now
                        self._last_req = requests[-1]
                        self._last_data = data
                    elif ridx.value >= 0 and self._type0.value >= 0:  # type: ignore[union-attr]  # (_probe_cursor; ridx first: -1 in the common case)
                        # hiredis holds the start of a request: the exact parser takes it now, so
                        # unfinished input is held in one place, which knows (and bounds) its size.
                        tail = _tail(data, len(requests), self._max_args)
                        self._reader, self._ridx, self._type0 = _new_reader(self._max_args)
                        self._parse(tail, requests, False)
                    elif len(data) > _BIG_READ:
                        # Complete: drop the buffer hiredis grew for this read (an idle connection keeps it).
                        self._reader, self._ridx, self._type0 = _new_reader(self._max_args)
                    return requests
            # Anything else: parse this read again, exactly, from where hiredis was before it.
            requests.clear()
            prefix = self._take_over()
            self._auth_seen = False
            self._parse(prefix + data if prefix else data, requests, False)
        except ProtocolError as exc:
            exc.requests = requests + exc.requests
            self._set_slow()
            raise
        return requests

    # --- hiredis' side ----------------------------------------------------------------------------

    def _at_boundary(self) -> bool:
        """True when hiredis holds no part of a request: the next byte starts a new one.

        hiredis does not say (it consumes an array's header and complete elements before the
        array is complete), so look at how the last read it parsed ended: at a boundary exactly
        when it ended with the encoding of the last request completed in it. Called only for reads
        that do not start with ``*`` or ``$`` while hiredis holds no unparsed bytes.
        """
        last = self._last_req
        if last is _NOTHING:
            return True
        enc = encode_request(last)
        data = self._last_data
        # The request may have begun in an earlier read: then the whole read is its tail.
        return data.endswith(enc) if len(data) >= len(enc) else enc.endswith(data)

    def _take_over(self) -> bytes:
        """Take the request hiredis holds (its bytes so far, b"" if none) and start hiredis afresh."""
        last, data = self._last_req, self._last_data
        self._reader, self._ridx, self._type0 = _new_reader(self._max_args)
        self._last_req, self._last_data, self._pending = _NOTHING, b"", 0
        if last is _NOTHING:
            return b""
        return _unfinished(data, encode_request(last))

    # --- the exact parser -------------------------------------------------------------------------

    def _feed_exact(self, data: bytes, requests: list[list[bytes]]) -> None:
        if self._source is not None:
            self.authenticated = bool(self._source.authenticated)
        if self._provisional and self._strict and self._args is not None:
            # Behind an AUTH that did not authenticate: the limit the request broke applies now.
            raise ProtocolError(self._provisional)
        self._provisional = ""
        self._auth_seen = False
        if self._last_req is not _NOTHING:  # hiredis parsed the last read: take what it holds
            prefix = self._take_over()
            if prefix:
                data = prefix + data
        self._parse(data, requests, True)

    def discard(self) -> None:
        """Forget the unfinished input (its connection is being closed): its memory goes at once."""
        self._args = None
        self._part = bytearray()
        self._inline = None
        self._reader, self._ridx, self._type0 = _new_reader(self._max_args)
        self._last_req, self._last_data, self._pending = _NOTHING, b"", 0
        self.held = 0
        self._slow = True


def _new_reader(max_elements: int) -> tuple[hiredis.Reader, ctypes.c_int | None, ctypes.c_int | None]:
    """A hiredis reader that refuses an aggregate of more than ``max_elements`` elements.

    hiredis allocates the list an aggregate header declares before reading its elements, and
    frees it slot by slot: a 15-byte ``*2147483647`` followed by a bad byte (or a closed
    connection) cost 4 seconds of the event loop, ``>2147483647`` a minute, and the garbage
    collector walks such a list too. hiredis has a limit for this (``maxelements``; past it, the
    header is a protocol error and nothing is allocated), but hiredis-py does not expose it, so it
    is set in hiredis' own struct, where _probe_layout found it. A request never has more than
    ``max_elements`` elements; one with more than _HIREDIS_MAX_ELEMENTS goes to the exact parser.

    Also returns views of hiredis' ``ridx`` (the reply task in progress) and of the type of its
    first task, when _probe_cursor found them: after ``gets()`` said there is no more, hiredis holds
    part of a request exactly when both are >= 0 (see _probe_cursor). Reading them costs a few tens
    of nanoseconds per read.
    """
    reader = hiredis.Reader()
    ridx = type0 = None
    if _MAX_ELEMENTS_AT:
        address = ctypes.c_void_p.from_address(id(reader) + _READER_AT).value
        limit = max(1, min(max_elements, _HIREDIS_MAX_ELEMENTS))
        ctypes.c_longlong.from_address(address + _MAX_ELEMENTS_AT).value = limit  # type: ignore[operator]
        if _CURSOR_OK:
            ridx, type0 = _cursor(address)  # type: ignore[arg-type]
    return reader, ridx, type0


# Past this many elements a request goes to the exact parser (which allocates as elements arrive),
# however large max_args is: hiredis' list of 65536 slots costs half a megabyte and a fraction of a
# millisecond to free.
_HIREDIS_MAX_ELEMENTS = 1 << 16
_READER_AT = 16  # hiredis-py's Reader object: PyObject_HEAD (16 bytes), then `redisReader *reader`


def _probe_layout() -> int:
    """The offset of ``maxelements`` in hiredis' ``redisReader`` (hiredis-py 3: 168), or 0 when this
    build does not lay the struct out as expected, checked against what hiredis-py does expose: the
    buffer length (``len()``, 8 bytes before ``maxbuf``) and ``maxbuf`` (``getmaxbuf``/``setmaxbuf``)
    must read back, ``maxelements`` must hold hiredis' default, and setting it must make hiredis
    refuse a longer array and accept one at the limit. With 0, hiredis is kept from large counts by
    a scan of each read instead (_BIG_AGGREGATE), which costs time on every read."""
    if not hiredis.__version__.startswith("3."):  # the layout below is hiredis-py 3's
        return 0
    maxbuf_at, maxelements_at = 160, 168  # after err, errstr[128], buf, pos, len
    try:
        reader = hiredis.Reader()
        reader.feed(b"*2\r\n$1\r\na")
        address = ctypes.c_void_p.from_address(id(reader) + _READER_AT).value
        if not address:
            return 0
        field = ctypes.c_size_t.from_address
        if not field(address + maxbuf_at - 8).value == reader.len() == 9:
            return 0
        reader.setmaxbuf(12345)
        if field(address + maxbuf_at).value != reader.getmaxbuf() or reader.getmaxbuf() != 12345:
            return 0
        if ctypes.c_longlong.from_address(address + maxelements_at).value != 2**32 - 1:
            return 0
        for count, refused in ((3, False), (4, True)):
            reader = hiredis.Reader()
            address = ctypes.c_void_p.from_address(id(reader) + _READER_AT).value
            ctypes.c_longlong.from_address(address + maxelements_at).value = 3  # type: ignore[operator]
            reader.feed(b"*%d\r\n" % count)
            try:
                reader.gets()
            except hiredis.ProtocolError:
                if not refused:
                    return 0
            else:
                if refused:
                    return 0
    except Exception:  # any surprise: do not touch hiredis' memory
        return 0
    return maxelements_at


_MAX_ELEMENTS_AT = _probe_layout()


def _cursor(address: int) -> tuple[ctypes.c_int, ctypes.c_int]:
    """Views of ``ridx`` and of ``task[0]->type`` in the ``redisReader`` at ``address``. hiredis
    allocates its first task with the reader and keeps it for the reader's life (growing the task
    stack reallocates the array of pointers, not the tasks), so the view stays valid."""
    tasks = ctypes.c_void_p.from_address(address + _TASKS_AT).value
    first = ctypes.c_void_p.from_address(tasks).value  # type: ignore[arg-type]
    return ctypes.c_int.from_address(address + _RIDX_AT), ctypes.c_int.from_address(first)  # type: ignore[arg-type]


def _probe_cursor() -> bool:
    """Whether hiredis' ``redisReader`` holds ``task`` (the task stack), ``ridx`` (the task in
    progress) and ``pos`` (the buffer cursor) where hiredis-py 3 has them (176, 188, 144) and
    they behave as the parser needs. After ``gets()`` returned False, hiredis holds part of a
    request exactly when ``ridx`` >= 0 and the first task's type >= 0: at a request boundary it has
    either nothing to parse (``ridx`` stays -1) or set up the next reply without reading its type
    byte (type -1). ``pos`` stops at the start of an element it cannot finish. If not, a read that
    ends inside a request leaves it with hiredis until the next read (see _at_boundary), where the
    budget for unfinished input does not see it."""
    if not _MAX_ELEMENTS_AT:
        return False
    try:
        reader = hiredis.Reader()
        address = ctypes.c_void_p.from_address(id(reader) + _READER_AT).value
        if not address or not ctypes.c_void_p.from_address(address + _TASKS_AT).value:
            return False
        ridx, type0 = _cursor(address)
        pos = ctypes.c_size_t.from_address(address + _POS_AT)
        unfinished = [ridx.value >= 0 and type0.value >= 0]
        big = b"*1\r\n$1\r\nx\r\n" * 200  # (past 1 KiB: hiredis empties its buffer, ``ridx`` stays -1)
        for chunk in (
            b"*2\r\n$1\r\na",
            b"\r\n$1\r\nb\r\n",
            b"*1\r",
            b"\n$1\r\nc\r\n",
            b"*2\r\n$1\r\na\r\n",
            b"$1\r\nb\r\n",
            big,
        ):
            reader.feed(chunk)
            while reader.gets() is not False:
                pass
            unfinished.append(ridx.value >= 0 and type0.value >= 0)
            if len(unfinished) == 2 and (pos.value, reader.len()) != (5, 9):  # `*2\r\n$` taken, `1\r\na` not
                return False
        if unfinished != [False, True, False, True, False, True, False, False]:
            return False
        if _tail(b"*1\r\n$1\r\nx\r\n*2\r\n$1\r\n*1\r\n$1\r\nx\r\n", 1, 8) != b"*2\r\n$1\r\n*1\r\n$1\r\nx\r\n":
            return False
    except Exception:  # any surprise: do not read hiredis' memory
        return False
    return True


def _tail(data: bytes, complete: int, max_elements: int) -> bytes:
    """The bytes of ``data`` after its first ``complete`` requests (``data`` starts at a request
    boundary, and hiredis found that many complete requests in it): the start of the request the
    read left unfinished. Parsed again by a fresh hiredis reader, which says where it stopped (its
    unread bytes are the end of ``data``); at hiredis' speed, only for reads that end inside a
    request."""
    reader, _, _ = _new_reader(max_elements)
    reader.feed(data)
    for _ in range(complete):
        reader.gets()
    address = ctypes.c_void_p.from_address(id(reader) + _READER_AT).value
    unread = reader.len() - ctypes.c_size_t.from_address(address + _POS_AT).value  # type: ignore[operator]
    return data[len(data) - unread :]


_POS_AT = _MAX_ELEMENTS_AT - 24  # hiredis' `pos` (buffer cursor), before `len` and `maxbuf`
_TASKS_AT = _MAX_ELEMENTS_AT + 8  # `redisReadTask **task`, after `maxelements`
_RIDX_AT = _MAX_ELEMENTS_AT + 20  # `int ridx`, after `task` and `int tasks`
_CURSOR_OK = False  # (while probing)
_CURSOR_OK = _probe_cursor()
# A read longer than this that hiredis parsed to its end gets a fresh reader: hiredis keeps the
# buffer it grew for a read until the next one (64 KiB: a few microseconds per such read).
_BIG_READ = 64 << 10
# What one argument costs in memory beyond its bytes: a bytes object's header (33 bytes) and its
# slot in the request's list (8), rounded up to the allocator's 16-byte steps. It bounds how many
# arguments fit in a client's query buffer limit, whatever max_args says.
ARG_OVERHEAD = 48
_COUNTS_UNCHECKED = not _MAX_ELEMENTS_AT
# Whether ``feed`` tries ``_whole_requests`` first: where it is compiled (faster than hiredis there,
# and it shares repeated requests' lists); interpreted, hiredis' C loop is faster. Tests set it.
_FAST = not __file__.endswith(".py")
# Whether this module runs compiled, so that the C helpers ``resp.pxd`` defines (``_c_slice``,
# ``_c_integer``: a bytes object made from a C buffer, no Python object per piece) exist. Tests never
# set it (``_FAST`` they do): interpreted, the same lines take their Python spelling.
_COMPILED = not __file__.endswith(".py")
# An aggregate header hiredis could parse with a count of 6 digits or more (past
# _HIREDIS_MAX_ELEMENTS), or whose count may go on in the next read (used only when maxelements
# cannot be set).
_BIG_AGGREGATE = re.compile(rb"[*~>|%](?:[0-9]{6}|[0-9]{0,5}\Z)")


def _whole_requests(data: bytes, max_args: int, max_bulk: int) -> list[list[bytes]] | None:
    """The requests of a read made only of whole requests of the common shape, or None.

    The common shape: each request ``*N\\r\\n`` (1 <= N <= ``max_args``) followed by N bulk strings
    ``$L\\r\\n<L bytes>\\r\\n`` (L <= ``max_bulk``), lengths in plain decimal (no sign, no leading
    zero), every CRLF where it belongs, and the read ends with the last one. A request that repeats
    the one before it byte for byte is that request's list again (the same object: a pipeline of 16
    identical INCRs is one list, checked with one compare, found by ``requests[i] is args``). Anything
    else (another type byte, an inline command, a limit passed, a read that ends inside a request)
    returns None, having changed nothing: the caller parses the read as before, and that path
    answers it (errors included) exactly as it did. So this path refuses nothing on its own and
    holds nothing; every limit it checks is one a whole request of this shape could break.

    Runs compiled (``resp.pxd``: C integers, the bytes read in place); interpreted, ``feed`` uses
    hiredis instead (``_FAST``), whose C loop is faster there.
    """
    requests: list[list[bytes]] = []
    n = len(data)
    pos = 0
    compiled = _COMPILED
    last: list[bytes] | None = None  # the request before, and its bytes
    same = b""
    while pos < n:
        if last is not None and data.startswith(same, pos):
            requests.append(last)
            pos += len(same)
            continue
        start = pos
        if data[pos] != 42:  # `*` (literals: a module constant is a dict lookup, compiled)
            return None
        pos += 1
        count = 0
        while pos < n and 48 <= data[pos] <= 57:
            count = count * 10 + data[pos] - 48
            pos += 1
            if count > max_args:
                return None
        # (at least one digit, no leading zero: count >= 1 then; and the header's CRLF)
        if count == 0 or data[start + 1] == 48 or pos + 1 >= n or data[pos] != 13 or data[pos + 1] != 10:
            return None
        pos += 2
        if count * 6 > n - pos:  # (each argument takes 6 bytes at least, `$0` and two CRLF: not all in this read)
            return None
        args: list[bytes] = [b""] * count  # (sized once, bounded by the read's length as checked)
        k = 0
        while k < count:
            if pos >= n or data[pos] != 36:  # `$`
                return None
            pos += 1
            digits = pos
            length = 0
            while pos < n and 48 <= data[pos] <= 57:
                length = length * 10 + data[pos] - 48
                pos += 1
                if length > max_bulk:
                    return None
            if pos == digits or (data[digits] == 48 and pos - digits > 1):
                return None
            end = pos + 2 + length  # the body's end, its CRLF after it
            if end + 2 > n or data[pos] != 13 or data[pos + 1] != 10 or data[end] != 13 or data[end + 1] != 10:
                return None
            # (compiled: the argument made from the read's bytes in place; a slice there costs a slice object)
            args[k] = _c_slice(data, pos + 2, end) if compiled else data[pos + 2 : end]  # type: ignore[name-defined]  # noqa: F821
            pos = end + 2
            k += 1
        requests.append(args)
        if pos < n:  # (a read of one request makes no copy of it)
            last, same = args, _c_slice(data, start, pos) if compiled else data[start:pos]  # type: ignore[name-defined]  # noqa: F821
    return requests


def _all_bulks(req: list[Any], max_args: int) -> bool:
    """A request hiredis returned is a non-empty list of at most ``max_args`` bulk strings."""
    if not 0 < len(req) <= max_args:
        return False
    for a in req:  # noqa: SIM110 (a loop is faster than all() over a generator)
        if a.__class__ is not bytes:
            return False
    return True


def _may_hide_types(data: bytes) -> bool:
    """``data`` may hold a type that hiredis returns like another: a simple string (``+``), big
    number (``(``) or verbatim string (``=``) as bytes, like a bulk string; a set (``~``) or an
    attribute (``|``) as a list, like an array. One of those type bytes starts the read or a line."""
    return data[0] in b"+(=~|" or b"\n+" in data or b"\n(" in data or b"\n=" in data or b"\n~" in data or b"\n|" in data


def _oversized(requests: list[list[bytes]], max_bulk: int) -> bool:
    return any(len(a) > max_bulk for r in requests for a in r)


def _integer(buf: bytes | bytearray, start: int, end: int) -> int | None:
    """``buf[start:end]`` as Redis' ``string2ll`` reads it, or None if it refuses it."""
    if _INTEGER.match(buf, start, end) is None:
        return None
    value = int(buf[start:end])
    return value if -(1 << 63) <= value < (1 << 63) else None


def _unfinished(data: bytes, enc: bytes) -> bytes:
    """The bytes hiredis holds, from the read ``data`` that left them unparsed.

    ``enc`` is the encoding of the last request completed in ``data``: what hiredis holds starts
    right after it (normally a request's ``*``; anything else is an inline command for Redis).
    When that request began in an earlier read, ``data`` starts with its tail. Error path only;
    linear in ``len(data)``.
    """
    if data.endswith(enc) if len(data) >= len(enc) else enc.endswith(data):
        return b""  # at a boundary: hiredis holds nothing
    at = data.rfind(enc)
    if at >= 0:
        return data[at + len(enc) :]
    view = memoryview(data)
    end = min(len(enc), len(data) - 1)
    for _ in range(64):  # the tail of the last request (it ends with LF): the latest candidates
        at = data.rfind(b"\n", 0, end)
        if at < 0:
            break
        if enc.endswith(view[: at + 1]):
            return data[at + 1 :]
        end = at
    # The read is not the encoding of what hiredis returned (junk instead of a bulk's CRLF):
    # where the request starts cannot be told.
    raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)


def encode_request(args: list[bytes]) -> bytes:
    """A request as a client sends it (a multibulk of bulk strings)."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_HEX = b"0123456789abcdefABCDEF"
_SPACE = b" \t\n\r\x0b\x0c"
_DQ, _SQ, _BACKSLASH = ord('"'), ord("'"), ord("\\")


def split_inline(line: bytes) -> list[bytes]:
    """Split an inline command like Redis' ``sdssplitargs``: spaces, "double" and 'single' quotes.

    Raises ``ProtocolError("unbalanced quotes in request")`` as Redis does.
    """
    if b'"' not in line and b"'" not in line:
        return line.split()
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        quote = 0  # the open quote character, or 0 outside quotes
        while True:
            if i >= n:
                if quote:
                    raise ProtocolError(errors.PROTO_UNBALANCED_QUOTES)
                break
            c = line[i]
            if not quote:
                if c in _SPACE:
                    break
                if c in (_DQ, _SQ):
                    quote = c
                else:
                    cur.append(c)
            elif c == quote:  # a closing quote must end the argument
                if i + 1 < n and line[i + 1] not in _SPACE:
                    raise ProtocolError(errors.PROTO_UNBALANCED_QUOTES)
                i += 1
                break
            elif c == _BACKSLASH and quote == _DQ and i + 3 < n and line[i + 1] == ord("x") and _is_hex(line, i + 2):
                cur.append(int(line[i + 2 : i + 4], 16))
                i += 3
            elif c == _BACKSLASH and quote == _DQ and i + 1 < n:
                i += 1
                cur += _ESCAPES.get(line[i], bytes([line[i]]))
            elif c == _BACKSLASH and quote == _SQ and i + 1 < n and line[i + 1] == _SQ:
                i += 1
                cur.append(_SQ)
            else:
                cur.append(c)
            i += 1
        args.append(bytes(cur))


def _is_hex(line: bytes, at: int) -> bool:
    return line[at] in _HEX and line[at + 1] in _HEX


# --- encoding ----------------------------------------------------------------------------------


# A run of integer replies is one format operation per this many (the format strings are made once).
_RUN_CHUNK = 64
_RUN_FORMATS = [b":%d\r\n" * k for k in range(_RUN_CHUNK + 1)]


def encode_integers(values: Sequence[int]) -> bytes:
    """The integer replies ``values`` (a run of requests answered at once), ``:v\r\n`` each, as one
    bytes object (what ``encode`` makes of each integer within 64 bits), in one format operation per
    ``_RUN_CHUNK`` values instead of a format and an object per reply."""
    k = len(values)
    if _FAST and k > 1 and values.__class__ is range and values.step == 1 and values.start >= 0:
        return _integer_run(values.start, k)
    if k <= _RUN_CHUNK:
        return _RUN_FORMATS[k] % tuple(values)
    parts = [values[i : i + _RUN_CHUNK] for i in range(0, k, _RUN_CHUNK)]
    return b"".join([_RUN_FORMATS[len(part)] % tuple(part) for part in parts])


def _integer_run(first: int, count: int) -> bytes:
    """``encode_integers(range(first, first + count))`` for ``first >= 0`` and ``count >= 1``, as
    compiled code does it fastest (``_FAST``): each value's digits made from the one before (add
    one, carry), written in place into one buffer, instead of a decimal conversion per value."""
    digits = bytearray(b"%d" % first)
    width = len(digits)
    out = bytearray(count * (len(b"%d" % (first + count - 1)) + 3))  # (no value is wider than the last)
    at = 0
    for _i in range(count):
        out[at] = 58  # `:`
        at += 1
        for j in range(width):
            out[at + j] = digits[j]
        at += width
        out[at] = 13
        out[at + 1] = 10
        at += 2
        j = width - 1
        while j >= 0 and digits[j] == 57:  # a 9: 0, and carry
            digits[j] = 48
            j -= 1
        if j >= 0:
            digits[j] += 1
        else:
            digits.insert(0, 49)
            width += 1
    del out[at:]
    return bytes(out)


def integer_reply(value: int) -> bytes:
    """One integer reply, ``:value\r\n`` (what ``encode`` makes of an int). Compiled, its digits are
    written into a C buffer and the reply is one bytes object made from it (``_c_integer``,
    resp.pxd; an int outside 64 bits takes the format), instead of a ``%`` format's conversion."""
    if _COMPILED:
        return _c_integer(value)  # type: ignore[no-any-return, name-defined]  # noqa: F821 (resp.pxd: compiled only)
    return b":%d\r\n" % value


def encode_error(message: str) -> bytes:
    return b"-" + message.replace("\r", " ").replace("\n", " ").encode() + CRLF


def encode(value: Any, proto: int) -> bytes:
    out: list[bytes] = []
    _encode(value, proto, out)
    return b"".join(out)


# Longer than 60 lines on purpose: one chain of type tests per value of every reply that is not a
# plain integer (measured ~0.3 µs for an integer, ~1.7 µs for a 3-element array); a table of
# per-type functions would add a lookup and a call (~67 ns) per value.
def _encode(value: Any, proto: int, out: list[bytes]) -> None:
    t = value.__class__
    if t is int:
        if -_INT64 <= value < _INT64:
            out.append(b":%d\r\n" % value)
        else:  # not a RESP integer (clients refuse it): a big number, as Redis' addReplyBigNum
            out.append(b"(%d\r\n" % value if proto >= 3 else b"$%d\r\n%d\r\n" % (len(str(value)), value))
    elif t is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif t is str:
        out.append(b"+" + value.encode() + CRLF)
    elif value is None:
        out.append(b"_\r\n" if proto >= 3 else b"$-1\r\n")
    elif t is bool:
        if proto >= 3:
            out.append(b"#t\r\n" if value else b"#f\r\n")
        else:
            out.append(b":1\r\n" if value else b":0\r\n")
    elif t is list or t is tuple:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode(item, proto, out)
    elif t is dict:
        if proto >= 3:
            out.append(b"%%%d\r\n" % len(value))
        else:
            out.append(b"*%d\r\n" % (2 * len(value)))
        for k, v in value.items():
            _encode(k, proto, out)
            _encode(v, proto, out)
    elif t is set or t is frozenset:
        out.append((b"~%d\r\n" if proto >= 3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode(item, proto, out)
    elif t is float:
        text = repr(value).encode() if value == value and value not in (float("inf"), float("-inf")) else b""
        if not text:
            text = b"nan" if value != value else (b"inf" if value > 0 else b"-inf")
        out.append(b"," + text + CRLF if proto >= 3 else b"$%d\r\n%s\r\n" % (len(text), text))
    elif t is Verbatim:
        body = value.encode()
        if proto >= 3:
            out.append(b"=%d\r\ntxt:%s\r\n" % (len(body) + 4, body))
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(body), body))
    elif value is NULL_ARRAY:
        out.append(b"_\r\n" if proto >= 3 else b"*-1\r\n")
    elif t is Push or t is SetReply:
        mark = (b">%d\r\n" if t is Push else b"~%d\r\n") if proto >= 3 else b"*%d\r\n"
        out.append(mark % len(value))
        for item in value:
            _encode(item, proto, out)
    elif t is Replies:
        for item in value:
            _encode(item, proto, out)
    elif t is Encoded:
        out.append(value)
    elif isinstance(value, CommandError):
        out.append(encode_error(value.message))
    elif isinstance(value, int):  # IntEnum and friends
        _encode(int(value), proto, out)
    elif isinstance(value, str):
        out.append(b"+" + str(value).encode() + CRLF)
    else:
        raise TypeError(f"cannot encode {t.__name__} as RESP")

"""RESP2/RESP3 encoding and request parsing. No I/O, no commands.

``RequestParser.feed(data)`` turns bytes from one connection into complete requests (lists of
``bytes``), in order. Multibulk requests are parsed by hiredis; inline requests (``PING`` typed
into ``nc``) by ``split_inline``, which follows Redis' ``sdssplitargs`` quoting rules. Incomplete
input means "need more": the parser keeps it. Malformed input raises ``ProtocolError`` with
Redis' own text; the server answers it and closes that one connection.

Limits are enforced here, cheaply: the argument count of every request; the length of every
argument (at its ``$`` header when the header starts a read, else before the request is returned,
so an oversized request never runs); the length of an inline line; and an upper bound on the
bytes held for one unfinished request (which bounds memory whatever a client sends).

Request boundaries: hiredis consumes an array's header and complete elements before the array is
complete, and does not say so. A read that starts with ``*`` or ``$``, or while hiredis holds
unparsed bytes, goes to hiredis; any other read starts an inline command when the previous read
ended with the last completed request's encoding (``_at_boundary``). That rule is exact for every
valid stream; it can only misjudge input that is invalid anyway. Known leniency: hiredis returns
simple strings as bytes, so ``*1\r\n+PING\r\n`` is taken as ``PING`` (Redis refuses it).

``encode(value, proto)`` turns a handler's return value into bytes:
int -> integer, bytes -> bulk string, str -> simple string, None -> null, bool -> RESP3 boolean
(RESP2: 1/0), float -> RESP3 double (RESP2: bulk), list/tuple -> array, set -> RESP3 set
(RESP2: array), dict -> RESP3 map (RESP2: flat array), ``Verbatim`` -> RESP3 verbatim text
(RESP2: bulk), ``CommandError`` -> error.
"""

from __future__ import annotations

from typing import Any

import hiredis

from . import errors
from .errors import CommandError

CRLF = b"\r\n"

_STAR = 42  # ord("*")
_DOLLAR = 36  # ord("$")
_NOTHING = object()  # no request ended in the last read
_NULL_ARRAY = b"*-1\r\n"


class ProtocolError(Exception):
    """Malformed input: answer ``-ERR Protocol error: <message>`` and close the connection.

    ``requests`` holds the complete requests that came before the bad bytes (Redis runs them).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.requests: list[list[bytes]] = []


class Verbatim(str):
    """Text that RESP3 sends as a verbatim string (``=N\\r\\ntxt:...``), as Redis does for INFO."""


class RequestParser:
    """Bytes in, requests out, for one connection."""

    __slots__ = (
        "_inline",
        "_last_data",
        "_last_req",
        "_max_args",
        "_max_bulk",
        "_max_inline",
        "_max_pending",
        "_pending",
        "_reader",
    )

    def __init__(self, max_args: int, max_bulk: int, max_inline: int) -> None:
        self._reader = hiredis.Reader()
        self._max_args = max_args
        self._max_bulk = max_bulk
        self._max_inline = max_inline
        # One request may hold two arguments of max_bulk bytes plus every header (at most 32 bytes
        # per argument): ample for any command March has, and a hard bound on buffered input.
        self._max_pending = max_bulk * 2 + max_args * 32 + 1024
        self._pending = 0  # upper bound on the bytes of the unfinished request held by the reader
        self._inline = b""  # an inline line still waiting for its newline
        # How the last read fed to hiredis ended (see _at_boundary): the last request completed in
        # it (or _NOTHING / _NULL_ARRAY) and the read itself.
        self._last_req: Any = _NOTHING
        self._last_data = b""

    def feed(self, data: bytes) -> list[list[bytes]]:
        """Return the complete requests in ``data`` (plus what came before); keep the rest.

        This runs once per read on every connection: keep it lean.
        """
        requests: list[list[bytes]] = []
        if not data:
            return requests
        try:
            first = data[0]
            if self._inline or (
                first != _STAR and first != _DOLLAR and not self._reader.has_data() and self._at_boundary()
            ):
                data = self._feed_inline(data, requests)
                if not data:
                    return requests
            reader = self._reader
            # A read that starts with `$` while hiredis holds nothing begins an argument's header
            # (inside an array whose header came earlier); otherwise it may be an argument's bytes.
            bulk_header = first == _DOLLAR and not reader.has_data()
            reader.feed(data)
            gets = reader.gets
            append = requests.append
            n_before = len(requests)
            ignored: list[tuple[int, bytes]] | None = None  # where `*0` / `*-1` came, if any
            try:
                while (req := gets()) is not False:
                    if req.__class__ is list:
                        if len(req) == 2:  # the common shape (INCR key, GET key): no loop
                            if req[0].__class__ is not bytes or req[1].__class__ is not bytes:
                                _check_request(req, self._max_args)
                        elif req:
                            _check_request(req, self._max_args)
                        else:  # Redis ignores `*0`
                            ignored = [*(ignored or ()), (len(requests), b"*0\r\n")]
                            continue
                        append(req)
                    elif req is None:  # `*-1`: ignored too
                        ignored = [*(ignored or ()), (len(requests), _NULL_ARRAY)]
                    else:
                        raise ProtocolError(errors.PROTO_EXPECTED.format("*", _type_byte(req)))
            except hiredis.ProtocolError as exc:
                rest = self._after_requests(data, requests, n_before, ignored)
                if rest is None:
                    raise ProtocolError(_translate(str(exc))) from None
                # The bad byte starts a new request at a request boundary: it is an inline
                # command, as Redis reads it. Start over with a fresh reader from there.
                self._reader = hiredis.Reader()
                self._last_req, self._last_data = _NOTHING, b""
                requests += self.feed(rest)
                return requests
            if ignored is None and len(requests) > n_before:  # the common case: nothing unusual
                if len(data) + self._pending > self._max_bulk:  # (the first may have begun earlier)
                    _check_bulks(requests, n_before, self._max_bulk)
                self._pending = len(data)  # bounds what an unfinished request holds now
                self._last_req = requests[-1]
                self._last_data = data
                return requests
            self._after_read(data, requests, n_before, ignored, bulk_header)
        except ProtocolError as exc:
            exc.requests = requests + exc.requests
            raise
        return requests

    def _after_read(
        self,
        data: bytes,
        requests: list[list[bytes]],
        n_before: int,
        ignored: list[tuple[int, bytes]] | None,
        bulk_header: bool,
    ) -> None:
        """Bookkeeping after a read that completed no request, or held `*0` / `*-1`."""
        if ignored is not None and ignored[-1][0] == len(requests):
            last: Any = ignored[-1][1]
        else:
            last = requests[-1] if len(requests) > n_before else _NOTHING
        if len(data) + self._pending > self._max_bulk:
            _check_bulks(requests, n_before, self._max_bulk)
        if last is _NOTHING:  # no request ended in this read: one is still coming
            if bulk_header or (data[0] == _STAR and self._at_boundary()):  # a header is here
                _check_header(data, self._max_args, self._max_bulk)
            pending = self._pending + len(data)
            if pending > self._max_pending:
                raise ProtocolError(errors.PROTO_TOO_BIG)
            self._pending = pending
        else:
            self._pending = len(data)
        self._last_req = last
        self._last_data = data

    def _at_boundary(self) -> bool:
        """True when the reader holds no part of a request: the next byte starts a new one.

        hiredis does not say (it consumes an array's header and complete elements before the
        array is complete), so look at how the last read ended: at a boundary exactly when it
        ended with the encoding of the last request completed in it. Called only for reads
        that do not start with ``*`` (inline commands, continuations of split requests).
        """
        last = self._last_req
        if last is _NOTHING:
            return not self._last_data  # a fresh parser, or one just reset
        enc = last if last.__class__ is bytes else encode_request(last)
        data = self._last_data
        # The request may have begun in an earlier read: then the whole read is its tail.
        return data.endswith(enc) if len(data) >= len(enc) else enc.endswith(data)

    def _after_requests(
        self, data: bytes, requests: list[list[bytes]], n_before: int, ignored: list[tuple[int, bytes]] | None
    ) -> bytes | None:
        """What follows the requests completed in ``data``, or None if that cannot be told.

        Error path only. The first of them may have begun in an earlier read: find how much of
        its encoding this read holds by matching, then check the rest lines up exactly.
        """
        parts = [encode_request(r) for r in requests[n_before:]]
        for index, enc in reversed(ignored or ()):
            parts.insert(index - n_before, enc)
        if not parts:  # the bad byte is inside the first request of this read: a real error
            return None
        first, others = parts[0], b"".join(parts[1:])
        # Longest match first: a shorter suffix (such as a bare CRLF) can match by accident.
        candidates = [len(first)] if self._at_boundary() else range(len(first), 0, -1)
        for head in candidates:
            offset = head + len(others)
            if offset >= len(data) or data[offset] == _STAR:
                continue
            if first.endswith(data[:head]) and data[head:offset] == others:
                return data[offset:]
        return None

    def _feed_inline(self, data: bytes, requests: list[list[bytes]]) -> bytes:
        """Consume inline lines from the front of ``data`` into ``requests``; return what is left."""
        buf = self._inline + data
        self._inline = b""
        self._last_req, self._last_data = _NOTHING, b""  # inline lines start and end at boundaries
        start = 0
        while start < len(buf) and buf[start] != _STAR:
            nl = buf.find(b"\n", start)
            if nl < 0:
                rest = buf[start:]
                if len(rest) > self._max_inline:
                    raise ProtocolError(errors.PROTO_TOO_BIG_INLINE)
                self._inline = rest
                return b""
            if nl - start > self._max_inline:
                raise ProtocolError(errors.PROTO_TOO_BIG_INLINE)
            line = buf[start:nl]
            start = nl + 1
            args = split_inline(line.rstrip(b"\r"))
            if args:
                if len(args) > self._max_args:
                    raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)
                requests.append(args)
        return buf[start:]


def _check_bulks(requests: list[list[bytes]], start: int, max_bulk: int) -> None:
    """Refuse an oversized argument; the requests before it still run (they came first)."""
    for i in range(start, len(requests)):
        if any(len(a) > max_bulk for a in requests[i]):
            del requests[i:]
            raise ProtocolError(errors.PROTO_BULK_LENGTH)


def _check_request(req: list[Any], max_args: int) -> None:
    if len(req) > max_args:
        raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)
    for a in req:
        if a is None:  # `$-1` inside a request
            raise ProtocolError(errors.PROTO_BULK_LENGTH)
        if a.__class__ is not bytes:
            raise ProtocolError(errors.PROTO_EXPECTED.format("$", _type_byte(a)))


def encode_request(args: list[bytes]) -> bytes:
    """A request as a client sends it (a multibulk of bulk strings)."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _check_header(data: bytes, max_args: int, max_bulk: int) -> None:
    """Refuse a request whose header, at the start of ``data``, declares too much.

    ``data`` starts either a request (``*``) or the next argument of one (``$``) and completed no
    request, so the cost is paid only by large or slow requests. Redis answers with the same texts.
    """
    if data[:1] == b"$":  # the next argument of an array whose header came earlier
        count, pos = 1 << 62, 0
    elif data[:1] == b"*":
        nl = data.find(b"\r\n")
        if nl < 0:
            return
        try:
            count = int(data[1:nl])
        except ValueError:
            raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH) from None
        if count > max_args:
            raise ProtocolError(errors.PROTO_MULTIBULK_LENGTH)
        pos = nl + 2
    else:
        return
    while count > 0 and data[pos : pos + 1] == b"$":
        nl = data.find(b"\r\n", pos)
        if nl < 0:
            return
        try:
            length = int(data[pos + 1 : nl])
        except ValueError:
            raise ProtocolError(errors.PROTO_BULK_LENGTH) from None
        if length > max_bulk or length < 0:
            raise ProtocolError(errors.PROTO_BULK_LENGTH)
        pos = nl + 2 + length + 2
        count -= 1


def _type_byte(value: Any) -> str:
    if isinstance(value, int):
        return ":"
    if isinstance(value, list):
        return "*"
    if isinstance(value, Exception):
        return "-"
    return "+"


def _translate(hiredis_message: str) -> str:
    """hiredis' protocol error texts, in Redis' words where Redis has them."""
    low = hiredis_message.lower()
    if "multi-bulk length" in low or "multibulk" in low:
        return errors.PROTO_MULTIBULK_LENGTH
    if "bulk" in low:
        return errors.PROTO_BULK_LENGTH
    if "reply type byte" in low:
        # e.g. 'Protocol error, got "x" as reply type byte'
        quoted = hiredis_message.split('"')
        got = quoted[1] if len(quoted) > 2 else "?"
        return errors.PROTO_EXPECTED.format("$", got)
    return hiredis_message


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


def encode_error(message: str) -> bytes:
    return b"-" + message.replace("\r", " ").replace("\n", " ").encode() + CRLF


def encode(value: Any, proto: int) -> bytes:
    out: list[bytes] = []
    _encode(value, proto, out)
    return b"".join(out)


def _encode(value: Any, proto: int, out: list[bytes]) -> None:
    t = value.__class__
    if t is int:
        out.append(b":%d\r\n" % value)
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
    elif isinstance(value, CommandError):
        out.append(encode_error(value.message))
    elif isinstance(value, int):  # IntEnum and friends
        out.append(b":%d\r\n" % int(value))
    elif isinstance(value, str):
        out.append(b"+" + str(value).encode() + CRLF)
    else:
        raise TypeError(f"cannot encode {t.__name__} as RESP")

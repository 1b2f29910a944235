"""Protocol fuzzer: a real march process, fed random and mutated RESP over many connections.

It starts one march node (free loopback port, throwaway data dir) and runs ``--connections``
clients at once. Each client opens a connection, writes a session of frames and reads whatever
comes back, then closes (sometimes in the middle of a frame); about half the sessions are valid
requests (perhaps with one bad frame last), so that many requests run. Frames (``FrameMaker``): valid
commands with random arguments (INCR, INCRBY, GET, SET, SEQ.CREATE, KEYS, SCAN, HELLO, AUTH,
MULTI/EXEC, CLIENT, CONFIG, ...) as multibulk or inline requests; every RESP2/RESP3 type as a
request or inside one; empty, null and negative arrays; nested aggregates; huge and malformed
length headers; binary garbage; truncated frames; mutations of valid frames (flipped, inserted,
deleted and duplicated bytes); now and then a large argument or a request with thousands of
arguments. A session is written in one piece, split at random points, or frame by frame.

Checked all along and at the end: the process is alive (no crash); it answers PING within
``--ping-timeout`` (no hang); its log holds no "Traceback", "internal error" or "never awaited"
(and no reply says "internal error"); its RSS (VmRSS in /proc/<pid>/status) stays under
``--max-rss-mb``. Afterwards, on a fresh connection, PING answers PONG and INCR on an untouched key
counts 1, 2. Prints a summary (frames, replies by kind, errors by text, peak RSS, duration) and
exits 1 on any failure, with the tail of the server log. Traffic goes to 127.0.0.1 only; the run is
bounded by ``--frames`` and ``--seconds``; the server is stopped on the way out, also on SIGINT or
SIGTERM. Run it through scripts/fuzz (``python -m march_harness.fuzz``);
tests/transport/test_protocol_fuzz.py runs a short version through ``run()``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import errno
import itertools
import random
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hiredis

from march_harness.resp import encode as mb  # one request as a client library writes it
from march_harness.servers import MarchServer

LOG_FINDINGS = ("Traceback", "internal error", "never awaited")
CHECK_KEY = "fuzz:check"  # no frame ever names it: INCR on it must count 1, 2 at the end
KEYS = [f"fz:{i}" for i in range(24)] + ["fz:ts", "fz:ts2"]


# --- frames ------------------------------------------------------------------------------------


# One element of every RESP2/RESP3 type but the bulk string (as a request, Redis reads these as
# inline commands; inside one, it refuses them).
RESP3 = [
    b"%1\r\n$1\r\na\r\n$1\r\nb\r\n",
    b"%1\r\n*1\r\n$1\r\na\r\n:1\r\n",  # a map with an array as its key (hiredis raised TypeError)
    b"%2\r\n%1\r\n:1\r\n:1\r\n:2\r\n:3\r\n:4\r\n",
    b"~2\r\n$1\r\na\r\n:1\r\n",
    b"~1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n",
    b"|1\r\n$1\r\na\r\n$1\r\nb\r\n",
    b">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n",
    b"(3492890328409238509324850943850943825024385\r\n",
    b",1.5\r\n",
    b",inf\r\n",
    b"#t\r\n",
    b"#f\r\n",
    b"_\r\n",
    b"=15\r\ntxt:Some string\r\n",
    b"!21\r\nSYNTAX invalid syntax\r\n",
    b":1\r\n",
    b":-9223372036854775808\r\n",
    b"+OK\r\n",
    b"+PING\r\n",
    b"-ERR x\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b"*0\r\n",
]

HEADERS = [
    b"*0\r\n",
    b"*-1\r\n",
    b"*-5\r\n",
    b"*abc\r\n",
    b"*01\r\n",
    b"* 1\r\n",
    b"*+1\r\n",
    b"*\r\n",
    b"*2147483647\r\n",
    b"*2147483648\r\n",
    b"*4294967295\r\n",
    b"*4294967296\r\n",
    b"*99999999999999999999999\r\n",
    b"*1\r\n$2147483647\r\n",
    b"*1\r\n$999999999999\r\n",
    b"*1\r\n$-5\r\n",
    b"*1\r\n$01\r\nx\r\n",
    b"*1\r\n$1048577\r\n",
    b"*1\r\n$1048576\r\n",
    b"*3\r\n$3\r\nSET\r\n$4\r\nfz:0\r\n$16384\r\n",
    b"*1\r\n$16385\r\n",
    b"*11\r\n",
    b"*4097\r\n",
    b"*1\r" + b"9" * 70000,  # a header line with no end
    b"*1\r\n$" + b"9" * 70000,
    b"$5\r\nhello\r\n",  # a bulk string as a request: the inline command "$5"
    b"\r\n",
    b"\n",
]

_NOT_BARE = re.compile(rb"[\s'\"\x00-\x1f\x7f-\xff]")  # what a bare inline word must not hold

COMMAND_WORDS = [
    b"INCR", b"INCRBY", b"GET", b"SET", b"SEQ.CREATE", b"SEQ.INFO", b"SEQ.LIST", b"SEQ.DECODE", b"KEYS",
    b"SCAN", b"HELLO", b"AUTH", b"MULTI", b"EXEC", b"DISCARD", b"CLIENT", b"CONFIG", b"PING", b"ECHO",
    b"INFO", b"TYPE", b"EXISTS", b"DBSIZE", b"COMMAND", b"TIME", b"SELECT", b"MGET", b"TTL", b"PTTL",
    b"DEL", b"DECR", b"EXPIRE", b"GETSET", b"MSET", b"RESET", b"WATCH", b"UNWATCH", b"READONLY",
    b"CLUSTER", b"ASKING", b"NOSUCHCMD", b"",
]  # fmt: skip
# Never sent: SHUTDOWN, DEBUG, FAILOVER, ACL, CLIENT KILL/PAUSE, CONFIG REWRITE (they would end or
# change the server itself, not test its input handling).


class FrameMaker:
    """Random frames from a seeded generator: ``frame()`` returns (kind, bytes)."""

    def __init__(self, rng: random.Random, max_bulk: int = 1 << 20) -> None:
        self.rng = rng
        self.max_bulk = max_bulk
        self.kinds: list[tuple[str, Callable[[], bytes], float]] = [
            ("command", self.command, 40),
            ("inline", self.inline, 10),
            ("bad-element", self.bad_element, 7),
            ("resp3-request", self.resp3_request, 5),
            ("header", self.header, 5),
            ("mutated", self.mutated, 12),
            ("garbage", self.garbage, 5),
            ("truncated", self.truncated, 5),
            ("nested", self.nested, 3),
            ("many-args", self.many_args, 0.5),
            ("large", self.large, 0.3),
        ]
        self.weights = [w for _, _, w in self.kinds]

    def frame(self) -> tuple[str, bytes]:
        name, make, _ = self.rng.choices(self.kinds, self.weights)[0]
        return name, make()

    def valid(self) -> tuple[str, bytes]:
        """A well-formed request (its arguments may still be wrong for the command)."""
        return ("inline", self.inline()) if self.rng.random() < 0.2 else ("command", self.command())

    # -- pieces -----------------------------------------------------------------------------------

    def key(self) -> bytes:
        r = self.rng.random()
        if r < 0.8:
            return self.rng.choice(KEYS).encode()
        if r < 0.9:
            return b"fz:" + self.rng.randbytes(self.rng.randint(0, 12))
        return b"fz:" + b"k" * self.rng.choice([300, 1000, 5000])  # past max_key_len

    def number(self) -> bytes:
        return self.rng.choice(
            [
                str(self.rng.randint(-5, 1000)).encode(),
                str(self.rng.randint(-(1 << 63), (1 << 63) - 1)).encode(),
                b"9223372036854775807",
                b"9223372036854775808",
                b"-9223372036854775809",
                b"1e3",
                b"0x10",
                b" 1",
                b"",
                b"1.5",
                b"nan",
                self.rng.randbytes(3),
            ]
        )

    def word(self) -> bytes:
        return self.rng.choice(
            [
                self.key(),
                self.number(),
                self.rng.randbytes(self.rng.randint(0, 16)),
                b"*",
                b"fz:*",
                b"?",
                b"[a-",
                b"\\",
                b"MATCH",
                b"COUNT",
                b"TYPE",
                b"NX",
                b"XX",
                b"GET",
                b"EX",
                b"AUTH",
                b"SETNAME",
                b"default",
                b"3",
                b"2",
                b"TIMESTAMP",
                b"PRESET",
                b"snowflake",
                b"START",
                b"MINBATCH",
                b"MAXBATCH",
                b"\r\n",
                b"\x00",
            ]
        )

    def command_args(self) -> list[bytes]:
        rng = self.rng
        k = self.key
        n = self.number
        w = self.word
        options: list[Callable[[], list[bytes]]] = [
            lambda: [b"INCR", k()],
            lambda: [b"INCR", k()],
            lambda: [b"incr", k()],
            lambda: [b"INCRBY", k(), n()],
            lambda: [b"GET", k()],
            lambda: [b"SET", k(), n()],
            lambda: [b"SET", k(), n(), rng.choice([b"NX", b"XX", b"GET", b"EX", b"KEEPTTL"])],
            lambda: [b"SEQ.CREATE", k()] + [w() for _ in range(rng.randint(0, 6))],
            lambda: [
                b"SEQ.CREATE",
                b"fz:ts",
                b"TIMESTAMP",
                b"PRESET",
                rng.choice([b"snowflake", b"sonyflake", b"js53"]),
            ],
            lambda: [b"SEQ.INFO", k()],
            lambda: [b"SEQ.LIST"] + [w() for _ in range(rng.randint(0, 3))],
            lambda: [b"SEQ.DECODE", k(), n()],
            lambda: [b"KEYS", rng.choice([b"*", b"fz:*", b"fz:?", b"[", w()])],
            lambda: [b"SCAN", n()] + [w() for _ in range(rng.randint(0, 4))],
            lambda: [b"HELLO"] + [w() for _ in range(rng.randint(0, 5))],
            lambda: [b"HELLO", rng.choice([b"2", b"3"])],
            lambda: [b"AUTH"] + [w() for _ in range(rng.randint(0, 3))],
            lambda: [b"MULTI"],
            lambda: [b"EXEC"],
            lambda: [b"DISCARD"],
            lambda: (
                [b"CLIENT", rng.choice([b"SETNAME", b"GETNAME", b"ID", b"INFO", b"LIST", b"SETINFO", b"NOPE"])]
                + [w() for _ in range(rng.randint(0, 3))]
            ),
            lambda: (
                [b"CONFIG", rng.choice([b"GET", b"SET", b"RESETSTAT", b"HELP"])]
                + [w() for _ in range(rng.randint(0, 3))]
            ),
            lambda: [b"PING"] + [w() for _ in range(rng.randint(0, 2))],
            lambda: [b"ECHO", w()],
            lambda: [b"INFO"] + [w() for _ in range(rng.randint(0, 2))],
            lambda: [b"MGET"] + [k() for _ in range(rng.randint(0, 20))],
            lambda: [rng.choice(COMMAND_WORDS)] + [w() for _ in range(rng.randint(0, 5))],
            lambda: (
                [b"COMMAND", rng.choice([b"COUNT", b"DOCS", b"INFO", b"GETKEYS", b"LIST"])]
                + [w() for _ in range(rng.randint(0, 3))]
            ),
            lambda: [b"RESET"],
            lambda: [b"QUIT"] if rng.random() < 0.02 else [b"PING"],
        ]
        return rng.choice(options)()

    def command(self) -> bytes:
        return mb(*self.command_args())

    def inline(self) -> bytes:
        """A request as an inline command, quoted as Redis' sdssplitargs reads it (the odd one
        malformed: a mutation or a mixed frame may unbalance its quotes)."""
        parts = []
        for a in self.command_args():
            r = self.rng.random()
            if r < 0.1:  # "double quotes", with escapes
                a = a.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n").replace(b"\r", b"\\r")
                parts.append(b'"' + a + b'"')
            elif r < 0.15 and b"'" not in a and b"\\" not in a and b"\n" not in a:  # 'single quotes'
                parts.append(b"'" + a + b"'")
            else:  # a bare word: no space or quote in it
                parts.append(_NOT_BARE.sub(b"_", a) or b'""')
        sep = self.rng.choice([b" ", b"  ", b"\t"])
        return sep.join(parts) + self.rng.choice([b"\r\n", b"\n"])

    def bad_element(self) -> bytes:
        args = self.command_args()
        at = self.rng.randint(0, len(args))
        parts = [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]
        parts.insert(at, self.rng.choice([*RESP3, self.nested()]))
        return b"*%d\r\n" % len(parts) + b"".join(parts)

    def resp3_request(self) -> bytes:
        return self.rng.choice(RESP3)

    def header(self) -> bytes:
        return self.rng.choice(HEADERS)

    def nested(self) -> bytes:
        depth = self.rng.choice([2, 3, 8, 9, 100, 2000])
        kinds = [b"*", b"%", b"~", b">", b"|"]
        return b"".join(self.rng.choice(kinds) + b"1\r\n" for _ in range(depth)) + b"$1\r\nx\r\n"

    def garbage(self) -> bytes:
        return self.rng.randbytes(self.rng.choice([1, 2, 5, 30, 200, 3000]))

    def truncated(self) -> bytes:
        f = self.command()
        return f[: self.rng.randint(1, len(f) - 1)]

    def mutated(self) -> bytes:
        f = bytearray(self.command() if self.rng.random() < 0.8 else self.inline())
        for _ in range(self.rng.randint(1, 4)):
            op = self.rng.randrange(5)
            i = self.rng.randrange(len(f))
            if op == 0:
                f[i] ^= 1 << self.rng.randrange(8)
            elif op == 1:
                f.insert(i, self.rng.choice(b"*$:+-\r\n0123456789%~_"))
            elif op == 2 and len(f) > 1:
                del f[i]
            elif op == 3:
                f[i:i] = f[i : i + self.rng.randint(1, 8)]
            else:
                f[i:i] = b"\r\n"
        return bytes(f)

    def many_args(self) -> bytes:
        n = self.rng.choice([10, 11, 100, 4096, 4097])
        return mb(b"MGET", *[self.key() for _ in range(n - 1)])

    def large(self) -> bytes:
        size = self.rng.choice([16384, 16385, 100_000, self.max_bulk, self.max_bulk + 1])
        return mb(b"SET", self.key(), b"7" * size) if self.rng.random() < 0.5 else mb(b"ECHO", b"x" * size)


# --- the run -----------------------------------------------------------------------------------


_FAIL_LOCK = threading.Lock()


@dataclass
class Stats:
    frames: int = 0
    bytes_sent: int = 0
    sessions: int = 0
    closed_mid_frame: int = 0
    frames_by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    replies: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    peak_rss_kb: int = 0
    start_rss_kb: int = 0
    pings: int = 0
    slowest_ping: float = 0.0
    duration: float = 0.0
    log_tail: str = ""
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        with _FAIL_LOCK:
            if message not in self.failures:
                self.failures.append(message)


CHECKER_ADDRESS = "127.0.0.2"


def _checker_socket(port: int, timeout: float) -> socket.socket:
    """A connection to the server for the checks, from its own source address when it can.

    The fuzzed connections send AUTH with random passwords for the user ``default`` from 127.0.0.1,
    so the server's AUTH throttle (see march.access.throttle.AuthThrottle) rightly holds back that very
    (address, user) pair, and a check's AUTH from there may be refused as a guess. From 127.0.0.2
    (still loopback, still to 127.0.0.1) the checker is a different client with no failures."""
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(CHECKER_ADDRESS, 0))
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise
        # a system whose loopback is 127.0.0.1 alone
        return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` in kB (0 if the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def log_findings(text: str) -> list[str]:
    """The lines of a server log that show a bug: a traceback, an internal error, a coroutine never awaited."""
    return [line for line in text.splitlines() if any(p in line for p in LOG_FINDINGS)]


_QUOTED = re.compile(r"'[^']*'")


def error_kind(message: str) -> str:
    """An error reply's text without its arguments, to count errors by kind."""
    return _QUOTED.sub("'…'", message, count=0)[:90] if "Protocol error" not in message else message[:90]


def reply_kind(reply: Any) -> str:
    if isinstance(reply, hiredis.ReplyError):
        return "error"
    return {bytes: "bulk/simple", int: "integer", list: "array", dict: "map", float: "double", bool: "boolean"}.get(
        type(reply), "null" if reply is None else type(reply).__name__
    )


class Watcher(threading.Thread):
    """Watches the server from its own thread (with blocking sockets, so that a busy fuzzing loop
    cannot delay it): alive, RSS under the limit, PING answered in time, a clean log."""

    def __init__(self, server: MarchServer, args: argparse.Namespace, stats: Stats, stop: threading.Event) -> None:
        super().__init__(name="fuzz-watcher", daemon=True)
        self.server, self.args, self.stats, self.stop = server, args, stats, stop
        self.log_offset = 0

    def run(self) -> None:
        last_ping = 0.0
        while not self.stop.is_set():
            self.check_process()
            if self.server.running and time.monotonic() - last_ping >= 1.0:
                self.ping()
                last_ping = time.monotonic()
            self.scan_log()
            if self.stats.failures:
                self.stop.set()
                return
            self.stop.wait(0.25)

    def check_process(self) -> None:
        if not self.server.running:
            self.stats.fail(f"the server exited (code {self.server.returncode})")
            return
        rss = rss_kb(self.server.pid)
        self.stats.peak_rss_kb = max(self.stats.peak_rss_kb, rss)
        if rss > self.args.max_rss_mb * 1024:
            self.stats.fail(f"RSS {rss // 1024} MB over the limit of {self.args.max_rss_mb} MB")

    def ping(self) -> None:
        started = time.monotonic()
        try:
            reply = self.call(b"PING\r\n")
        except OSError as exc:
            self.stats.fail(f"PING got no answer within {self.args.ping_timeout}s ({exc!r})")
            return
        self.stats.pings += 1
        self.stats.slowest_ping = max(self.stats.slowest_ping, time.monotonic() - started)
        if reply != b"PONG":
            self.stats.fail(f"PING answered {reply!r}")

    def call(self, *requests: bytes) -> Any:
        """Send requests on a fresh connection (authenticating first if needed); the last reply.
        Raises OSError (TimeoutError included) when the answer does not come within --ping-timeout."""
        deadline = time.monotonic() + self.args.ping_timeout
        if self.args.requirepass:
            requests = (mb("AUTH", self.args.requirepass), *requests)
        with _checker_socket(self.server.port, self.args.ping_timeout) as sock:
            sock.sendall(b"".join(requests))
            parser = hiredis.Reader()
            replies: list[Any] = []
            while len(replies) < len(requests):
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                data = sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("closed by the server")
                parser.feed(data)
                while (reply := parser.gets()) is not False:
                    replies.append(reply)
            return replies[-1]

    def scan_log(self) -> None:
        """The log lines written since the last scan that show a bug."""
        try:
            with open(self.server.log_path, "rb") as f:
                f.seek(self.log_offset)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1  # whole lines only: the rest is read next time
        self.log_offset += end
        for line in log_findings(chunk[:end].decode(errors="replace")):
            self.stats.fail(f"server log: {line[:300]}")

    def final_checks(self) -> None:
        """After the traffic: alive, PING, and INCR counting on a key no frame touched."""
        self.check_process()
        if not self.server.running:
            return
        self.ping()
        try:
            first = self.call(mb("INCR", CHECK_KEY))
            second = self.call(mb("INCR", CHECK_KEY))
        except OSError as exc:
            self.stats.fail(f"INCR {CHECK_KEY} got no answer: {exc!r}")
            return
        if not (isinstance(first, int) and second == first + 1):
            self.stats.fail(f"INCR {CHECK_KEY} answered {first!r} then {second!r}: expected n, n + 1")
        self.scan_log()


class Fuzzer:
    """The clients: ``--connections`` of them at once, each running sessions until the end."""

    def __init__(self, server: MarchServer, args: argparse.Namespace, stats: Stats, stop: threading.Event) -> None:
        self.server, self.args, self.stats, self.stop = server, args, stats, stop
        self.deadline = time.monotonic() + args.seconds

    async def client(self, worker: int) -> None:
        rng = random.Random(f"{self.args.seed}:{worker}")
        maker = FrameMaker(rng, self.args.max_bulk)
        while not self.stop.is_set():
            if self.stats.frames >= self.args.frames or time.monotonic() >= self.deadline:
                self.stop.set()
                return
            # The server closing first is normal here (uvloop says so with a RuntimeError on write).
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError, RuntimeError):
                await asyncio.wait_for(self.session(rng, maker), timeout=30)

    async def session(self, rng: random.Random, maker: FrameMaker) -> None:
        stats = self.stats
        n = rng.choice([1, 1, 2, 5, 20, 100, 400])
        valid = rng.random() < 0.45
        if valid:  # valid requests (so that many run), perhaps one bad frame last
            frames = [maker.valid() for _ in range(n)] + ([maker.frame()] if rng.random() < 0.5 else [])
        else:
            frames = [maker.frame() for _ in range(n)]
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        stats.sessions += 1
        closed = asyncio.Event()
        replied = asyncio.Event()  # as many replies as valid requests came back
        read_task = asyncio.create_task(self.read_replies(reader, closed, replied, n if valid else 0))
        try:
            wire = b"".join(f for _, f in frames)
            ends = list(itertools.accumulate(len(f) for _, f in frames))
            cut = len(wire)
            if rng.random() < 0.12:  # close in the middle of a frame
                cut = rng.randrange(len(wire)) if wire else 0
                stats.closed_mid_frame += 1
            style = rng.random()
            if style < 0.5:  # the whole session in one write
                points = [0, cut]
            elif style < 0.8:  # split at random points
                points = sorted({0, cut, *(rng.randrange(cut + 1) for _ in range(rng.randint(1, 12)))})
            else:  # frame by frame
                points = [0, *(e for e in ends if e < cut), cut]
            pieces = [wire[a:b] for a, b in itertools.pairwise(points)]
            sent = 0
            for piece in pieces:
                if closed.is_set() or writer.is_closing() or not piece or self.stop.is_set():
                    break
                writer.write(piece)
                sent += len(piece)
                if len(pieces) > 1:
                    await asyncio.wait_for(writer.drain(), timeout=5)
            sent_frames = frames[: sum(1 for e in ends if e <= sent)]
            stats.frames += len(sent_frames)
            stats.bytes_sent += sent
            stats.frames_by_kind.update(kind for kind, _ in sent_frames)
            if cut == len(wire) and not closed.is_set():
                with contextlib.suppress(TimeoutError, ConnectionError):
                    await asyncio.wait_for(writer.drain(), timeout=5)
                # Read the replies: all of them for valid requests, else until the server closes or
                # goes quiet for a moment.
                wait = replied.wait() if valid else closed.wait()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wait, timeout=5 if valid else rng.choice([0.01, 0.05, 0.2]))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), timeout=2)
            read_task.cancel()
            await asyncio.wait([read_task], timeout=2)  # (a cancellation of this task goes through)

    async def read_replies(
        self, reader: asyncio.StreamReader, closed: asyncio.Event, replied: asyncio.Event, expected: int
    ) -> None:
        parser = hiredis.Reader()
        stats = self.stats
        data = b""
        count = 0
        try:
            while data := await reader.read(1 << 16):
                parser.feed(data)
                while (reply := parser.gets()) is not False:
                    count += 1
                    if count >= expected:
                        replied.set()
                    kind = reply_kind(reply)
                    stats.replies[kind] += 1
                    if kind == "error":
                        text = str(reply)
                        stats.errors[error_kind(text)] += 1
                        if "internal error" in text:
                            stats.fail(f"reply: {text[:300]}")
        except hiredis.ProtocolError as exc:
            bad = re.findall(rb"\n(:[^\r]{19,})\r", data) or [data[-300:]]
            stats.fail(f"a reply that does not parse as RESP ({exc}), near: {bad[0][:300]!r}")
        except (OSError, ValueError):
            pass
        finally:
            closed.set()
            replied.set()

    async def run(self) -> None:
        clients = [asyncio.create_task(self.client(i)) for i in range(self.args.connections)]
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            await asyncio.sleep(0.1)
            for t in clients:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    self.stop.set()  # a bug in the fuzzer itself: stop and show it
        self.stop.set()
        _, late = await asyncio.wait(clients, timeout=35)
        for t in late:
            t.cancel()
        for result in await asyncio.gather(*clients, return_exceptions=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result


def run(args: argparse.Namespace, workdir: Path, stop: threading.Event | None = None) -> tuple[Stats, MarchServer]:
    """Start a march in ``workdir``, fuzz it, check it, stop it (whatever happens). Setting ``stop``
    ends the traffic early (the checks still run)."""
    extra = ["--max-bulk-len", str(args.max_bulk)]
    server = MarchServer.in_dir(workdir, requirepass=args.requirepass or None, extra_args=extra)
    stats = Stats()
    stop = stop or threading.Event()
    watcher = Watcher(server, args, stats, stop)
    try:
        server.start()
        stats.start_rss_kb = rss_kb(server.pid)
        started = time.monotonic()
        watcher.ping()  # before any guess: from now on the server knows the watcher's (address, user)
        watcher.start()
        try:
            _event_loop_run(Fuzzer(server, args, stats, stop).run())
        finally:
            stop.set()
            watcher.join(timeout=args.ping_timeout + 5)
        stats.duration = time.monotonic() - started
        watcher.final_checks()
    finally:
        code = server.stop()
    if code not in (0, None):
        stats.fail(f"the server exited with code {code} on SIGTERM")
    stats.log_tail = server.log_tail(6000)
    for line in log_findings(server.log_tail(1 << 20)):  # the shutdown too
        stats.fail(f"server log: {line[:300]}")
    return stats, server


def _event_loop_run(main: Any) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is one of march's dependencies
        asyncio.run(main)
    else:
        uvloop.run(main)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000, help="frames to send (default 1,000,000)")
    ap.add_argument("--seconds", type=float, default=900.0, help="stop after this long (default 900)")
    ap.add_argument("--seed", default="0", help="random seed (default 0): the same seed sends the same sessions")
    ap.add_argument("--connections", type=int, default=32, help="clients at once (default 32)")
    ap.add_argument("--max-rss-mb", type=int, default=300, help="fail when the server's RSS passes this (MB)")
    ap.add_argument("--ping-timeout", type=float, default=5.0, help="fail when PING takes longer (seconds)")
    ap.add_argument("--max-bulk", type=int, default=1 << 20, help="the server's --max-bulk-len (default 1 MiB)")
    ap.add_argument("--requirepass", default="", help="start the server with this password (default none)")
    return ap.parse_args(argv)


def summary(stats: Stats) -> str:
    duration = stats.duration
    rate = stats.frames / max(duration, 1e-9)
    lines = [
        f"frames sent: {stats.frames:,} ({stats.bytes_sent:,} bytes) in {stats.sessions:,} connections, "
        f"{stats.closed_mid_frame:,} closed mid-frame; {duration:.1f}s ({rate:,.0f} frames/s)",
        f"server RSS: {stats.start_rss_kb / 1024:.0f} MB at start, peak {stats.peak_rss_kb / 1024:.0f} MB; "
        f"{stats.pings} PINGs, slowest {stats.slowest_ping * 1000:.0f} ms",
        "frames by kind: " + ", ".join(f"{k} {v:,}" for k, v in stats.frames_by_kind.most_common()),
        "replies by kind: " + ", ".join(f"{k} {v:,}" for k, v in stats.replies.most_common()),
        "errors by text:",
        *(f"  {v:>9,}  {k}" for k, v in stats.errors.most_common(25)),
    ]
    if len(stats.errors) > 25:
        lines.append(f"  ... and {len(stats.errors) - 25} other texts")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    stop = threading.Event()
    interrupted: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        if interrupted:  # a second signal: leave now (`finally` still stops the server)
            raise SystemExit(128 + signum)
        interrupted.append(signum)
        stop.set()  # end the traffic; the checks run and the server is stopped

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    print(
        f"fuzzing march: {args.frames:,} frames or {args.seconds:.0f}s, {args.connections} connections, "
        f"seed {args.seed}"
    )
    with tempfile.TemporaryDirectory(prefix="march-fuzz-") as tmp:
        stats, server = run(args, Path(tmp), stop)
        print(summary(stats))
        if stats.failures:
            print("\nFAILED:")
            for f in stats.failures:
                print(f"  {f}")
            print(f"\n--- server log tail ({server.log_path}) ---\n{stats.log_tail}--- end ---")
            sys.exit(1)
    if interrupted:
        print(f"interrupted by signal {interrupted[0]}: checks passed for the traffic sent")
        sys.exit(128 + interrupted[0])
    print("OK: no crash, no hang, no traceback, RSS bounded; PING and INCR correct afterwards")


if __name__ == "__main__":
    main()

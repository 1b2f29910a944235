"""The Python baseline for the benchmarks: a bare uvloop + hiredis server that answers INCR and
nothing else worth the name. No ACL, no persistence, no limits, no metrics, no timing: what a
Python server on this stack costs per request at the least, so that March's throughput can be
given as a ratio to it (issue 18: March ÷ baseline at ``-c 50 -P 16``).

Usage: ``python -m march_harness.bench.baseline_server [--bind 127.0.0.1] [--port 7390]``; it prints
``ready <port>`` once it listens (``--port 0``: a free one) and runs until SIGINT/SIGTERM.

It answers INCR/INCRBY with a counter per key (kept in memory only), AUTH/PING/SELECT/CLIENT/CONFIG
with what redis-benchmark is content with, anything else with an error. Independent of March
(imports nothing from it): it is a reference, not a part of the server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import hiredis
import uvloop

_OK = b"+OK\r\n"
_PONG = b"+PONG\r\n"
_EMPTY = b"*0\r\n"


class Floor(asyncio.Protocol):
    """One connection: parse what arrived, answer every request, one write per read."""

    counters: dict[bytes, int] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        counters = self.counters
        out = []
        request = reader.gets()
        while request is not False:
            name = request[0].upper()
            if name == b"INCR":
                value = counters.get(request[1], 0) + 1
                counters[request[1]] = value
                out.append(b":%d\r\n" % value)
            elif name == b"INCRBY":
                value = counters.get(request[1], 0) + int(request[2])
                counters[request[1]] = value
                out.append(b":%d\r\n" % value)
            elif name == b"PING":
                out.append(_PONG)
            elif name == b"CONFIG":
                out.append(_EMPTY)
            elif name in (b"AUTH", b"SELECT", b"CLIENT", b"HELLO"):
                out.append(_OK)
            else:
                out.append(b"-ERR unknown command\r\n")
            request = reader.gets()
        if out:
            self.transport.write(b"".join(out))


async def main(bind: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Floor, bind, port, reuse_address=True)
    print("ready", server.sockets[0].getsockname()[1], flush=True)
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set_result, None)
    await stop
    server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7390)
    a = parser.parse_args()
    uvloop.run(main(a.bind, a.port))

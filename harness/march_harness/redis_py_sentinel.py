"""redis-py ``Sentinel`` as the README shows it, as a program that draws like the docs/clients ones.

    MARCH_SENTINELS=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 python redis_py_sentinel.py

``Sentinel([...]).master_for("march")``, nothing rebuilt by hand: it draws IDs from the keys in
MARCH_KEYS (default orders,payments,invoices) in turn, one every INTERVAL_MS (default 10), until its
input ends, and prints one line per draw as the docs/clients programs do (``id <key> <id>``,
``error <key> <message>``, ``resumed <key> after <s> s (<n> errors)``; ``march_harness.clients``).
A failed draw handed out no ID: it is printed and tried again after 50 ms.

Run by ``march_harness.clients`` with the tests' own Python (which has redis-py); imports nothing of
the tests.
"""

from __future__ import annotations

import os
import select
import sys
import time

import redis
from redis.sentinel import Sentinel


def main() -> int:
    sentinels = [(a.rpartition(":")[0], int(a.rpartition(":")[2])) for a in os.environ["MARCH_SENTINELS"].split(",")]
    keys = os.environ.get("MARCH_KEYS", "orders,payments,invoices").split(",")
    interval = int(os.environ.get("INTERVAL_MS", "10")) / 1000
    password = os.environ.get("MARCH_PASSWORD") or None
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        sentinels, socket_timeout=1.0, password=password, sentinel_kwargs={"socket_timeout": 0.5, "password": password}
    )
    master = sentinel.master_for("march", socket_timeout=1.0)  # type: ignore[no-untyped-call]
    failing: dict[str, tuple[float, int]] = {}
    i = 0
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready and not os.read(sys.stdin.fileno(), 65536):
            return 0  # input ended
        key = keys[i % len(keys)]
        i += 1
        try:
            value = master.incr(key)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
            since, errors = failing.get(key, (time.monotonic(), 0))
            failing[key] = (since, errors + 1)
            print(f"error {key} {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", flush=True)
            time.sleep(0.05)
            continue
        if key in failing:
            since, errors = failing.pop(key)
            print(f"resumed {key} after {time.monotonic() - since:.2f} s ({errors} errors)", flush=True)
        print(f"id {key} {value}", flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())

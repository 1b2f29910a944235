"""How fast prefetch mode hands out IDs in one Python process: `prefetch_rate`, called by the
project's scripts/bench and by anyone who wants the number on their own machine.

It only measures: it must never write anything but IDs (they become gaps), and never run longer
than the seconds it is given plus one chunk and the connection set-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from march_client.sync import Sequencer

CHUNK = 10_000  # calls between two looks at the clock: the clock must not be what is measured


def prefetch_rate(url: str, key: str, seconds: float = 2.0, *, method: Literal["next", "ids"] = "next") -> float:
    """IDs per second from ``Sequencer(url, prefetch=True)`` drawing ``key`` for ``seconds``.

    ``method="next"`` calls ``seq.next(key)`` in a loop (what an application does);
    ``method="ids"`` calls ``next(it)`` on ``seq.ids(key)`` (the fastest path). The first range
    is drawn before the clock starts, so connecting is not counted.
    """
    with Sequencer(url, prefetch=True) as seq:
        if method == "ids":
            it = seq.ids(key)
            next(it)
            return _rate_ids(it.__next__, seconds)
        seq.next(key)
        return _rate_next(seq.next, key, seconds)


def _rate_next(call: Callable[[str], int], key: str, seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(CHUNK):
            call(key)
        n += CHUNK
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def _rate_ids(call: Callable[[], int], seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(CHUNK):
            call()
        n += CHUNK
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)

"""march_client: a Python client for March, the ID sequencer that speaks Redis.

- `Sequencer` / `AsyncSequencer`: ``next(key)``, ``next_range(key, n)``; one node or a cluster
  (follows ``MOVED`` through failovers); bounded, safe retries (`Unavailable` after the deadline).
- ``prefetch=True`` (`march_client.prefetch`): ranges drawn in the background, millions of IDs per
  second from one process; IDs increase per thread, not across threads or processes.
- `march_client.formats`: base62, fixed width, dated IDs, JS-safety, a keyed reversible permutation.
- `march_client.snowflake.SnowflakeGenerator`: snowflake IDs made locally under a worker id leased
  from the server.

This package must never return an error as an ID, nor an ID it did not get from the server (or,
for the snowflake generator, make under a worker id it does not hold).
"""

from march_client.aio import AsyncSequencer
from march_client.errors import MarchClientError, Unavailable, WorkerLost
from march_client.sync import PrefetchSequencer, Sequencer

__all__ = [
    "AsyncSequencer",
    "MarchClientError",
    "PrefetchSequencer",
    "Sequencer",
    "Unavailable",
    "WorkerLost",
]

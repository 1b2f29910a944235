"""Test helpers: free ports, server processes (march and a real redis-server) and `serving()`
to run one for a fixture, a tiny raw RESP client, the history checker for the uniqueness and
real-time guarantees, and (in `support.aio`) a fake clock and bounded waits for asyncio unit tests.

Imported as `support` (pytest puts tests/ on sys.path because tests/ is not a package).
Nothing here starts a process that its owner does not stop: every server object has a
`stop()` that always reaps.
"""

from support.history import History, Op, check_history
from support.ports import free_port
from support.resp import RespConn, RespError, wait_until
from support.servers import MarchServer, RedisServer, ServerExited, redis_binaries_present, serving

__all__ = [
    "History",
    "MarchServer",
    "Op",
    "RedisServer",
    "RespConn",
    "RespError",
    "ServerExited",
    "check_history",
    "free_port",
    "redis_binaries_present",
    "serving",
    "wait_until",
]

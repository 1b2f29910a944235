"""Process-level test helpers: free ports, server processes (march and a real redis-server),
a tiny raw RESP client, and the history checker for the uniqueness and real-time guarantees.

Imported as `support` (pytest puts tests/ on sys.path because tests/ is not a package).
Nothing here starts a process that its owner does not stop: every server object has a
`stop()` that always reaps.
"""

from support.history import History, Op, check_history
from support.ports import free_port
from support.resp import RespConn, RespError, wait_until
from support.servers import MarchServer, RedisServer, ServerExited, redis_binaries_present

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
    "wait_until",
]

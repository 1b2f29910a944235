"""March's harness: what the tests and the scripts share, one package imported by name.

Here at the top: free ports, server processes (march and a real redis-server) and `serving()` to
run one for a fixture, a tiny raw RESP client, the history checker for the uniqueness and
real-time guarantees, and `REPO_ROOT`. In its modules: etcd processes and March clusters
(`etcd`, `cluster`), the fault drills, races, the soak and the load they put on (`drills`,
`races`, `stops`, `soak`, `load`), network namespaces and the TCP proxy (`netns`, `proxy`), the
protocol fuzzer (`fuzz`), the bench library (`bench`), comparisons with a real redis-server
(`compare`, `raw`), the docs' example runner (`examples`), and the test doubles March's pure core
runs on in unit tests (`memory_store`, `fake_etcd`, `manual_clock`, `aio`, `sim`).

It belongs to this repository (scripts/_env.sh installs it editable into .venv): `REPO_ROOT` is
the working tree it was installed from. It must never be imported by march/ (tests/test_no_doubles.py
checks), and nothing here starts a process that its owner does not stop: every server object has a
`stop()` that always reaps.
"""

from march_harness.history import History, Op, check_history
from march_harness.ports import free_port
from march_harness.resp import RespConn, RespError, wait_until
from march_harness.servers import (
    REPO_ROOT,
    MarchServer,
    Pair,
    RedisServer,
    ServerExited,
    paired,
    redis_binaries_present,
    serving,
)

__all__ = [
    "REPO_ROOT",
    "History",
    "MarchServer",
    "Op",
    "Pair",
    "RedisServer",
    "RespConn",
    "RespError",
    "ServerExited",
    "check_history",
    "free_port",
    "paired",
    "redis_binaries_present",
    "serving",
    "wait_until",
]

"""Free loopback ports. Tests never use 6379 and never bind anything but 127.0.0.1."""

import socket

# Every port this process has handed out. The kernel may give the same ephemeral port to two
# bind(0) calls in a row once the first socket is closed; two servers of one test given the same
# port then look alike (the loser exits, but the winner answers the loser's readiness PING).
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process never handed out
    before (the caller still retries if another process takes it meanwhile)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no loopback port left that this process has not handed out already")

"""Free loopback ports. Tests never use 6379 and never bind anything but 127.0.0.1."""

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller retries if it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port

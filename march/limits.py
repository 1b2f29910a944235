"""What the operating system lets this process hold: ``max_clients`` against the file-descriptor limit.

Read at start (the server's assembly) and by ``CONFIG SET max-clients`` (``App.reconfigure``), so it
sits below both; it knows no socket and no command.
"""

from __future__ import annotations

import contextlib
import logging
import resource

log = logging.getLogger("march")

FD_RESERVE = 32  # file descriptors kept for the store, etcd, logs (Redis keeps 32 too)


def clients_the_fd_limit_allows(wanted: int) -> int:
    """``max_clients``, lowered (and logged) if the process may not open that many files, as Redis does.

    The soft limit is raised toward the hard one first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = wanted + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    allowed = max(1, soft - FD_RESERVE)
    log.warning(
        "max_clients lowered from %d to %d: this process may open %d files (ulimit -n), %d are kept for the rest",
        wanted,
        allowed,
        soft,
        FD_RESERVE,
    )
    return allowed

"""Readiness: whether this node can serve a plain client's key requests now, and if not, why
(``GET /ready`` on the metrics port, ``march_ready`` and ``march_not_ready_because`` in INFO cluster).

A node is ready when it serves every group, or when it forwards (``redirect forward``, or on its
``forward_port``) and every group it does not serve has a primary it holds a forwarding link to
(``Group.link_peer``, ``Links.reachable``). Before that: not while it shuts down, nor before the
users are read (a cluster node that has not read them knows nobody).

What this module must never do: wait, read etcd, or open a link on the caller's path (``warm``
only asks ``Links`` to open the missing ones in the background, so a later ask may say ready).
"""

from __future__ import annotations

from march.cluster.groups import Groups
from march.cluster.links import Links
from march.config import Config

FORWARD = "forward"  # the ``redirect`` setting that turns forwarding on


def readiness(
    groups: Groups, links: Links, config: Config, users_loaded: bool, stopping: bool, warm: bool = True
) -> str | None:
    """None when this node can serve a plain client's key requests now (see the module docstring);
    else why not. ``warm`` (on the event loop only): ask for the missing links in the background."""
    if stopping:
        return "shutting down"
    if not users_loaded:
        return "the users are not read yet"
    for group in groups:
        if group.serving:
            continue
        if config.redirect != FORWARD and not config.forward_port:
            return f"group {group.index} is served by another node (redirect moved, no forward_port)"
        peer = group.link_peer(links.tls is not None)
        if peer is None:
            return f"group {group.index} has no primary"
        if not links.reachable(peer):
            if warm:
                links.warm(peer)
            return f"no link to group {group.index}'s primary {peer.addr} yet"
    return None

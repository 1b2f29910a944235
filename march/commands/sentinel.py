"""Sentinel discovery: the subset of Redis Sentinel that client libraries ask, and ROLE.

Every node answers on its own RESP port as if it were one of the cluster's sentinels, under one
master name (``sentinel_master_name``, default ``march``) that names the current primary (of group
0, at its forwarding port when it has one: below). So an application configured for Sentinel
(redis-py ``Sentinel``, ioredis ``sentinels``, Jedis ``JedisSentinelPool``, Lettuce
``RedisURI.Builder.sentinel``) lists the nodes as its sentinels and finds the primary through them.
What they send, checked in their sources:

- redis-py: ``SENTINEL MASTERS`` (each entry's ``flags``, ``ip``, ``port``,
  ``num-other-sentinels``), ``SENTINEL SLAVES`` for ``slave_for``;
- ioredis: ``SENTINEL get-master-addr-by-name``, then ``SENTINEL sentinels`` to learn the others,
  then the primary's ``INFO`` (``role:master``) as its ready check;
- Jedis: ``SENTINEL get-master-addr-by-name`` (plus a ``SUBSCRIBE +switch-master`` listener: the
  node publishes it when it sees the primary change, ``march.cluster.announce``);
- Lettuce: ``SENTINEL get-master-addr-by-name``; its master/replica mode ``SENTINEL MASTER`` and
  ``SENTINEL REPLICAS``.

Replies have real Sentinel 7.0's shape: the same fields in the same order, every value a bulk
string, one map per instance (a flat array in RESP2), a null array for an unknown name in
GET-MASTER-ADDR-BY-NAME and Sentinel's error text for it elsewhere. Fields March has no meaning
for (ping times, replication offsets) are 0; the timeouts are the lease TTL, after which a dead
primary is replaced.

**Which port is named.** The master is group 0's primary (with one group, the primary). A node with a
forwarding port (``forward_port``: it serves every key, forwarding those of groups it does not lead
to their primaries) is named at that port, in every address these replies give for a data node
(master, replicas, ROLE, ``+switch-master``), so a Sentinel client lands on a connection that
serves every key of a cluster of several groups, while cluster clients on the RESP port keep getting
MOVED. Without one (or to a client on the TLS port: the forwarding port is plain TCP) the RESP or
TLS port is named, which serves only the keys of the groups its node leads. The sentinels
themselves (SENTINEL SENTINELS) are the nodes' RESP ports, where the application listed them.

The answer comes from this node's view of the directory (``ClusterMember.directory``), the same one
``CLUSTER SLOTS`` and ``MOVED`` use: it never decides who may serve, it only points. A pointer that
is stale by a moment is safe: a node that is not the primary answers key commands with ``MOVED`` or
``TRYAGAIN`` (never an ID), and clients ask again. With no primary known, GET-MASTER-ADDR-BY-NAME
is a null array (clients try the next sentinel, then retry) and the master entry is flagged
``s_down,o_down`` so that redis-py passes over it. A single node (no etcd) names itself.

This module must never mutate cluster state: SENTINEL FAILOVER / SET / MONITOR / REMOVE / RESET
are not offered (``FAILOVER`` is the switchover), so they get Redis' unknown-subcommand error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from march import errors
from march.cluster.directory import NodeInfo
from march.commands.table import Subcommand, command, container
from march.errors import CommandError
from march.resp import NULL_ARRAY

if TYPE_CHECKING:
    from march.client import Client

_PRIORITY = b"100"  # Redis' default replica-priority: every standby may be elected


class _View:
    """The cluster as this client sees it: this node, the primary (None: none known), the standbys."""

    __slots__ = ("down_ms", "epoch", "me", "others", "primary", "standbys")

    def __init__(self, client: Client) -> None:
        app = client.app
        self.down_ms = str(app.config.lease_ttl * 1000).encode()
        member = app.groups.member
        if member is None:  # a single node: it is the primary, alone
            port = app.tls_port if client.tls and app.tls_port else app.port
            self.me = NodeInfo(app.config.address(port), app.config.address(port))
            self.primary: NodeInfo | None = self.me
            self.standbys: list[NodeInfo] = []
            self.others: list[NodeInfo] = []
            self.epoch = 0
            return
        self.me = member.me.seen_by(client.tls)
        primary, standbys = member.directory.members()
        self.primary = primary.for_sentinel(client.tls) if primary else None
        self.standbys = [n.for_sentinel(client.tls) for n in standbys]
        self.epoch = member.directory.topology.leader_revision
        nodes = [*([primary] if primary else []), *standbys]
        self.others = [n.seen_by(client.tls) for n in nodes if n.id != self.me.id]  # as sentinels: their RESP ports


def _b(value: int | str) -> bytes:
    return str(value).encode()


def _instance(view: _View, name: bytes, host: str, port: int, runid: str, flags: bytes) -> dict[bytes, bytes]:
    """The fields every Sentinel entry (master, replica, sentinel) starts with, in Sentinel's order."""
    return {
        b"name": name,
        b"ip": host.encode(),
        b"port": _b(port),
        b"runid": runid.encode(),
        b"flags": flags,
        b"link-pending-commands": b"0",
        b"link-refcount": b"1",
        b"last-ping-sent": b"0",
        b"last-ok-ping-reply": b"0",
        b"last-ping-reply": b"0",
        b"down-after-milliseconds": view.down_ms,
    }


def _master(view: _View, name: bytes) -> dict[bytes, bytes]:
    p = view.primary
    flags = b"master" if p is not None else b"master,s_down,o_down"
    return {
        **_instance(view, name, p.host if p else "", p.port if p else 0, p.cluster_id if p else "", flags),
        b"info-refresh": b"0",
        b"role-reported": b"master",
        b"role-reported-time": b"0",
        b"config-epoch": _b(view.epoch),
        b"num-slaves": _b(len(view.standbys)),
        b"num-other-sentinels": _b(len(view.others)),
        b"quorum": _b((len(view.others) + 1) // 2 + 1),  # etcd's majority elects, not a vote of sentinels
        b"failover-timeout": view.down_ms,
        b"parallel-syncs": b"1",
    }


def _replica(view: _View, n: NodeInfo) -> dict[bytes, bytes]:
    p = view.primary
    return {
        **_instance(view, n.addr.encode(), n.host, n.port, n.cluster_id, b"slave"),
        b"info-refresh": b"0",
        b"role-reported": b"slave",
        b"role-reported-time": b"0",
        b"master-link-down-time": b"0",
        b"master-link-status": b"ok" if p else b"err",
        b"master-host": p.host.encode() if p else b"?",
        b"master-port": _b(p.port) if p else b"0",
        b"slave-priority": _PRIORITY,
        b"slave-repl-offset": b"0",
        b"replica-announced": b"1",
    }


def _sentinel(view: _View, n: NodeInfo) -> dict[bytes, bytes]:
    return {
        **_instance(view, n.cluster_id.encode(), n.host, n.port, n.cluster_id, b"sentinel"),
        b"last-hello-message": b"0",
        b"voted-leader": b"?",
        b"voted-leader-epoch": b"0",
    }


def _named(client: Client, args: list[bytes]) -> _View:
    """The view, once ``args[2]`` is this cluster's master name (else Sentinel's error)."""
    if args[2] != client.app.config.sentinel_master_name.encode():
        raise CommandError(errors.NO_SUCH_MASTER)
    return _View(client)


def _get_master_addr(client: Client, args: list[bytes]) -> Any:
    if args[2] != client.app.config.sentinel_master_name.encode():
        return NULL_ARRAY
    primary = _View(client).primary
    if primary is None:
        return NULL_ARRAY
    return [primary.host.encode(), _b(primary.port)]


def _masters(client: Client, args: list[bytes]) -> Any:
    return [_master(_View(client), client.app.config.sentinel_master_name.encode())]


def _master_one(client: Client, args: list[bytes]) -> Any:
    return _master(_named(client, args), args[2])


def _replicas(client: Client, args: list[bytes]) -> Any:
    view = _named(client, args)
    return [_replica(view, n) for n in view.standbys]


def _sentinels(client: Client, args: list[bytes]) -> Any:
    view = _named(client, args)
    return [_sentinel(view, n) for n in view.others]


def _myid(client: Client, args: list[bytes]) -> Any:
    return _View(client).me.cluster_id.encode()


_MASTER = "<master-name>"

container(
    "sentinel",
    ("stale", "loading"),
    ("@slow", "@app"),  # read-only discovery, what a Sentinel-configured client asks first (not @admin)
    (
        Subcommand(
            "get-master-addr-by-name",
            3,
            "The ip and port of the primary of <master-name>.",
            _get_master_addr,
            f"GET-MASTER-ADDR-BY-NAME {_MASTER}",
        ),
        Subcommand("masters", 2, "The one master (the cluster's primary) and its state.", _masters),
        Subcommand("master", 3, "The state of <master-name>.", _master_one, f"MASTER {_MASTER}"),
        Subcommand("replicas", 3, "The standbys of <master-name> and their state.", _replicas, f"REPLICAS {_MASTER}"),
        Subcommand(
            "slaves", 3, "The standbys of <master-name> (old name of REPLICAS).", _replicas, f"SLAVES {_MASTER}"
        ),
        Subcommand(
            "sentinels",
            3,
            "The other nodes, each also a sentinel, and their state.",
            _sentinels,
            f"SENTINELS {_MASTER}",
        ),
        Subcommand("myid", 2, "This node's id.", _myid),
    ),
    summary="Sentinel discovery: GET-MASTER-ADDR-BY-NAME, MASTERS, MASTER, REPLICAS, SLAVES, SENTINELS, MYID.",
    group="sentinel",
)


@command(
    "role",
    1,
    ("noscript", "loading", "stale", "fast"),
    ("@fast", "@app"),  # read-only: what a client asks to check it reached the primary (not @admin)
    summary="This node's replication role: master with its standbys, or slave with the primary's address.",
    group="server",
)
def role(client: Client, args: list[bytes]) -> Any:
    view = _View(client)
    if view.primary is not None and view.primary.id == view.me.id and client.app.groups[0].state.leading:
        return [b"master", 0, [[n.host.encode(), _b(n.port), b"0"] for n in view.standbys]]
    if view.primary is None or view.primary.id == view.me.id:  # no primary, or this one still taking over
        return [b"slave", b"?", 0, b"connect", -1]
    return [b"slave", view.primary.host.encode(), view.primary.port, b"connected", 0]

"""Cluster commands: CLUSTER SLOTS/SHARDS/NODES/INFO/MYID/KEYSLOT, READONLY, READWRITE, ASKING, FAILOVER.

Every node answers the topology commands from the node directory in etcd: the primary (the node
that holds the leader key) owns slots 0-16383 and the standbys are its replicas, which is the
shape redis-py ``RedisCluster``, ``redis-cli -c`` and ioredis ``Cluster`` follow. Node ids are
the sha1 of the configured ``node_id`` (clients expect 40 hex digits). On a single node (no etcd)
these commands answer as a Redis server without cluster support does.

``READONLY``, ``READWRITE`` and ``ASKING`` are accepted for client compatibility; reads are never
served by standbys (a standby knows no watermark), so key commands on a standby are redirected
whatever the connection's mode.

``FAILOVER [TO host port] [TIMEOUT ms] [ABORT]`` (on the primary) is a planned switchover: this
node holds new key requests, hands leadership to the chosen standby (or the first one) and
replies ``OK`` once the new primary holds the leader key; the held requests then get ``MOVED``.
TIMEOUT (default 5000 ms, at most ``MAX_TIMEOUT_MS``: 60000) bounds the wait for the new primary,
which also ends as soon as another node holds the leader key or the chosen one stopped answering
(``march.cluster.failover``). ``FAILOVER ABORT`` cancels a switchover that has not handed over yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from ..cluster.directory import NodeInfo
from ..cluster.failover import MAX_TIMEOUT_MS
from ..cluster.member import ClusterMember
from ..cluster.slots import SLOTS, key_slot
from ..errors import CommandError
from ..resp import Verbatim
from .args import Args
from .table import Subcommand, command, container

if TYPE_CHECKING:
    from ..client import Client

_DEFAULT_FAILOVER_TIMEOUT_MS = 5000


def _member(client: Client) -> ClusterMember:
    member = client.app.group.member
    if member is None:
        raise CommandError(errors.CLUSTER_DISABLED)
    return member


def _endpoint(n: NodeInfo) -> list[Any]:
    return [n.host.encode(), n.port, n.cluster_id.encode()]


def _cluster_keyslot(client: Client, args: list[bytes]) -> Any:
    _member(client)
    return key_slot(args[2])


def _cluster_myid(client: Client, args: list[bytes]) -> Any:
    return _member(client).me.cluster_id.encode()


def _cluster_slots(client: Client, args: list[bytes]) -> Any:
    primary, standbys = _member(client).directory.members(client.tls)
    if primary is None:
        return []
    return [[0, SLOTS - 1, _endpoint(primary), *(_endpoint(n) for n in standbys)]]


def _cluster_shards(client: Client, args: list[bytes]) -> Any:
    return _shards(*_member(client).directory.members(client.tls))


def _cluster_nodes(client: Client, args: list[bytes]) -> Any:
    member = _member(client)
    primary, standbys = member.directory.members(client.tls)
    epoch = member.directory.topology.leader_revision
    return Verbatim(_nodes_text(member.me.seen_by(client.tls), epoch, primary, standbys))


def _cluster_info(client: Client, args: list[bytes]) -> Any:
    member = _member(client)
    primary, standbys = member.directory.members(client.tls)
    return Verbatim(_info_text(member.directory.topology.leader_revision, primary, standbys))


def _shards(primary: NodeInfo | None, standbys: list[NodeInfo]) -> list[Any]:
    def describe(n: NodeInfo, role: str) -> dict[bytes, Any]:
        return {
            b"id": n.cluster_id.encode(),
            b"port": n.port,
            b"ip": n.host.encode(),
            b"endpoint": n.host.encode(),
            b"role": role.encode(),
            b"replication-offset": 0,
            b"health": b"online",
        }

    nodes = [describe(n, "replica") for n in standbys]
    if primary is None:
        return [{b"slots": [], b"nodes": nodes}] if nodes else []
    return [{b"slots": [0, SLOTS - 1], b"nodes": [describe(primary, "master"), *nodes]}]


def _nodes_text(me: NodeInfo, epoch: int, primary: NodeInfo | None, standbys: list[NodeInfo]) -> str:
    lines = []
    for n, is_primary in [*([(primary, True)] if primary else []), *((s, False) for s in standbys)]:
        flags = ("myself," if n.id == me.id else "") + ("master" if is_primary or primary is None else "slave")
        master = "-" if is_primary or primary is None else primary.cluster_id
        slots = f" 0-{SLOTS - 1}" if is_primary else ""
        lines.append(
            f"{n.cluster_id} {n.host}:{n.port}@{n.port + 10000} {flags} {master} 0 0 {epoch} connected{slots}\n"
        )
    return "".join(lines)


def _info_text(epoch: int, primary: NodeInfo | None, standbys: list[NodeInfo]) -> str:
    ok = primary is not None
    assigned = SLOTS if ok else 0
    fields = [
        ("cluster_state", "ok" if ok else "fail"),
        ("cluster_slots_assigned", assigned),
        ("cluster_slots_ok", assigned),
        ("cluster_slots_pfail", 0),
        ("cluster_slots_fail", 0),
        ("cluster_known_nodes", len(standbys) + (1 if ok else 0)),
        ("cluster_size", 1 if ok else 0),
        ("cluster_current_epoch", epoch),
        ("cluster_my_epoch", epoch),
        ("cluster_stats_messages_sent", 0),
        ("cluster_stats_messages_received", 0),
        ("total_cluster_links_buffer_limit_exceeded", 0),
    ]
    return "".join(f"{k}:{v}\r\n" for k, v in fields)


container(
    "cluster",
    ("stale",),
    ("@slow", "@app"),  # read-only topology: what every cluster client asks first
    (
        Subcommand(
            "slots", 2, "The slot ranges and the nodes that serve them (the primary owns 0-16383).", _cluster_slots
        ),
        Subcommand("shards", 2, "The shard (one: the primary and its standbys) with its nodes.", _cluster_shards),
        Subcommand("nodes", 2, "The nodes in CLUSTER NODES text format.", _cluster_nodes),
        Subcommand("info", 2, "Cluster state: ok while a primary is known.", _cluster_info),
        Subcommand("myid", 2, "This node's id.", _cluster_myid),
        Subcommand("keyslot", 3, "The hash slot of a key (CRC16 with hash tags).", _cluster_keyslot, "KEYSLOT <key>"),
    ),
    summary="Topology for cluster clients: SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT.",
    group="cluster",
)


def _accept(client: Client, args: list[bytes]) -> Any:
    _member(client)
    return "OK"


for _name, _summary in (
    ("readonly", "Accepted for cluster clients; reads still go to the primary."),
    ("readwrite", "Accepted for cluster clients (the default mode)."),
    ("asking", "Accepted for cluster clients; March never migrates slots."),
):
    command(
        _name, 1, ("fast", "loading", "stale"), ("@fast", "@connection", "@app"), summary=_summary, group="cluster"
    )(_accept)


@command(
    "failover",
    -1,
    ("admin", "noscript", "stale"),
    ("@admin", "@slow", "@dangerous"),
    summary="FAILOVER [TO host port] [TIMEOUT ms] [ABORT]: hand the primary role to a standby, no client error.",
    group="cluster",
)
def failover(client: Client, args: list[bytes]) -> Any:
    target: str | None = None
    timeout_ms = _DEFAULT_FAILOVER_TIMEOUT_MS
    abort = False
    cursor = Args(args)
    for option in cursor.options(b"to", b"timeout", b"abort"):
        if option == b"to":
            host = cursor.text()
            port = cursor.integer()
            if not 0 < port < 65536:
                raise CommandError(errors.SYNTAX)
            target = f"{host}:{port}"
        elif option == b"timeout":
            timeout_ms = cursor.integer()
            if timeout_ms <= 0:
                raise CommandError(errors.FAILOVER_TIMEOUT_RANGE)
            if timeout_ms > MAX_TIMEOUT_MS:
                raise CommandError(errors.FAILOVER_TIMEOUT_TOO_LONG.format(MAX_TIMEOUT_MS))
        else:
            abort = True
    member = client.app.group.member
    if abort:
        if target is not None or len(args) > 2:
            raise CommandError(errors.FAILOVER_ABORT_ALONE)
        if member is None:
            raise CommandError(errors.FAILOVER_NONE)
        member.failover.abort()
        return "OK"
    if member is None:
        raise CommandError(errors.FAILOVER_NO_STANDBY)
    return _failover(member, target, timeout_ms / 1000)


async def _failover(member: ClusterMember, target: str | None, timeout: float) -> Any:
    await member.failover.run(target, timeout)
    return "OK"

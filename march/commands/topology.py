"""Cluster commands: CLUSTER SLOTS/SHARDS/NODES/INFO/MYID/KEYSLOT, READONLY, READWRITE, ASKING, FAILOVER.

Every node answers the topology commands from the node directory in etcd: each leadership group's
primary (the node that holds the group's leader key) owns the group's slot range (0-16383 with one
group) and the other nodes are its replicas, which is the shape redis-py ``RedisCluster``,
``redis-cli -c`` and ioredis ``Cluster`` follow: ``CLUSTER SLOTS`` and ``SHARDS`` list one range per
group with a known primary; ``CLUSTER NODES`` shows each node once, a master with the ranges of
the groups it leads (contiguous ones joined), or a replica of the first group's primary if it
leads none (Redis gives a replica one master); ``CLUSTER INFO`` is ``ok`` while every group has a
primary, and with several groups adds ``march_groups`` and ``march_groups_led`` (this node's). Node ids are
the sha1 of the configured ``node_id`` (clients expect 40 hex digits). On a single node (no etcd)
these commands answer as a Redis server without cluster support does.

``READONLY``, ``READWRITE`` and ``ASKING`` are accepted for client compatibility; reads are never
served by standbys (a standby knows no watermark), so key commands on a standby are redirected
whatever the connection's mode.

``FAILOVER [GROUP g] [TO host port] [TIMEOUT ms] [ABORT]`` (on the primary) is a planned switchover:
this node holds new key requests, hands leadership to the chosen standby (or the first one) and
replies ``OK`` once the new primary holds the leader key; the held requests then get ``MOVED``.
With several groups, ``GROUP g`` hands over that group only (``FAILOVER_NOT_PRIMARY`` if this node
does not lead it), and without it every group this node leads goes, at once, each to the node
leading fewest (or all to ``TO``); the first error is the reply. ``ABORT`` cancels every hand-over
in progress. ``CLUSTER FAILOVER [FORCE|TAKEOVER]`` is Redis' replica-side command: on a node that
leads no group it asks the most loaded primary for one group (``ClusterMember.take_over``) and
answers once it serves it (Redis answers at once and fails over in the background; an answer
after the fact says whether it happened). FORCE and TAKEOVER take the same planned path: a dead
primary's groups are elected anew anyway. On a node that leads a group it is Redis' error.
TIMEOUT (default 5000 ms, at most ``MAX_TIMEOUT_MS``: 60000) bounds the wait for the new primary,
which also ends as soon as another node holds the leader key or the chosen one stopped answering
(``march.cluster.failover``). ``FAILOVER ABORT`` cancels a switchover that has not handed over yet.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from march import errors
from march.cluster.directory import NodeInfo
from march.cluster.failover import MAX_TIMEOUT_MS
from march.cluster.groups import SlotRange
from march.cluster.member import ClusterMember, GroupMember, hand_over_plan
from march.cluster.slots import SLOTS, key_slot
from march.commands.args import Args
from march.commands.table import Subcommand, command, container
from march.errors import CommandError
from march.resp import Verbatim

if TYPE_CHECKING:
    from march.client import Client

_DEFAULT_FAILOVER_TIMEOUT_MS = 5000


def _member(client: Client) -> ClusterMember:
    member = client.app.groups.member
    if member is None:
        raise CommandError(errors.CLUSTER_DISABLED)
    return member


def _endpoint(n: NodeInfo) -> list[Any]:
    return [n.host.encode(), n.port, n.cluster_id.encode()]


@dataclass(frozen=True)
class _Shard:
    """One group as clients see it: its slot range, its primary (None: none known) and replicas."""

    index: int
    slots: SlotRange
    primary: NodeInfo | None
    replicas: list[NodeInfo]
    epoch: int  # the group's leader key's create revision


def _shards_of(client: Client) -> list[_Shard]:
    """Every group of this node, in slot order, from the directory's last read."""
    directory = _member(client).directory
    out = []
    for group in client.app.groups:
        primary, replicas = directory.members(client.tls, group.index)
        out.append(_Shard(group.index, group.slots, primary, replicas, directory.views[group.index].leader_revision))
    return out


def _cluster_failover(client: Client, args: list[bytes]) -> Any:
    """Redis' replica-side manual failover: the node asks the most loaded primary for one group
    (``ClusterMember.take_over``) and answers once it serves it. FORCE and TAKEOVER are accepted and
    take the same planned path: a primary that is down loses its groups to the election anyway."""
    member = _member(client)
    if len(args) > 3 or (len(args) == 3 and args[2].lower() not in (b"force", b"takeover")):
        raise CommandError(errors.SYNTAX)
    return _take_over(member, _DEFAULT_FAILOVER_TIMEOUT_MS / 1000)


async def _take_over(member: ClusterMember, timeout: float) -> Any:
    await member.take_over(timeout)
    return "OK"


def _cluster_keyslot(client: Client, args: list[bytes]) -> Any:
    _member(client)
    return key_slot(args[2])


def _cluster_myid(client: Client, args: list[bytes]) -> Any:
    return _member(client).me.cluster_id.encode()


def _cluster_slots(client: Client, args: list[bytes]) -> Any:
    return [
        [s.slots.first, s.slots.last, _endpoint(s.primary), *(_endpoint(n) for n in s.replicas)]
        for s in _shards_of(client)
        if s.primary is not None
    ]


def _cluster_shards(client: Client, args: list[bytes]) -> Any:
    shards = _shards_of(client)
    if len(shards) == 1:
        return _shards(shards[0].primary, shards[0].replicas)
    return [_shard(s.slots, s.primary, s.replicas) for s in shards if s.primary is not None]


def _cluster_nodes(client: Client, args: list[bytes]) -> Any:
    member = _member(client)
    shards = _shards_of(client)
    if len(shards) == 1:
        return Verbatim(
            _nodes_text(member.me.seen_by(client.tls), shards[0].epoch, shards[0].primary, shards[0].replicas)
        )
    return Verbatim(_grouped_nodes_text(member.me.seen_by(client.tls), shards))


def _cluster_info(client: Client, args: list[bytes]) -> Any:
    shards = _shards_of(client)
    if len(shards) == 1:
        return Verbatim(_info_text(shards[0].epoch, shards[0].primary, shards[0].replicas))
    return Verbatim(_grouped_info_text(client, shards))


def _shard(slots: SlotRange, primary: NodeInfo, replicas: list[NodeInfo]) -> dict[bytes, Any]:
    return {
        b"slots": [slots.first, slots.last],
        b"nodes": [_describe(primary, "master"), *(_describe(n, "replica") for n in replicas)],
    }


def _describe(n: NodeInfo, role: str) -> dict[bytes, Any]:
    return {
        b"id": n.cluster_id.encode(),
        b"port": n.port,
        b"ip": n.host.encode(),
        b"endpoint": n.host.encode(),
        b"role": role.encode(),
        b"replication-offset": 0,
        b"health": b"online",
    }


def _shards(primary: NodeInfo | None, standbys: list[NodeInfo]) -> list[Any]:
    nodes = [_describe(n, "replica") for n in standbys]
    if primary is None:
        return [{b"slots": [], b"nodes": nodes}] if nodes else []
    return [{b"slots": [0, SLOTS - 1], b"nodes": [_describe(primary, "master"), *nodes]}]


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


def _grouped_nodes_text(me: NodeInfo, shards: list[_Shard]) -> str:
    """Several groups: a node leading groups is a master with their slot ranges (contiguous ones
    joined); a node leading none is a replica of the first group's primary (Redis gives a replica one
    master)."""
    nodes: dict[str, NodeInfo] = {}
    led: dict[str, list[_Shard]] = {}
    for shard in shards:
        for n in (*([shard.primary] if shard.primary else []), *shard.replicas):
            nodes.setdefault(n.id, n)
        if shard.primary is not None:
            led.setdefault(shard.primary.id, []).append(shard)
    first = next((s.primary for s in shards if s.primary is not None), None)
    lines = []
    for n in sorted(nodes.values(), key=lambda n: n.id):
        mine = led.get(n.id, [])
        is_master = bool(mine) or first is None
        flags = ("myself," if n.id == me.id else "") + ("master" if is_master else "slave")
        master = "-" if is_master or first is None else first.cluster_id
        epoch = max((s.epoch for s in mine), default=0)
        lines.append(
            f"{n.cluster_id} {n.host}:{n.port}@{n.port + 10000} {flags} {master} 0 0 {epoch} connected{_ranges(mine)}\n"
        )
    return "".join(lines)


def _ranges(shards: list[_Shard]) -> str:
    """`` a-b c-d``: the slot ranges of ``shards`` (in slot order), contiguous ones joined."""
    spans: list[list[int]] = []
    for s in sorted(shards, key=lambda s: s.slots.first):
        if spans and spans[-1][1] + 1 == s.slots.first:
            spans[-1][1] = s.slots.last
        else:
            spans.append([s.slots.first, s.slots.last])
    return "".join(f" {a}-{b}" for a, b in spans)


def _info_text(epoch: int, primary: NodeInfo | None, standbys: list[NodeInfo]) -> str:
    ok = primary is not None
    assigned = SLOTS if ok else 0
    return _info_fields(ok, assigned, len(standbys) + (1 if ok else 0), 1 if ok else 0, epoch, epoch)


def _grouped_info_text(client: Client, shards: list[_Shard]) -> str:
    """Several groups: ``ok`` while every group has a known primary; then which groups this node leads."""
    me = _member(client).me.id
    assigned = sum(s.slots.last - s.slots.first + 1 for s in shards if s.primary is not None)
    known = {n.id for s in shards for n in (*([s.primary] if s.primary else []), *s.replicas)}
    primaries = {s.primary.id for s in shards if s.primary is not None}
    mine = [s for s in shards if s.primary is not None and s.primary.id == me]
    text = _info_fields(
        assigned == SLOTS,
        assigned,
        len(known),
        len(primaries),
        max((s.epoch for s in shards), default=0),
        max((s.epoch for s in mine), default=0),
    )
    return text + f"march_groups:{len(shards)}\r\nmarch_groups_led:{','.join(str(s.index) for s in mine)}\r\n"


def _info_fields(ok: bool, assigned: int, known: int, size: int, epoch: int, my_epoch: int) -> str:
    fields = [
        ("cluster_state", "ok" if ok else "fail"),
        ("cluster_slots_assigned", assigned),
        ("cluster_slots_ok", assigned),
        ("cluster_slots_pfail", 0),
        ("cluster_slots_fail", 0),
        ("cluster_known_nodes", known),
        ("cluster_size", size),
        ("cluster_current_epoch", epoch),
        ("cluster_my_epoch", my_epoch),
        ("cluster_stats_messages_sent", 0),
        ("cluster_stats_messages_received", 0),
        ("total_cluster_links_buffer_limit_exceeded", 0),
    ]
    return "".join(f"{k}:{v}\r\n" for k, v in fields)


_NONDET = ("nondeterministic_output",)  # Redis' tip for the topology replies

container(
    "cluster",
    ("stale",),
    ("@slow", "@app"),  # read-only topology: what every cluster client asks first
    (
        Subcommand(
            "slots",
            2,
            "The slot ranges and the nodes that serve them (the primary owns 0-16383).",
            _cluster_slots,
            tips=_NONDET,
        ),
        Subcommand(
            "shards",
            2,
            "The shard (one: the primary and its standbys) with its nodes.",
            _cluster_shards,
            tips=_NONDET,
        ),
        Subcommand("nodes", 2, "The nodes in CLUSTER NODES text format.", _cluster_nodes, tips=_NONDET),
        Subcommand("info", 2, "Cluster state: ok while a primary is known.", _cluster_info, tips=_NONDET),
        Subcommand("myid", 2, "This node's id.", _cluster_myid),
        Subcommand("keyslot", 3, "The hash slot of a key (CRC16 with hash tags).", _cluster_keyslot, "KEYSLOT <key>"),
        Subcommand(
            "failover",
            -2,
            "On a node leading no group: take one group over from the most loaded primary (planned, no client error).",
            _cluster_failover,
            "FAILOVER [FORCE|TAKEOVER]",
            categories=("@admin", "@slow", "@dangerous"),
            flags=("admin", "stale"),
        ),
    ),
    summary="Topology for cluster clients: SLOTS, SHARDS, NODES, INFO, MYID, KEYSLOT; CLUSTER FAILOVER.",
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
    summary="FAILOVER [GROUP g] [TO host port] [TIMEOUT ms] [ABORT]: hand the primary role to a standby, "
    "no client error.",
    group="cluster",
)
def failover(client: Client, args: list[bytes]) -> Any:
    target: str | None = None
    timeout_ms = _DEFAULT_FAILOVER_TIMEOUT_MS
    abort = False
    only: int | None = None
    groups = client.app.groups
    cursor = Args(args)
    for option in cursor.options(b"to", b"timeout", b"abort", b"group"):
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
        elif option == b"group":
            only = cursor.integer(errors.FAILOVER_GROUP_RANGE.format(len(groups) - 1), 0, len(groups) - 1)
        else:
            abort = True
    members = [g.member for g in groups if g.member is not None]
    if abort:
        if target is not None or len(args) > 2:
            raise CommandError(errors.FAILOVER_ABORT_ALONE)
        active = [m for m in members if m.failover.active is not None]
        if not active:
            raise CommandError(errors.FAILOVER_NONE)
        for m in active:
            m.failover.abort()
        return "OK"
    if not members:
        raise CommandError(errors.FAILOVER_NO_STANDBY)
    if len(members) == 1:
        return _failover([(members[0], target)], timeout_ms / 1000)
    chosen = [m for m in members if (only is None or m.index == only)]
    led = [m for m in chosen if m.state.leading]
    if not led:
        raise CommandError(errors.FAILOVER_NOT_PRIMARY)
    return _failover(hand_over_plan(led, target), timeout_ms / 1000)


async def _failover(plan: list[tuple[GroupMember, str | None]], timeout: float) -> Any:
    """Hand over every group of ``plan`` at once; the first error is the reply (the others went on)."""
    results = await asyncio.gather(*(m.failover.run(target, timeout) for m, target in plan), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return "OK"

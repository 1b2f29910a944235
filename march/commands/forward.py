"""Forwarding: a key request for a group this node does not serve is relayed to the group's primary
and its reply relayed back, so a plain client can use any node. It is a property of the port a
client came in on (``forwards``): the forwarding port (``forward_port``) forwards, the RESP port
answers MOVED (cluster clients need it to learn the slot map) unless ``redirect forward`` makes it
forward too. Links go to the address a primary takes them at (``NodeInfo.link``: ``link_address``,
default its advertised address), which may differ from the one clients are told (containers).

The entry side (this node):

- The dispatcher checks everything it checks for a local request (authentication, the user's
  ACL: a user without ``+incr`` is refused here, counted and logged here), waits while the group is
  in transition, then calls ``forward`` instead of answering MOVED. With no primary known the
  client gets today's CLUSTERDOWN/TRYAGAIN.
- The request goes over a pooled link (``march.cluster.links``) on the client's own lane (its client id)
  and runs there as the same user (named with each request; users are the same on every node), so
  what a handler checks beyond the dispatcher (creating a sequence by INCR needs ``SEQ.CREATE``) is
  checked there as it would be here. A request that waits there holds back only the later requests
  of its own lane: no other client waits for it.
- A reply that never comes is never asked for again: the client gets ``FORWARD_LOST`` (a plain
  ``ERR``, which no client library retries by itself; an INCR that ran there is a gap), or
  ``FORWARD_TIMEOUT`` past its deadline (the link stays unless the primary proves dead). A link that
  could not be opened sent nothing: ``TRYAGAIN``. A ``MOVED`` from the primary (it stopped leading
  meanwhile) means the request did not run there: it is sent once more, to the node that MOVED
  names (if it is a registered node), else the client gets ``TRYAGAIN``.
- A connection's requests keep their order. With a link open, a forwarded request is written at
  once (``Relayed``) and the connection goes on with the requests after it; a connection keeps
  its link (``client.relay_link``) and its lane, so the primary runs them in the order sent, and the replies
  are written in order once the relayed ones are in (``march.transport.waiting.Relays``). A request that
  must first open a link waits (``march.transport.waiting``) before the next one runs.
- MULTI/EXEC: inside MULTI a key command of a group served elsewhere is queued (not MOVED); EXEC
  whose commands all belong to one group served elsewhere writes ``MULTI``, the commands and
  ``EXEC`` at once on one link and relays EXEC's reply. A transaction that mixes groups, or
  commands this node runs (its own groups' keys, PING...) with another group's keys, is refused at
  EXEC (``FORWARD_CROSS``, an EXECABORT) and nothing runs. WATCH stays refused, as everywhere.

The receiving side: ``MARCH.LINK`` (``link_command``), a command no user can run and that COMMAND,
HELP and ACL do not list (the dispatcher reaches it only for a name it does not know). Without
``cluster_secret`` it does not exist (``ERR unknown command``); with ``tls_cluster_required`` it
answers only on the TLS port. ``HELLO`` gives a fresh nonce; ``AUTH <node> <me> <nonce> <proof>
<proto>`` checks that ``me`` is this node and the proof (``links.proof``, over both nonces, both
ids and the direction) in constant time, one answer per nonce, and answers this node's own proof:
a relayed, reflected or replayed proof fails. Failures get AUTH's WRONGPASS and are throttled
(``app.link_throttle``, an ``AuthThrottle`` of their own, never shared with AUTH) per source
address and per claimed node, never in one record for all: a stranger's guesses slow that
stranger (and whoever claims the same node from elsewhere), and a node that links from the host
it registered in etcd is a known pair, held back only by failures of its own. Each failure is
counted (``LinkStats.proofs_failed``, INFO, /metrics) and logged (rate-limited). The proven
connection then serves lanes (``waiting.Lanes``): every request runs as the user it names (an
unknown user: a user that may run nothing), only key commands and MULTI/EXEC/DISCARD. A link is
named ``march-link:<node>`` (CLIENT LIST, lib-name ``march-link``) and never forwards what it is
sent: a request it cannot serve gets MOVED, which the entry node handles as above.

Whether this node can serve a plain client every key now is ``march.cluster.readiness``'s.

What this module must never do: send a request twice, or run a request as anyone but its user.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from march import errors
from march import log as march_log
from march.client import NOBODY, LinkPeer
from march.cluster.links import (
    INITIATOR,
    LINK_COMMAND,
    NONCE_MAX,
    RESPONDER,
    LinkDown,
    LinkLost,
    LinkTimeout,
    Peer,
    Sent,
    new_nonce,
    proof,
    proof_ok,
)
from march.cluster.readiness import FORWARD
from march.commands.table import CommandSpec, Relayed, lookup
from march.errors import CommandError
from march.resp import Encoded

if TYPE_CHECKING:
    from march.app import App
    from march.client import Client
    from march.cluster.groups import Group

log = logging.getLogger("march")

LINK_USER = " march-link:"  # + the claimed node: what link proofs are throttled under (no ACL user's name has a space)
LINK_LIB = "march-link"  # CLIENT LIST lib-name of a link on the receiving side
_NAME_SAFE = re.compile(r"[^A-Za-z0-9._:\-\[\]]")  # what of a node id may go into a client name
_NODE_MAX = 256  # bytes of a claimed node id that count (throttle records, logs): ids are short


def forwards(client: Client) -> bool:
    """Whether a request of ``client`` that this node cannot serve is forwarded: on the forwarding
    port (``forward_port``), or on any port with ``redirect forward``; never one a link sent."""
    return client.link is None and (client.forwarding or client.app.config.redirect == FORWARD)


def deadline(app: App) -> float:
    """Seconds a forwarded request may take: the primary may wait for a transition (max_wait) and
    then for a store write (store_timeout); past that it is taken for lost."""
    return app.config.max_wait + app.config.store_timeout + 1.0


def forward(client: Client, spec: CommandSpec, args: list[bytes]) -> Relayed | Coroutine[Any, Any, Encoded]:
    """Send ``args`` to its group's primary. With a link open, it is written now and a ``Relayed``
    comes back (the connection answers the requests after it meanwhile, and this one in its
    place); else a coroutine that opens a link first. Either may be awaited for the reply."""
    key = args[spec.keys[0]] if spec.keys[0] else b""
    group, links = client.app.groups.of_key(key), client.app.links
    peer = group.link_peer(links.tls is not None)
    if peer is None:
        raise group.redirect(key, client.tls)  # CLUSTERDOWN or TRYAGAIN, as without forwarding
    kept = client.relay_link
    link = links.open_link(peer, client.proto, kept)
    if link is None or (kept is not None and link is not kept):
        # No link yet, or not the one this connection's earlier requests went on (another primary,
        # protocol or a broken link): as a waiting request, sent once those are answered.
        client.relay_link = None
        return _relay(client, group, key, [args])
    client.relay_link = link  # its next requests go on the same link and lane, so they run in its order
    sent = links.write(link, client.id, client.user.name.encode(), [args])
    return Relayed(partial(_reply, client, group, peer, [args], sent))


async def _reply(client: Client, group: Group, peer: Peer, requests: list[list[bytes]], sent: Sent) -> Encoded:
    """The reply of ``requests``, written to a link already (``sent``)."""
    try:
        replies = await client.app.links.replies(sent, deadline(client.app))
    except LinkLost as exc:
        raise _lost(exc) from None
    return await _settle(client, group, peer, requests, replies)


async def _relay(client: Client, group: Group, key: bytes, requests: list[list[bytes]]) -> Encoded:
    """``requests`` on one link to ``group``'s primary (opened if need be); the last reply."""
    peer = group.link_peer(client.app.links.tls is not None)
    if peer is None:
        raise group.redirect(key, client.tls)
    return await _settle(client, group, peer, requests, await _send(client, peer, requests))


async def _settle(
    client: Client, group: Group, peer: Peer, requests: list[list[bytes]], replies: list[bytes]
) -> Encoded:
    """The last of ``replies``, unless one is a MOVED: then nothing ran there, and ``requests`` are
    sent once more to the registered node it names (if another), else TRYAGAIN."""
    moved = next((r for r in replies if r.startswith(b"-MOVED ")), None)
    if moved is not None:
        target = moved.split()[2].decode("utf-8", "replace")
        me = group.member.me if group.member is not None else None
        node = group.node_at(target)
        if node is None or node.id == peer.node or (me is not None and node.id == me.id):
            raise CommandError(errors.FORWARD_MOVED)
        replies = await _send(client, Peer(node.link(client.app.links.tls is not None), node.id), requests)
        if any(r.startswith(b"-MOVED ") for r in replies):
            raise CommandError(errors.FORWARD_MOVED)
    return Encoded(replies[-1])


async def _send(client: Client, peer: Peer, requests: list[list[bytes]]) -> list[bytes]:
    app = client.app
    user = client.user.name.encode()
    try:
        return await app.links.request(peer, client.proto, client.id, user, requests, deadline(app))
    except LinkDown:
        raise CommandError(errors.FORWARD_UNREACHABLE) from None
    except LinkLost as exc:
        raise _lost(exc) from None


def _lost(exc: LinkLost) -> CommandError:
    return CommandError(errors.FORWARD_TIMEOUT if isinstance(exc, LinkTimeout) else errors.FORWARD_LOST)


# --- MULTI / EXEC -------------------------------------------------------------------------------


def elsewhere(client: Client, queued: list[list[bytes]]) -> tuple[list[Group], bool]:
    """The groups served elsewhere that ``queued``'s key commands belong to, in order of first use,
    and whether any command runs here (a key of a group this node serves, or a command without one)."""
    groups, remote, here = client.app.groups, [], False
    for args in queued:
        spec = lookup(args[0])
        if spec is None or not spec.primary:
            here = True
            continue
        group = groups.of_key(args[spec.keys[0]] if spec.keys[0] else b"")
        if group.serving:
            here = True
        elif group not in remote:
            remote.append(group)
    return remote, here


async def transaction(
    client: Client,
    queued: list[list[bytes]],
    remote: list[Group],
    run_here: Callable[[], Awaitable[Any]],
) -> Any:
    """EXEC of a transaction with key commands of groups served elsewhere (``remote``): once no
    group is in transition, forwarded whole if it all belongs to one such group, run here if it
    now all belongs to this node (``run_here``), else refused (FORWARD_CROSS) with nothing run."""
    for group in remote:
        if group.in_transition:
            await group.settled(client.app.config.max_wait)
    remote, here = elsewhere(client, queued)
    if not remote:
        return await run_here()
    if here or len(remote) > 1:
        raise CommandError(errors.FORWARD_CROSS)
    spec = lookup(queued[0][0])
    key = queued[0][spec.keys[0]] if spec is not None and spec.keys[0] else b""
    return await _relay(client, remote[0], key, [[b"MULTI"], *queued, [b"EXEC"]])


# --- the receiving side: MARCH.LINK ---------------------------------------------------------------


def link_command(client: Client, args: list[bytes]) -> Any:
    """``MARCH.LINK HELLO | AUTH node me nonce proof proto`` (see the module docstring). Anything
    else, and everything without ``cluster_secret``, inside MULTI or on a proven link, is an
    unknown command."""
    sub = args[1].lower() if len(args) > 1 else b""
    peer = client.link
    config = client.app.config
    if not config.cluster_secret or client.multi is not None or (peer is not None and peer.authenticated):
        raise errors.unknown_command(args)
    if sub == b"hello" and len(args) == 2:
        if config.tls_cluster_required and not client.tls:
            raise CommandError(errors.LINK_NEEDS_TLS)
        client.link = LinkPeer(new_nonce())
        return client.link.nonce
    if sub == b"auth" and len(args) == 7 and peer is not None and peer.nonce:
        return _prove(client, peer, args[2:])
    raise errors.unknown_command(args)


def _prove(client: Client, peer: LinkPeer, fields: list[bytes]) -> Any:
    """Check a link's proof, throttled per source address and per claimed node (``app.link_throttle``):
    one answer per nonce."""
    app = client.app
    node = fields[0][:_NODE_MAX]
    host, who = _host(client), LINK_USER + node.decode("utf-8", "replace")
    nonce, peer.nonce = peer.nonce, b""
    if _registered_at(app, node, host):  # the node itself, from where it said it is: its own record only
        app.link_throttle.know(host, who)
    wait = app.link_throttle.admit(host, who)
    if wait is None:
        _failed(client, node, checked=False)
        raise CommandError(errors.LINK_THROTTLED)
    if wait > 0:
        return _prove_later(client, peer, nonce, fields, wait)
    return _check(client, peer, nonce, fields)


async def _prove_later(client: Client, peer: LinkPeer, nonce: bytes, fields: list[bytes], wait: float) -> bytes:
    try:
        await asyncio.sleep(wait)
    except BaseException:
        client.app.link_throttle.abandoned(_host(client), LINK_USER + fields[0][:_NODE_MAX].decode("utf-8", "replace"))
        raise
    return _check(client, peer, nonce, fields)


def _check(client: Client, peer: LinkPeer, nonce: bytes, fields: list[bytes]) -> bytes:
    """The proof checked: this node's own proof (the connection is a link now), or WRONGPASS."""
    app = client.app
    node, me, theirs, answer, proto = fields
    secret = app.config.cluster_secret.encode()
    host, who = _host(client), LINK_USER + node[:_NODE_MAX].decode("utf-8", "replace")
    ok = (
        me == app.links.name.encode()
        and proto in (b"2", b"3")
        and 0 < len(theirs) <= NONCE_MAX
        and proof_ok(secret, INITIATOR, node, me, theirs, nonce, answer)
    )
    if not ok:
        app.link_throttle.failed(host, who)
        _failed(client, node)
        raise CommandError(errors.LINK_PROOF_BAD)
    app.link_throttle.succeeded(host, who)
    peer.authenticated = True
    peer.node = _NAME_SAFE.sub("_", node.decode("utf-8", "replace"))[:64]
    client.login(NOBODY)
    client.proto = int(proto)
    client.name = f"{LINK_LIB}:{peer.node}"
    client.lib_name = LINK_LIB
    return proof(secret, RESPONDER, node, me, theirs, nonce)


def _registered_at(app: App, node: bytes, host: str) -> bool:
    """Whether ``node`` is a node registered in etcd at ``host`` (its address's or TLS address's host)."""
    member = app.groups.member
    if member is None:
        return False
    found = member.directory.topology.nodes.get(node.decode("utf-8", "replace"))
    if found is None:
        return False
    return host in {a.rpartition(":")[0] for a in (found.addr, found.tls_addr, found.link_addr, found.link_tls_addr)}


def _failed(client: Client, node: bytes, checked: bool = True) -> None:
    """A wrong (or, throttled, unchecked) link proof: counted, recorded as a failed AUTH is, and
    logged (rate-limited: a flood writes a few lines a minute); never the proof."""
    app = client.app
    client.auth_failures += 1
    app.stats.denied_auth += 1
    app.links.stats.proofs_failed += 1
    app.acl_log.add("auth", "toplevel", "MARCH.LINK", LINK_LIB, client.info_line())
    march_log.event(
        log,
        logging.WARNING,
        "forward_link_proof",
        "a forwarding link from %s (claiming node %r) did not prove the cluster secret%s",
        client.addr,
        node[:64],
        "" if checked else " (throttled: refused unchecked)",
    )


def _host(client: Client) -> str:
    return client.addr.rpartition(":")[0]


def is_link_command(name: bytes) -> bool:
    return name.lower() == LINK_COMMAND

"""Forwarding (``redirect forward``): a key request for a group this node does not serve is relayed
to the group's primary and its reply relayed back, so a plain client can use any node.

The entry side (this node):

- The dispatcher checks everything it checks for a local request (authentication, the user's
  ACL: a user without ``+incr`` is refused here, counted and logged here), waits while the group is
  in transition, then calls ``forward`` instead of answering MOVED. With no primary known the
  client gets today's CLUSTERDOWN/TRYAGAIN.
- The request goes over a pooled, pipelined link (``march.links``) and runs there as the same user
  (``MARCH.LINK AS``; users are the same on every node), so what a handler checks beyond the
  dispatcher (creating a sequence by INCR needs ``SEQ.CREATE``) is checked there as it would be here.
- A reply that never comes is never asked for again: the client gets ``FORWARD_LOST`` (a plain
  ``ERR``, which no client library retries by itself; an INCR that ran there is a gap). A link that
  could not be opened sent nothing: ``TRYAGAIN``. A ``MOVED`` from the primary (it stopped leading
  meanwhile) means the request did not run there: it is sent once more, to the node that MOVED
  names, else the client gets ``TRYAGAIN``.
- A connection's requests keep their order. With a link open, a forwarded request is written at
  once (``Relayed``) and the connection goes on with the requests after it; a connection keeps
  its link (``client.relay_link``), so the primary runs them in the order sent, and the replies
  are written in order once the relayed ones are in (``march.waiting.Relays``). A request that
  must first open a link waits (``march.waiting``) before the next one runs.
- MULTI/EXEC: inside MULTI a key command of a group served elsewhere is queued (not MOVED); EXEC
  whose commands all belong to one group served elsewhere writes ``MULTI``, the commands and
  ``EXEC`` at once on one link and relays EXEC's reply. A transaction that mixes groups, or
  commands this node runs (its own groups' keys, PING...) with another group's keys, is refused at
  EXEC (``FORWARD_CROSS``, an EXECABORT) and nothing runs. WATCH stays refused, as everywhere.

The receiving side: ``MARCH.LINK`` (``link_command``), a command no user can run and that COMMAND,
HELP and ACL do not list (the dispatcher reaches it only for a name it does not know). Without
``cluster_secret`` it does not exist (``ERR unknown command``). ``HELLO`` gives a fresh nonce;
``AUTH <node> <proof>`` checks ``HMAC-SHA256(secret, nonce)`` in constant time (one answer per nonce;
failures count in ``AuthThrottle`` like AUTH's, and get AUTH's WRONGPASS); ``AS <user>`` sets whom
the link's next requests run as (an unknown user: a user that may run nothing). A link is named
``march-link:<node>`` (CLIENT LIST, lib-name ``march-link``) and never forwards what it is sent:
a request it cannot serve gets MOVED, which the entry node handles as above.

``readiness`` says whether this node can serve a plain client every key now (``/ready`` on the
metrics port, ``march_ready`` in INFO cluster).

What this module must never do: send a request twice, or run a request as anyone but its user.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from .. import errors
from ..auth import User
from ..client import LinkPeer
from ..errors import CommandError
from ..links import LINK_COMMAND, LinkDown, LinkLost, LinkTimeout, Sent, proof_ok
from ..resp import Encoded
from .table import CommandSpec, lookup

if TYPE_CHECKING:
    from ..app import App
    from ..client import Client
    from ..group import Group

log = logging.getLogger("march")

FORWARD = "forward"  # the ``redirect`` setting that turns forwarding on
LINK_USER = " march-link"  # the name link proofs are throttled under: no ACL user's name has a space
LINK_LIB = "march-link"  # CLIENT LIST lib-name of a link on the receiving side
NOBODY = User("march-link")  # whom a link runs requests as before its first AS: may run nothing
_NAME_SAFE = re.compile(r"[^A-Za-z0-9._:\-\[\]]")  # what of a node id may go into a client name


def forwards(client: Client) -> bool:
    """Whether a request of ``client`` that this node cannot serve is forwarded (never one a link sent)."""
    return client.link is None and client.app.config.redirect == FORWARD


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
    addr = group.primary_address(links.tls is not None)
    if addr is None:
        raise group.redirect(key, client.tls)  # CLUSTERDOWN or TRYAGAIN, as without forwarding
    link = links.open_link(addr, client.proto, client.relay_link)
    if link is None:
        return _relay(client, group, key, [args])
    client.relay_link = link  # its next requests go on the same link, so they run in its order
    return Relayed(client, group, addr, [args], links.write(link, client.user.name.encode(), [args]))


class Relayed:
    """A forwarded request written to its link; awaiting it gives the reply (or raises its error)."""

    __slots__ = ("addr", "client", "group", "requests", "sent")

    def __init__(self, client: Client, group: Group, addr: str, requests: list[list[bytes]], sent: Sent) -> None:
        self.client, self.group, self.addr, self.requests, self.sent = client, group, addr, requests, sent

    def __await__(self) -> Generator[Any, None, Encoded]:
        return self.reply().__await__()

    async def reply(self) -> Encoded:
        client = self.client
        try:
            replies = await client.app.links.replies(self.sent, deadline(client.app))
        except LinkLost as exc:
            raise _lost(exc) from None
        return await _settle(client, self.group, self.addr, self.requests, replies)


async def _relay(client: Client, group: Group, key: bytes, requests: list[list[bytes]]) -> Encoded:
    """``requests`` on one link to ``group``'s primary (opened if need be); the last reply."""
    addr = group.primary_address(client.app.links.tls is not None)
    if addr is None:
        raise group.redirect(key, client.tls)
    return await _settle(client, group, addr, requests, await _send(client, addr, requests))


async def _settle(
    client: Client, group: Group, addr: str, requests: list[list[bytes]], replies: list[bytes]
) -> Encoded:
    """The last of ``replies``, unless one is a MOVED: then nothing ran there, and ``requests`` are
    sent once more to the node it names (if another), else TRYAGAIN."""
    moved = next((r for r in replies if r.startswith(b"-MOVED ")), None)
    if moved is not None:
        target = moved.split()[2].decode("utf-8", "replace")
        me = group.member.me if group.member is not None else None
        if target == addr or (me is not None and target in (me.addr, me.tls_addr)):
            raise CommandError(errors.FORWARD_MOVED)
        replies = await _send(client, target, requests)
        if any(r.startswith(b"-MOVED ") for r in replies):
            raise CommandError(errors.FORWARD_MOVED)
    return Encoded(replies[-1])


async def _send(client: Client, addr: str, requests: list[list[bytes]]) -> list[bytes]:
    app = client.app
    try:
        return await app.links.request(addr, client.proto, client.user.name.encode(), requests, deadline(app))
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
    """``MARCH.LINK HELLO | AUTH node proof | AS user`` (see the module docstring). Anything else, and
    everything without ``cluster_secret`` or inside MULTI, is an unknown command."""
    sub = args[1].lower() if len(args) > 1 else b""
    peer = client.link
    if not client.app.config.cluster_secret or client.multi is not None:
        raise errors.unknown_command(args)
    if sub == b"hello" and len(args) == 2:
        client.link = LinkPeer(os.urandom(16).hex().encode())
        return client.link.nonce
    if sub == b"auth" and len(args) == 4 and peer is not None and peer.nonce:
        return _prove(client, peer, args[2], args[3])
    if sub == b"as" and len(args) == 3 and peer is not None and peer.authenticated:
        user = client.app.users.get(args[2].decode("utf-8", "replace"))
        client.user = user if user is not None else NOBODY
        return "OK"
    raise errors.unknown_command(args)


def _prove(client: Client, peer: LinkPeer, node: bytes, answer: bytes) -> Any:
    """Check a link's proof, throttled as AUTH is (``auth.AuthThrottle``): one answer per nonce."""
    app = client.app
    nonce, peer.nonce = peer.nonce, b""
    wait = app.auth_throttle.admit(_host(client), LINK_USER)
    if wait is None:
        _failed(client, node, logged=False)
        raise CommandError(errors.LINK_THROTTLED)
    if wait > 0:
        return _prove_later(client, peer, nonce, node, answer, wait)
    return _check(client, peer, nonce, node, answer)


async def _prove_later(client: Client, peer: LinkPeer, nonce: bytes, node: bytes, answer: bytes, wait: float) -> str:
    try:
        await asyncio.sleep(wait)
    except BaseException:
        client.app.auth_throttle.abandoned(_host(client), LINK_USER)
        raise
    return _check(client, peer, nonce, node, answer)


def _check(client: Client, peer: LinkPeer, nonce: bytes, node: bytes, answer: bytes) -> str:
    app = client.app
    if not proof_ok(app.config.cluster_secret.encode(), nonce, answer):
        app.auth_throttle.failed(_host(client), LINK_USER)
        _failed(client, node)
        raise CommandError(errors.LINK_PROOF_BAD)
    app.auth_throttle.succeeded(_host(client), LINK_USER)
    peer.authenticated = True
    peer.node = _NAME_SAFE.sub("_", node.decode("utf-8", "replace"))[:64]
    client.login(NOBODY)
    client.name = f"{LINK_LIB}:{peer.node}"
    client.lib_name = LINK_LIB
    return "OK"


def _failed(client: Client, node: bytes, logged: bool = True) -> None:
    """A wrong (or unchecked) link proof: counted and recorded as a failed AUTH is; never the proof."""
    app = client.app
    client.auth_failures += 1
    app.stats.denied_auth += 1
    app.acl_log.add("auth", "toplevel", "MARCH.LINK", LINK_LIB, client.info_line())
    if logged and (client.auth_failures == 1 or client.auth_failures % 100 == 0):
        log.warning("a forwarding link from %s (node %r) failed to prove the cluster secret", client.addr, node[:64])


def _host(client: Client) -> str:
    return client.addr.rpartition(":")[0]


def is_link_command(name: bytes) -> bool:
    return name.lower() == LINK_COMMAND


# --- readiness --------------------------------------------------------------------------------


def readiness(app: App, warm: bool = True) -> str | None:
    """None when this node can serve a plain client's key requests now: it serves every group, or it
    forwards and every other group has a primary it holds a link to; else why not. With ``warm``
    (on the event loop only) asking opens the missing links in the background (``Links.warm``), so
    a later ask may say ready."""
    if app.shutdown_requested is not None and app.shutdown_requested.is_set():
        return "shutting down"
    if not app.users.loaded:
        return "the users are not read yet"
    for group in app.groups:
        if group.serving:
            continue
        if app.config.redirect != FORWARD:
            return f"group {group.index} is served by another node (redirect moved)"
        addr = group.primary_address(app.links.tls is not None)
        if addr is None:
            return f"group {group.index} has no primary"
        if not app.links.reachable(addr):
            if warm:
                app.links.warm(addr)
            return f"no link to group {group.index}'s primary {addr} yet"
    return None

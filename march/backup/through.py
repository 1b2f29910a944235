"""``--through HOST:PORT``: raise floors through a serving primary instead of the store.

``SET key N`` per plain sequence is the floor raise every node already makes: the primary moves its
in-memory range past N and makes the new ceiling durable under its own leadership guard before it
replies, so it is safe while the primary serves (a restore into etcd is not: ``operations``). A
floor already passed is left alone. Timestamp sequences, users and worker records are not
restored this way (reported as skipped). The tool is a client of the node here: it never opens the
store.
"""

from __future__ import annotations

import sys
from typing import Any

from march.backup.checks import BackupError, optional
from march.backup.report import PAGE, Progress, Summary
from march.store.contract import SequenceRecord

MOVED_HOPS = 2  # a standby names the primary, which serves: more hops mean the cluster is moving


def through_primary(
    address: str, records: list[SequenceRecord], user: str | None, password: str | None, summary: Summary, apply: bool
) -> None:
    """Raise floors through a serving primary: ``SET key ceiling-1`` per sequence-kind record (the
    node's own durable, fenced floor raise). A record already above is left alone (unchanged).

    ``address`` may be any node of the cluster: a key that gets ``MOVED`` is read and written on the
    node named (at most ``MOVED_HOPS`` hops; with leadership groups each key goes to its own group's
    primary), and the first redirect to each node is said on stderr. Errors name the key as text and
    the reply with its kind (``MOVED 13262 127.0.0.1:7382``), never a bytes repr."""
    redis = optional("redis")  # the CLI is a client of the node here

    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise BackupError(f"--through {address}: expected HOST:PORT")
    first = (host or "127.0.0.1", int(port))
    clients: dict[tuple[str, int], Any] = {}

    def client(node: tuple[str, int]) -> Any:
        if node not in clients:
            if clients:
                print(f"--through {address}: MOVED: sending those keys to {node[0]}:{node[1]}", file=sys.stderr)
            clients[node] = redis.Redis(host=node[0], port=node[1], username=user, password=password, socket_timeout=30)
        return clients[node]

    def get_following_moved(key: bytes, reply: Any) -> tuple[tuple[str, int], Any]:
        node = first
        for _ in range(MOVED_HOPS):
            if not isinstance(reply, redis.exceptions.MovedError):
                break
            node = (reply.host, reply.port)
            try:
                reply = client(node).get(key)
            except redis.exceptions.ResponseError as exc:
                reply = exc
        return node, reply

    progress = Progress(len(records), "floors")
    try:
        for start in range(0, len(records), PAGE):
            page = records[start : start + PAGE]
            wanted = [r for r in page if r.kind == "sequence"]
            summary.skipped.extend(
                f"{r.key!r}: a timestamp sequence (not through a primary)" for r in page if r.kind != "sequence"
            )
            reads = client(first).pipeline(transaction=False)
            for r in wanted:
                reads.get(r.key)
            owners: dict[tuple[str, int], list[SequenceRecord]] = {}
            for r, got in zip(wanted, reads.execute(raise_on_error=False), strict=True):
                node, got = get_following_moved(r.key, got)
                owners.setdefault(node, []).append(r)
                if isinstance(got, Exception):
                    summary.skipped.append(f"{_key_text(r.key)}: {_reply_text(got)}")
                elif got is None:
                    summary.created += 1
                elif int(got) >= r.ceiling - 1:
                    summary.unchanged += 1
                else:
                    summary.raised += 1
            if apply:
                for node, owned in owners.items():
                    sets = client(node).pipeline(transaction=False)
                    for r in owned:
                        sets.set(r.key, r.ceiling - 1)
                    for r, result in zip(owned, sets.execute(raise_on_error=False), strict=True):
                        if isinstance(result, Exception) and "backwards" not in str(result).lower():
                            why = _reply_text(result)
                            again = " (the primary changed meanwhile: run it again)" if why.startswith("MOVED") else ""
                            raise BackupError(
                                f"SET {_key_text(r.key)} {r.ceiling - 1} through {node[0]}:{node[1]}: {why}{again}"
                            )
            progress.add(len(page))
    except redis.RedisError as exc:
        raise BackupError(f"--through {address}: {_reply_text(exc)}") from None
    finally:
        for c in clients.values():
            c.close()


def _key_text(key: bytes) -> str:
    """A sequence name in a message: as text (bytes that are no UTF-8 escaped), quoted, at most 60
    characters (a 2 MB name stays out of the terminal)."""
    text = key.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _reply_text(exc: BaseException) -> str:
    """An error reply as the server sent it: redis-py keeps a redirect's words but drops its kind."""
    name = type(exc).__name__
    kind = {"MovedError": "MOVED", "AskError": "ASK", "TryAgainError": "TRYAGAIN", "ClusterDownError": "CLUSTERDOWN"}
    return f"{kind[name]} {exc}" if name in kind else str(exc)

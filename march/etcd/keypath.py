"""Every etcd key March uses, in one place. Nothing else in March spells a key path.

Under the cluster's prefix (``etcd_prefix``, default ``/march``):

- ``<prefix>/cluster``: the cluster id, a random hex string written once, by the first node that
  finds none (a create-if-absent transaction; ``march.cluster.identity``). Every campaign compares it.
- ``<prefix>/groups``: the cluster's layout, JSON ``{"groups": N, "previous": P}`` (absent: one
  group; ``march.cluster.layout``, which alone spells the per-group keys below).
- ``<prefix>/leader``: the primary's node id, attached to its lease. Its create revision and
  value form the ``Guard`` every ceiling write compares (see ``march.store.etcd_store``). With N > 1
  groups, one per group: ``<prefix>/leader/<g>-of-<N>``.
- ``<prefix>/leader-handoff``: during a planned FAILOVER, the node chosen to take over (N > 1:
  ``<prefix>/leader-handoff/<g>-of-<N>``).
- ``<prefix>/nodes/<id>``: each node's registration (JSON: id, address, role, pid, lease TTL), under
  its lease; created only where absent, so one live process holds a node id (``march.cluster.directory``).
- ``<prefix>/seq/<key>``: one sequence (its ceiling and settings, see ``march.store.etcd_store``).
- ``<prefix>/users/<name>``: one ACL user, as its rules (``march.access.rules``; passwords only hashed).
- ``<prefix>/workers/<n>:<namespace>/<id>``: one worker id of a namespace (``march.keyspace.worker_ids``;
  JSON, see ``march.store.etcd_workers``). ``n`` is the namespace's length in bytes and ``id`` has four
  digits, so one namespace's records are exactly one prefix, whatever bytes its name holds
  (``a`` never reads the records of ``a/b``).
- ``<prefix>/workers-retired``: the highest UPTO of every worker record deleted so far (20
  zero-padded digits), raised in the transaction that deletes one (outside ``workers/``, so a
  listing of the namespaces never meets it).

``groups``, ``leader``, ``leader/*``, ``leader-handoff``, ``leader-handoff/*`` and ``nodes/*`` sort
together (nothing else of March's sorts between ``groups`` and ``nodes/``), so one range read (and
one watch) ``[topology_start, topology_end)`` covers everything the election and the directory look at.
"""

from __future__ import annotations

from dataclasses import dataclass


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True)
class KeyPaths:
    prefix: bytes

    @classmethod
    def of(cls, prefix: str) -> KeyPaths:
        return cls(prefix.encode())

    @property
    def cluster(self) -> bytes:
        return self.prefix + b"/cluster"

    @property
    def groups(self) -> bytes:
        return self.prefix + b"/groups"

    @property
    def topology_start(self) -> bytes:
        """``[topology_start, topology_end)`` holds the layout, every leader and hand-off key and every
        node record (``leader`` is still the start of the range without the layout)."""
        return self.groups

    @property
    def leader(self) -> bytes:
        return self.prefix + b"/leader"

    @property
    def handoff(self) -> bytes:
        return self.prefix + b"/leader-handoff"

    @property
    def nodes(self) -> bytes:
        return self.prefix + b"/nodes/"

    def node(self, node_id: str) -> bytes:
        return self.nodes + node_id.encode()

    @property
    def topology_end(self) -> bytes:
        """``[leader, topology_end)`` holds every leader key, every hand-off key and every node record."""
        return prefix_end(self.nodes)

    @property
    def seqs(self) -> bytes:
        return self.prefix + b"/seq/"

    def seq(self, key: bytes) -> bytes:
        return self.seqs + key

    def seq_name(self, etcd_key: bytes) -> bytes:
        return etcd_key[len(self.seqs) :]

    @property
    def users(self) -> bytes:
        return self.prefix + b"/users/"

    def user(self, name: str) -> bytes:
        return self.users + name.encode("utf-8", "surrogateescape")

    @property
    def workers(self) -> bytes:
        return self.prefix + b"/workers/"

    def worker_namespace(self, namespace: bytes) -> bytes:
        """The prefix of every record of ``namespace`` (and of no other namespace)."""
        return self.workers + b"%d:" % len(namespace) + namespace + b"/"

    def worker(self, namespace: bytes, worker_id: int) -> bytes:
        return self.worker_namespace(namespace) + b"%04d" % worker_id

    def worker_namespace_of(self, etcd_key: bytes) -> bytes:
        """The namespace of a key under ``workers`` (the inverse of ``worker``)."""
        length, _, rest = etcd_key[len(self.workers) :].partition(b":")
        return rest[: int(length)]

    @property
    def workers_retired(self) -> bytes:
        return self.prefix + b"/workers-retired"

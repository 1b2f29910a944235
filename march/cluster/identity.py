"""Which cluster this node belongs to: the cluster id in etcd, and the data dir's memory of it.

A cluster is an etcd prefix, and its IDs are unique within it; a node pointed at another prefix
(or at an etcd that lost its data) would find no sequences there and hand out IDs from 1 again.
So each cluster has an id, ``<prefix>/cluster``: a random hex string that the first node to find
none writes with a create-if-absent transaction (two nodes bootstrapping at once agree on one).
Each node records the id it joined in its data dir (``march.store.membership``) and, before it
registers or campaigns, ``confirm`` compares the two:

=====================  ===================  =============================================
data dir records       etcd holds           outcome
=====================  ===================  =============================================
nothing                nothing              bootstrap: create the id, record it
nothing                X                    join X, record it
X                      X                    carry on
X                      nothing, or Y != X   refuse (``IdentityConflict``), unless ``join_other``
a single node's store  anything             refuse, unless ``join_other``
=====================  ===================  =============================================

With ``join_other`` (``--join-other-cluster yes``) the node joins (or bootstraps) what etcd holds
and records it. Every campaign also compares ``<prefix>/cluster`` with the confirmed id in the same
transaction (``march.cluster.election``), so an etcd wiped or restored under a running cluster
elects nobody instead of starting over.

This module only reads and writes the cluster key and the data dir's record; it never decides who
leads and never hands out anything.
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from march.errors import IdentityConflict, StoreError
from march.etcd.api import Etcd, Get, Put, created_at
from march.etcd.keypath import KeyPaths
from march.store.membership import JOIN_FLAG, SQLITE_FILE, ClusterMark, holds_single_node_store, read_mark, write_mark

log = logging.getLogger("march.cluster")


class ClusterIdentity:
    def __init__(
        self, etcd: Etcd, keys: KeyPaths, data_dir: str, endpoints: str, join_other: bool, timeout: float
    ) -> None:
        self.etcd = etcd
        self.keys = keys
        self.data_dir = data_dir
        self.endpoints = endpoints
        self.join_other = join_other
        self.timeout = timeout
        self.id = ""  # confirmed: the cluster this node takes part in ("" until then)

    @property
    def prefix(self) -> str:
        return self.keys.prefix.decode()

    async def confirm(self) -> str:
        """Agree with etcd on the cluster this node belongs to (StoreError: try again later;
        IdentityConflict: this node must not take part)."""
        local = read_mark(self.data_dir)
        if local is None and holds_single_node_store(self.data_dir) and not self.join_other:
            raise IdentityConflict(
                f"data dir {self.data_dir} holds a single node's store ({SQLITE_FILE}); as a node of the "
                f"cluster at etcd prefix {self.prefix} it would not continue that node's IDs. Give this node "
                f"another data dir, or start it with {JOIN_FLAG} (raise each sequence's floor with SET first)"
            )
        found = await self.etcd.get(self.keys.cluster, self.timeout)
        if found is None:
            if local is not None and not self.join_other:
                raise IdentityConflict(
                    f"this node belongs to {local.where()} (data dir {self.data_dir}), but etcd prefix "
                    f"{self.prefix} at {self.endpoints} holds no cluster: it was started with another "
                    "etcd_prefix or etcd, or etcd lost its data. Starting here would hand out IDs again that "
                    f"cluster already handed out. Start it with its own prefix, or with {JOIN_FLAG} to make it "
                    "the first node of a new cluster here"
                )
            cluster_id = await self._bootstrap()
        else:
            cluster_id = found.value.decode(errors="replace")
            if local is not None and local.cluster_id != cluster_id and not self.join_other:
                raise IdentityConflict(
                    f"this node belongs to {local.where()} (data dir {self.data_dir}), but etcd prefix "
                    f"{self.prefix} at {self.endpoints} holds cluster {cluster_id}. Start it with its own "
                    f"prefix, or with {JOIN_FLAG} to leave its old cluster and join this one"
                )
        mark = ClusterMark(cluster_id, self.prefix, self.endpoints)
        if local != mark:
            write_mark(self.data_dir, mark)
            if local is not None and local.cluster_id != cluster_id:
                log.warning("joined %s; this node left %s (join_other_cluster)", mark.where(), local.where())
            else:
                log.info("data dir %s: this node belongs to %s", Path(self.data_dir), mark.where())
        self.id = cluster_id
        return cluster_id

    async def _bootstrap(self) -> str:
        """Create ``<prefix>/cluster`` if it is still absent; the id it holds afterwards."""
        key = self.keys.cluster
        new = secrets.token_hex(16)
        reply = await self.etcd.txn([created_at(key, 0)], [Put(key, new.encode())], [Get(key)], self.timeout)
        if reply.succeeded:
            log.info("bootstrapped cluster %s at etcd prefix %s", new, self.prefix)
            return new
        found = reply.ranges[0]
        if found is None or not found.kvs:  # cannot be: the compare failed because the key exists
            raise StoreError(f"etcd prefix {self.prefix}: the cluster key could not be read back")
        return found.kvs[0].value.decode(errors="replace")  # another node bootstrapped it first

"""What a data dir remembers about the deployment it belongs to, so that a node started against
another one refuses instead of handing out IDs from 1 again.

A deployment is a data dir (single node) or an etcd prefix (cluster); the guarantees hold within
one. Three mistakes would silently start a new one with the old clients still waiting for IDs
above the old ones: a cluster node restarted with another ``etcd_prefix`` (or against an etcd that
lost its data), a cluster node restarted without ``--etcd``, and a single node's data dir given
to a cluster node. So:

- A cluster node keeps one small file, ``<data_dir>/cluster.json``: the cluster id it joined (the
  value of ``<prefix>/cluster`` in etcd, ``march.cluster.identity``), with the prefix and the etcd
  endpoints it was read from (for the messages only). It is written once the node has confirmed
  its cluster, atomically (a temporary file, flushed, renamed over the old one).
- A single node's data dir holds ``march.sqlite3``.
- ``SqliteStore.open`` refuses a data dir that holds ``cluster.json``; a cluster node refuses a
  data dir whose ``cluster.json`` names another cluster than etcd does (or names one where etcd
  holds none), or that holds ``march.sqlite3`` and no ``cluster.json``. ``join_other_cluster``
  lets the node go ahead: the record is then replaced (or removed, for a single node).

The refusals are ``IdentityConflict``: the server prints the reason and exits with status 1.
Nothing here talks to etcd, and nothing here is on the request path.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from march.errors import IdentityConflict, StoreError

SQLITE_FILE = "march.sqlite3"  # the single node's store (``march.store.sqlite_store``)
MARK_FILE = "cluster.json"  # the cluster this data dir belongs to
JOIN_FLAG = "--join-other-cluster yes"  # how the messages tell an operator to go ahead anyway


@dataclass(frozen=True)
class ClusterMark:
    cluster_id: str
    etcd_prefix: str
    etcd: str  # the endpoints, as configured

    def where(self) -> str:
        return f"cluster {self.cluster_id} (etcd prefix {self.etcd_prefix} at {self.etcd})"


def read_mark(data_dir: str | os.PathLike[str]) -> ClusterMark | None:
    """The cluster this data dir belongs to, or None if it records none."""
    path = Path(data_dir) / MARK_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ClusterMark(str(data["cluster_id"]), str(data["etcd_prefix"]), str(data.get("etcd", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IdentityConflict(
            f"data dir {data_dir}: cannot read {MARK_FILE} (which cluster this node belongs to): {exc}; "
            f"restore it, or start with {JOIN_FLAG} to record the cluster it joins now"
        ) from None


def write_mark(data_dir: str | os.PathLike[str], mark: ClusterMark) -> None:
    """Record ``mark`` in the data dir, atomically; StoreError if the data dir cannot be written."""
    directory = Path(data_dir)
    text = json.dumps(asdict(mark), indent=1) + "\n"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, prefix=f".{MARK_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(name, directory / MARK_FILE)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise StoreError(
            f"data dir {directory}: cannot record which cluster this node belongs to: {exc.strerror or exc}"
        ) from None


def forget_mark(data_dir: str | os.PathLike[str]) -> None:
    (Path(data_dir) / MARK_FILE).unlink(missing_ok=True)


def holds_single_node_store(data_dir: str | os.PathLike[str]) -> bool:
    return (Path(data_dir) / SQLITE_FILE).exists()

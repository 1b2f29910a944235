"""March: an ID sequencer that speaks the Redis protocol.

# Layout
- ``cli`` / ``__main__``: ``march serve ...``; argument parsing only.
- ``config``: the one frozen Config (TOML < MARCH_* env < flags).
- ``server``: listener, connections, pipelining, back-pressure, limits, shutdown.
- ``resp``: RESP2/RESP3 encoding and request parsing; no I/O, no commands.
- ``errors``: the one CommandError type and every error text.
- ``commands/``: one module per command family, the command table, the dispatcher.
- ``app`` / ``client``: server-wide and per-connection state that handlers see.
- ``node``: a node's store and group (and in cluster mode its etcd clients), built from the Config.
- ``group``: one leadership group: serving state, keyspace, and the cluster member deciding who serves.
- ``serving``: whether this node may hand out IDs: the one state machine that owns that fact.
- ``keyspace``: the sequences a group serves, read lazily per term, wired to the store.
- ``cluster/``: lease, election, directory and topology, planned failover (etcd mode).
- ``generators/``: pure allocation logic with an injected clock, store and lease.
- ``store/``: durable state behind one interface (sqlite embedded; etcd).
- ``etcd/``: the etcd interface, key paths, the gRPC client.
- ``clock``: injected time (real, or moved by tests).
- ``build``: which build of the per-read path runs, compiled (Cython) or the same ``.py`` files.
"""

from march import build as _build

_build.install()  # before any module of the per-read path is imported: compiled, or the .py files

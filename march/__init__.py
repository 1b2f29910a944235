"""March: an ID sequencer that speaks the Redis protocol.

# Layout
- ``cli`` / ``__main__``: ``march serve ...``; argument parsing only.
- ``config``: the one frozen Config (TOML < MARCH_* env < flags).
- ``server``: listener, connections, pipelining, back-pressure, limits, shutdown.
- ``resp``: RESP2/RESP3 encoding and request parsing; no I/O, no commands.
- ``errors``: the one CommandError type and every error text.
- ``commands/``: one module per command family, a registry, the dispatcher.
- ``app`` / ``client``: server-wide and per-connection state that handlers see.
- ``keyspace``: the generators this node serves, wired to the store and the lease.
- ``generators/``: pure allocation logic with an injected clock, store and lease.
- ``store/``: durable state behind one interface (sqlite embedded; memory for tests).
"""

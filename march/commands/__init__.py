"""Commands, one module per family. Importing this package registers every command.

Layout: ``table`` (the decorator, the tables and the handler contract), ``dispatch`` (name -> checks
-> handler), ``session`` (AUTH, HELLO, CLIENT, PING...), ``transactions``, ``admin`` (INFO, CONFIG,
COMMAND, SHUTDOWN), ``ops`` (SLOWLOG, MONITOR, LATENCY), ``keys``, ``sequences``, ``workers``, ``acl``,
``topology`` (CLUSTER, FAILOVER), ``sentinel`` (Sentinel discovery, ROLE), ``pubsub`` (SUBSCRIBE and
friends, for ``+switch-master``), ``forward`` (relaying to another group's primary), ``refused``,
``debug``.

What this package exports is all the transport may know of the commands (``tests/test_layers.py``
checks that it imports nothing else of them): the dispatcher's entry points (``call``, ``rerun``,
``as_error``, ``monitored``, ``show``), the table's lookups (``lookup``, ``redacted``) and the handler
contract (``waits``, ``Relayed``, ``NO_REPLY``, ``MONITOR_STARTED``, ``QUEUED``: ``table``'s docstring).
"""

from march.commands import (  # noqa: F401  (registration)
    acl,
    admin,
    debug,
    keys,
    ops,
    pubsub,
    refused,
    sentinel,
    sequences,
    session,
    topology,
    transactions,
    workers,
)
from march.commands.dispatch import as_error, call, monitored, rerun, show
from march.commands.table import MONITOR_STARTED, NO_REPLY, QUEUED, Relayed, lookup, redacted, waits

__all__ = [
    "MONITOR_STARTED",
    "NO_REPLY",
    "QUEUED",
    "Relayed",
    "as_error",
    "call",
    "lookup",
    "monitored",
    "redacted",
    "rerun",
    "show",
    "waits",
]

"""Commands, one module per family. Importing this package registers every command.

Layout: ``table`` (the decorator and tables), ``dispatch`` (name -> checks -> handler),
``session`` (AUTH, HELLO, CLIENT, PING...), ``transactions``, ``admin`` (INFO, CONFIG, COMMAND, SHUTDOWN),
``ops`` (SLOWLOG, MONITOR, LATENCY), ``keys``, ``sequences``, ``workers``, ``acl``, ``topology`` (CLUSTER,
FAILOVER), ``sentinel`` (Sentinel discovery, ROLE),
``pubsub`` (SUBSCRIBE and friends, for ``+switch-master``), ``refused``, ``debug``.
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
from march.commands.dispatch import call

__all__ = ["call"]

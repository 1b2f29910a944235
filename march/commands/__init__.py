"""Commands, one module per family. Importing this package registers every command.

Layout: ``table`` (the decorator and tables), ``dispatch`` (name -> checks -> handler),
``connection``, ``transactions``, ``server``, ``ops`` (SLOWLOG, MONITOR, LATENCY), ``keys``, ``sequences``,
``workers``, ``acl``, ``cluster``, ``sentinel`` (Sentinel discovery, ROLE),
``pubsub`` (SUBSCRIBE and friends, for ``+switch-master``), ``refused``, ``debug``.
"""

from . import (  # noqa: F401  (registration)
    acl,
    cluster,
    connection,
    debug,
    keys,
    ops,
    pubsub,
    refused,
    sentinel,
    sequences,
    server,
    transactions,
    workers,
)
from .dispatch import call

__all__ = ["call"]

"""Commands, one module per family. Importing this package registers every command.

Layout: ``registry`` (the decorator and tables), ``dispatch`` (name -> checks -> handler),
``connection``, ``transactions``, ``server``, ``keys``, ``sequences``, ``acl``, ``cluster``, ``refused``,
``debug``.
"""

from . import (  # noqa: F401  (registration)
    acl,
    cluster,
    connection,
    debug,
    keys,
    refused,
    sequences,
    server,
    transactions,
)
from .dispatch import call

__all__ = ["call"]

"""Commands, one module per family. Importing this package registers every command.

Layout: ``registry`` (the decorator and tables), ``dispatch`` (name -> checks -> handler),
``connection``, ``transactions``, ``server``, ``keys``, ``sequences``, ``refused``, ``debug``.
"""

from . import cluster, connection, debug, keys, refused, sequences, server, transactions  # noqa: F401  (registration)
from .dispatch import call

__all__ = ["call"]

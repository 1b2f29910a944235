"""Redis commands March refuses because they would break a guarantee or make no sense here.

Each gets ``ERR '<NAME>' is not supported by March: <why>`` (never a silent no-op), and stays in
the COMMAND table so cluster clients route it and show the server's reason.
"""

from __future__ import annotations

from march.commands.table import register_refused

for _name, _arity in (
    ("decr", 2),
    ("decrby", 3),
    ("incrbyfloat", 3),
    ("del", -2),
    ("unlink", -2),
    ("expire", -3),
    ("pexpire", -3),
    ("expireat", -3),
    ("pexpireat", -3),
    ("persist", 2),
    ("append", 3),
    ("setrange", 4),
    ("getset", 3),
    ("getdel", 2),
    ("getex", -2),
    ("rename", 3),
    ("renamenx", 3),
    ("copy", -3),
    ("move", 3),
    ("flushdb", -1),
    ("flushall", -1),
    ("setex", 4),
    ("psetex", 4),
    ("mset", -3),
    ("msetnx", -3),
    ("setnx", 3),
):
    register_refused(_name, _arity)

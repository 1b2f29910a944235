"""Primary keys drawn from March for ORMs: `march_client.orm.sqlalchemy` (a column default and a
flush hook) and `march_client.orm.django` (a model field and a queryset).

Both draw an ID *before* the INSERT, from a `Sequencer` (or anything with its `next` and
`next_range`), and draw all the IDs one statement, flush or `bulk_create` needs from as few
`INCRBY` calls as the server allows (`draw`). What they must never do: invent, reuse or reorder an
ID. Every ID comes from the server, a range is handed out in ascending order, and an ID that was
drawn but not inserted (a rolled back transaction, a failed statement) is simply a gap.

This package imports neither SQLAlchemy nor Django: each integration lives in its own module,
which imports its ORM.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

# The server's default `max_incrby`: one INCRBY never asks for more unless the sequencer says
# otherwise (`Sequencer(max_incrby=...)`) or the integration is given `max_range=`.
MAX_RANGE = 1_000_000


class IdSource(Protocol):
    """What the integrations need from a `march_client.Sequencer`."""

    def next(self, key: str) -> int: ...

    def next_range(self, key: str, n: int) -> range: ...


def draw(source: IdSource, key: str, n: int, max_range: int | None = None) -> Iterator[int]:
    """``n`` new IDs of ``key`` in ascending order: one `INCRBY` per ``max_range`` IDs (default:
    the source's ``max_incrby``, else `MAX_RANGE`; one call in practice), or one `INCR` when ``n``
    is 1.

    Lazy: each range is drawn when the iterator reaches it. Later ranges are above earlier ones
    because the server's IDs increase, so the whole sequence ascends.
    """
    limit = max_range or getattr(source, "max_incrby", None) or MAX_RANGE
    if n == 1:
        yield source.next(key)
        return
    while n > 0:
        chunk = min(n, limit)
        yield from source.next_range(key, chunk)
        n -= chunk


__all__ = ["MAX_RANGE", "IdSource", "draw"]

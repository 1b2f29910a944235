"""SQLAlchemy 2.x: primary keys (or any column) drawn from March before the INSERT.

- `MarchId(sequencer, "orders")` is a column default::

      id: Mapped[int] = mapped_column(BigInteger, primary_key=True, default=MarchId(seq, "orders"))

  SQLAlchemy calls it once per row, with the statement's execution context. The first call of an
  execution draws the IDs of *every* row of that execution from one range (`INCRBY`), the next
  calls hand them out in row order. So one range serves a unit-of-work flush that SQLAlchemy
  batches into one executemany (the usual case), `session.execute(insert(T), [dicts])`,
  `conn.execute(insert(t), [dicts])` and a multi-row `insert(t).values([...])`; a statement for one
  row costs one `INCR`.
- `assign_on_flush(Session)` (or a session, or a sessionmaker) adds a `before_flush` hook that
  gives every new object lacking an ID its ID before the flush, one range per default for the
  whole flush, in the order the objects were added: one range even when SQLAlchemy would split
  the flush into several statements, and the IDs are on the objects before any SQL runs.
- `MarchId.fill(rows)` gives a list of dicts their IDs from one range before you execute them
  (to reference them in child rows, say).

What this module must never do: produce an ID that did not come from the server, or give one ID
to two rows. IDs left over when a statement fails are dropped (a gap), never reused.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine.interfaces import ExecutionContext
from sqlalchemy.orm import Mapper, Session, sessionmaker
from sqlalchemy.sql.schema import CallableColumnDefault

from march_client.orm import IdSource, draw


class MarchId:
    """A column default: new IDs of sequence ``key`` from ``sequencer`` (a `march_client.Sequencer`)."""

    def __init__(self, sequencer: IdSource, key: str, *, max_range: int | None = None) -> None:
        self.sequencer = sequencer
        self.key = key
        self.max_range = max_range
        # IDs drawn for an execution and not yet handed out. Weak keys: an execution that failed
        # midway takes its leftovers with it (a gap), and nothing outlives the statement.
        self._pending: weakref.WeakKeyDictionary[object, deque[int]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # one default may serve statements of several threads

    def next(self) -> int:
        """One new ID (one `INCR`), e.g. to set a primary key by hand."""
        return self.sequencer.next(self.key)

    def take(self, n: int) -> list[int]:
        """``n`` new IDs in ascending order, from one range (or as few as ``max_range`` allows)."""
        return list(draw(self.sequencer, self.key, n, self.max_range)) if n > 0 else []

    def fill(self, rows: Sequence[MutableMapping[str, Any]], column: str = "id") -> Sequence[MutableMapping[str, Any]]:
        """Give every row lacking ``column`` (absent or None) an ID, in list order, from one range.
        Returns ``rows`` (changed in place)."""
        missing = [row for row in rows if row.get(column) is None]
        for row, new_id in zip(missing, self.take(len(missing)), strict=True):
            row[column] = new_id
        return rows

    def __call__(self, context: ExecutionContext) -> int:
        """SQLAlchemy's hook: the ID of the row being inserted in ``context``."""
        # An execution runs in one thread, so only the shared dict needs the lock; the round trip
        # to March happens outside it and never holds up other threads' statements.
        with self._lock:
            pending = self._pending.get(context)
        if pending is None:
            pending = deque(self.take(self._calls_in(context)))
            with self._lock:
                self._pending[context] = pending
        if pending:
            return pending.popleft()
        # More calls than counted (a SQLAlchemy path this module does not know): still a new ID.
        return self.next()

    def _calls_in(self, context: ExecutionContext) -> int:
        """How many times SQLAlchemy will call this default in ``context``: once per parameter set
        (executemany) for each column of the statement that has it (a multi-row VALUES has one
        column per row)."""
        compiled: Any = getattr(context, "compiled", None)
        prefetch = getattr(compiled, "insert_prefetch", None) or ()
        per_set = sum(1 for c in prefetch if getattr(getattr(c, "default", None), "arg", None) is self)
        parameter_sets = len(getattr(context, "compiled_parameters", None) or (None,))
        return max(per_set, 1) * max(parameter_sets, 1)

    def __repr__(self) -> str:
        return f"MarchId({self.key!r})"


# -- one range per flush -----------------------------------------------------------------------

# Per mapper: (attribute key, default) for each mapped column whose default is a MarchId.
_defaults_of: weakref.WeakKeyDictionary[Mapper[Any], list[tuple[str, MarchId]]] = weakref.WeakKeyDictionary()


def _march_defaults(mapper: Mapper[Any]) -> list[tuple[str, MarchId]]:
    found = _defaults_of.get(mapper)
    if found is None:
        found = []
        for prop in mapper.column_attrs:
            for col in prop.columns:
                default = getattr(col, "default", None)
                if isinstance(default, CallableColumnDefault) and isinstance(default.arg, MarchId):
                    found.append((prop.key, default.arg))
        _defaults_of[mapper] = found
    return found


def assign_ids(objects: Iterable[object]) -> int:
    """Give every object (mapped, new or not) that lacks a value for a column with a `MarchId`
    default its ID now: one range per default for all of them, in iteration order. Returns how
    many IDs were assigned."""
    wanting: dict[int, tuple[MarchId, list[tuple[object, str]]]] = {}
    for obj in objects:
        state: Any = sa_inspect(obj)
        for attr, default in _march_defaults(state.mapper):
            if state.dict.get(attr) is None:
                wanting.setdefault(id(default), (default, []))[1].append((obj, attr))
    assigned = 0
    for default, targets in wanting.values():
        for (obj, attr), new_id in zip(targets, default.take(len(targets)), strict=True):
            setattr(obj, attr, new_id)
        assigned += len(targets)
    return assigned


def _before_flush(session: Session, flush_context: object, instances: object) -> None:
    # `insert_order` is the order of `session.add`, which is also the order SQLAlchemy inserts
    # rows of one table in: the IDs ascend the way the rows go in.
    new = sorted(session.new, key=lambda obj: sa_inspect(obj).insert_order)
    assign_ids(new)


def assign_on_flush(target: type[Session] | Session | sessionmaker[Any]) -> None:
    """Assign the IDs of every flush's new objects before it runs (`assign_ids`): pass the
    `Session` class (every session), a sessionmaker or one session."""
    if not event.contains(target, "before_flush", _before_flush):
        event.listen(target, "before_flush", _before_flush)


__all__ = ["MarchId", "assign_ids", "assign_on_flush"]

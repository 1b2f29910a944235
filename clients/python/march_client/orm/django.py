"""Django: a model field whose value is drawn from March when the row is first saved, and a
queryset whose `bulk_create` draws all the IDs it needs from one range.

    class Order(models.Model):
        id = MarchIDField(primary_key=True, sequence="orders")
        objects = MarchManager()

- `MarchIDField(sequence=..., sequencer=None)` is a `BigIntegerField`. When a row is added and
  the field is empty, one ID is drawn (`INCR`) before the INSERT and set on the instance (for a
  primary key in Django's `get_pk_value_on_save` hook, otherwise in `pre_save`). ``sequencer``
  is a `march_client.Sequencer`, a callable returning one, or None: then one process-wide
  `Sequencer(settings.MARCH_URL, **settings.MARCH_OPTIONS)` is made on first use.
- `MarchQuerySet.bulk_create` / `MarchManager` assign every empty `MarchIDField` of the objects
  from one `INCRBY` per field, in list order, before Django's own `bulk_create` (which would
  otherwise draw one `INCR` per object). `assign_ids(objs)` does the same for your own manager.

What this module must never do: produce an ID that did not come from the server, or overwrite a
value already set. A drawn ID whose row is not inserted (rollback, failed INSERT) is a gap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings  # type: ignore[import-untyped]  # Django ships no type stubs
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.db import models  # type: ignore[import-untyped]

from march_client import errors
from march_client.orm import IdSource, draw

SequencerArg = IdSource | Callable[[], IdSource] | None


def _drawn_on_save() -> None:
    """The field's default: no value until the row is saved (then one is drawn)."""
    return None


class MarchIDField(models.BigIntegerField):  # type: ignore[misc]
    """A 64-bit integer drawn from March sequence ``sequence`` when its row is added empty."""

    description = "64-bit integer drawn from a March sequence"

    def __init__(
        self, *args: Any, sequence: str, sequencer: SequencerArg = None, max_range: int | None = None, **kwargs: Any
    ) -> None:
        if not sequence:
            raise ValueError(errors.ORM_NO_SEQUENCE)
        self.sequence = sequence
        self.max_range = max_range
        self._sequencer = sequencer
        # Like AutoField: a form or full_clean() of an unsaved object must not demand a value that
        # is only drawn on save.
        kwargs.setdefault("blank", True)
        if "default" in kwargs:
            raise ValueError(errors.ORM_NO_DEFAULT)
        # A default that yields None: a new instance holds no ID (nothing is drawn for an object
        # that is never saved), but Django sees a primary key with a default, so `save()` of a new
        # object INSERTs at once instead of trying an UPDATE of a row with the new ID first.
        super().__init__(*args, default=_drawn_on_save, **kwargs)

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        # The sequence name is part of the schema (migrations keep it); the sequencer is a live
        # connection and is chosen at run time.
        name, path, args, kwargs = super().deconstruct()
        kwargs["sequence"] = self.sequence
        if kwargs.get("blank") is True:
            del kwargs["blank"]
        kwargs.pop("default", None)  # always _drawn_on_save, set by __init__
        return name, path, args, kwargs

    @property
    def source(self) -> IdSource:
        """The sequencer this field draws from (made from the settings on first use)."""
        found = self._sequencer
        if found is None:
            return default_sequencer()
        if callable(found) and not hasattr(found, "next_range"):
            return found()
        return found  # type: ignore[return-value]

    def get_pk_value_on_save(self, instance: models.Model) -> Any:
        # Django's hook for a primary key that is empty when `save()` or `bulk_create()` starts:
        # the ID is on the instance before any SQL runs (one INCR; MarchManager.bulk_create
        # assigns a whole range before Django gets here).
        return self.source.next(self.sequence)

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        # The same for a MarchIDField that is not the primary key.
        value = getattr(model_instance, self.attname)
        if add and value is None:
            value = self.source.next(self.sequence)
            setattr(model_instance, self.attname, value)
        return value


def assign_ids(objs: Iterable[models.Model]) -> int:
    """Set every empty `MarchIDField` of ``objs`` now: one range per field for all of them, in
    iteration order. Returns how many IDs were assigned."""
    wanting: dict[int, tuple[MarchIDField, IdSource, list[models.Model]]] = {}
    for obj in objs:
        for field in obj._meta.concrete_fields:
            if isinstance(field, MarchIDField) and getattr(obj, field.attname) is None:
                wanting.setdefault(id(field), (field, field.source, []))[2].append(obj)
    assigned = 0
    for field, source, targets in wanting.values():
        for obj, new_id in zip(targets, draw(source, field.sequence, len(targets), field.max_range), strict=True):
            setattr(obj, field.attname, new_id)
        assigned += len(targets)
    return assigned


class MarchQuerySet(models.QuerySet):  # type: ignore[misc]
    """A queryset whose `bulk_create` takes the IDs of all the objects from one range."""

    def bulk_create(self, objs: Iterable[models.Model], *args: Any, **kwargs: Any) -> list[models.Model]:
        objs = list(objs)
        assign_ids(objs)
        result: list[models.Model] = super().bulk_create(objs, *args, **kwargs)
        return result


MarchManager = models.Manager.from_queryset(MarchQuerySet)


# -- the process-wide sequencer from the settings --------------------------------------------

_default: tuple[tuple[object, ...], IdSource] | None = None
_default_lock = threading.Lock()


def default_sequencer() -> IdSource:
    """`Sequencer(settings.MARCH_URL, **settings.MARCH_OPTIONS)`, made once per process (again
    if those settings change, as tests do)."""
    global _default
    url = getattr(settings, "MARCH_URL", None)
    options: dict[str, Any] = dict(getattr(settings, "MARCH_OPTIONS", None) or {})
    if url is None and not options.get("nodes"):
        raise ImproperlyConfigured(errors.ORM_NO_SEQUENCER)
    wanted = (url, *sorted((k, repr(v)) for k, v in options.items()))
    with _default_lock:
        if _default is None or _default[0] != wanted:
            from march_client import Sequencer  # here: importing this module must not connect

            old, _default = _default, (wanted, Sequencer(url, **options))
            if old is not None:
                close = getattr(old[1], "close", None)
                if close is not None:
                    close()
        return _default[1]


def close_default_sequencer() -> None:
    """Close the sequencer made from the settings, if any (the next use makes a new one)."""
    global _default
    with _default_lock:
        old, _default = _default, None
    if old is not None:
        close = getattr(old[1], "close", None)
        if close is not None:
            close()


__all__ = [
    "MarchIDField",
    "MarchManager",
    "MarchQuerySet",
    "assign_ids",
    "close_default_sequencer",
    "default_sequencer",
]

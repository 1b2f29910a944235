"""Django models with primary keys from March, for the ORM tests (tests/clients): Django configured
in this process once with `settings.configure` (no project), a SQLite "default" database, aliases
of a real PostgreSQL added later, and two models: `Order` (its IDs from ``settings.MARCH_URL``) and
`Ticket` (from `SPY`, a sequencer that records each call, and `MarchManager`).

One module, so that every test of the process shares one Django setup and one set of models (Django
defines a model once per process). Needs Django (March's test extra); only the ORM tests import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import django  # type: ignore[import-untyped]  # Django ships no type stubs
from django.conf import settings  # type: ignore[import-untyped]
from march_client import Sequencer

from march_harness.postgres import PostgresCluster

APP = "march_orm_tests"
SPY_KEY = "dj:tickets"
SETTINGS_KEY = "dj:orders"


class Spy:
    """A sequencer that records each call it passes on: ("next", 1) or ("range", n)."""

    def __init__(self) -> None:
        self.inner: Sequencer | None = None
        self.calls: list[tuple[str, int]] = []

    def next(self, key: str) -> int:
        assert self.inner is not None
        self.calls.append(("next", 1))
        return self.inner.next(key)

    def next_range(self, key: str, n: int) -> range:
        assert self.inner is not None
        self.calls.append(("range", n))
        return self.inner.next_range(key, n)


SPY = Spy()  # the models are made once per process; each test plugs in its own sequencer


class Models:
    Order: Any  # the sequencer from settings.MARCH_URL
    Ticket: Any  # an explicit sequencer (the spy), and MarchManager


_models: Models | None = None


def setup_django(sqlite_path: Path) -> Models:
    """Configure Django once per process and define the test models."""
    global _models
    if _models is not None:
        return _models
    if not settings.configured:
        settings.configure(
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_path)}},
            INSTALLED_APPS=[],
            USE_TZ=True,
            DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        )
    django.setup()
    from django.db import models  # type: ignore[import-untyped]
    from march_client.orm.django import MarchIDField, MarchManager

    class Order(models.Model):
        id = MarchIDField(primary_key=True, sequence=SETTINGS_KEY)
        n = models.BigIntegerField()

        class Meta:
            app_label = APP

    class Ticket(models.Model):
        id = MarchIDField(primary_key=True, sequence=SPY_KEY, sequencer=lambda: SPY)
        n = models.BigIntegerField()
        objects = MarchManager()

        class Meta:
            app_label = APP

    _models = Models()
    _models.Order, _models.Ticket = Order, Ticket
    return _models


def add_postgres(alias: str, pg: PostgresCluster) -> None:
    """Add a database alias after `settings.configure` (the DSN is known only now)."""
    from django.db import DEFAULT_DB_ALIAS, connections

    if alias in connections.settings:
        return
    cfg = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": pg.create_database("dj"),
        "USER": "march",
        "HOST": "127.0.0.1",
        "PORT": str(pg.port),
    }
    full = connections.configure_settings({DEFAULT_DB_ALIAS: connections.settings[DEFAULT_DB_ALIAS], alias: cfg})
    connections.settings[alias] = full[alias]

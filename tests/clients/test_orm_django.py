"""Django models with primary keys from March (`march_client.orm.django`), on SQLite and on a real
PostgreSQL, against a real march process.

Django is configured in this process with `settings.configure` (no project): a SQLite "default"
database, and a "pg" alias added once the PostgreSQL fixture runs. Tables are made and dropped
by each test with the schema editor.

What is checked: `save()` draws one ID per row (from `settings.MARCH_URL` or a given sequencer),
`MarchManager.bulk_create` takes one range for all the objects (a spy counts the calls, the
server's watermark moves by exactly the number of rows), plain `bulk_create` still works (one
`INCR` per object), explicit IDs are kept, and a rolled back save leaves a gap.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from march_client import Sequencer
from march_harness import MarchServer, serving

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402
from march_harness.django_models import SPY, SPY_KEY, Models, add_postgres, setup_django  # noqa: E402

pytestmark = pytest.mark.e2e

BULK = 10_000
EXPLICIT = 2**62  # an ID set by hand, far above what the tests draw


@pytest.fixture(scope="module")
def march(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    with serving(MarchServer.in_dir(tmp_path_factory.mktemp("march")), during="the module") as server:
        yield server


@pytest.fixture(scope="module")
def dj(tmp_path_factory: pytest.TempPathFactory, march: MarchServer) -> Iterator[Models]:
    from march_client.orm.django import close_default_sequencer

    m = setup_django(tmp_path_factory.mktemp("django") / "default.sqlite3")
    settings.MARCH_URL = f"redis://127.0.0.1:{march.port}"
    try:
        yield m
    finally:
        close_default_sequencer()
        from django.db import connections

        connections.close_all()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, dj: Models, march: MarchServer) -> Iterator[str]:
    """A database alias whose test tables exist for this test only; the spy plugged in."""
    from django.db import connections

    alias = "default"
    if request.param == "postgresql":
        alias = "pg"
        add_postgres(alias, request.getfixturevalue("postgres"))
    with connections[alias].schema_editor() as editor:
        editor.create_model(dj.Order)
        editor.create_model(dj.Ticket)
    with Sequencer(f"redis://127.0.0.1:{march.port}", retry_for=5.0) as seq:
        SPY.inner, SPY.calls = seq, []
        try:
            yield alias
        finally:
            SPY.inner = None
            with connections[alias].schema_editor() as editor:
                editor.delete_model(dj.Ticket)
                editor.delete_model(dj.Order)


def watermark(march: MarchServer, key: str) -> int:
    with march.conn() as c:
        reply = c.call("GET", key)
    return 0 if reply is None else int(reply)


def test_save_draws_one_id_from_the_settings_sequencer(dj: Models, db: str) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    made = []
    for i in range(5):
        order = dj.Order(n=i)
        assert order.pk is None
        with CaptureQueriesContext(connections[db]) as queries:
            order.save(using=db)
        # A new row is INSERTed at once: no UPDATE of a row with the new ID is tried first.
        assert [q["sql"].split()[0] for q in queries.captured_queries] == ["INSERT"]
        made.append(order.pk)
    assert made == sorted(made) and len(set(made)) == 5
    stored = list(dj.Order.objects.using(db).order_by("n").values_list("id", flat=True))
    assert stored == made
    order.n = 100
    order.save(using=db)  # an update keeps the ID and draws none
    assert dj.Order.objects.using(db).get(n=100).pk == made[-1]


def test_a_new_object_holds_no_id_until_saved(dj: Models) -> None:
    SPY.calls = []
    assert dj.Ticket(n=0).pk is None
    assert SPY.calls == []


def test_create_and_explicit_ids(dj: Models, db: str) -> None:
    first = dj.Ticket.objects.db_manager(db).create(n=0)
    kept = dj.Ticket.objects.db_manager(db).create(n=1, id=EXPLICIT)
    assert kept.pk == EXPLICIT
    assert SPY.calls == [("next", 1)]
    assert dj.Ticket.objects.using(db).get(pk=first.pk).n == 0


def test_bulk_create_takes_one_range(dj: Models, db: str, march: MarchServer) -> None:
    before = watermark(march, SPY_KEY)
    tickets = [dj.Ticket(n=i) for i in range(BULK)]
    tickets.insert(5, dj.Ticket(n=-1, id=EXPLICIT))
    dj.Ticket.objects.using(db).bulk_create(tickets, batch_size=2000)
    after = watermark(march, SPY_KEY)
    assert SPY.calls == [("range", BULK)]
    ids = list(dj.Ticket.objects.using(db).filter(n__gte=0).order_by("n").values_list("id", flat=True))
    assert ids == list(range(ids[0], ids[0] + BULK)), "one range, ascending in list order"
    assert ids[0] > before and after - before == BULK
    assert [t.pk for t in tickets if t.n >= 0] == ids
    assert dj.Ticket.objects.using(db).filter(pk=EXPLICIT).exists()


def test_plain_bulk_create_draws_one_id_per_object(dj: Models, db: str) -> None:
    plain = dj.Ticket._base_manager.using(db)  # a plain Manager, not MarchManager
    tickets = plain.bulk_create([dj.Ticket(n=i) for i in range(20)])
    ids = [t.pk for t in tickets]
    assert SPY.calls == [("next", 1)] * 20
    assert ids == sorted(ids) and len(set(ids)) == 20
    assert list(plain.order_by("n").values_list("id", flat=True)) == ids
    orders = dj.Order.objects.using(db).bulk_create([dj.Order(n=i) for i in range(20)])
    assert [o.pk for o in orders] == list(dj.Order.objects.using(db).order_by("n").values_list("id", flat=True))


def test_a_rolled_back_save_leaves_a_gap(dj: Models, db: str) -> None:
    from django.db import transaction

    class Abort(Exception):
        pass

    lost = dj.Ticket(n=0)
    with pytest.raises(Abort), transaction.atomic(using=db):
        lost.save(using=db)
        raise Abort
    kept = dj.Ticket(n=1)
    kept.save(using=db)
    assert kept.pk > lost.pk
    assert list(dj.Ticket.objects.using(db).values_list("id", flat=True)) == [kept.pk]


def test_field_deconstructs_without_the_sequencer(dj: Models) -> None:
    field = dj.Ticket._meta.get_field("id")
    _, path, args, kwargs = field.deconstruct()
    assert path == "march_client.orm.django.MarchIDField"
    assert kwargs["sequence"] == SPY_KEY and kwargs["primary_key"] is True
    assert "default" not in kwargs and "sequencer" not in kwargs and "blank" not in kwargs
    assert type(field)(*args, **kwargs).sequence == SPY_KEY


def test_no_sequencer_configured_is_a_clear_error(dj: Models) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test.utils import override_settings

    with override_settings(MARCH_URL=None), pytest.raises(ImproperlyConfigured, match="MARCH_URL"):
        dj.Order(n=0).save()  # refused before any SQL runs


def test_the_field_refuses_a_default_and_needs_a_sequence(dj: Models) -> None:
    from march_client.orm.django import MarchIDField

    with pytest.raises(ValueError, match="no default"):
        MarchIDField(sequence="x", default=1)
    with pytest.raises(ValueError, match="sequence="):
        MarchIDField(sequence="")

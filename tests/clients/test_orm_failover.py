"""ORM inserts through a failover: a SQLAlchemy writer and a Django writer, on SQLite and on
PostgreSQL, take their primary keys from one sequence of a real three-node March cluster (real
etcd) while the primary is killed with SIGKILL.

Each writer thread inserts rows in turns of 1 and of 25 (a single `INCR`, then one `INCRBY`
range: a SQLAlchemy flush, a `MarchManager.bulk_create`) through one `Sequencer(nodes=[...])`,
which follows the failover by itself. Every turn is recorded as one op per row (the time before
it, the time after it, the row's ID) and the whole history of the sequence, both ORMs together,
goes through the checker of guarantees 1 and 2. Afterwards each table is read back: every
recorded row is there, IDs are unique, each writer's IDs increase in its insertion order, and
rows were inserted after the kill.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from march_client import Sequencer
from march_harness import History, check_history, wait_until
from march_harness.cluster import MarchCluster
from march_harness.postgres import PostgresCluster  # the `postgres` fixture comes from conftest.py

sa = pytest.importorskip("sqlalchemy")
pytest.importorskip("django")

from march_client.orm.sqlalchemy import MarchId  # noqa: E402
from march_harness.django_models import SPY, SPY_KEY, Models, add_postgres, setup_django  # noqa: E402
from sqlalchemy import BigInteger, select  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column  # noqa: E402

pytestmark = pytest.mark.e2e

BEFORE_KILL = 200  # rows inserted before the primary is killed
AFTER_KILL = 200  # rows inserted (by requests sent) after the kill, for the test to end
DEADLINE = 60.0  # seconds for each phase; a failover takes a few lease TTLs (2 s each)
KEY = SPY_KEY  # the Django test model's sequence: both ORMs draw from one history


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def engine(database: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if database == "sqlite":
        eng = sa.create_engine(f"sqlite:///{tmp_path / 'failover.db'}")
    else:
        pg: PostgresCluster = request.getfixturevalue("postgres")
        eng = sa.create_engine(pg.dsn(pg.create_database("fo")).replace("postgresql://", "postgresql+psycopg://"))
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def django_db(database: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Models]]:
    """The Django alias for ``database``, with the test model's table made for this test."""
    from django.db import connections

    models = setup_django(tmp_path / "django.sqlite3")  # the path is used if Django is not configured yet
    alias = "default"
    if database == "postgresql":
        alias = "pg"
        add_postgres(alias, request.getfixturevalue("postgres"))
    with connections[alias].schema_editor() as editor:
        editor.create_model(models.Ticket)
    try:
        yield alias, models
    finally:
        with connections[alias].schema_editor() as editor:
            editor.delete_model(models.Ticket)
        connections.close_all()


def event_model(seq: Sequencer) -> Any:
    class Base(DeclarativeBase):
        pass

    class Event(Base):
        __tablename__ = "events"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, default=MarchId(seq, KEY))
        k: Mapped[int] = mapped_column(BigInteger)  # the writer's insertion order

    return Event


# A writer's turn: insert rows k .. k+size-1, return their IDs in insertion order.
Insert = Callable[[int, int], list[int]]


def sqlalchemy_writer(engine: Any, model: Any) -> Insert:
    def insert(k: int, size: int) -> list[int]:
        with Session(engine) as s:
            rows = [model(k=k + i) for i in range(size)]
            s.add_all(rows)
            s.commit()  # the flush draws the IDs (INCR, or one INCRBY) and INSERTs
            return [row.id for row in rows]

    return insert


def django_writer(alias: str, models: Models) -> Insert:
    tickets = models.Ticket.objects.db_manager(alias)

    def insert(k: int, size: int) -> list[int]:
        if size == 1:
            return [tickets.create(n=k).pk]
        made = tickets.bulk_create([models.Ticket(n=k + i) for i in range(size)])  # one INCRBY
        return [t.pk for t in made]

    return insert


class Writers:
    """One thread per writer, inserting until `stop()`; what they did, for the checks."""

    def __init__(self, inserts: dict[str, Insert]) -> None:
        self.history = History()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(name, f), name=name) for name, f in inserts.items()]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(DEADLINE)
        assert not any(t.is_alive() for t in self.threads), "a writer did not stop"

    def _run(self, name: str, insert: Insert) -> None:
        from django.db import connections

        k = 0
        try:
            while not self._stop.is_set():
                size = 1 if k % 2 == 0 else 25
                sent = History.now()
                ids = insert(k, size)
                replied = History.now()
                for new_id in ids:  # in insertion order: the checker sorts a turn's ops stably
                    self.history.record(name, sent, replied, new_id)
                k += size
        except BaseException as e:  # the test fails on it; the thread must not die silently
            self.errors.append(e)
        finally:
            connections.close_all()  # this thread's Django connections

    def ids_of(self, name: str) -> list[int]:
        return [op.id for op in self.history.ops if op.client == name]

    def sent_after(self, t: int) -> int:
        return sum(1 for op in self.history.ops if op.sent > t)


def test_orm_inserts_keep_unique_increasing_ids_through_a_primary_kill(
    march_cluster: MarchCluster, engine: Any, django_db: tuple[str, Models]
) -> None:
    alias, dj = django_db
    first = march_cluster.wait_settled()
    with Sequencer(nodes=[n.address for n in march_cluster.nodes], retry_for=DEADLINE) as seq:
        model = event_model(seq)
        model.metadata.create_all(engine)
        SPY.inner, SPY.calls = seq, []
        writers = Writers({"sqlalchemy": sqlalchemy_writer(engine, model), "django": django_writer(alias, dj)})
        writers.start()
        try:
            wait_until(lambda: len(writers.history) >= BEFORE_KILL or bool(writers.errors), DEADLINE, 0.01, "rows")
            killed = march_cluster.kill_primary()
            t_kill = History.now()
            wait_until(
                lambda: writers.sent_after(t_kill) >= AFTER_KILL or bool(writers.errors),
                DEADLINE,
                0.01,
                "rows inserted after the kill",
            )
        finally:
            writers.stop()
            SPY.inner = None
        assert not writers.errors, f"a writer failed: {writers.errors[0]!r}\n{march_cluster.describe()}"
    assert killed is first
    assert march_cluster.wait_primary(DEADLINE, exclude=[killed]) is not killed

    check_history(writers.history)  # unique, and increasing in real time, across both ORMs
    with Session(engine) as s:
        by_k = [row.id for row in s.execute(select(model.id).order_by(model.k))]
    in_django = list(dj.Ticket.objects.using(alias).order_by("n").values_list("id", flat=True))
    for name, stored in (("sqlalchemy", by_k), ("django", in_django)):
        assert sorted(stored) == sorted(writers.ids_of(name)), f"{name}: every recorded row is stored, nothing else"
        assert stored == sorted(stored) and len(set(stored)) == len(stored), f"{name}: IDs went back"
    assert writers.sent_after(t_kill) >= AFTER_KILL

"""SQLAlchemy models and Core tables with primary keys from March (`march_client.orm.sqlalchemy`),
on SQLite and on a real PostgreSQL, against a real march process.

What is checked: every row gets an ID from the server, IDs ascend in insertion order, every bulk
path that promises one range costs exactly one `INCRBY` (a spy counts the calls, and the server's
watermark moves by exactly the number of rows), explicit IDs are kept, and a rollback leaves a
gap, never a reused ID.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from march_client import Sequencer
from march_harness import MarchServer, serving
from march_harness.postgres import PostgresCluster  # the `postgres` fixture comes from conftest.py

sa = pytest.importorskip("sqlalchemy")

from march_client.orm.sqlalchemy import MarchId, assign_ids, assign_on_flush  # noqa: E402
from sqlalchemy import BigInteger, Column, MetaData, String, Table, func, insert, select  # noqa: E402
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker  # noqa: E402

pytestmark = pytest.mark.e2e

BULK = 10_000
EXPLICIT = 2**62  # an ID set by hand, far above what the tests draw


class Spy:
    """A sequencer that records each call it passes on: ("next", 1) or ("range", n)."""

    def __init__(self, inner: Sequencer) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int]] = []

    def next(self, key: str) -> int:
        self.calls.append(("next", 1))
        return self.inner.next(key)

    def next_range(self, key: str, n: int) -> range:
        self.calls.append(("range", n))
        return self.inner.next_range(key, n)


@pytest.fixture(scope="module")
def march(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    """One march for the module (each test uses its own sequence)."""
    with serving(MarchServer.in_dir(tmp_path_factory.mktemp("march")), during="the module") as server:
        yield server


@pytest.fixture
def spy(march: MarchServer) -> Iterator[Spy]:
    with Sequencer(f"redis://127.0.0.1:{march.port}", retry_for=5.0) as seq:
        yield Spy(seq)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'orm.db'}"
    else:
        pg: PostgresCluster = request.getfixturevalue("postgres")
        url = pg.dsn(pg.create_database("sa")).replace("postgresql://", "postgresql+psycopg://")
    eng = sa.create_engine(url)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def key(request: pytest.FixtureRequest) -> str:
    """A sequence of this test alone (the march is shared by the module)."""
    return "sa:" + request.node.name


def watermark(march: MarchServer, key: str) -> int:
    with march.conn() as c:
        reply = c.call("GET", key)
    return 0 if reply is None else int(reply)


def models(seq: Spy, key: str) -> tuple[type[DeclarativeBase], Any]:
    """A fresh declarative base with one model whose primary key is drawn from ``key``."""

    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, default=MarchId(seq, key))
        n: Mapped[int] = mapped_column(BigInteger)
        note: Mapped[str] = mapped_column(String(40), default="")

    return Base, Order


def ids_by_n(session: Session, model: Any) -> list[int]:
    """The IDs in the order the rows were made (their `n`)."""
    return [row[0] for row in session.execute(select(model.id).order_by(model.n))]


def assert_one_range(ids: list[int], spy: Spy, before: int, after: int) -> None:
    assert spy.calls == [("range", len(ids))], spy.calls
    assert ids == list(range(ids[0], ids[0] + len(ids))), "one range, ascending in insertion order"
    assert ids[0] > before and after - before == len(ids), (before, after, ids[:3], ids[-3:])


def test_rows_added_one_by_one_get_increasing_ids(engine: Any, spy: Spy, key: str) -> None:
    Base, Order = models(spy, key)
    Base.metadata.create_all(engine)
    made = []
    with Session(engine) as s:
        for i in range(5):
            order = Order(n=i)
            s.add(order)
            s.commit()
            made.append(order.id)
        assert ids_by_n(s, Order) == made
    assert made == sorted(made) and len(set(made)) == 5
    assert spy.calls == [("next", 1)] * 5  # one row per flush: one INCR each


def test_flush_of_many_objects_takes_one_range(engine: Any, spy: Spy, key: str, march: MarchServer) -> None:
    Base, Order = models(spy, key)
    Base.metadata.create_all(engine)
    before = watermark(march, key)
    with Session(engine) as s:
        s.add_all([Order(n=i) for i in range(BULK)])
        s.commit()
        ids = ids_by_n(s, Order)
    assert len(ids) == BULK
    assert_one_range(ids, spy, before, watermark(march, key))


def test_assign_on_flush_sets_ids_before_the_insert(engine: Any, spy: Spy, key: str, march: MarchServer) -> None:
    Base, Order = models(spy, key)
    Base.metadata.create_all(engine)
    make = sessionmaker(engine)
    assign_on_flush(make)
    before = watermark(march, key)
    with make() as s:
        orders = [Order(n=i) for i in range(BULK)]
        s.add_all(orders[:10])
        s.add(Order(n=-1, id=EXPLICIT))  # an explicit ID is kept and costs nothing
        s.add_all(orders[10:])
        s.flush()
        assert [o.id for o in orders] == list(range(orders[0].id, orders[0].id + BULK))
        s.commit()
        ids = [i for i in ids_by_n(s, Order) if i != EXPLICIT]
        assert s.get(Order, EXPLICIT) is not None
    assert_one_range(ids, spy, before, watermark(march, key))


def test_orm_bulk_insert_takes_one_range(engine: Any, spy: Spy, key: str, march: MarchServer) -> None:
    Base, Order = models(spy, key)
    Base.metadata.create_all(engine)
    before = watermark(march, key)
    with Session(engine) as s:
        s.execute(insert(Order), [{"n": i} for i in range(BULK)])
        s.commit()
        ids = ids_by_n(s, Order)
    assert_one_range(ids, spy, before, watermark(march, key))


def test_core_executemany_and_multi_values_take_one_range_each(engine: Any, spy: Spy, key: str) -> None:
    table = Table(
        "events",
        MetaData(),
        Column("id", BigInteger, primary_key=True, default=MarchId(spy, key)),
        Column("n", BigInteger),
    )
    table.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"n": i} for i in range(BULK)])  # executemany
        conn.execute(insert(table).values([{"n": BULK + i} for i in range(100)]))  # one multi-row VALUES
        ids = [row[0] for row in conn.execute(select(table.c.id).order_by(table.c.n))]
    assert spy.calls == [("range", BULK), ("range", 100)]
    assert ids == sorted(ids) and len(set(ids)) == BULK + 100
    assert ids[:BULK] == list(range(ids[0], ids[0] + BULK))
    assert ids[BULK:] == list(range(ids[BULK], ids[BULK] + 100))


def test_fill_gives_rows_their_ids_before_the_statement(engine: Any, spy: Spy, key: str) -> None:
    default = MarchId(spy, key)
    table = Table(
        "items", MetaData(), Column("id", BigInteger, primary_key=True, default=default), Column("n", BigInteger)
    )
    table.metadata.create_all(engine)
    rows: list[dict[str, Any]] = [{"n": i} for i in range(50)] + [{"n": 50, "id": EXPLICIT}]
    default.fill(rows)
    assert spy.calls == [("range", 50)]
    assert rows[-1]["id"] == EXPLICIT
    with engine.begin() as conn:
        conn.execute(insert(table), rows)
        stored = {row.n: row.id for row in conn.execute(select(table))}
    assert stored == {row["n"]: row["id"] for row in rows}
    assert spy.calls == [("range", 50)]  # every row had its ID: the default was not called


def test_a_rolled_back_insert_leaves_a_gap(engine: Any, spy: Spy, key: str) -> None:
    Base, Order = models(spy, key)
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        lost = Order(n=0)
        s.add(lost)
        s.flush()
        lost_id = lost.id
        s.rollback()
        kept = Order(n=1)
        s.add(kept)
        s.commit()
        assert kept.id > lost_id
        assert s.scalar(select(func.count()).select_from(Order)) == 1


def test_assign_ids_skips_objects_that_have_one(spy: Spy, key: str) -> None:
    _, Order = models(spy, key)
    objs = [Order(n=0), Order(n=1, id=99), Order(n=2)]
    assert assign_ids(objs) == 2
    assert objs[1].id == 99 and objs[2].id == objs[0].id + 1
    assert spy.calls == [("range", 2)]


def test_a_range_above_max_range_is_drawn_in_ascending_chunks(spy: Spy, key: str) -> None:
    ids = MarchId(spy, key, max_range=300).take(1000)
    assert spy.calls == [("range", 300)] * 3 + [("range", 100)]
    assert ids == sorted(ids) and len(set(ids)) == 1000

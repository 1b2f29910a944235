"""New names created by many real clients at once, on a real server on SQLite: an INCR on a new name
is created in its group commit and answered from that commit's pass (``Creations.take_new``: the
name becomes a row of the compact table at once, no generator). Every request is answered once,
one creation per name is shared by all the requests for it (its IDs 1, 2, 3 ... with none twice),
and every name that was answered is durable: after ``kill -9`` each continues above every ID it
handed out. With 32 clients (the bench row's load) the commits hold about 32 creations: each
waits for the callers of the one before (``march.store.batch``'s gather).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from march_harness import MarchServer, free_port
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

CLIENTS = 16  # connections creating at once (the bench row's load is 32)
OWN = 60  # new names each client alone asks for
SHARED = 40  # new names every client asks for, in the same order: their creations are raced for


def _load(port: int) -> list[list[tuple[str, int]]]:
    """Each client's (name, ID) replies: OWN names of its own and the SHARED ones, interleaved."""
    start = threading.Barrier(CLIENTS)

    def client(i: int) -> list[tuple[str, int]]:
        r = redis.Redis(port=port, single_connection_client=True, socket_timeout=30)
        try:
            got: list[tuple[str, int]] = []
            start.wait(timeout=30)
            for j in range(max(OWN, SHARED)):
                for name in ([f"shared:{j}"] if j < SHARED else []) + ([f"own:{i}:{j}"] if j < OWN else []):
                    got.append((name, int(r.incr(name))))
            assert r.ping() is True  # its replies stayed in step with its requests: none answered twice
            return got
        finally:
            r.close()

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(client, range(CLIENTS)))


@pytest.mark.timeout(180)
def test_many_clients_creating_names_at_once_get_each_id_once_and_keep_them_across_kill_9(
    march_server: MarchServer,
) -> None:
    replies = _load(march_server.port)
    ids: dict[str, list[int]] = {}
    for got in replies:
        for name, value in got:
            ids.setdefault(name, []).append(value)
    assert len(ids) == CLIENTS * OWN + SHARED
    own = {name: v for name, v in ids.items() if name.startswith("own:")}
    assert all(v == [1] for v in own.values()), {n: v for n, v in own.items() if v != [1]}
    for j in range(SHARED):  # one creation each, shared: the first range's IDs in turn, none twice
        assert sorted(ids[f"shared:{j}"]) == list(range(1, CLIENTS + 1)), (j, sorted(ids[f"shared:{j}"]))
    r = redis.Redis(port=march_server.port, single_connection_client=True, socket_timeout=30)
    try:
        assert r.dbsize() == len(ids)  # one sequence per name
    finally:
        r.close()

    march_server.kill(signal.SIGKILL)
    march_server.start()
    r = redis.Redis(port=march_server.port, single_connection_client=True, socket_timeout=30)
    try:
        assert r.dbsize() == len(ids)  # every name answered was durable before its answer
        pipe = r.pipeline(transaction=False)
        for name in ids:
            pipe.incr(name)
        after = dict(zip(ids, pipe.execute(), strict=True))
    finally:
        r.close()
    below = {name: (after[name], max(v)) for name, v in ids.items() if after[name] <= max(v)}
    assert not below, f"IDs at or below one handed out before the kill: {below}"


def _records_per_commit(metrics_port: int) -> tuple[float, float]:
    """(records, transactions) of the creations' group commits so far, from ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    got: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("march_store_transaction_records_") and s.labels.get("operation") == "load_or_create":
                got[s.name.rsplit("_", 1)[1]] = s.value
    return got.get("sum", 0.0), got.get("count", 0.0)


@pytest.mark.timeout(180)
def test_32_clients_creating_share_commits_of_about_32_and_every_answered_name_is_durable(
    march_factory: Callable[..., MarchServer],
) -> None:
    """The bench row's load (``redis-benchmark -c 32``, INCR on random new names): a commit of new
    names waits for the callers of the one before to come back (``Batcher``'s gather), so a commit
    holds about 32 creations, not 16 (two groups alternating, each commit beside the loop's answers
    to the other: 15.9-16.1 records a commit before; 22-32 since, 18 asserted: a loaded machine's
    slower clients end some holds by their bound). Speed is not asserted."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        pytest.skip("redis-benchmark not installed (scripts/test installs it)")
    metrics = free_port()
    server = march_factory(extra_args=["--metrics-port", str(metrics)])
    command = ["-c", "32", "-n", "6400", "-r", "100000000", "-q", "INCR", "key:__rand_int__"]
    proc = subprocess.run(
        [binary, "-h", "127.0.0.1", "-p", str(server.port), *command],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records, commits = _records_per_commit(metrics)
    with server.conn() as c:
        created = c.call("DBSIZE")
    assert isinstance(created, int) and created > 6000  # (-r 10^8: a name drawn twice is rare)
    assert commits > 0 and records > created // 2  # (most creations go through the gathered commits)
    assert records / commits >= 18, f"{records / commits:.1f} records a commit ({commits:.0f} commits)"
    server.kill(signal.SIGKILL)
    server.start()
    with server.conn() as c:
        assert c.call("DBSIZE") == created  # every name answered was durable before its answer

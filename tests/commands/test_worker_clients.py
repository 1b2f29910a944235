"""Worker ids end to end: concurrent clients, ACL, transactions, RESP2, and what a namespace is not.

- 8 clients acquiring at once on separate connections get 400 distinct ids, the lowest ones;
- the ACL category ``@worker`` grants exactly the WORKER commands, and key patterns apply to
  namespaces (``~app*``); ``ACL CAT worker`` lists them; ``@write`` holds none of them, so a
  ``+@read +@write`` user draws IDs but cannot hold (or release, or renew) a worker id;
- WORKER.ACQUIRE inside MULTI/EXEC and on a RESP2 connection;
- namespaces never show in DBSIZE, KEYS or SCAN.
"""

from __future__ import annotations

import threading

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError

pytestmark = pytest.mark.e2e


def test_concurrent_clients_get_distinct_ids(march_server: MarchServer) -> None:
    ids: list[int] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            with redis.Redis(port=march_server.port, protocol=3) as c:
                mine = [c.execute_command("WORKER.ACQUIRE", "fleet")[0] for _ in range(50)]
            with lock:
                ids.extend(mine)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert sorted(ids) == list(range(400))


def test_acl_category_and_key_patterns(march_server: MarchServer) -> None:
    with redis.Redis(port=march_server.port, protocol=3) as admin:
        cat = {c.decode() for c in admin.execute_command("ACL", "CAT", "worker")}
        assert cat == {"worker.acquire", "worker.renew", "worker.release", "worker.list"}
        admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~app*", "+@worker")
        admin.execute_command("ACL", "SETUSER", "seq", "on", ">pw", "~*", "+@read", "+incr")
    with redis.Redis(port=march_server.port, protocol=3, username="app", password="pw") as c:
        worker_id, token, _, _ = c.execute_command("WORKER.ACQUIRE", "app1")
        assert c.execute_command("WORKER.RELEASE", "app1", worker_id, token) == b"OK"
        try:
            c.execute_command("WORKER.ACQUIRE", "other")
            raise AssertionError("a namespace outside the user's key patterns was accepted")
        except redis.exceptions.NoPermissionError:
            pass
        try:
            c.execute_command("INCR", "app1")
            raise AssertionError("+@worker granted INCR")
        except redis.exceptions.NoPermissionError:
            pass
    with redis.Redis(port=march_server.port, protocol=3) as admin:
        write = {c.decode() for c in admin.execute_command("ACL", "CAT", "write")}
        assert not {name for name in write if name.startswith("worker.")}, write
        admin.execute_command("ACL", "SETUSER", "rw", "on", ">pw", "~*", "+@read", "+@write")
        admin.execute_command("SEQ.CREATE", "app1:ids")
    with redis.Redis(port=march_server.port, protocol=3, username="rw", password="pw") as c:
        assert c.execute_command("INCR", "app1:ids") == 1
        assert c.execute_command("WORKER.LIST", "app1") == []  # WORKER.LIST reads: it is @read too
        for args in (("WORKER.ACQUIRE", "app1"), ("WORKER.RENEW", "app1", 0, "t"), ("WORKER.RELEASE", "app1", 0, "t")):
            try:
                c.execute_command(*args)
                raise AssertionError(f"+@read +@write granted {args[0]}")
            except redis.exceptions.NoPermissionError:
                pass
    with redis.Redis(port=march_server.port, protocol=3, username="seq", password="pw") as c:
        try:
            c.execute_command("WORKER.ACQUIRE", "app1")
            raise AssertionError("a user without @worker (or @write) acquired an id")
        except redis.exceptions.NoPermissionError:
            pass


def test_multi_resp2_and_namespaces_are_not_keys(march_server: MarchServer) -> None:
    with RespConn(march_server.port) as c:  # RESP2
        assert c.call("MULTI") == "OK"
        assert c.call("WORKER.ACQUIRE", "tx") == "QUEUED"
        assert c.call("WORKER.ACQUIRE", "tx", "TTL", "5") == "QUEUED"
        first, second = c.call("EXEC")
        assert (first[0], second[0], second[2]) == (0, 1, 5)
        assert isinstance(first[1], bytes) and len(first[1]) == 32
        listed = c.call("WORKER.LIST", "tx")
        assert [row[0] for row in listed] == [0, 1] and listed[0][3] == b"live"
        assert c.call("DBSIZE") == 0
        assert c.call("KEYS", "*") == []
        assert c.call("SCAN", "0") == [b"0", []]
        reply = c.call("WORKER.RENEW", "tx", "0", "wrong")
        assert isinstance(reply, RespError) and reply.message.startswith("ERR worker id 0 in namespace 'tx'")

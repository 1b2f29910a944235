"""ACL end to end on a real single-node march process, with redis-py and a raw RESP client.

- The bar: an admin creates ``orders:eu``; user ``app`` (``~orders:* +@read +@write``) draws IDs
  from it and nothing else; it creates sequences only with ``+@create`` (also by INCR/SET), raises
  floors only with ``+@floor`` (SET, SEQ.CREATE ... START/FLOOR), never administers; AUTH, HELLO 3
  AUTH and redis-py ``username=``/``password=`` work, a wrong password is WRONGPASS. Run twice: the
  ``default`` password from ``--requirepass`` and from ``ACL SETUSER default >pw``.
- ``default`` off: an unauthenticated client gets NOAUTH; users (and default's password) survive a
  restart; ACL DELUSER closes the user's connections; ACL SETUSER applies to open connections.
- Listings (KEYS, SCAN, SEQ.LIST) show a restricted user only the names it may read.
- NOPERM inside MULTI aborts EXEC. Failed AUTHs are counted, logged in ACL LOG and the server log
  without the password, and throttled per address across connections (other clients are answered
  meanwhile; 20 connections reconnecting for every guess get no more guesses checked than one).
- ``aclfile``: seeds an empty store; ACL SAVE writes the users; ACL LOAD replaces them.
- As in Redis, ``+@all -@admin`` leaves out CLIENT KILL/LIST and keeps ACL WHOAMI.

Every server is stopped by its fixture; waits are conditions with deadlines.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from march_harness import MarchServer, RespConn, RespError, serving
from march_harness.cluster import parse_info
from march_harness.resp import encode
from redis.backoff import NoBackoff
from redis.retry import Retry

from march import errors

pytestmark = pytest.mark.e2e

Factory = Callable[..., MarchServer]

ADMIN_PASS = "adm1n-Pa55"
APP_PASS = "app-Pa55-0rders"


def ok(conn: RespConn, *args: str | int) -> object:
    """``args`` must not be an error reply; the reply."""
    reply = conn.call(*args)
    assert not isinstance(reply, RespError), (args, reply)
    return reply


def redis_client(port: int, **kwargs: object) -> redis.Redis:
    """redis-py without its retries: a refused AUTH must fail at once, not after backing off."""
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0), **kwargs)  # type: ignore[arg-type]


def noperm_command(name: str) -> RespError:
    return RespError(errors.NOPERM_COMMAND.format(name))


NOPERM_KEY = RespError(errors.NOPERM_KEY)
NOAUTH = RespError(errors.NOAUTH)
WRONGPASS = RespError(errors.WRONGPASS)


def stats(port: int, password: str = ADMIN_PASS, section: str = "stats") -> dict[str, str]:
    with RespConn(port) as c:
        c.call("AUTH", password)
        text = c.call("INFO", section)
    assert isinstance(text, bytes), text
    return parse_info(text)


def admin(port: int, password: str = ADMIN_PASS, user: str = "default") -> RespConn:
    conn = RespConn(port)
    assert conn.call("AUTH", user, password) == "OK"
    return conn


def as_user(port: int, user: str, password: str) -> RespConn:
    conn = RespConn(port)
    assert conn.call("AUTH", user, password) == "OK"
    return conn


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarchServer]:
    """One server for the module, ``default`` protected by ``--requirepass`` (tests use their own names)."""
    server = MarchServer.in_dir(tmp_path_factory.mktemp("acl"), requirepass=ADMIN_PASS)
    with serving(server, during="the module"):
        yield server


@pytest.fixture(params=["requirepass", "acl-setuser-default"])
def bar_server(request: pytest.FixtureRequest, march_factory: Factory) -> MarchServer:
    if request.param == "requirepass":
        return march_factory(requirepass=ADMIN_PASS)
    server = march_factory()
    with RespConn(server.port) as c:
        assert c.call("ACL", "SETUSER", "default", f">{ADMIN_PASS}") == "OK"
    with RespConn(server.port) as c:
        assert c.call("INCR", "x") == NOAUTH  # a new connection must authenticate from now on
    return server


# --- the bar --------------------------------------------------------------------------------------


def test_app_user_draws_ids_creates_and_raises_floors_only_when_granted(bar_server: MarchServer) -> None:
    port = bar_server.port
    with admin(port) as adm, RespConn(port) as app:
        assert adm.call("SEQ.CREATE", "orders:eu") == "OK"
        assert adm.call("ACL", "SETUSER", "app", "on", f">{APP_PASS}", "~orders:*", "+@read", "+@write") == "OK"

        assert app.call("INCR", "orders:eu") == NOAUTH
        assert app.call("AUTH", "app", "not-" + APP_PASS) == WRONGPASS
        assert app.call("AUTH", "app", APP_PASS) == "OK"
        assert app.call("ACL", "WHOAMI") == noperm_command("acl|whoami")

        # drawing IDs and reading watermarks on its own keys
        assert app.call("INCR", "orders:eu") == 1
        assert app.call("INCRBY", "orders:eu", 5) == 6
        assert app.call("GET", "orders:eu") == b"6"
        assert app.call("INCR", "invoices") == NOPERM_KEY
        assert app.call("GET", "invoices") == NOPERM_KEY
        assert app.call("INCRBY", "invoices", 2) == NOPERM_KEY

        # neither creating (also not by INCR or SET) nor raising floors, nor administering
        assert app.call("INCR", "orders:new") == RespError(errors.NOPERM_CREATE.format("orders:new"))
        assert app.call("SEQ.CREATE", "orders:y") == noperm_command("seq.create")
        assert app.call("SET", "orders:eu", "10") == noperm_command("set")
        assert app.call("SEQ.CREATE", "orders:x", "START", "50") == noperm_command("seq.create")
        for args, name in [
            (["FAILOVER"], "failover"),
            (["ACL", "SETUSER", "app", "+@all"], "acl|setuser"),
            (["CONFIG", "GET", "requirepass"], "config|get"),
            (["SHUTDOWN", "NOSAVE"], "shutdown"),
        ]:
            assert app.call(*args) == noperm_command(name), args
        # DEBUG while it is off: refused to everyone before permissions are looked at, as Redis
        assert app.call("DEBUG", "CLOCK-OFFSET", "1000") == RespError(errors.DEBUG_DISABLED)
        assert adm.call("EXISTS", "orders:new", "orders:y", "orders:x") == 0  # nothing was created
        assert adm.call("GET", "orders:eu") == b"6"  # no floor was raised

        # +@floor: SET on an existing sequence; creating by SET still needs +@create
        assert adm.call("ACL", "SETUSER", "app", "+@floor") == "OK"
        assert app.call("SET", "orders:eu", "10") == "OK"  # the open connection sees it at once
        assert app.call("INCR", "orders:eu") == 11
        assert app.call("SET", "orders:new", "5") == RespError(errors.NOPERM_CREATE.format("orders:new"))
        assert app.call("SET", "invoices", "5") == NOPERM_KEY

        # +@create without +@floor: INCR creates; SEQ.CREATE ... START n / FLOOR id need +@floor
        assert adm.call("ACL", "SETUSER", "app", "-@floor", "+@create") == "OK"
        assert app.call("SET", "orders:eu", "20") == noperm_command("set")
        assert app.call("INCR", "orders:new") == 1
        assert app.call("SEQ.CREATE", "orders:x", "START", "50") == RespError(errors.NOPERM_FLOOR.format("orders:x"))
        assert app.call("SEQ.CREATE", "orders:ts", "TIMESTAMP", "FLOOR", "12345") == RespError(
            errors.NOPERM_FLOOR.format("orders:ts")
        )
        assert app.call("SEQ.CREATE", "orders:y") == "OK"
        assert app.call("SEQ.CREATE", "orders:z", "START", "1") == "OK"  # START 1 raises no floor
        assert app.call("SEQ.CREATE", "invoices") == NOPERM_KEY
        assert adm.call("EXISTS", "orders:x", "orders:ts", "invoices") == 0

        # both: everything on its keys, still nothing else
        assert adm.call("ACL", "SETUSER", "app", "+@floor") == "OK"
        assert app.call("SEQ.CREATE", "orders:x", "START", "50") == "OK"
        assert app.call("INCR", "orders:x") == 50
        assert app.call("SET", "orders:eu", "1000") == "OK"
        assert app.call("INCR", "orders:eu") == 1001
        assert app.call("FAILOVER") == noperm_command("failover")
        assert app.call("INCR", "invoices") == NOPERM_KEY

        # HELLO 3 AUTH on a fresh connection
        with RespConn(port) as hello:
            reply = hello.call("HELLO", "3", "AUTH", "app", APP_PASS)
            assert isinstance(reply, dict) and reply[b"proto"] == 3, reply
            assert hello.call("INCR", "orders:eu") == 1002
            assert hello.call("ACL", "WHOAMI") == noperm_command("acl|whoami")
        with RespConn(port) as hello:
            assert hello.call("HELLO", "3", "AUTH", "app", "wrong") == WRONGPASS
            assert hello.call("INCR", "orders:eu") == NOAUTH

    # redis-py, RESP2 (AUTH user pass) and RESP3 (HELLO 3 AUTH user pass)
    last = 1002
    for protocol in (2, 3):
        client = redis_client(port, username="app", password=APP_PASS, protocol=protocol)
        try:
            value = client.incr("orders:eu")
            assert value == last + 1
            last = value
            assert client.incrby("orders:eu", 10) == last + 10
            last += 10
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.incr("invoices")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.config_get("*")
        finally:
            client.close()
        wrong = redis_client(port, username="app", password="wrong", protocol=protocol)
        try:
            with pytest.raises(redis.exceptions.AuthenticationError):
                wrong.incr("orders:eu")
        finally:
            wrong.close()
    with admin(port) as adm:
        assert adm.call("ACL", "WHOAMI") == b"default"
        assert adm.call("GET", "orders:eu") == str(last).encode()


def test_default_off_means_noauth(march_factory: Factory) -> None:
    server = march_factory()
    with RespConn(server.port) as c:
        assert c.call("ACL", "SETUSER", "root", "on", f">{ADMIN_PASS}", "~*", "+@all") == "OK"
        assert c.call("ACL", "SETUSER", "default", "off") == "OK"
    with RespConn(server.port) as c:
        assert c.call("PING") == NOAUTH
        assert c.call("INCR", "k") == NOAUTH
        assert c.call("KEYS", "*") == NOAUTH
        hello = c.call("HELLO", "3")
        assert isinstance(hello, RespError) and hello.prefix == "NOAUTH", hello
        assert c.call("AUTH", "default", "") == WRONGPASS  # nopass, but disabled
        assert c.call("AUTH", "root", ADMIN_PASS) == "OK"
        assert c.call("INCR", "k") == 1
    client = redis_client(server.port)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            client.incr("k")
    finally:
        client.close()


def test_users_survive_a_restart(march_factory: Factory) -> None:
    server = march_factory()
    with RespConn(server.port) as c:
        assert c.call("ACL", "SETUSER", "default", f">{ADMIN_PASS}") == "OK"
        rules = ["on", f">{APP_PASS}", "~orders:*", "+@read", "+@write", "+@create"]
        assert c.call("ACL", "SETUSER", "app", *rules) == "OK"
        assert c.call("ACL", "SETUSER", "retired", "off", ">gone", "~*", "+@all") == "OK"
        listed = c.call("ACL", "LIST")
    server.restart()
    with RespConn(server.port) as c:
        assert c.call("INCR", "orders:eu") == NOAUTH  # default kept its password
        assert c.call("AUTH", "retired", "gone") == WRONGPASS  # and the disabled user stays off
        assert c.call("AUTH", "app", APP_PASS) == "OK"
        assert c.call("INCR", "orders:eu") == 1
        assert c.call("INCR", "invoices") == NOPERM_KEY
    with admin(server.port) as c:
        assert c.call("ACL", "LIST") == listed
        assert c.call("GET", "orders:eu") == b"1"


# --- changes reach open connections -----------------------------------------------------------------


def closed_by_server(conn: RespConn, timeout: float = 5.0) -> bool:
    return conn.is_closed_by_peer(timeout)


def test_deluser_closes_that_users_connections(locked: MarchServer) -> None:
    port = locked.port
    with admin(port) as adm:
        assert adm.call("ACL", "SETUSER", "doomed", "on", ">d", "~del:*", "+@all") == "OK"
        assert adm.call("ACL", "SETUSER", "survivor", "on", ">s", "~del:*", "+@all") == "OK"
        doomed = [as_user(port, "doomed", "d") for _ in range(2)]
        survivor = as_user(port, "survivor", "s")
        try:
            assert doomed[0].call("INCR", "del:k") == 1
            assert adm.call("ACL", "DELUSER", "doomed", "nobody") == 1
            for c in doomed:
                assert closed_by_server(c), "a deleted user's connection stayed open"
            assert survivor.call("INCR", "del:k") == 2
            assert adm.call("PING") == "PONG"
            with RespConn(port) as again:
                assert again.call("AUTH", "doomed", "d") == WRONGPASS
            assert b"doomed" not in adm.call("ACL", "USERS")
        finally:
            for c in [*doomed, survivor]:
                c.close()


def test_setuser_applies_to_open_connections_at_once(locked: MarchServer) -> None:
    port = locked.port
    with admin(port) as adm, RespConn(port) as c:
        assert adm.call("ACL", "SETUSER", "live", "on", ">one", "~live:*", "+@read", "+@write", "+@create") == "OK"
        assert c.call("AUTH", "live", "one") == "OK"
        assert c.call("INCR", "live:a") == 1
        assert adm.call("ACL", "SETUSER", "live", "-@write") == "OK"
        assert c.call("INCR", "live:a") == noperm_command("incr")
        assert c.call("GET", "live:a") == b"1"
        assert adm.call("ACL", "SETUSER", "live", "+incr", "resetkeys", "~other:*") == "OK"
        assert c.call("INCR", "live:a") == NOPERM_KEY
        assert c.call("INCR", "other:a") == 1
        assert c.call("INCRBY", "other:a", 2) == noperm_command("incrby")
        assert adm.call("ACL", "SETUSER", "live", "resetpass", ">two") == "OK"
        assert c.call("INCR", "other:a") == 2  # an authenticated connection stays so (as in Redis)
        with RespConn(port) as fresh:
            assert fresh.call("AUTH", "live", "one") == WRONGPASS
            assert fresh.call("AUTH", "live", "two") == "OK"
            assert fresh.call("INCR", "other:a") == 3
        # a user with every command on every key (the server's fast path) is checked again at once
        assert adm.call("ACL", "SETUSER", "fast", "on", ">f", "~*", "+@all") == "OK"
        with as_user(port, "fast", "f") as quick:
            assert quick.call("INCR", "live:fast") == 1
            assert adm.call("ACL", "SETUSER", "fast", "-incr") == "OK"
            quick.send(encode("INCR", "live:fast") * 3)  # a pipelined run of one INCR, too
            assert [quick.read_reply() for _ in range(3)] == [noperm_command("incr")] * 3
            assert adm.call("ACL", "SETUSER", "fast", "+incr", "resetkeys", "~live:f*") == "OK"
            assert quick.call("INCR", "live:fast") == 2
            assert quick.call("INCR", "live:a") == NOPERM_KEY
        # an invalid rule changes nothing, on open connections either
        invalid = adm.call("ACL", "SETUSER", "live", "-@all", "+nosuchcommand")
        assert isinstance(invalid, RespError) and invalid.prefix == "ERR", invalid
        assert c.call("INCR", "other:a") == 4


def test_client_kill_and_list_are_admin_commands(locked: MarchServer) -> None:
    port = locked.port
    with admin(port) as adm:
        assert adm.call("ACL", "SETUSER", "notadmin", "on", ">n", "~*", "+@all", "-@admin") == "OK"
        admin_id = adm.call("CLIENT", "ID")
        with as_user(port, "notadmin", "n") as c:
            assert isinstance(c.call("CLIENT", "ID"), int)  # its own connection: allowed, as in Redis
            assert c.call("CLIENT", "KILL", "ID", admin_id) == noperm_command("client|kill")
            assert adm.call("PING") == "PONG"  # the administrator is still connected
            assert c.call("CLIENT", "LIST") == noperm_command("client|list")


def test_acl_whoami_needs_no_admin(locked: MarchServer) -> None:
    with admin(locked.port) as adm:
        assert adm.call("ACL", "SETUSER", "plain", "on", ">p", "~*", "+@all", "-@admin") == "OK"
    with as_user(locked.port, "plain", "p") as c:
        assert c.call("ACL", "WHOAMI") == b"plain"
        assert isinstance(c.call("ACL", "CAT"), list)
        assert c.call("ACL", "SETUSER", "plain", "+@admin") == noperm_command("acl|setuser")


# --- listings -----------------------------------------------------------------------------------------


def scan_all(conn: RespConn, *options: str) -> list[bytes]:
    found: list[bytes] = []
    cursor = b"0"
    for _ in range(10_000):
        reply = conn.call("SCAN", cursor, *options)
        assert isinstance(reply, list), reply
        cursor, page = reply
        found += page
        if cursor == b"0":
            return sorted(found)
    raise AssertionError("SCAN did not end")


def test_listings_show_only_readable_names(locked: MarchServer) -> None:
    port = locked.port
    everything = [f"ls:pub:{i}" for i in range(30)] + ["ls:sec:1", "ls:wo:1", "ls:mine:1", "ls:mine:2"]
    with admin(port) as adm:
        for key in everything:
            assert adm.call("INCR", key) == 1
        rules = ["on", ">r", "%R~ls:pub:*", "%W~ls:wo:*", "~ls:mine:*", "+@all", "-@admin"]
        assert adm.call("ACL", "SETUSER", "lister", *rules) == "OK"
        admin_sees = [k for k in adm.call("KEYS", "ls:*")]
        assert sorted(admin_sees) == sorted(k.encode() for k in everything)
    readable = sorted(k.encode() for k in everything if k.startswith(("ls:pub:", "ls:mine:")))
    with as_user(port, "lister", "r") as c:
        assert sorted(c.call("KEYS", "ls:*")) == readable
        assert sorted(c.call("KEYS", "*")) == [k for k in readable]
        assert sorted(c.call("KEYS", "ls:sec:*")) == []
        assert sorted(c.call("KEYS", "ls:wo:*")) == []
        assert scan_all(c, "MATCH", "ls:*", "COUNT", "7") == readable
        assert scan_all(c) == readable
        listed = c.call("SEQ.LIST")
        assert isinstance(listed, list) and sorted(listed) == readable
        assert c.call("GET", "ls:wo:1") == NOPERM_KEY  # a write pattern only
        assert c.call("GET", "ls:sec:1") == NOPERM_KEY
        assert c.call("GET", "ls:pub:1") == b"1"
        assert c.call("INCR", "ls:pub:1") == NOPERM_KEY


# --- MULTI --------------------------------------------------------------------------------------------


def test_noperm_inside_multi_aborts_exec(locked: MarchServer) -> None:
    port = locked.port
    with admin(port) as adm:
        assert adm.call("ACL", "SETUSER", "tx", "on", ">t", "~tx:*", "+@read", "+@write", "+@transaction") == "OK"
        assert adm.call("ACL", "LOG", "RESET") == "OK"
    denials = [
        (["INCR", "tx-other"], NOPERM_KEY),
        (["SET", "tx:{}", "100"], noperm_command("set")),
        (["CONFIG", "GET", "*"], noperm_command("config|get")),
    ]
    for i, (denied, error) in enumerate(denials):
        key = f"tx:{i}"
        with admin(port) as adm:
            assert adm.call("INCR", key) == 1
        with as_user(port, "tx", "t") as c:
            assert c.call("MULTI") == "OK"
            assert c.call("INCR", key) == "QUEUED"
            assert c.call(*[a.format(i) for a in denied]) == error
            assert c.call("INCR", key) == "QUEUED"
            assert c.call("EXEC") == RespError(errors.EXECABORT)
            assert c.call("GET", key) == b"1"  # nothing ran
            assert c.call("INCR", key) == 2  # and the connection goes on
    with admin(port) as adm:
        entries = adm.call("ACL", "LOG")
    assert isinstance(entries, list)
    fields = [dict(zip(e[::2], e[1::2], strict=True)) for e in entries]
    assert {(f[b"username"], f[b"context"], f[b"reason"]) for f in fields} == {
        (b"tx", b"multi", b"key"),
        (b"tx", b"multi", b"command"),
    }, fields


# --- failed AUTHs -------------------------------------------------------------------------------------


def test_failed_auths_are_counted_and_logged_without_the_password(locked: MarchServer) -> None:
    port = locked.port
    guesses = ["Gu3ss-One-xyzzy", "Gu3ss-Two-plugh", "Gu3ss-Three-fnord"]
    before = int(stats(port)["acl_access_denied_auth"])
    with admin(port) as adm:
        assert adm.call("ACL", "LOG", "RESET") == "OK"
    with RespConn(port) as c:
        assert c.call("AUTH", "mallory", guesses[0]) == WRONGPASS
        assert c.call("AUTH", guesses[1]) == WRONGPASS  # the default user
        hello = c.call("HELLO", "3", "AUTH", "mallory", guesses[2])
        assert hello == WRONGPASS
    assert int(stats(port)["acl_access_denied_auth"]) == before + 3
    with admin(port) as adm:
        entries = adm.call("ACL", "LOG")
    assert isinstance(entries, list)
    text = repr(entries)
    fields = [dict(zip(e[::2], e[1::2], strict=True)) for e in entries]
    auth = [f for f in fields if f[b"reason"] == b"auth"]
    assert {f[b"username"] for f in auth} == {b"mallory", b"default"}, fields
    assert all(f[b"object"] == b"AUTH" for f in auth)
    assert sum(f[b"count"] for f in auth) == 3
    for secret in [*guesses, ADMIN_PASS]:
        assert secret not in text
    # the server's own log: neither the guesses nor any real password (the test harness's own
    # "=== start" lines carry the command line, which is not the server's output)
    log = locked.log_path.read_text()
    server_lines = "\n".join(line for line in log.splitlines() if not line.startswith("=== start"))
    assert "mallory" in server_lines  # a failure is logged...
    for secret in [*guesses, ADMIN_PASS]:
        assert secret not in server_lines  # ...never a password


def test_failed_auths_are_throttled_across_connections_and_others_are_served(march_factory: Factory) -> None:
    port = march_factory(requirepass=ADMIN_PASS).port
    with admin(port) as adm:  # an authenticated client, served while the guesser waits
        # the 4th..8th failures from one address wait 50, 100, 200, 400 and 800 ms (the 9th 1.6 s),
        # each on a new connection: reconnecting does not start the count again
        documented = 0.05 + 0.1 + 0.2 + 0.4 + 0.8
        for i in range(3):
            with RespConn(port) as guesser:
                assert guesser.call("AUTH", "throttled", f"wrong-{i}") == WRONGPASS
        started = time.monotonic()
        with RespConn(port) as guesser:  # HELLO AUTH counts too
            assert guesser.call("HELLO", "3", "AUTH", "throttled", "wrong-3") == WRONGPASS
        for i in range(4, 8):
            with RespConn(port) as guesser:
                assert guesser.call("AUTH", "throttled", f"wrong-{i}") == WRONGPASS
        took = time.monotonic() - started
        # a lower bound (timers may fire a hair early): never a speed assertion
        assert took >= documented * 0.95, f"the 4th..8th failed AUTHs took {took:.3f}s, less than {documented}s"
        with RespConn(port) as guesser:
            guesser.send(encode("AUTH", "throttled", "wrong-8"))  # the 9th: answered 1.6 s later
            assert adm.call("PING") == "PONG"  # meanwhile another client is answered
            readable, _, _ = select.select([guesser.sock], [], [], 0)
            assert not readable and not guesser.buf, "the 9th wrong AUTH was answered before another client's PING"
            assert guesser.read_reply() == WRONGPASS
        # HELLO with a right password waits its turn like AUTH, then completes
        with RespConn(port) as late:
            reply = late.call("HELLO", "3", "AUTH", "default", ADMIN_PASS)
            assert isinstance(reply, dict) and reply[b"proto"] == 3, reply
        # the success cleared the address: the next failure is answered at once again
        quick = time.monotonic()
        with RespConn(port) as again:
            assert again.call("AUTH", "someone", "else") == WRONGPASS
        assert time.monotonic() - quick < documented


def test_hello_setname_and_client_setname_get_the_same_acl_check_and_limit(locked: MarchServer) -> None:
    port = locked.port
    with admin(port) as adm:
        assert adm.call("ACL", "SETUSER", "nameless", "on", ">n-pw", "~*", "+@all", "-client|setname") == "OK"
        assert adm.call("ACL", "SETUSER", "named", "on", ">n-pw", "~*", "-@all", "+get", "+client|setname") == "OK"
    denied = noperm_command("client|setname")
    with RespConn(port) as c:
        assert c.call("HELLO", "3", "AUTH", "nameless", "n-pw", "SETNAME", "sneaky") == denied
        assert c.call("CLIENT", "GETNAME") is None  # no name was set
        assert c.call("CLIENT", "SETNAME", "sneaky") == denied
    with RespConn(port) as c:  # granted: both ways work, with the same length limit
        assert c.call("HELLO", "2", "AUTH", "named", "n-pw", "SETNAME", "n" * 256)[0] == b"server"
        too_long = RespError(errors.CLIENT_NAME_TOO_LONG.format(256))
        assert c.call("CLIENT", "SETNAME", "n" * 257) == too_long
        assert c.call("HELLO", "3", "SETNAME", "n" * 257) == too_long
        assert c.call("CLIENT", "SETNAME", "ok-name") == "OK"
    with RespConn(port) as c:  # a bad name is refused before HELLO authenticates or switches protocol
        assert c.call("HELLO", "3", "AUTH", "named", "n-pw", "SETNAME", "bad name") == RespError(errors.CLIENT_NAME)
        assert c.call("GET", "x") == NOAUTH
    with admin(port) as adm:
        log = adm.call("ACL", "LOG")
        assert any(b"client|setname" in entry for entry in log), log


def test_reconnecting_in_parallel_gains_a_guesser_nothing(march_factory: Factory) -> None:
    port = march_factory(requirepass=ADMIN_PASS).port
    checked = refused = 0
    started = time.monotonic()
    conns = [RespConn(port) for _ in range(20)]
    try:
        deadline = started + 3.0
        while time.monotonic() < deadline:  # 20 connections at once, each guess on a fresh one
            for c in conns:  # (each a different password: one tried before is no new guess)
                c.send(encode("AUTH", "default", f"guess-{checked + refused}-{id(c)}"))
            for i, c in enumerate(conns):
                reply = c.read_reply()
                if reply == WRONGPASS:
                    checked += 1
                else:
                    assert reply == RespError(errors.AUTH_THROTTLED), reply
                    refused += 1
                c.close()
                conns[i] = RespConn(port)
    finally:
        for c in conns:
            c.close()
    elapsed = time.monotonic() - started
    # Checked guesses: 3 free, then one per 50, 100, ... ms up to one per 2 s (a count, not a speed).
    most = 3 + 6 + elapsed / 2.0 + 1
    print(f"{checked} guesses checked, {refused} refused unchecked in {elapsed:.1f} s (at most {most:.0f})")
    assert checked <= most, f"{checked} guesses were checked in {elapsed:.1f} s"
    assert refused > 0


# --- aclfile ------------------------------------------------------------------------------------------


def test_aclfile_seeds_an_empty_store_and_acl_save_load(march_factory: Factory, tmp_path: Path) -> None:
    aclfile = tmp_path / "users.acl"
    aclfile.write_text(
        "# users of the test\n"
        f"user default on >{ADMIN_PASS} ~* &* +@all\n"
        "\n"
        "user alice on >alice-pw ~* +@all\n"
        "user bob on >bob-pw ~bob:* +@read +@write +@create\n"
    )
    server = march_factory(extra_args=["--aclfile", str(aclfile)])
    port = server.port
    with RespConn(port) as c:
        assert c.call("PING") == NOAUTH
        assert c.call("AUTH", "alice", "alice-pw") == "OK"
        assert sorted(c.call("ACL", "USERS")) == [b"alice", b"bob", b"default"]
        assert c.call("INCR", "anything") == 1
    with as_user(port, "bob", "bob-pw") as bob:
        assert bob.call("INCR", "bob:1") == 1
        assert bob.call("INCR", "anything") == NOPERM_KEY

    with as_user(port, "alice", "alice-pw") as c:
        assert c.call("ACL", "SETUSER", "carol", "on", ">carol-pw", "~carol:*", "+@all") == "OK"
        assert c.call("ACL", "SAVE") == "OK"
    saved = aclfile.read_text()
    lines = {line.split()[1]: line for line in saved.splitlines() if line.startswith("user ")}
    assert set(lines) == {"alice", "bob", "carol", "default"}, saved
    assert "~carol:*" in lines["carol"] and "carol-pw" not in saved and "alice-pw" not in saved  # hashes only

    # ACL LOAD: the file's users replace the stored ones (bob goes, dave comes, carol goes)
    aclfile.write_text(
        f"user default on >{ADMIN_PASS} ~* &* +@all\n"
        "user alice on >alice-pw ~* +@all\n"
        "user dave on >dave-pw ~dave:* +@all\n"
    )
    with as_user(port, "bob", "bob-pw") as bob, as_user(port, "alice", "alice-pw") as c:
        assert c.call("ACL", "LOAD") == "OK"
        assert sorted(c.call("ACL", "USERS")) == [b"alice", b"dave", b"default"]
        assert closed_by_server(bob), "a user removed by ACL LOAD kept its connection"
    with RespConn(port) as c:
        assert c.call("AUTH", "bob", "bob-pw") == WRONGPASS
        assert c.call("AUTH", "carol", "carol-pw") == WRONGPASS
        assert c.call("AUTH", "dave", "dave-pw") == "OK"
        assert c.call("INCR", "dave:1") == 1

    # a broken file changes nothing
    aclfile.write_text("user eve on >eve-pw +@nosuchcategory\n")
    with as_user(port, "alice", "alice-pw") as c:
        reply = c.call("ACL", "LOAD")
        assert isinstance(reply, RespError) and reply.message.startswith("ERR Error loading ACLs"), reply
        assert sorted(c.call("ACL", "USERS")) == [b"alice", b"dave", b"default"]

    # the store has users now: at a restart the file no longer seeds them
    aclfile.write_text("user zed on >zed-pw ~* +@all\n")
    server.restart()
    with RespConn(port) as c:
        assert c.call("AUTH", "zed", "zed-pw") == WRONGPASS
        assert c.call("AUTH", "dave", "dave-pw") == "OK"


def test_acl_save_and_load_without_an_aclfile(locked: MarchServer) -> None:
    with admin(locked.port) as c:
        assert c.call("ACL", "SAVE") == RespError(errors.ACL_NO_FILE)
        assert c.call("ACL", "LOAD") == RespError(errors.ACL_NO_FILE)

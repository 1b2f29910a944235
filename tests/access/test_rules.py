"""Unit tests of users and permissions (``march.access``): the rules as Redis reads them, what a user
may run and touch, the rules that rebuild a user (what the store keeps), the ACL file and log.

The command table is March's real registry. Comparisons with a real redis-server are in
tests/access/test_acl_vs_redis.py; end-to-end behaviour in tests/access/test_acl.py.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import march.commands  # noqa: F401  (registers every command)
from march import errors
from march.access.acl_log import LOG_SIZE, AclLog
from march.access.rules import DEFAULT, User, hash_password
from march.access.throttle import AuthThrottle
from march.access.users import Users, format_acl_file, parse_acl_file
from march.commands.table import COMMANDS
from march.errors import CommandError


def user(*rules: str, name: str = "u") -> User:
    u = User(name)
    u.apply(rules, COMMANDS)
    return u


def denied(u: User, *args: str) -> tuple[str, str] | None:
    spec = COMMANDS[args[0].lower()]
    return u.denial(spec, [a.encode() for a in args])


# --- passwords ----------------------------------------------------------------------------------


def test_passwords_are_kept_hashed_and_checked() -> None:
    u = user("on", ">secret", ">other")
    assert u.passwords == [hash_password(b"secret"), hash_password(b"other")]
    assert "secret" not in u.describe()
    assert u.check_password(b"secret") and u.check_password(b"other")
    assert not u.check_password(b"nope") and not u.check_password(b"")
    u.apply(["<secret"], COMMANDS)
    assert not u.check_password(b"secret") and u.check_password(b"other")
    u.apply([f"!{hash_password(b'other')}", f"#{hash_password(b'third')}"], COMMANDS)
    assert u.check_password(b"third") and not u.check_password(b"other")
    u.apply(["nopass"], COMMANDS)
    assert u.passwords == [] and u.check_password(b"anything")
    u.apply(["resetpass"], COMMANDS)
    assert not u.nopass and not u.check_password(b"anything")


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("#abc", errors.ACL_BAD_HASH),
        ("#" + "A" * 64, errors.ACL_BAD_HASH),
        ("<never-set", errors.ACL_NO_SUCH_PASSWORD),
        ("!" + "0" * 64, errors.ACL_NO_SUCH_PASSWORD),
        ("bogus", errors.ACL_SYNTAX),
        ("%X~a", errors.ACL_SYNTAX),
        ("+nope", errors.ACL_UNKNOWN_COMMAND),
        ("+@nope", errors.ACL_UNKNOWN_COMMAND),
        ("+config|nope", errors.ACL_UNKNOWN_COMMAND),
    ],
)
def test_an_invalid_rule_is_redis_error_and_changes_nothing(rule: str, why: str) -> None:
    u = user("on", ">pw", "~a*", "+get")
    before = u.describe()
    with pytest.raises(CommandError) as err:
        u.apply(["off", "allcommands", rule], COMMANDS)  # valid rules before it are not kept either
    assert err.value.message == errors.ACL_MODIFIER.format(rule, why)
    assert u.describe() == before


# --- commands and keys --------------------------------------------------------------------------


def test_a_new_user_may_do_nothing() -> None:
    u = User("fresh")
    assert not u.enabled and not u.unrestricted
    assert denied(u, "GET", "k") == ("command", "get")
    assert u.describe() == "off resetchannels -@all"


def test_categories_commands_and_subcommands() -> None:
    u = user("+@read", "+incr", "-mget", "+config|get", "~*")
    assert denied(u, "GET", "k") is None and denied(u, "INCR", "k") is None
    assert denied(u, "MGET", "a") == ("command", "mget")
    assert denied(u, "INCRBY", "k", "2") == ("command", "incrby")
    assert denied(u, "CONFIG", "GET", "x") is None
    assert denied(u, "CONFIG", "SET", "x", "y") == ("command", "config|set")
    u.apply(["+config", "-config|get"], COMMANDS)
    assert denied(u, "CONFIG", "GET", "x") == ("command", "config|get")
    assert denied(u, "CONFIG", "REWRITE") is None
    u.apply(["+@all", "-@admin"], COMMANDS)
    assert denied(u, "CONFIG", "REWRITE") == ("command", "config|rewrite")
    assert denied(u, "FAILOVER") == ("command", "failover")
    assert denied(u, "INCR", "k") is None


def test_march_categories_split_drawing_creating_and_raising_floors() -> None:
    app = user("+@read", "+@write", "~*")
    assert denied(app, "INCR", "k") is None and denied(app, "GET", "k") is None
    assert denied(app, "SEQ.CREATE", "k") == ("command", "seq.create")
    assert denied(app, "SET", "k", "5") == ("command", "set")
    creator = user("+@create", "~*")
    assert denied(creator, "SEQ.CREATE", "k") is None
    migrator = user("+@floor", "~*")
    assert denied(migrator, "SET", "k", "5") is None
    admin = user("+@admin", "~*")
    for cmd in (["FAILOVER"], ["SHUTDOWN"], ["CONFIG", "GET", "x"], ["ACL", "SETUSER", "x"], ["DEBUG", "CLOCK-OFFSET"]):
        assert denied(admin, *cmd) is None, cmd
        assert denied(app, *cmd) is not None, cmd


def granted(u: User) -> set[str]:
    """Every command and subcommand ``u`` may run (``cmd`` or ``cmd|sub``)."""
    out = set()
    for name, spec in COMMANDS.items():
        if spec.subcommands:
            out |= {f"{name}|{sub.name}" for sub in spec.subcommands if u.may_run(name, sub.name)}
        elif u.may_run(name):
            out.add(name)
    return out


def test_read_write_grants_drawing_and_reading_nothing_more() -> None:
    # Every command in the registry, checked: refused commands (an error whatever the grant) and
    # WORKER.* (a category of their own) aside, +@read +@write is exactly this.
    app = granted(user("+@read", "+@write"))
    ours = {c for c in app if COMMANDS[c.split("|")[0]].group != "refused" and not c.startswith("worker.")}
    assert ours == {
        "incr", "incrby",  # draw IDs
        "get", "mget", "exists", "type", "ttl", "pttl", "keys", "scan", "dbsize",  # read
        "seq.info", "seq.decode", "seq.list",
    }  # fmt: skip
    assert "seq.alter" not in app and "seq.create" not in app and "set" not in app


def test_the_app_category_is_what_client_libraries_send() -> None:
    assert granted(user("+@app")) == {
        "ping", "echo", "select", "hello", "auth", "quit", "reset",  # handshake
        "client|id", "client|setname", "client|getname", "client|setinfo", "client|info", "client|no-touch",
        "client|help",
        "multi", "exec", "discard", "watch", "unwatch",  # redis-py transaction=True, ioredis multi()
        "cluster|slots", "cluster|shards", "cluster|nodes", "cluster|info", "cluster|myid", "cluster|keyslot",
        "command|count", "command|info", "command|docs", "command|list", "command|getkeys",  # RedisCluster
        "readonly", "readwrite", "asking",
        # redis-py Sentinel, ioredis sentinels, Jedis, Lettuce: discovery only (docs/sentinel.md)
        "sentinel|get-master-addr-by-name", "sentinel|masters", "sentinel|master", "sentinel|replicas",
        "sentinel|slaves", "sentinel|sentinels", "sentinel|myid", "role",
        "cluster|help", "command|help", "sentinel|help",  # (a container's HELP has its categories)
        "subscribe", "unsubscribe", "psubscribe", "punsubscribe",  # +switch-master (Jedis, go-redis, Lettuce)
    }  # fmt: skip


def test_seq_alter_is_seqadmin() -> None:
    ops = user("+@seqadmin", "~*")
    assert denied(ops, "SEQ.ALTER", "k", "MINBATCH", "5") is None
    assert denied(user("+@all", "-@seqadmin", "~*"), "SEQ.ALTER", "k", "MINBATCH", "5") == ("command", "seq.alter")
    assert granted(ops) == {"seq.alter"}


def test_key_patterns_read_and_write() -> None:
    u = user("+@all", "~orders:*", "%R~stats:*", "%W~sink:*")
    assert denied(u, "INCR", "orders:eu") is None and denied(u, "GET", "orders:eu") is None
    assert denied(u, "GET", "stats:a") is None
    assert denied(u, "INCR", "stats:a") == ("key", "stats:a")
    assert denied(u, "INCR", "sink:a") == ("key", "sink:a")  # INCR reads as well (its key spec is RW)
    assert denied(u, "SEQ.CREATE", "sink:a") is None  # creating only writes
    assert denied(u, "GET", "sink:a") == ("key", "sink:a")
    assert denied(u, "EXISTS", "sink:a") is None and denied(u, "TYPE", "stats:a") is None  # any pattern: metadata
    assert denied(u, "GET", "invoices") == ("key", "invoices")
    assert denied(u, "MGET", "orders:1", "invoices") == ("key", "invoices")
    assert not u.unrestricted
    u.apply(["allkeys"], COMMANDS)
    assert u.unrestricted and denied(u, "GET", "anything") is None
    u.apply(["resetkeys"], COMMANDS)
    assert denied(u, "GET", "orders:eu") == ("key", "orders:eu")


def test_reset_and_the_default_user() -> None:
    users = Users(COMMANDS)
    default = users.default
    assert default.name == DEFAULT and default.enabled and default.nopass and default.unrestricted
    assert default.describe() == "on nopass ~* &* +@all"
    default.apply(["reset"], COMMANDS)
    assert default.describe() == "off resetchannels -@all" and not default.unrestricted


# --- what the store keeps ----------------------------------------------------------------------

_RULES = st.lists(
    st.sampled_from(
        [
            "on", "off", ">a", ">b", "nopass", "resetpass", "~orders:*", "%R~r*", "%W~w*", "allkeys", "resetkeys",
            "+@read", "-@read", "+@write", "+@admin", "-@admin", "+@all", "-@all", "+get", "-get", "+config|get",
            "-config|get", "+config", "allchannels", "resetchannels", "+@create", "+@floor", "reset",
            "&news.*", "&alerts", "+select|0", "%RW~orders:*", "%R~orders:*", "+subscribe", "+psubscribe",
        ]
    ),
    max_size=12,
)  # fmt: skip
_PROBES = [
    ["GET", "orders:1"], ["INCR", "orders:1"], ["GET", "r1"], ["INCR", "r1"], ["INCR", "w1"], ["GET", "w1"],
    ["CONFIG", "GET", "x"], ["CONFIG", "SET", "x", "y"], ["FAILOVER"], ["SEQ.CREATE", "orders:2"],
    ["SET", "orders:1", "9"], ["PING"], ["INCR", "other"], ["SELECT", "0"], ["SELECT", "1"],
    ["SUBSCRIBE", "news.eu"], ["SUBSCRIBE", "alerts", "other"], ["PSUBSCRIBE", "news.*"], ["PSUBSCRIBE", "news*"],
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(rules=_RULES)
def test_describe_rebuilds_the_same_user(rules: list[str]) -> None:
    try:
        original = user(*rules)
    except CommandError:  # (a pattern after allkeys or allchannels: refused, as Redis refuses it)
        assume(False)
        raise
    rebuilt = User("u")
    rebuilt.apply(["reset", *original.describe().split()], COMMANDS)
    assert rebuilt.describe() == original.describe()
    assert (rebuilt.enabled, rebuilt.nopass, rebuilt.passwords) == (
        original.enabled,
        original.nopass,
        original.passwords,
    )
    for probe in _PROBES:
        assert denied(rebuilt, *probe) == denied(original, *probe), (rules, probe)


def test_users_replace_updates_in_place_and_reports_who_went() -> None:
    users = Users(COMMANDS)
    alice = users.install("alice", "on >pw ~a* +get")
    users.install("bob", "on nopass ~* +@all")
    removed = users.replace({"alice": "on >pw ~b* +get", "default": "on >root ~* +@all"})
    assert [u.name for u in removed] == ["bob"]
    assert users.get("alice") is alice  # its open connections see the change
    assert denied(alice, "GET", "b1") is None and denied(alice, "GET", "a1") == ("key", "a1")
    assert not users.default.nopass and users.default.check_password(b"root")
    assert users.authenticate("alice", b"pw") is alice
    assert users.authenticate("alice", b"wrong") is None and users.authenticate("bob", b"x") is None
    users.install("alice", "off >pw")
    assert users.authenticate("alice", b"pw") is None  # disabled


def test_the_acl_file_round_trips() -> None:
    users = Users(COMMANDS)
    users.install("alice", "on >pw ~orders:* +@read +@write")
    text = format_acl_file(users)
    assert "pw" not in text.replace(hash_password(b"pw"), "")
    described = parse_acl_file("# a comment\n\n" + text)
    assert set(described) == {"alice", "default"}
    again = Users(COMMANDS)
    again.replace(described)
    assert format_acl_file(again) == text
    with pytest.raises(ValueError, match="line 1"):
        parse_acl_file("alice on >pw\n")


# --- the ACL log --------------------------------------------------------------------------------


def test_the_log_groups_repeats_and_keeps_the_newest() -> None:
    log = AclLog()
    log.add("auth", "toplevel", "AUTH", "alice", "id=1")
    log.add("key", "toplevel", "invoices", "bob", "id=2")
    log.add("auth", "toplevel", "AUTH", "alice", "id=3")
    assert [(e.reason, e.username, e.count) for e in log.entries] == [("auth", "alice", 2), ("key", "bob", 1)]
    assert log.entries[0].fields()[b"client-info"] == b"id=3"
    for i in range(LOG_SIZE + 10):
        log.add("command", "toplevel", f"cmd{i}", "carol", "")
    assert len(log.entries) == LOG_SIZE and log.entries[0].subject == f"cmd{LOG_SIZE + 9}"
    log.reset()
    assert log.entries == []


def test_subcommands_with_their_own_categories() -> None:
    """As in Redis: listing and killing clients is admin work, ACL WHOAMI is not."""
    u = user("+@all", "-@admin", "~*")
    assert denied(u, "CLIENT", "KILL", "ID", "1") == ("command", "client|kill")
    assert denied(u, "CLIENT", "LIST") == ("command", "client|list")
    assert denied(u, "CLIENT", "ID") is None
    assert denied(u, "ACL", "WHOAMI") is None
    assert denied(u, "ACL", "SETUSER", "x") == ("command", "acl|setuser")
    admin = user("+@admin", "~*")
    assert denied(admin, "CLIENT", "KILL", "ID", "1") is None and denied(admin, "ACL", "LIST") is None
    assert denied(admin, "CLIENT", "ID") == ("command", "client|id")


# --- AUTH throttling ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guess(t: AuthThrottle, clock: Clock, addr: str, user: str) -> float | None:
    """One failed attempt: the wait it was given (None: refused unchecked); the clock moves to its turn."""
    wait = t.admit(addr, user)
    if wait is not None:
        clock.now += wait
        t.failed(addr, user)
        wait = round(wait, 6)
    return wait


def test_failures_space_attempts_per_address_across_connections() -> None:
    clock = Clock()
    t = AuthThrottle(clock)
    waits = [guess(t, clock, "10.0.0.1", f"user{i}") for i in range(9)]  # any user: the address counts
    assert waits == [0, 0, 0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
    assert guess(t, clock, "10.0.0.1", "x") == 2.0  # at most one guess every 2 s, from then on
    assert guess(t, clock, "10.0.0.2", "y") == 0  # another address is not held back


def test_concurrent_attempts_queue_and_the_queue_is_bounded() -> None:
    clock = Clock()
    t = AuthThrottle(clock)
    for _ in range(12):
        guess(t, clock, "10.0.0.1", "u")
    turns = [t.admit("10.0.0.1", "u") for _ in range(4)]  # four connections at the same moment
    assert [rounded(w) for w in turns] == [2.0, 4.0, None, None]  # one per spacing; past THROTTLE_QUEUE: refused
    # A burst from nothing (twenty connections at once): each attempt counted as if those before it failed.
    fresh = AuthThrottle(clock)
    burst = [rounded(fresh.admit("10.0.0.5", "u")) for _ in range(20)]
    assert burst == [0, 0, 0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15] + [None] * 11


def rounded(wait: float | None) -> float | None:
    return None if wait is None else round(wait, 6)


def test_one_user_guessed_from_many_addresses_is_throttled_but_its_known_address_is_not() -> None:
    clock = Clock()
    t = AuthThrottle(clock)
    t.succeeded("10.0.0.9", "app")  # the application logged in from here before
    waits = [guess(t, clock, f"192.0.2.{i}", "app") for i in range(8)]  # a new address each time
    assert waits == [0, 0, 0, 0.05, 0.1, 0.2, 0.4, 0.8]
    assert t.admit("10.0.0.9", "app") == 0  # the application's own address: not held back by them
    assert t.admit("10.0.0.8", "app") is not None and t.admit("10.0.0.8", "app") > 0  # a new one is


def test_failures_are_forgotten_and_a_success_clears_its_address() -> None:
    clock = Clock()
    t = AuthThrottle(clock)
    for _ in range(6):
        guess(t, clock, "10.0.0.1", "u")
    clock.now += 61  # THROTTLE_FORGET
    assert guess(t, clock, "10.0.0.1", "u") == 0
    for _ in range(6):
        guess(t, clock, "10.0.0.1", "v")
    t.succeeded("10.0.0.1", "w")
    assert t.admit("10.0.0.1", "z") == 0


def test_the_tables_stay_bounded_under_a_flood() -> None:
    clock = Clock()
    t = AuthThrottle(clock, entries=1000)
    for i in range(20_000):
        guess(t, clock, f"addr{i}", f"user{i}")
        t.succeeded(f"addr{i}", f"other{i}")
    assert len(t) <= 3 * 1000


def test_guessing_from_a_shared_address_does_not_hold_back_those_who_logged_in_from_it() -> None:
    clock = Clock()
    t = AuthThrottle(clock)
    t.succeeded("10.0.0.1", "app")  # behind one NAT: the application and the guesser share the address
    waits = [guess(t, clock, "10.0.0.1", f"victim{i % 2}") for i in range(8)]
    assert waits == [0, 0, 0, 0.05, 0.1, 0.2, 0.4, 0.8]  # the guesser is spaced as before
    assert t.admit("10.0.0.1", "app") == 0  # the known pair is not held back by the address's failures
    t.abandoned("10.0.0.1", "app")
    assert t.admit("10.0.0.1", "stranger") is not None and t.admit("10.0.0.1", "stranger") > 0  # a new pair is
    # Guessing the known pair's own password from its address slows that pair (indistinguishable from
    # it) and counts for the address too.
    t2 = AuthThrottle(clock)
    t2.succeeded("10.0.0.2", "app")
    assert [guess(t2, clock, "10.0.0.2", "app") for _ in range(5)] == [0, 0, 0, 0.05, 0.1]
    wait = t2.admit("10.0.0.2", "other")
    assert wait is not None and wait > 0


def test_a_repeated_wrong_password_is_no_new_guess() -> None:
    """A client library retrying one mistyped password (redis-py 8 sends it eleven times) leaves the
    throttle as one failure would; each different password is a guess and waits its turn."""
    clock = Clock()
    t = AuthThrottle(clock)
    assert t.admit("10.0.0.1", "app") == 0
    t.failed("10.0.0.1", "app", b"typo")
    for _ in range(10):  # the retries: answered at once, counted nowhere
        assert t.repeated("10.0.0.1", "app", b"typo")
    assert not t.repeated("10.0.0.2", "app", b"typo") and not t.repeated("10.0.0.1", "other", b"typo")
    waits = []
    for i in range(6):  # guesses: the first failure above counted once
        wait = t.admit("10.0.0.1", "app")
        assert wait is not None
        clock.now += wait
        t.failed("10.0.0.1", "app", b"guess%d" % i)
        waits.append(round(wait, 6))
    assert waits == [0, 0, 0.05, 0.1, 0.2, 0.4]
    assert t.repeated("10.0.0.1", "app", b"guess5") and not t.repeated("10.0.0.1", "app", b"typo")  # the last 4 kept
    clock.now += 61  # THROTTLE_FORGET
    assert not t.repeated("10.0.0.1", "app", b"guess5")
    t.failed("10.0.0.1", "app", b"x")
    t.succeeded("10.0.0.1", "app", admitted=False)  # a success forgets the pair's wrong passwords
    assert not t.repeated("10.0.0.1", "app", b"x")


def test_a_pair_known_without_a_success_is_held_back_only_by_its_own_failures() -> None:
    """``know``: a forwarding link from the host etcd registered for its node (``commands.forward``):
    strangers claiming that node from elsewhere, and failures of its address on other names, do
    not slow it; its own failures do, and count for its address."""
    clock = Clock()
    t = AuthThrottle(clock)
    for i in range(10):  # strangers claim the node from elsewhere, and its host guesses other names
        guess(t, clock, f"192.0.2.{i}", " march-link:n1")
        guess(t, clock, "10.0.0.1", f" march-link:x{i}")
    t.know("10.0.0.1", " march-link:n1")
    assert t.admit("10.0.0.1", " march-link:n1") == 0
    t.abandoned("10.0.0.1", " march-link:n1")
    waits = [guess(t, clock, "10.0.0.1", " march-link:n1") for _ in range(5)]
    assert waits == [0, 0, 0, 0.05, 0.1]

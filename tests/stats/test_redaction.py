"""No password in SLOWLOG or MONITOR, wherever a request carries it (issue 20, item 5), on a real
march process: redaction follows each command's declared secrets (``table.Secrets``), down
through the commands a request carries (ACL DRYRUN, COMMAND GETKEYS) and the ones EXEC runs.

Redis itself redacts AUTH, HELLO AUTH, ACL SETUSER and CONFIG SET of a password option, but
shows ``ACL DRYRUN u AUTH pw`` and ``COMMAND GETKEYS AUTH pw`` in clear: March goes further.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from march_harness import MarchServer, RespConn

pytestmark = pytest.mark.e2e

ADMIN_PW = "redact-Admin-7731"
SECRETS = [f"pw-{i}-secret" for i in range(12)]
R = b"(redacted)"


def test_no_password_in_slowlog_or_monitor(march_factory: Callable[..., MarchServer]) -> None:
    server = march_factory(
        requirepass=ADMIN_PW, extra_args=["--slowlog-log-slower-than", "0", "--slowlog-max-len", "100"]
    )
    s = SECRETS
    requests: list[tuple[str, ...]] = [
        ("ACL", "DRYRUN", "default", "AUTH", s[0]),
        ("ACL", "DRYRUN", "default", "AUTH", "default", s[1]),
        ("ACL", "DRYRUN", "default", "HELLO", "3", "AUTH", "default", s[2]),
        ("COMMAND", "GETKEYS", "AUTH", s[3]),
        ("COMMAND", "GETKEYS", "HELLO", "3", "AUTH", "u", s[4], "SETNAME", "n"),
        ("COMMAND", "GETKEYSANDFLAGS", "AUTH", s[5]),  # a subcommand March does not have: refused, no call
        ("ACL", "DRYRUN", "default", "COMMAND", "GETKEYS", "AUTH", s[6]),  # two levels down
        ("ACL", "DRYRUN", "default", "NOSUCHCOMMAND", s[7]),  # a command March does not know: all redacted
        ("CONFIG", "SET", "requirepass", ADMIN_PW),
        ("ACL", "SETUSER", "carried", "on", f">{s[8]}", "~*", "+@all"),
    ]
    with RespConn(server.port) as watcher, RespConn(server.port) as c:
        assert watcher.call("AUTH", ADMIN_PW) == "OK"
        assert watcher.call("MONITOR") == "OK"
        assert c.call("AUTH", ADMIN_PW) == "OK"
        assert c.call("SLOWLOG", "RESET") == "OK"
        for request in requests:
            c.call(*request)
        # AUTH inside a transaction: shown and logged when EXEC runs it, redacted
        assert [c.call("MULTI"), c.call("AUTH", "default", s[9]), c.call("ECHO", "in-exec")] == [
            "OK",
            "QUEUED",
            "QUEUED",
        ]
        c.call("EXEC")
        c.call("ECHO", "redact:end")
        lines: list[str] = []
        while not lines or "redact:end" not in lines[-1]:  # (each read bounded by the socket's timeout)
            lines.append(watcher.read_reply())
        logged = [entry[3] for entry in c.call("SLOWLOG", "GET", "-1")]
    seen = "\n".join(lines) + repr(logged)
    assert not [secret for secret in [*SECRETS, ADMIN_PW] if secret in seen], seen
    assert [b"ACL", b"DRYRUN", b"default", b"AUTH", R] in logged
    assert [b"ACL", b"DRYRUN", b"default", b"AUTH", R, R] in logged
    assert [b"ACL", b"DRYRUN", b"default", b"HELLO", b"3", b"AUTH", R, R] in logged
    assert [b"COMMAND", b"GETKEYS", b"AUTH", R] in logged
    assert [b"COMMAND", b"GETKEYS", b"HELLO", b"3", b"AUTH", R, R, b"SETNAME", b"n"] in logged
    assert not [entry for entry in logged if entry[:2] == [b"COMMAND", b"GETKEYSANDFLAGS"]]  # never slow, as Redis
    assert [b"ACL", b"DRYRUN", b"default", b"COMMAND", b"GETKEYS", b"AUTH", R] in logged
    assert [b"ACL", b"DRYRUN", b"default", b"NOSUCHCOMMAND", R] in logged
    assert [b"CONFIG", b"SET", b"requirepass", R] in logged
    assert [b"ACL", b"SETUSER", *[R] * 5] in logged  # every argument, as Redis does
    assert [b"AUTH", R, R] in logged  # run by EXEC (user name too, as Redis; the AUTH before had one argument)
    # MONITOR shows COMMAND GETKEYS (not admin) and the AUTH that EXEC ran, redacted; never ACL or CONFIG
    assert '"COMMAND" "GETKEYS" "AUTH" "(redacted)"' in seen
    assert '"COMMAND" "GETKEYS" "HELLO" "3" "AUTH" "(redacted)" "(redacted)" "SETNAME" "n"' in seen
    assert '"AUTH" "(redacted)" "(redacted)"' in seen
    assert '"ACL"' not in "\n".join(lines) and '"CONFIG"' not in "\n".join(lines)

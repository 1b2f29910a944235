"""The log format (``march.log``): text and JSON lines carry the node id, an event and its fields;
passwords never reach a line; repeated lines are rate-limited and say how many were dropped.

Unit tests drive the formatters and the filter on hand-made records; the end-to-end checks run a
real server with ``--log-format json`` and ``--requirepass``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from march_harness import MarchServer, RespConn, RespError

from march import log as march_log
from march.config import Config

pytestmark = pytest.mark.e2e


@pytest.fixture
def node() -> Iterator[None]:
    """Name the node and set two secrets for one test; put the module's state back afterwards."""
    before = (march_log._state.node, march_log._state.secrets)
    march_log.set_node("node-a")
    march_log._state.secrets = ("s3cret-pass", "etcd-pw-123")
    yield
    march_log._state.node, march_log._state.secrets = before


def record(msg: str, *args: object, level: int = logging.WARNING, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("march.test", level, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(r, k, v)
    return r


def test_text_line_names_the_node_the_logger_and_the_fields(node: None) -> None:
    line = march_log.TextFormatter().format(
        record("closing client %s: %s", "1.2.3.4:5", "idle", event="client_limit", fields={"limit": "timeout"})
    )
    assert "\n" not in line
    assert " WARNING [node-a] march.test: closing client 1.2.3.4:5: idle limit=timeout" in line
    assert line[:4].isdigit() and line[19:24].startswith(".") and line[23] == "Z"  # 2026-11-23T05:20:00.123Z


def test_text_quotes_field_values_with_spaces(node: None) -> None:
    line = march_log.TextFormatter().format(record("x", fields={"why": "two words", "n": 3}))
    assert line.endswith('x why="two words" n=3')


def test_json_line_is_one_object_with_every_field(node: None) -> None:
    line = march_log.JsonFormatter().format(
        record("store %s failed: %s", "save", "disk full", event="store_failing", fields={"records": 3})
    )
    obj = json.loads(line)
    assert obj["node"] == "node-a"
    assert obj["level"] == "warning"
    assert obj["event"] == "store_failing"
    assert obj["logger"] == "march.test"
    assert obj["message"] == "store save failed: disk full"
    assert obj["fields"] == {"records": 3}
    assert obj["time"].endswith("Z")


def test_json_line_without_an_event_is_a_log_event(node: None) -> None:
    obj = json.loads(march_log.JsonFormatter().format(record("hello")))
    assert obj["event"] == "log" and obj["fields"] == {}


def test_json_line_keeps_a_traceback_inside_the_object(node: None) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        r = logging.LogRecord("march", logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info())
    line = march_log.JsonFormatter().format(r)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exception"]


@pytest.mark.parametrize("formatter", [march_log.TextFormatter(), march_log.JsonFormatter()])
def test_secrets_never_reach_a_line(node: None, formatter: logging.Formatter) -> None:
    line = formatter.format(
        record("connect with %s then %s", "s3cret-pass", "etcd-pw-123", fields={"pw": "s3cret-pass"})
    )
    assert "s3cret-pass" not in line and "etcd-pw-123" not in line
    assert "(redacted)" in line


def test_a_password_changed_at_run_time_stays_redacted(node: None, monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[tuple[str, ...]] = []
    monkeypatch.setattr(march_log, "_handler", logging.NullHandler())  # as after ``march serve`` configured it
    monkeypatch.setattr(march_log, "configure", lambda *a, secrets=(), **k: given.append(tuple(secrets)))

    march_log.apply(Config(requirepass="new-pass-456"))  # CONFIG SET requirepass new-pass-456
    assert given and {"s3cret-pass", "new-pass-456"} <= set(given[-1])


def test_short_strings_are_not_treated_as_secrets() -> None:
    before = march_log._state.secrets
    try:
        march_log._state.secrets = ()
        march_log.add_secret("ab")
        assert march_log._state.secrets == ()
        march_log.add_secret("long-enough")
        assert march_log._state.secrets == ("long-enough",)
    finally:
        march_log._state.secrets = before


def test_rate_limit_drops_repeats_and_counts_them() -> None:
    now = [0.0]
    limit = march_log.RateLimit(burst=3, window=60.0, clock=lambda: now[0])
    passed = [limit.filter(record("client %s over its limit", i)) for i in range(10)]
    assert passed == [True] * 3 + [False] * 7
    assert limit.filter(record("another template")) is True  # limits are per template, not per logger
    now[0] = 61.0
    later = record("client %s over its limit", 99)
    assert limit.filter(later) is True
    assert later.suppressed == 7  # type: ignore[attr-defined]
    assert "suppressed=7" in march_log.TextFormatter().format(later)


def test_event_helper_passes_event_and_fields(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("march.test.event")
    with caplog.at_level(logging.INFO, logger="march.test.event"):
        march_log.event(logger, logging.INFO, "role", "standby -> serving", cause="elected")
    (r,) = caplog.records
    assert r.event == "role" and r.fields == {"cause": "elected"}  # type: ignore[attr-defined]


# --- end to end -------------------------------------------------------------------------------------

PASSWORD = "pw-Zq81-never-logged"


def test_json_log_of_a_real_server_has_the_node_and_no_password(
    march_factory: Callable[..., MarchServer], tmp_path: Path
) -> None:
    """Start with --log-format json and a password, fail AUTH with a guess and with the password's
    neighbour, set a user with a password rule, stop: every line is JSON with the node id, and no
    password appears anywhere in the log."""
    server = march_factory(requirepass=PASSWORD, extra_args=["--log-format", "json", "--node-id", "log-node"])
    with RespConn(server.port) as c:
        for guess in ("wrong-guess-1", PASSWORD + "x"):
            assert isinstance(c.call("AUTH", guess), RespError)
        assert c.call("AUTH", PASSWORD) == "OK"
        assert c.call("ACL", "SETUSER", "alice", "on", ">alice-Secret-77", "~*", "+@all") == "OK"
    assert server.stop() == 0
    # the harness' own "=== start" line shows the command line it ran (march moves the password
    # out of its own process list at once): everything else is march's
    text = "\n".join(ln for ln in server.log_path.read_text().splitlines() if not ln.startswith("=== start"))
    assert PASSWORD not in text and "alice-Secret-77" not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    objs = [json.loads(ln) for ln in lines]
    assert objs, text
    assert all(o["node"] == "log-node" for o in objs), text
    events = {o["event"] for o in objs}
    assert "role" in events  # standby -> promoting -> serving, with their cause
    assert any("AUTH failed" in o["message"] for o in objs)
    assert any(o["message"] == "March stopped" for o in objs)
    # nothing but the harness' own start line is outside JSON
    others = [ln for ln in text.splitlines() if ln and not ln.startswith("{")]
    assert others == [], others


def test_store_watch_logs_a_failure_streak_once_and_its_end(caplog: pytest.LogCaptureFixture) -> None:
    from march.stats.counters import NodeMetrics
    from march.stats.diagnostics import LatencyMonitor, StoreWatch

    metrics, latency = NodeMetrics(()), LatencyMonitor()
    now = [0.0]
    watch = StoreWatch(metrics, latency, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="march.store"):
        for _ in range(3):
            watch.chunk("save", 2, 0.01, OSError("disk gone"))
        now[0] = 4.0
        watch.chunk("save", 1, 0.002, None)
        watch.chunk("save", 1, 1.5, None)
    events = [(r.event, r.getMessage()) for r in caplog.records]  # type: ignore[attr-defined]
    assert events == [
        ("store_failing", "store save failed: disk gone"),
        ("store_recovered", "store transactions succeed again after 3 failures in 4.0s"),
        ("store_slow", "slow store save: 1.50s for 1 records"),
    ]
    stats = metrics.store["save"]
    assert (stats.calls, stats.failures, stats.records) == (5, 3, 8)
    assert latency.latest()[0][0] == "store-write" and latency.latest()[0][3] == 1500

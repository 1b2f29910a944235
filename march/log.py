"""Logging for a March node: one line per event, as readable text or as JSON, each naming the node.

``configure(level, fmt, node_id, secrets)`` sets up the root logger once (``march serve``
calls it); calling it again (CONFIG SET log-level / log-format) swaps the level and the format in
place. ``set_node(node_id)`` names the node once its address is known.

- **text**: ``2026-11-23T05:20:00.123Z 1234 WARNING [node-a] march.keyspace.serving: message key=value``
- **json**: one object per line: ``time``, ``level``, ``node``, ``event``, ``logger``, ``message``,
  ``fields`` (and ``exception`` with a traceback, when there is one).

A line's event and fields come from ``extra={"event": "...", "fields": {...}}`` (``event()`` is the
short way); a line without them is event ``log``.

What this module must never do: let a secret out, or let a flood fill a disk.

- **Secrets**: every configured password (``Config.secrets()``: requirepass, etcd_password) is replaced by
  ``(redacted)`` in every line, whatever logged it. That is a net, not the rule: code never logs
  a password, a rule with ``>password``, or an AUTH's arguments in the first place.
- **Floods**: a line with the same template (logger and format string, not the values) is
  written at most ``BURST`` times per ``WINDOW`` seconds; the next one written after a pause says
  how many were dropped (``suppressed=N``). A client limit hit thousands of times a second, or a
  store outage seen by every sequence, costs a few lines a minute.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

BURST = 20  # lines per template per window: enough to see a problem start, not enough to fill a disk
WINDOW = 60.0  # seconds
_MAX_TEMPLATES = 4096  # templates tracked by the rate limit (they come from code, so this is never reached)
_MIN_SECRET = 4  # a shorter string would blank out ordinary words in every line (and is no password worth the name)
REDACTED = "(redacted)"

_handler: logging.Handler | None = None


class _State:
    node = ""
    secrets: tuple[str, ...] = ()


_state = _State()


def event(logger: logging.Logger, level: int, name: str, message: str, *args: Any, **fields: Any) -> None:
    """Log ``message % args`` as event ``name`` with ``fields`` (shown as key=value, or JSON fields)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, *args, extra={"event": name, "fields": fields})


class RateLimit(logging.Filter):
    """At most ``burst`` lines per template per ``window`` seconds; says how many it dropped."""

    def __init__(self, burst: int = BURST, window: float = WINDOW, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self._seen: dict[tuple[str, str], list[float]] = {}  # template -> [window start, lines, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is None or now - seen[0] >= self.window:
            if seen is None and len(self._seen) >= _MAX_TEMPLATES:
                self._seen.clear()
            dropped = int(seen[2]) if seen is not None else 0
            self._seen[key] = [now, 1, 0]
            if dropped:
                record.suppressed = dropped
            return True
        if seen[1] < self.burst:
            seen[1] += 1
            return True
        seen[2] += 1
        return False


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    out: dict[str, Any] = dict(fields) if isinstance(fields, Mapping) else {}
    suppressed = getattr(record, "suppressed", 0)
    if suppressed:
        out["suppressed"] = suppressed
    return out


def _redact(text: str) -> str:
    for secret in _state.secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _time(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    """One readable line: time (UTC), pid, level, [node], logger: message key=value..."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        fields = _fields(record)
        if fields:
            message += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        line = f"{_time(record.created)} {record.process} {record.levelname} [{_state.node}] {record.name}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return _redact(line)


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "time": _time(record.created),
            "level": record.levelname.lower(),
            "node": _state.node,
            "event": getattr(record, "event", "log"),
            "logger": record.name,
            "message": record.getMessage(),
            "fields": _fields(record),
        }
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return _redact(json.dumps(obj, default=str, ensure_ascii=False))


def configure(
    level: str = "info",
    fmt: str = "text",
    node_id: str = "",
    secrets: Iterable[str] = (),
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Set up (or change) the ``march`` logger's level, format, node id and secrets; returns its handler.

    Safe to call again at run time (CONFIG SET log-level / log-format): the one handler is kept,
    its formatter and the level change. ``secrets`` replaces the list of strings to redact.
    """
    global _handler
    logger = logging.getLogger()  # the root: asyncio's and grpc's lines get the same format and node id
    if _handler is None:
        _handler = logging.StreamHandler(stream or sys.stderr)
        _handler.addFilter(RateLimit())
        logger.addHandler(_handler)
    elif stream is not None and isinstance(_handler, logging.StreamHandler):
        _handler.setStream(stream)
    _handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.setLevel(getattr(logging, level.upper()))
    if node_id:
        _state.node = node_id
    _state.secrets = tuple(sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True))
    return _handler


def set_node(node_id: str) -> None:
    """Name this node in every line from now on (once its listening address is known)."""
    _state.node = node_id


def add_secret(secret: str) -> None:
    """Redact ``secret`` from every line from now on (a password set at run time)."""
    if len(secret) >= _MIN_SECRET and secret not in _state.secrets:
        _state.secrets = tuple(sorted((*_state.secrets, secret), key=len, reverse=True))


def apply(config: Any) -> None:
    """CONFIG SET log-level / log-format / requirepass: apply ``config``'s logging settings now.

    Before ``configure`` (a node run inside a test process) only the level changes, so the test's
    own log capture keeps working. A password replaced at run time stays redacted: clients and
    scripts may still send it.
    """
    if _handler is None:
        logging.getLogger().setLevel(getattr(logging, config.log_level.upper()))
        return
    configure(config.log_level, config.log_format, secrets=(*_state.secrets, *config.secrets()))

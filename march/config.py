"""One frozen ``Config``, built once from a TOML file < environment ``MARCH_*`` < command-line flags.

Every option is declared once, in ``OPTIONS``: its name, type, default, the one-line help that
the CLI, ``CONFIG GET`` and the README's configuration reference all show. Nothing else in March
reads the environment or a file for settings; constructors receive the ``Config``.

Names: ``data_dir`` in Python and TOML (``data-dir`` is accepted too), ``--data-dir`` on the
command line, ``MARCH_DATA_DIR`` in the environment, ``data-dir`` in ``CONFIG GET``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import errors

MAX_ID = (1 << 63) - 1  # IDs are signed 64-bit integers, as Redis INCR replies are
MAX_KEY_LEN = 64 << 10  # no sequence name may approach what one etcd request carries (1.5 MiB)


class ConfigError(ValueError):
    """A setting is missing, unknown or out of range; the message says which and why."""


@dataclass(frozen=True)
class Config:
    bind: str = "127.0.0.1"
    port: int = 7379
    data_dir: str = "./data"
    requirepass: str = ""
    aclfile: str = ""
    protected_mode: bool = True
    log_level: str = "info"
    log_format: str = "text"
    metrics_port: int = 0
    slowlog_log_slower_than: int = 10000
    slowlog_max_len: int = 128
    shutdown_timeout: float = 5.0
    max_clients: int = 10000
    max_args: int = 1 << 20
    max_bulk_len: int = 1 << 20
    max_inline_len: int = 64 << 10
    max_output_buffer: int = 64 << 20
    client_query_buffer_limit: int = 16 << 20
    query_buffer_budget: int = 128 << 20
    max_key_len: int = 1024
    timeout: float = 0.0
    max_sequences: int = 1_000_000
    max_multi_commands: int = 10_000
    auto_create: bool = True
    min_batch: int = 1000
    max_batch: int = 1_000_000
    batch_interval: float = 1.0
    watermark: float = 0.5
    max_wait: float = 2.0
    store_timeout: float = 5.0
    max_incrby: int = 1_000_000
    timestamp_lookahead_ms: int = 3000
    timestamp_max_lead_ms: int = 1000
    worker_ttl: int = 30
    worker_margin: float = 10.0
    enable_debug_command: bool = False
    etcd: str = ""
    etcd_prefix: str = "/march"
    node_id: str = ""
    advertise: str = ""
    lease_ttl: int = 3
    etcd_user: str = ""
    etcd_password: str = ""
    etcd_ca_cert_file: str = ""
    etcd_cert_file: str = ""
    etcd_key_file: str = ""
    tls_port: int = 0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_cert_file: str = ""
    tls_auth_clients: str = "yes"
    config_file: str = ""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def etcd_endpoints(self) -> list[str]:
        return [e.strip() for e in self.etcd.split(",") if e.strip()]

    @property
    def cluster(self) -> bool:
        return bool(self.etcd_endpoints)

    def address(self, port: int) -> str:
        """host:port that clients are sent to: ``advertise``, else the bind address (loopback for a
        wildcard) and ``port`` (the one actually listened on)."""
        host = self.bind if self.bind not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return self.advertise or f"{host}:{port}"

    def node_name(self, port: int) -> str:
        """This node's id in logs and metrics (and the cluster's default id): ``node_id``, else its address."""
        return self.node_id or self.address(port)

    def secrets(self) -> tuple[str, ...]:
        """The passwords this config holds (options declared ``secret``): never shown, never logged."""
        return tuple(value for o in OPTIONS if o.secret and (value := getattr(self, o.name)))

    def public_items(self) -> dict[str, str]:
        """``CONFIG GET`` view: dashed names, string values, the password masked."""
        out: dict[str, str] = {}
        for o in OPTIONS:
            value = getattr(self, o.name)
            if o.secret and value:
                text = "********"
            elif isinstance(value, bool):
                text = "yes" if value else "no"
            else:
                text = str(value)
            out[o.name.replace("_", "-")] = text
        return out


@dataclass(frozen=True)
class Option:
    """One setting. ``live``: ``CONFIG SET`` may change it in a running server (see ``App.reconfigure``
    for where each live value is pushed); otherwise ``restart`` says why it takes a restart.

    An option is not live unless declared so: a new option must be checked (who caches it? can a
    new value ever lower what is persisted?) before it may change at run time.
    """

    name: str
    help: str
    section: str = "server"
    live: bool = False
    restart: str = errors.RESTART_AT_START
    secret: bool = False  # a password: CONFIG GET masks it, the log redacts it (``Config.secrets``)

    @property
    def default(self) -> Any:
        return Config.__dataclass_fields__[self.name].default

    @property
    def type(self) -> type:
        return _TYPES[str(Config.__dataclass_fields__[self.name].type)]


OPTIONS: tuple[Option, ...] = (
    # server
    Option("bind", "address to listen on (0.0.0.0 for every interface)", restart=errors.RESTART_LISTEN),
    Option("port", "TCP port for RESP clients (0 picks a free port, printed at start)", restart=errors.RESTART_LISTEN),
    Option("data_dir", "directory of the embedded store (march.sqlite3) and its lock", restart=errors.RESTART_STORE),
    Option(
        "requirepass", "password of the default user; empty = no AUTH needed (loopback only)", live=True, secret=True
    ),
    Option(
        "aclfile",
        "ACL file (Redis' format) that seeds the users when the store has none; ACL LOAD/SAVE use it",
        restart=errors.RESTART_ACLFILE,
    ),
    Option("protected_mode", "with no password, refuse clients that are not on the loopback interface", live=True),
    Option("log_level", "debug, info, warning or error", live=True),
    Option(
        "log_format",
        "text (one readable line per event) or json (one JSON object per line, for log shippers)",
        live=True,
    ),
    Option("shutdown_timeout", "seconds that SHUTDOWN/SIGTERM wait for in-flight requests"),
    Option(
        "metrics_port",
        "port of the Prometheus /metrics endpoint on the bind address (0 = off)",
        "observability",
        restart=errors.RESTART_METRICS,
    ),
    Option(
        "slowlog_log_slower_than",
        "SLOWLOG records commands slower than this many microseconds (0 = every command, -1 = none)",
        "observability",
        live=True,
    ),
    Option("slowlog_max_len", "most entries SLOWLOG keeps (the oldest go first)", "observability", live=True),
    Option(
        "enable_debug_command",
        "allow DEBUG CLOCK-OFFSET, which moves the clock timestamp IDs read (tests only)",
        restart=errors.RESTART_DEBUG,
    ),
    # limits
    Option("max_clients", "connections beyond this get 'ERR max number of clients reached'", "limits", live=True),
    Option(
        "max_args",
        "most arguments in one request (protocol error beyond); client_query_buffer_limit allows fewer",
        "limits",
        live=True,
    ),
    Option("max_bulk_len", "largest argument in bytes (protocol error beyond)", "limits", live=True),
    Option("max_inline_len", "longest inline command line in bytes", "limits", live=True),
    Option("max_output_buffer", "bytes of unread replies before a client is disconnected", "limits", live=True),
    Option(
        "client_query_buffer_limit",
        "bytes of memory one unfinished request may hold, 48 per argument included (protocol error beyond)",
        "limits",
        live=True,
    ),
    Option(
        "query_buffer_budget",
        "bytes of memory all clients' unfinished requests may hold; past it the largest are closed (0 = no budget)",
        "limits",
        live=True,
    ),
    Option("max_key_len", "longest sequence name in bytes (creating a longer one is an error)", "limits", live=True),
    Option("timeout", "close a client with no complete request for this many seconds (0 = never)", "limits", live=True),
    Option(
        "max_sequences",
        "most sequences that may exist; creating one more is an error (0 = no limit)",
        "limits",
        live=True,
    ),
    Option(
        "max_multi_commands", "most commands queued in one MULTI; one more aborts the transaction", "limits", live=True
    ),
    # sequences
    Option("auto_create", "INCR on an unknown key creates a sequence (off: SEQ.CREATE first)", "sequences", live=True),
    Option("min_batch", "smallest range of IDs persisted at a time", "sequences", live=True),
    Option("max_batch", "largest range of IDs persisted at a time", "sequences", live=True),
    Option("batch_interval", "target seconds one batch lasts; the batch adapts to it", "sequences", live=True),
    Option("watermark", "extend when less than this fraction of the batch is left", "sequences", live=True),
    Option("max_wait", "seconds a request waits for a store write before TRYAGAIN", "sequences", live=True),
    Option("store_timeout", "seconds before one store write is given up (and retried)", "sequences", live=True),
    Option("max_incrby", "largest n in INCRBY key n", "sequences", live=True),
    Option(
        "timestamp_lookahead_ms",
        "timestamp sequences persist a time bound this far ahead (a restart starts past it)",
        "sequences",
        live=True,
    ),
    Option(
        "timestamp_max_lead_ms",
        "most milliseconds the time inside a timestamp ID may run ahead of real time (0 = no cap)",
        "sequences",
        live=True,
    ),
    # workers
    Option("worker_ttl", "seconds a worker id is held by WORKER.ACQUIRE when no TTL is given", "workers", live=True),
    Option(
        "worker_margin",
        "seconds an expired worker id rests beyond its TTL before it is handed out again",
        "workers",
        live=True,
    ),
    # cluster
    Option(
        "etcd",
        "etcd endpoints host:port,...; empty = single node on the embedded store",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "etcd_prefix",
        "every key of this cluster lives under this etcd prefix",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "node_id",
        "this node's id in the cluster (default: advertised host:port)",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "advertise",
        "host:port that clients are sent to (MOVED, CLUSTER SLOTS); default bind:port",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "lease_ttl",
        "seconds of the leadership lease; a dead primary is replaced after about this",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option("etcd_user", "etcd user name (with etcd_password)", "cluster", restart=errors.RESTART_ETCD),
    Option("etcd_password", "etcd password", "cluster", restart=errors.RESTART_ETCD, secret=True),
    Option("etcd_ca_cert_file", "CA certificate for TLS to etcd (enables TLS)", "cluster", restart=errors.RESTART_ETCD),
    Option("etcd_cert_file", "client certificate for TLS to etcd", "cluster", restart=errors.RESTART_ETCD),
    Option("etcd_key_file", "client key for TLS to etcd", "cluster", restart=errors.RESTART_ETCD),
    # TLS for clients (Redis' option names)
    Option(
        "tls_port", "TCP port for TLS clients, beside the plain port (0 = no TLS)", "tls", restart=errors.RESTART_LISTEN
    ),
    Option("tls_cert_file", "the server's certificate (PEM) for the TLS port", "tls", restart=errors.RESTART_TLS),
    Option("tls_key_file", "the server certificate's private key (PEM)", "tls", restart=errors.RESTART_TLS),
    Option(
        "tls_ca_cert_file",
        "CA certificate(s) that client certificates are checked against",
        "tls",
        restart=errors.RESTART_TLS,
    ),
    Option(
        "tls_auth_clients",
        "yes: clients need a certificate signed by the CA; optional; no",
        "tls",
        restart=errors.RESTART_TLS,
    ),
)

_BY_NAME = {o.name: o for o in OPTIONS}
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}


def _validate(c: Config) -> None:
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    need(0 <= c.port <= 65535, "port must be between 0 and 65535")
    need(c.log_level in ("debug", "info", "warning", "error"), "log_level must be debug, info, warning or error")
    need(c.max_clients >= 1, "max_clients must be >= 1")
    need(c.max_args >= 3, "max_args must be >= 3")
    need(c.max_bulk_len >= 1024, "max_bulk_len must be >= 1024")
    need(c.max_inline_len >= 1024, "max_inline_len must be >= 1024")
    need(c.max_output_buffer >= 1 << 16, "max_output_buffer must be >= 65536")
    # An unfinished request must have room for two arguments of the largest size and the rest of
    # its request (the old fixed bound); the budget for all clients, for one client at its limit.
    need(
        2 * c.max_bulk_len + (64 << 10) <= c.client_query_buffer_limit <= 1 << 40,
        "client_query_buffer_limit must be at least 2 x max_bulk_len + 65536 (and at most 1 TiB)",
    )
    need(
        c.query_buffer_budget == 0 or c.client_query_buffer_limit <= c.query_buffer_budget <= 1 << 40,
        "query_buffer_budget must be 0 (no budget) or between client_query_buffer_limit and 1 TiB",
    )
    need(c.log_format in ("text", "json"), "log_format must be text or json")
    need(0 <= c.metrics_port <= 65535, "metrics_port must be between 0 and 65535")
    need(c.slowlog_log_slower_than >= -1, "slowlog_log_slower_than must be >= -1 (-1: off)")
    need(c.slowlog_max_len >= 0, "slowlog_max_len must be >= 0")
    need(0 <= c.timestamp_max_lead_ms <= 86_400_000, "timestamp_max_lead_ms must be between 0 and 86400000")
    need(1 <= c.worker_ttl <= 86_400, "worker_ttl must be between 1 and 86400 seconds")
    need(c.worker_margin >= 0, "worker_margin must be >= 0")
    need(c.timeout >= 0, "timeout must be >= 0")
    need(c.max_sequences >= 0, "max_sequences must be >= 0 (0: no limit)")
    need(c.max_multi_commands >= 1, "max_multi_commands must be >= 1")
    need(0 <= c.tls_port <= 65535, "tls_port must be between 0 and 65535")
    need(c.tls_auth_clients in ("yes", "no", "optional"), "tls_auth_clients must be yes, no or optional")
    if c.tls_port:
        need(bool(c.tls_cert_file and c.tls_key_file), "tls_port needs tls_cert_file and tls_key_file")
        need(c.tls_auth_clients == "no" or bool(c.tls_ca_cert_file), "tls_auth_clients needs tls_ca_cert_file")
    # 64 KiB: a name appears a few times in one etcd transaction, which must stay under etcd's
    # default 1.5 MiB request limit (and the store batches several records per transaction).
    need(1 <= c.max_key_len <= MAX_KEY_LEN, f"max_key_len must be between 1 and {MAX_KEY_LEN}")
    need(1 <= c.min_batch <= c.max_batch <= MAX_ID, "need 1 <= min_batch <= max_batch")
    need(c.batch_interval > 0, "batch_interval must be > 0")
    need(0 < c.watermark < 1, "watermark must be between 0 and 1 (exclusive)")
    need(c.max_wait > 0, "max_wait must be > 0")
    need(c.store_timeout > 0, "store_timeout must be > 0")
    need(1 <= c.max_incrby <= MAX_ID, "max_incrby must be >= 1")
    need(1 <= c.timestamp_lookahead_ms <= 86_400_000, "timestamp_lookahead_ms must be between 1 and 86400000")
    need(c.shutdown_timeout >= 0, "shutdown_timeout must be >= 0")
    need(2 <= c.lease_ttl <= 60, "lease_ttl must be between 2 and 60 seconds")
    need(bool(c.etcd_user) == bool(c.etcd_password), "etcd_user and etcd_password go together")
    need(bool(c.etcd_cert_file) == bool(c.etcd_key_file), "etcd_cert_file and etcd_key_file go together")
    need(
        c.etcd_prefix.startswith("/") and not c.etcd_prefix.endswith("/"),
        "etcd_prefix must start with / and not end with /",
    )
    for endpoint in c.etcd_endpoints:
        need(_is_host_port(endpoint), f"etcd endpoint {endpoint!r} must be host:port")
    need(not c.advertise or _is_host_port(c.advertise), "advertise must be host:port")


def _is_host_port(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) <= 65535)


def parse_value(option: Option, raw: Any, origin: str) -> Any:
    """Turn a TOML, environment or flag value into the option's type, or say what is wrong."""
    try:
        if option.type is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("yes", "true", "1", "on"):
                return True
            if text in ("no", "false", "0", "off"):
                return False
            raise ValueError(text)
        if option.type is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(str(raw).replace("_", "")) if not isinstance(raw, int) else raw
        if option.type is float:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return float(raw)
        return str(raw)
    except ValueError:
        raise ConfigError(f"{origin}: {option.name} expects {option.type.__name__}, got {raw!r}") from None


def load(
    file: str | None = None, env: Mapping[str, str] | None = None, flags: Mapping[str, Any] | None = None
) -> Config:
    """Build the Config: defaults < TOML ``file`` < ``env`` (``MARCH_*``) < ``flags`` (already typed)."""
    values: dict[str, Any] = {}
    env = os.environ if env is None else env
    file = file or env.get("MARCH_CONFIG") or None
    if file:
        path = Path(file)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {file} not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file}: {exc}") from None
        for section_or_key, value in data.items():
            items = value.items() if isinstance(value, dict) else [(section_or_key, value)]
            for key, raw in items:
                name = key.replace("-", "_")
                if name not in _BY_NAME:
                    raise ConfigError(f"config file {file}: unknown option {key!r}")
                values[name] = parse_value(_BY_NAME[name], raw, f"config file {file}")
        values["config_file"] = str(path)
    for o in OPTIONS:
        raw = env.get("MARCH_" + o.name.upper())
        if raw is not None:
            values[o.name] = parse_value(o, raw, "MARCH_" + o.name.upper())
    for name, raw in (flags or {}).items():
        if raw is not None:
            values[name] = parse_value(_BY_NAME[name], raw, "--" + name.replace("_", "-"))
    return Config(**values)


def with_changes(config: Config, **changes: Any) -> Config:
    return dataclasses.replace(config, **changes)


def reference_table() -> str:
    """The README's configuration reference, generated from ``OPTIONS`` (live: CONFIG SET changes it)."""
    lines = ["| option (TOML / env / flag) | default | live | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        default = o.default
        shown = ("yes" if default else "no") if isinstance(default, bool) else (default if default != "" else '""')
        flag = "--" + o.name.replace("_", "-")
        live = "yes" if o.live else "restart"
        lines.append(f"| `{o.name}` / `MARCH_{o.name.upper()}` / `{flag}` | `{shown}` | {live} | {o.help} |")
    return "\n".join(lines)


# --- CONFIG SET and CONFIG REWRITE ------------------------------------------------------------------

_ALIASES = {"maxclients": "max_clients"}  # Redis' names that CONFIG GET shows too


def find_option(name: str) -> Option | None:
    """The option a CONFIG SET name means: ``max-batch`` or ``max_batch`` in any case, or Redis' ``maxclients``."""
    key = name.lower().replace("-", "_")
    return _BY_NAME.get(_ALIASES.get(key, key))


_SECTION_LINE = re.compile(r"\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?")
_KEY_LINE = re.compile(r"(\s*)([A-Za-z0-9_-]+)(\s*=\s*)(.*)")


def toml_value(value: Any) -> str:
    """``value`` (an option's bool, int, float or str) as a TOML literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # 2.0, 1e-05, inf: all TOML
    # JSON's string escapes are TOML's; TOML also wants DEL escaped.
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def _inline_comment(rest: str) -> str:
    """The comment after a key's value (with the blanks before it), or ''."""
    for i, ch in enumerate(rest):
        if ch != "#":
            continue
        try:
            tomllib.loads("v = " + rest[:i])  # a '#' inside a string is not a comment
        except tomllib.TOMLDecodeError:
            continue
        return rest[len(rest[:i].rstrip()) :]
    return ""


def rewrite_file(path: str, values: Mapping[str, Any]) -> None:
    """Write ``values`` (option name -> value) into the TOML file at ``path``, keeping the rest as it is.

    A key already in the file gets its new value in place (its comments, inline ones too, stay); a
    missing one goes at the end of its option's section if the file has it, else into that section
    under a ``# CONFIG REWRITE`` comment at the end. The result is parsed back and checked, then
    written beside the file, flushed to disk and renamed over it: a crash leaves the old file or the
    new one, never half of one. Raises ``ConfigError`` or ``OSError``; the file is then unchanged.
    """
    target = Path(path).resolve()  # a symlinked config stays a symlink: write where it points
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    found: set[str] = set()
    section = ""
    section_end: dict[str, int] = {}  # section -> index just after its last key line
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        m = _SECTION_LINE.fullmatch(body)
        if m:
            section = m.group(1)
            section_end.setdefault(section, i + 1)
            continue
        m = _KEY_LINE.fullmatch(body)
        if m is None:
            continue
        section_end[section] = i + 1
        name = m.group(2).replace("-", "_")
        if name in values:  # every occurrence: the loader reads a key in any section
            found.add(name)
            value = toml_value(values[name])
            lines[i] = m.group(1) + m.group(2) + m.group(3) + value + _inline_comment(m.group(4)) + ending
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    missing: dict[str, list[str]] = {}
    for name, value in values.items():
        if name not in found:
            missing.setdefault(_BY_NAME[name].section, []).append(f"{name} = {toml_value(value)}\n")
    appended: list[str] = []
    for sect, new_lines in sorted(missing.items(), key=lambda item: -section_end.get(item[0], -1)):
        if sect in section_end:  # from the last section up, so earlier indexes stay right
            lines[section_end[sect] : section_end[sect]] = new_lines
        else:
            appended += ["\n", "# CONFIG REWRITE: set at run time\n", f"[{sect}]\n", *new_lines]
    text = "".join(lines + appended)
    _check_rewritten(text, values)
    _replace_atomically(target, text)


def _check_rewritten(text: str, values: Mapping[str, Any]) -> None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the rewritten file would not parse: {exc}") from None
    flat: dict[str, Any] = {}
    for section_or_key, value in data.items():
        for key, raw in value.items() if isinstance(value, dict) else [(section_or_key, value)]:
            flat[key.replace("-", "_")] = raw
    for name, want in values.items():
        if name not in flat or parse_value(_BY_NAME[name], flat[name], "rewrite") != want:
            raise ConfigError(f"could not place {name} in the file")


def _replace_atomically(target: Path, text: str) -> None:
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".rewrite")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(fd, target.stat().st_mode & 0o7777)  # keep the file's permissions (it may hold passwords)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)

"""One frozen ``Config``, built once from a TOML file < environment ``MARCH_*`` < command-line flags.

Every option is declared once, in ``OPTIONS``: its name, type, default, the one-line help that
the CLI, ``CONFIG GET`` and the README's configuration reference all show. Nothing else in March
reads the environment or a file for settings; constructors receive the ``Config``.

**Bounds.** Every number has a range, declared once beside its option (``Bounds``, with the reason)
and checked by one validator (``check_value``) wherever a value comes from: the TOML file, the
environment, flags, ``CONFIG SET``, and the per-sequence settings of ``SEQ.CREATE``/``SEQ.ALTER``
(``setting_bounds``). Numbers must be finite (``inf`` and ``nan`` are refused). Relations between
options (``min_batch <= max_batch``, TLS files given together...) are checked in ``_validate``.

Names: ``data_dir`` in Python and TOML (``data-dir`` is accepted too), ``--data-dir`` on the
command line, ``MARCH_DATA_DIR`` in the environment, ``data-dir`` in ``CONFIG GET``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from march import errors

MAX_ID = (1 << 63) - 1  # IDs are signed 64-bit integers, as Redis INCR replies are
MAX_KEY_LEN = 64 << 10  # no sequence name may approach what one etcd request carries (1.5 MiB)
# A batch is what a restart or failover may skip: at 10^9 a key survives 9 * 10^9 of them before
# 2^63, and no key draws 10^9 IDs in a batch interval (one process serves a few million per second).
MAX_BATCH = 1_000_000_000
# The lead cap of timestamp IDs: below 100 ms a busy key's bursts wait for the clock every few
# milliseconds (12 sequence bits: 409,600 IDs per 100 ms); above a minute, the time inside an ID
# (and where a restart starts) may be a minute ahead of real time. Always a cap: 0 is no value.
LEAD_MIN_MS = 100
LEAD_MAX_MS = 60_000
# Random bytes of a cluster secret made for ``cluster_secret_file`` (64 hex digits): a listener that
# sees a link's proof cannot guess a secret that long offline.
SECRET_BYTES = 32


class ConfigError(ValueError):
    """A setting is missing, unknown or out of range; the message says which and why."""


class ConfigTypeError(ConfigError):
    """A value is not of its option's type at all (``bla`` for a number): CONFIG SET says so in Redis' words."""


@dataclass(frozen=True)
class Config:
    bind: str = "127.0.0.1"
    port: int = 7379
    data_dir: str = "./data"
    requirepass: str = ""
    aclfile: str = ""
    acl_pubsub_default: str = "resetchannels"
    protected_mode: bool = True
    log_level: str = "info"
    log_format: str = "text"
    metrics_port: int = 0
    metrics_max_connections: int = 16
    metrics_max_connections_per_address: int = 4
    metrics_timeout: float = 5.0
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
    sequence_idle_seconds: float = 3600.0
    worker_ttl: int = 30
    worker_margin: float = 10.0
    worker_max_namespaces: int = 256
    worker_max_holders: int = 1024
    enable_debug_command: bool = False
    etcd: str = ""
    etcd_prefix: str = "/march"
    node_id: str = ""
    advertise: str = ""
    link_address: str = ""
    lease_ttl: int = 3
    join_other_cluster: bool = False
    sentinel_master_name: str = "march"
    groups: int = 1
    redirect: str = "moved"
    forward_port: int = 0
    cluster_secret: str = ""
    cluster_secret_file: str = ""
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
    tls_cluster: bool = False
    tls_cluster_required: bool = False
    tls_client_cert_file: str = ""
    tls_client_key_file: str = ""
    config_file: str = ""

    def __post_init__(self) -> None:
        # Redis' enum settings are read in any case and shown in lower case (CONFIG SET ... ALLCHANNELS)
        object.__setattr__(self, "acl_pubsub_default", self.acl_pubsub_default.lower())
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
            elif isinstance(value, float) and value.is_integer():
                text = str(int(value))  # whole seconds as Redis shows them (``timeout`` is ``0``, not ``0.0``)
            else:
                text = str(value)
            out[o.name.replace("_", "-")] = text
        return out


@dataclass(frozen=True)
class Bounds:
    """The range a number must be in (inclusive), and why: shown in the error."""

    low: float
    high: float
    why: str

    def text(self, name: str) -> str:
        return f"{name} must be between {_number(self.low)} and {_number(self.high)} ({self.why})"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


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
    bounds: Bounds | None = None  # every int and float option has them

    @property
    def default(self) -> Any:
        return Config.__dataclass_fields__[self.name].default

    @property
    def type(self) -> type:
        return _TYPES[str(Config.__dataclass_fields__[self.name].type)]


OPTIONS: tuple[Option, ...] = (
    # server
    Option("bind", "address to listen on (0.0.0.0 for every interface)", restart=errors.RESTART_LISTEN),
    Option(
        "port",
        "TCP port for RESP clients (0 picks a free port, printed at start)",
        restart=errors.RESTART_LISTEN,
        bounds=Bounds(0, 65535, "a TCP port; 0 picks a free one"),
    ),
    Option(
        "data_dir",
        "directory of the embedded store (march.sqlite3) and its lock; a cluster node keeps cluster.json "
        "there (which cluster it belongs to)",
        restart=errors.RESTART_STORE,
    ),
    Option(
        "requirepass", "password of the default user; empty = no AUTH needed (loopback only)", live=True, secret=True
    ),
    Option(
        "aclfile",
        "ACL file (Redis' format) that seeds the users when the store has none; ACL LOAD/SAVE use it",
        restart=errors.RESTART_ACLFILE,
    ),
    Option(
        "acl_pubsub_default",
        "channels a user gets when ACL SETUSER creates it (or resets it): resetchannels (none, Redis 7's "
        "default) or allchannels",
        live=True,
    ),
    Option("protected_mode", "with no password, refuse clients that are not on the loopback interface", live=True),
    Option("log_level", "debug, info, warning or error", live=True),
    Option(
        "log_format",
        "text (one readable line per event) or json (one JSON object per line, for log shippers)",
        live=True,
    ),
    Option(
        "shutdown_timeout",
        "seconds that SHUTDOWN/SIGTERM wait for in-flight requests",
        bounds=Bounds(0, 3600, "seconds; longer outlasts any supervisor's patience"),
    ),
    Option(
        "metrics_port",
        "port of the Prometheus /metrics endpoint on the bind address (0 = off)",
        "observability",
        restart=errors.RESTART_METRICS,
        bounds=Bounds(0, 65535, "a TCP port; 0 is off"),
    ),
    # A scraper or two per node, plus people with curl; each one a render's worth of work at most.
    Option(
        "metrics_max_connections",
        "most connections the metrics port serves at once; one more gets 503 and is closed",
        "observability",
        restart=errors.RESTART_METRICS,
        bounds=Bounds(1, 10_000, "connections; each holds a socket and a file descriptor"),
    ),
    # A Prometheus or two and a load balancer's probe per address: one address never takes every slot.
    Option(
        "metrics_max_connections_per_address",
        "most connections one address may hold on the metrics port; one more from it gets 503 and is closed",
        "observability",
        restart=errors.RESTART_METRICS,
        bounds=Bounds(1, 10_000, "connections; keep it below metrics_max_connections so others always get in"),
    ),
    # A scrape on a healthy network takes milliseconds; a client slower than this holds nothing longer.
    Option(
        "metrics_timeout",
        "seconds a metrics-port client has to take the reply, and to send its request head (at most 1 s)",
        "observability",
        restart=errors.RESTART_METRICS,
        bounds=Bounds(0.01, 3600, "seconds: a scrape takes milliseconds, an hour is plenty"),
    ),
    Option(
        "slowlog_log_slower_than",
        "SLOWLOG records commands slower than this many microseconds (0 = every command, -1 = none)",
        "observability",
        live=True,
        bounds=Bounds(-1, 3_600_000_000, "microseconds, at most an hour; -1 is off"),
    ),
    Option(
        "slowlog_max_len",
        "most entries SLOWLOG keeps (the oldest go first)",
        "observability",
        live=True,
        bounds=Bounds(0, 100_000, "each entry keeps a request's arguments: more is memory nobody reads"),
    ),
    Option(
        "enable_debug_command",
        "allow DEBUG CLOCK-OFFSET, which moves the clock timestamp IDs read (tests only)",
        restart=errors.RESTART_DEBUG,
    ),
    # limits
    Option(
        "max_clients",
        "connections beyond this get 'ERR max number of clients reached'",
        "limits",
        live=True,
        bounds=Bounds(1, 1_000_000, "each connection holds a file descriptor and buffers"),
    ),
    Option(
        "max_args",
        "most arguments in one request (protocol error beyond); client_query_buffer_limit allows fewer",
        "limits",
        live=True,
        bounds=Bounds(3, 1 << 20, "INCRBY key n needs 3; a million arguments is already one huge request"),
    ),
    Option(
        "max_bulk_len",
        "largest argument in bytes (protocol error beyond)",
        "limits",
        live=True,
        bounds=Bounds(1024, 512 << 20, "bytes: a key name needs at least 1 KiB, Redis stops at 512 MiB"),
    ),
    Option(
        "max_inline_len",
        "longest inline command line in bytes",
        "limits",
        live=True,
        bounds=Bounds(1024, 1 << 20, "bytes of one line typed by hand"),
    ),
    Option(
        "max_output_buffer",
        "bytes of unread replies before a client is disconnected",
        "limits",
        live=True,
        bounds=Bounds(1 << 16, 1 << 34, "bytes: at least one ordinary reply, at most 16 GiB per client"),
    ),
    Option(
        "client_query_buffer_limit",
        "bytes of memory one unfinished request may hold, 48 per argument included (protocol error beyond)",
        "limits",
        live=True,
        bounds=Bounds(1 << 20, 1 << 40, "bytes; also at least 2 x max_bulk_len + 65536 (checked with it)"),
    ),
    Option(
        "query_buffer_budget",
        "bytes of memory all clients' unfinished requests may hold; past it the largest are closed (0 = no budget)",
        "limits",
        live=True,
        bounds=Bounds(0, 1 << 40, "bytes; 0 or at least client_query_buffer_limit (checked with it)"),
    ),
    Option(
        "max_key_len",
        "longest sequence name in bytes (creating a longer one is an error)",
        "limits",
        live=True,
        bounds=Bounds(1, MAX_KEY_LEN, "bytes: a name appears a few times in one etcd request, limited to 1.5 MiB"),
    ),
    Option(
        "timeout",
        "close a client with no complete request for this many seconds (0 = never)",
        "limits",
        live=True,
        bounds=Bounds(0, 31_536_000, "seconds, at most a year; 0 is never"),
    ),
    Option(
        "max_sequences",
        "most sequences that may exist; creating one more is an error (0 = no limit)",
        "limits",
        live=True,
        bounds=Bounds(0, 1_000_000_000, "0 is no limit"),
    ),
    Option(
        "max_multi_commands",
        "most commands queued in one MULTI; one more aborts the transaction",
        "limits",
        live=True,
        bounds=Bounds(1, 1_000_000, "queued commands are held in memory until EXEC"),
    ),
    # sequences
    Option("auto_create", "INCR on an unknown key creates a sequence (off: SEQ.CREATE first)", "sequences", live=True),
    Option(
        "min_batch",
        "smallest range of IDs persisted at a time",
        "sequences",
        live=True,
        bounds=Bounds(1, MAX_BATCH, "IDs per store write; a restart may skip one batch"),
    ),
    Option(
        "max_batch",
        "largest range of IDs persisted at a time",
        "sequences",
        live=True,
        bounds=Bounds(1, MAX_BATCH, "IDs per store write; a restart may skip one batch"),
    ),
    Option(
        "batch_interval",
        "target seconds one batch lasts; the batch adapts to it",
        "sequences",
        live=True,
        bounds=Bounds(0.01, 3600, "seconds: shorter writes the store 100 times a second per busy key"),
    ),
    Option(
        "watermark",
        "extend when less than this fraction of the batch is left",
        "sequences",
        live=True,
        bounds=Bounds(0.01, 0.99, "a fraction of the batch"),
    ),
    Option(
        "max_wait",
        "seconds a request waits for a store write before TRYAGAIN",
        "sequences",
        live=True,
        bounds=Bounds(0.001, 60, "seconds a request may be held"),
    ),
    Option(
        "store_timeout",
        "seconds before one store write is given up (and retried)",
        "sequences",
        live=True,
        bounds=Bounds(0.01, 60, "seconds: a store write takes at least milliseconds"),
    ),
    Option(
        "max_incrby",
        "largest n in INCRBY key n",
        "sequences",
        live=True,
        bounds=Bounds(1, MAX_BATCH, "IDs one request may take, at most a batch"),
    ),
    Option(
        "timestamp_lookahead_ms",
        "timestamp sequences persist a time bound this far ahead (a restart starts past it)",
        "sequences",
        live=True,
        bounds=Bounds(1, 86_400_000, "at most a day: a bound further ahead only makes restarts jump further"),
    ),
    Option(
        "timestamp_max_lead_ms",
        "most milliseconds the time inside a timestamp ID may run ahead of real time",
        "sequences",
        live=True,
        bounds=Bounds(LEAD_MIN_MS, LEAD_MAX_MS, "the time in an ID may run this far ahead of the clock"),
    ),
    # An hour: a sequence used hourly or more stays in memory; one used less often costs one store
    # read and write at its next use (as after a restart) and gives back ~250 bytes meanwhile.
    Option(
        "sequence_idle_seconds",
        "seconds after its last ID that a sequence leaves memory, its unspent range a gap (0 = never, else >= 1)",
        "sequences",
        live=True,
        bounds=Bounds(0, 30 * 86_400, "seconds, at most 30 days; 0 keeps every sequence in memory"),
    ),
    # workers
    Option(
        "worker_ttl",
        "seconds a worker id is held by WORKER.ACQUIRE when no TTL is given",
        "workers",
        live=True,
        bounds=Bounds(1, 86_400, "seconds, at most a day"),
    ),
    Option(
        "worker_margin",
        "seconds an expired worker id rests beyond its TTL before it is handed out again",
        "workers",
        live=True,
        bounds=Bounds(0, 3600, "seconds"),
    ),
    # A few namespaces per application; bounds what WORKER.ACQUIRE may leave in the store (with 1024
    # holders each, 256 namespaces are at most 262,144 records, ~80 MB in etcd against its 2 GB quota).
    Option(
        "worker_max_namespaces",
        "most worker namespaces with records; an ACQUIRE in one more is an error (a namespace goes once its "
        "ids are free)",
        "workers",
        live=True,
        bounds=Bounds(1, 65_536, "namespaces; 256 x 1024 records is ~80 MB of etcd"),
    ),
    # 1024 is the whole 10-bit field; lower it to bound one namespace's records (an id above it is never used).
    Option(
        "worker_max_holders",
        "most worker ids held or resting in one namespace (1..1024)",
        "workers",
        live=True,
        bounds=Bounds(1, 1024, "the 10-bit worker field"),
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
        "link_address",
        "host:port other nodes open forwarding links to (default: advertise); with tls_cluster, its host "
        "and tls_port. For nodes that reach each other by other addresses than clients do (containers)",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "lease_ttl",
        "seconds of the leadership lease; a dead primary is replaced after about this",
        "cluster",
        restart=errors.RESTART_CLUSTER,
        bounds=Bounds(2, 60, "seconds: under 2 the keep-alive cannot keep up; over 60 a dead primary waits too long"),
    ),
    Option(
        "join_other_cluster",
        "let a node whose data dir records another deployment join the cluster at etcd_prefix (or start one "
        "there), or a cluster node's data dir serve a single node; the record is replaced. For one start only: "
        "leave it false in a file",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "sentinel_master_name",
        "the master name SENTINEL commands answer for (group 0's primary, at its forward_port when it has one), as "
        "clients' Sentinel settings name it",
        "cluster",
    ),
    Option(
        "groups",
        "leadership groups the slot space is split into when the cluster is first created (etcd keeps the "
        "cluster's number; `march groups` changes it on a running cluster)",
        "cluster",
        restart=errors.RESTART_CLUSTER,
        bounds=Bounds(1, 256, "one election each: more groups than a cluster has cores gain nothing"),
    ),
    Option(
        "redirect",
        "what the RESP and TLS ports do with a key request for a group this node does not serve: moved "
        "(answer MOVED, for cluster clients) or forward (relay it to the group's primary, as forward_port "
        "always does)",
        "cluster",
        restart=errors.RESTART_CLUSTER,
    ),
    Option(
        "forward_port",
        "a second TCP port for plain and Sentinel clients (0 = none): it serves every key, forwarding those "
        "of groups this node does not lead to their primaries, and SENTINEL replies name it; the RESP port "
        "keeps redirect. Needs cluster_secret",
        "cluster",
        restart=errors.RESTART_LISTEN,
        bounds=Bounds(0, 65535, "a TCP port; 0 is off"),
    ),
    Option(
        "cluster_secret",
        "the secret nodes authenticate their forwarding links with (the same on every node; needed for "
        "redirect forward and forward_port)",
        "cluster",
        restart=errors.RESTART_CLUSTER,
        secret=True,
    ),
    Option(
        "cluster_secret_file",
        "a file holding cluster_secret, read at start when cluster_secret is empty; a node that finds "
        "no file creates it with a random secret, so every node must read the same file (a shared volume)",
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
        "tls_port",
        "TCP port for TLS clients, beside the plain port (0 = no TLS)",
        "tls",
        restart=errors.RESTART_LISTEN,
        bounds=Bounds(0, 65535, "a TCP port; 0 is off"),
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
    # TLS between nodes (forwarding links; Redis' tls-cluster and tls-client-cert-file)
    Option(
        "tls_cluster",
        "forwarding links go to the primaries' TLS ports, their certificates checked against tls_ca_cert_file",
        "tls",
        restart=errors.RESTART_TLS,
    ),
    Option(
        "tls_cluster_required",
        "refuse forwarding links that come over plain TCP (only the TLS port takes them); needs tls_cluster",
        "tls",
        restart=errors.RESTART_TLS,
    ),
    Option(
        "tls_client_cert_file",
        "the certificate (PEM) this node shows on its TLS forwarding links (default: tls_cert_file)",
        "tls",
        restart=errors.RESTART_TLS,
    ),
    Option("tls_client_key_file", "its private key (default: tls_key_file)", "tls", restart=errors.RESTART_TLS),
)

_BY_NAME = {o.name: o for o in OPTIONS}
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}


def check_value(option: Option, value: Any) -> Any:
    """``value`` if it is a finite number within the option's bounds (other types: as is), else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{option.name} must be a finite number, not {value}")
    bounds = option.bounds
    if bounds is not None and not bounds.low <= value <= bounds.high:
        raise ConfigError(bounds.text(option.name))
    return value


# A sequence's own settings (SEQ.CREATE, SEQ.ALTER) and the option whose bounds they share.
_SETTING_OPTIONS = {
    "min_batch": "min_batch",
    "max_batch": "max_batch",
    "lookahead": "timestamp_lookahead_ms",
    "max_lead": "timestamp_max_lead_ms",
}


def setting_bounds(setting: str) -> Bounds:
    """The bounds of a per-sequence setting: those of the server option it overrides."""
    bounds = _BY_NAME[_SETTING_OPTIONS[setting]].bounds
    assert bounds is not None
    return bounds


def clamp_setting(setting: str, value: int) -> int:
    """A stored per-sequence setting within today's bounds (a record written before they existed:
    MAXLEAD 0, "no cap", becomes the largest cap; a batch of 2^62 the largest batch)."""
    bounds = setting_bounds(setting)
    if setting == "max_lead" and value == 0:
        return int(bounds.high)
    return int(min(max(value, bounds.low), bounds.high))


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _validate(c: Config) -> None:
    """Every option's own bounds, then the rules between options (``_validate_connections``: TLS,
    forwarding, etcd, addresses)."""
    need = _need
    for option in OPTIONS:
        check_value(option, getattr(c, option.name))
    need(
        bool(c.sentinel_master_name) and not any(ch.isspace() for ch in c.sentinel_master_name),
        "sentinel_master_name must be a non-empty name without spaces",
    )
    need(c.log_level in ("debug", "info", "warning", "error"), "log_level must be debug, info, warning or error")
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
    need(
        c.acl_pubsub_default in ("allchannels", "resetchannels"),
        "acl_pubsub_default: argument(s) must be one of the following: allchannels, resetchannels",
    )
    need(c.tls_auth_clients in ("yes", "no", "optional"), "tls_auth_clients must be yes, no or optional")
    if c.tls_port:
        need(bool(c.tls_cert_file and c.tls_key_file), "tls_port needs tls_cert_file and tls_key_file")
        need(c.tls_auth_clients == "no" or bool(c.tls_ca_cert_file), "tls_auth_clients needs tls_ca_cert_file")
    need(c.min_batch <= c.max_batch, "need min_batch <= max_batch")
    # A sweep of every sequence more often than once a second would be work for nothing.
    need(c.sequence_idle_seconds == 0 or c.sequence_idle_seconds >= 1, "sequence_idle_seconds must be 0 or at least 1")
    _validate_connections(c)


def _validate_connections(c: Config) -> None:
    """The rules of the options that say where a node connects and who may connect to it."""
    need = _need
    need(c.redirect in ("moved", "forward"), "redirect must be moved or forward")
    need(c.redirect == "moved" or bool(c.cluster_secret), "redirect forward needs cluster_secret")
    need(not c.forward_port or bool(c.cluster_secret), "forward_port needs cluster_secret (or cluster_secret_file)")
    need(
        not c.forward_port or c.forward_port not in (c.port, c.tls_port, c.metrics_port),
        "forward_port must differ from port, tls_port and metrics_port",
    )
    need(
        not c.tls_cluster or bool(c.tls_port and c.tls_ca_cert_file), "tls_cluster needs tls_port and tls_ca_cert_file"
    )
    need(not c.tls_cluster_required or c.tls_cluster, "tls_cluster_required needs tls_cluster")
    need(
        bool(c.tls_client_cert_file) == bool(c.tls_client_key_file),
        "tls_client_cert_file and tls_client_key_file go together",
    )
    need(bool(c.etcd_user) == bool(c.etcd_password), "etcd_user and etcd_password go together")
    need(bool(c.etcd_cert_file) == bool(c.etcd_key_file), "etcd_cert_file and etcd_key_file go together")
    need(
        c.etcd_prefix.startswith("/") and not c.etcd_prefix.endswith("/"),
        "etcd_prefix must start with / and not end with /",
    )
    for endpoint in c.etcd_endpoints:
        need(_is_host_port(endpoint), f"etcd endpoint {endpoint!r} must be host:port")
    need(not c.advertise or _is_host_port(c.advertise), "advertise must be host:port")
    need(not c.link_address or _is_host_port(c.link_address), "link_address must be host:port")


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
        value: Any
        if option.type is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = int(str(raw).replace("_", "")) if not isinstance(raw, int) else raw
        elif option.type is float:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = float(raw)
        else:
            return str(raw)
    except ValueError:
        raise ConfigTypeError(f"{origin}: {option.name} expects {option.type.__name__}, got {raw!r}") from None
    try:
        return check_value(option, value)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


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
    if values.get("cluster_secret_file") and not values.get("cluster_secret"):
        values["cluster_secret"] = read_secret_file(values["cluster_secret_file"])
    return Config(**values)


def read_secret_file(path: str) -> str:
    """The cluster secret ``path`` holds (one line; blanks around it ignored). Where there is no file
    yet, one is made first with a random secret (``SECRET_BYTES``), mode 0600, whole or not at all:
    of nodes that start together on one shared file, one makes it and every one reads that secret."""
    target = Path(path)
    try:
        if not target.exists():
            _make_secret_file(target)
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cluster_secret_file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    secret = text.strip()
    if not secret or "\n" in secret:
        raise ConfigError(f"cluster_secret_file {path} must hold the secret on one line")
    return secret


def _make_secret_file(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".new")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(fd, 0o600)
            f.write(os.urandom(SECRET_BYTES).hex() + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another node's, made meanwhile, stays
            os.link(name, target)  # only where there is no file
    finally:
        os.unlink(name)


def with_changes(config: Config, **changes: Any) -> Config:
    return dataclasses.replace(config, **changes)


def reference_table() -> str:
    """The README's configuration reference, generated from ``OPTIONS`` (range: the bounds every source is
    checked against; live: CONFIG SET changes it)."""
    lines = ["| option (TOML / env / flag) | default | range | live | meaning |", "|---|---|---|---|---|"]
    for o in OPTIONS:
        default = o.default
        shown = ("yes" if default else "no") if isinstance(default, bool) else (default if default != "" else '""')
        flag = "--" + o.name.replace("_", "-")
        live = "yes" if o.live else "restart"
        span = "-" if o.bounds is None else f"{_number(o.bounds.low)} .. {_number(o.bounds.high)}"
        lines.append(f"| `{o.name}` / `MARCH_{o.name.upper()}` / `{flag}` | `{shown}` | {span} | {live} | {o.help} |")
    return "\n".join(lines)


def toml_comment(option: Option, width: int = 100) -> list[str]:
    """The comment config/march.toml carries right above ``option``'s key (tests/test_config.py checks
    the file against it): its help and, for a number, the range every source is checked against."""
    lines: list[str] = []
    for word in option.help.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append("# " + word)
    if option.bounds is not None:
        lines.append(f"# range: {_number(option.bounds.low)} .. {_number(option.bounds.high)}")
    return lines


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

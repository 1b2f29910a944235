"""The Go, Ruby, PHP, C and Node client programs of docs/clients, built and run as their pages say,
and redis-py's ``Sentinel`` as the README shows it (``support/redis_py_sentinel.py``).

Each program draws IDs from a few keys in turn and prints one line per draw (``id <key> <id>``,
``error <key> <message>``, ``resumed <key> after <s> s (<n> errors)``) until its input ends.
``ClientProgram`` says how to build (``prepare``) and run one (``command``, ``env``); ``Drawing``
runs it in the background, timestamps every line as it arrives and keeps the IDs per key, so a
test can kill a node while it draws and then ask when each key drew again (``resumed_after``)
and check the guarantees over what it drew (``check``).

The programs come from Debian 12's packages (golang-go with redigo, redisc and FZambia/sentinel
under /usr/share/gocode; ruby-redis; php-cli with php-redis; libhiredis-dev), which
``scripts/_env.sh`` (``march_clients``) installs; a program whose toolchain or library is missing
is reported by ``missing()`` so the test can skip it with the reason. Go builds in GOPATH mode
with modules off (no module proxy is reachable here); its compiled output is cached by Go's own
build cache, the C program is compiled with ``cc`` (well under a second).

The Node program (docs/clients/node/ioredis-sentinel.js) runs with ioredis 5 installed by npm into
the test's work directory (``march_harness.node.install_ioredis``), found through NODE_PATH.

``recommended()`` reads the cluster the README recommends from config/cluster/node1.toml (the file
``scripts/cluster`` starts node 1 with): its number of groups, and whether its nodes have a
forwarding port (``forward_port``, what Sentinel clients are sent to), so the tests run the
programs on that cluster and fail if it changes to one a client cannot survive.

Nothing here starts a March node; ``Drawing.stop()`` always reaps its program.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from march_harness.node import install_ioredis
from march_harness.servers import REPO_ROOT as REPO

CLIENTS = REPO / "docs" / "clients"
GOPATH = "/usr/share/gocode"  # where Debian's golang-*-dev packages put their sources
KEYS = ("orders", "payments", "invoices")  # slots 105, 8507, 13262: one key in each of 3 groups
STOP_TIMEOUT = 10.0  # seconds a program gets to end after its input closes (it checks between draws)


@dataclass(frozen=True)
class Recommended:
    """The README's cluster, as config/cluster/node1.toml sets it up."""

    groups: int  # leadership groups (``groups``; 1 if unset)
    forward: bool  # the nodes have a forwarding port (``forward_port``), with a cluster secret


def recommended(config: Path = REPO / "config" / "cluster" / "node1.toml") -> Recommended:
    """The README's cluster (see the module docstring)."""
    with config.open("rb") as f:
        flat: dict[str, object] = {}
        for key, value in tomllib.load(f).items():
            flat.update(value if isinstance(value, dict) else {key: value})
    forward = bool(flat.get("forward_port")) and bool(flat.get("cluster_secret") or flat.get("cluster_secret_file"))
    return Recommended(int(str(flat.get("groups", 1))), forward)


@dataclass(frozen=True)
class Prepared:
    """How to run a built program: its command line and what its environment needs besides."""

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientProgram:
    """One docs/clients program in one mode: ``cluster`` (MARCH_NODES) or ``sentinel``
    (MARCH_SENTINELS)."""

    name: str
    language: str  # go, ruby, php, c, node, python
    mode: str

    @property
    def variable(self) -> str:
        return "MARCH_NODES" if self.mode == "cluster" else "MARCH_SENTINELS"

    def missing(self) -> str | None:
        """Why this program cannot run here (a tool or library not installed), else None."""
        if self.language == "node":
            if shutil.which("node") is None or shutil.which("npm") is None:
                return "node or npm is not installed"
        elif self.language == "go":
            if shutil.which("go") is None:
                return "go is not installed (golang-go)"
            for package in ("gomodule/redigo", "mna/redisc", "FZambia/sentinel"):
                if not (Path(GOPATH) / "src/github.com" / package).is_dir():
                    return f"{package} is not in {GOPATH} (golang-github-*-dev)"
        elif self.language == "ruby":
            if shutil.which("ruby") is None:
                return "ruby is not installed"
            if subprocess.run(["ruby", "-e", "require 'redis'"], capture_output=True).returncode != 0:
                return "redis-rb is not installed (ruby-redis)"
        elif self.language == "php":
            if shutil.which("php") is None:
                return "php is not installed (php-cli)"
            probe = subprocess.run(["php", "-r", "exit(class_exists('RedisCluster') ? 0 : 1);"], capture_output=True)
            if probe.returncode != 0:
                return "phpredis is not installed (php-redis)"
        elif self.language == "c":
            if shutil.which("cc") is None or shutil.which("pkg-config") is None:
                return "cc or pkg-config is not installed"
            if subprocess.run(["pkg-config", "--exists", "hiredis"]).returncode != 0:
                return "hiredis is not installed (libhiredis-dev)"
        return None

    def prepare(self, workdir: Path) -> Prepared:
        """Build the program if it needs building (into ``workdir``); how to run it."""
        if self.language == "go":
            binary = workdir / "march-ids-go"
            if not binary.exists():  # one build per test session; Go's build cache makes a rebuild ~1 s
                _build(["go", "build", "-o", str(binary), "."], CLIENTS / "go" / "redigo", go_env())
            return Prepared([str(binary)])
        if self.language == "c":
            binary = workdir / "march-ids-c"
            if not binary.exists():
                flags = subprocess.run(
                    ["pkg-config", "--cflags", "--libs", "hiredis"], capture_output=True, text=True, check=True
                ).stdout.split()
                _build(["cc", "-O2", "-Wall", "-o", str(binary), "ids.c", *flags], CLIENTS / "c", dict(os.environ))
            return Prepared([str(binary)])
        if self.language == "node":
            modules = workdir / "node" / "node_modules"
            if not (modules / "ioredis").is_dir():  # one npm install per test session
                install_ioredis(workdir / "node")
            node = shutil.which("node")
            assert node is not None
            return Prepared([node, str(CLIENTS / "node" / "ioredis-sentinel.js")], {"NODE_PATH": str(modules)})
        if self.language == "python":
            return Prepared([sys.executable, str(Path(__file__).with_name("redis_py_sentinel.py"))])
        if self.language == "ruby":
            return Prepared(["ruby", str(CLIENTS / "ruby" / "ids.rb")])
        return Prepared(["php", str(CLIENTS / "php" / "ids.php")])


def go_env() -> dict[str, str]:
    """The environment docs/clients/go.md builds with: GOPATH mode over Debian's sources."""
    return {**os.environ, "GO111MODULE": "off", "GOPATH": GOPATH, "GOFLAGS": ""}


def _build(argv: list[str], cwd: Path, env: Mapping[str, str]) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(argv)} failed in {cwd}:\n{proc.stdout}{proc.stderr}"


PROGRAMS = {
    p.name: p
    for p in (
        ClientProgram("go-redisc", "go", "cluster"),
        ClientProgram("go-sentinel", "go", "sentinel"),
        ClientProgram("ruby-cluster", "ruby", "cluster"),
        ClientProgram("ruby-sentinel", "ruby", "sentinel"),
        ClientProgram("php-rediscluster", "php", "cluster"),
        ClientProgram("php-redissentinel", "php", "sentinel"),
        ClientProgram("c-hiredis", "c", "cluster"),
        ClientProgram("node-ioredis-sentinel", "node", "sentinel"),
        ClientProgram("py-redis-sentinel", "python", "sentinel"),
    )
}


@dataclass
class Drawing:
    """A client program drawing IDs in the background; every line it prints, timestamped."""

    program: ClientProgram
    command: list[str]
    env: dict[str, str]
    ids: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # key -> [(monotonic, id)]
    errors: list[tuple[float, str]] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)  # the program's own "resumed ..." lines
    other: list[str] = field(default_factory=list)
    stderr: str = ""
    returncode: int | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            now = time.monotonic()
            kind, _, rest = line.rstrip("\n").partition(" ")
            with self._lock:
                if kind == "id":
                    key, _, value = rest.partition(" ")
                    self.ids.setdefault(key, []).append((now, int(value)))
                elif kind == "error":
                    self.errors.append((now, rest))
                elif kind == "resumed":
                    self.resumed.append(rest)
                else:
                    self.other.append(line.rstrip("\n"))

    def count(self, key: str, after: float = 0.0) -> int:
        with self._lock:
            return sum(1 for t, _ in self.ids.get(key, ()) if t >= after)

    def resumed_after(self, key: str, since: float) -> float | None:
        """Seconds from ``since`` to the first ID of ``key`` that arrived after it; None if none did."""
        with self._lock:
            first = next((t for t, _ in self.ids.get(key, ()) if t >= since), None)
        return None if first is None else first - since

    def running(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        """Close its input (it stops after the draw it is in), wait; kill it if it does not end."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(STOP_TIMEOUT)
        except (subprocess.TimeoutExpired, OSError):
            self._proc.kill()
            self._proc.wait()
        finally:
            self._reader.join(5)
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    if stream is self._proc.stderr:
                        self.stderr = stream.read()
                    stream.close()
            self.returncode = self._proc.returncode

    def check(self) -> None:
        """This program's own draws: per key, every ID new and above the one before (one request at
        a time, each reply before the next request: guarantee 2 says increasing)."""
        for key, drawn in self.ids.items():
            values = [v for _, v in drawn]
            assert all(a < b for a, b in itertools.pairwise(values)), f"{key}: an ID went backwards"

    def last_errors(self, n: int = 5) -> list[str]:
        with self._lock:
            return [e for _, e in self.errors[-n:]]


def start(program: ClientProgram, prepared: Prepared, addresses: Iterable[str], keys: Iterable[str] = KEYS) -> Drawing:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        program.variable: ",".join(addresses),
        "MARCH_KEYS": ",".join(keys),
        "INTERVAL_MS": "10",
        **prepared.env,
    }
    return Drawing(program, prepared.command, env)


def no_duplicates(drawings: Iterable[Drawing]) -> None:
    """Across programs drawing the same keys at once: no ID of a key handed out twice (guarantee 1)."""
    seen: dict[str, set[int]] = {}
    for d in drawings:
        for key, drawn in d.ids.items():
            values = [v for _, v in drawn]
            mine = set(values)
            assert len(mine) == len(values), f"{d.program.name}: an ID of {key} came twice"
            twice = seen.setdefault(key, set()) & mine
            assert not twice, f"{d.program.name}: IDs of {key} also handed to another client: {sorted(twice)[:5]}"
            seen[key] |= mine

"""Server processes for tests and benchmarks: `MarchServer` (`python -m march serve`) and
`RedisServer` (a real redis-server, no persistence, for comparison tests).

Both bind 127.0.0.1 on a free port (a drill in network namespaces sets ``host`` and ``wrapper``),
write stdout+stderr to a log file (shown in failure messages), are ready when a TCP connection +
PING answers, and are reaped by `stop()` whatever state they are in. Readiness is polled with a
deadline, never slept for.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NamedTuple, Self, TypeVar

from march_harness.ports import free_port
from march_harness.resp import RespConn, RespError

REPO_ROOT = Path(__file__).resolve().parents[2]

START_TIMEOUT = 20.0  # a cold Python start on a loaded 2-core CI machine can take seconds
STOP_TIMEOUT = 15.0  # graceful shutdown flushes the store; after this the process is killed


P = TypeVar("P", bound="_Process")


class ServerExited(AssertionError):
    """The server process exited while we waited for it to become ready."""


def redis_binaries_present() -> bool:
    return all(shutil.which(b) for b in ("redis-server", "redis-cli", "redis-benchmark"))


class _Process:
    name = "server"

    def __init__(self, log_path: Path, port: int | None) -> None:
        self.log_path = log_path
        self.host = "127.0.0.1"  # where it listens (a drill in network namespaces gives each its own)
        self.wrapper: list[str] = []  # a command prefix, e.g. `ip netns exec <ns>` (which executes: same pid)
        self.port = port if port is not None else free_port()
        self._fixed_port = port is not None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.starts = 0

    # -- subclass hooks ------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        return None

    def ready_reply_ok(self, reply: object) -> bool:
        return reply == "PONG" or (isinstance(reply, RespError) and reply.prefix == "NOAUTH")

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} not started"
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting for readiness."""
        assert not self.running, f"{self.name} already running (pid {self.pid})"
        self._reap()
        self.starts += 1
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap()
        self._log.write(f"=== start #{self.starts}: {' '.join(self.wrapper + self.command())}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.wrapper + self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            cwd=REPO_ROOT,
            start_new_session=True,  # a Ctrl-C aimed at pytest must not reach the server first
        )
        return self.proc

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start and wait until PING answers. Picks another port if ours was taken meanwhile."""
        for attempt in range(5):
            self.spawn()
            try:
                self.wait_ready(timeout)
                return
            except ServerExited:
                port_taken = "in use" in self.log_tail(2000).lower()
                if self._fixed_port or not port_taken or attempt == 4:
                    raise
                self.port = free_port()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            if not self.running:
                self._reap()
                raise ServerExited(
                    f"{self.name} exited with code {self.returncode_after_exit} before it was ready\n{self.describe()}"
                )
            try:
                with RespConn(self.port, self.host, timeout=2.0) as c:
                    last = c.call("PING")
                if self.ready_reply_ok(last):
                    return
            except OSError as e:
                last = e
            if time.monotonic() >= deadline:
                self.stop()
                raise AssertionError(f"{self.name} not ready after {timeout}s (last: {last!r})\n{self.describe()}")
            time.sleep(0.02)

    def send_signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        """Send `sig`; for SIGKILL also reap and return the exit code."""
        self.send_signal(sig)
        if sig == signal.SIGKILL:
            return self.wait(STOP_TIMEOUT)
        return None

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait for the process to exit and reap it; fail after `timeout` (the process keeps running)."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running {timeout}s later\n{self.describe()}") from None
        self._reap()
        return code

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait, SIGKILL if needed. Always reaps. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self._reap()
        return code

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Stop (gracefully, if still running) and start again on the same port and state."""
        self.stop()
        self._fixed_port = True
        self.start(timeout)

    @property
    def returncode_after_exit(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    def _reap(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- diagnostics ---------------------------------------------------------------------
    def log_tail(self, limit: int = 4000) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return ""
        return data[-limit:].decode(errors="replace")

    def describe(self) -> str:
        return f"--- {self.name} log ({self.log_path}) ---\n{self.log_tail()}--- end of log ---"

    def conn(self, timeout: float = 10.0) -> RespConn:
        return RespConn(self.port, self.host, timeout=timeout)

    @property
    def url(self) -> str:
        """``redis://host:port``, as a client library takes it."""
        return f"redis://{self.host}:{self.port}"

    def __repr__(self) -> str:
        state = f"pid {self.proc.pid}" if self.running and self.proc else "stopped"
        return f"<{type(self).__name__} {self.host}:{self.port} {state}>"


class MarchServer(_Process):
    """`python -m march serve` on a free loopback port with its own data dir.

    `restart()` keeps the port and the data dir, so a restart continues the same state.
    """

    name = "march"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        requirepass: str | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        log_path: Path | None = None,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(log_path or data_dir.parent / f"march-{data_dir.name}.log", port)
        self.data_dir = data_dir
        self.requirepass = requirepass
        self.extra_args = list(extra_args)

    @classmethod
    def in_dir(cls, base: Path, **kwargs: Any) -> Self:
        """A march with its data dir at ``base/data`` and its log at ``base/march.log``."""
        return cls(base / "data", log_path=base / "march.log", **kwargs)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "march", "serve", "--bind", self.host, "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir)]
        if self.requirepass is not None:
            cmd += ["--requirepass", self.requirepass]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        # The developer's own MARCH_* settings must not leak into tests; the build the suite runs on
        # (MARCH_PURE_PYTHON: docs/compiled.md) must reach the server.
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARCH_") or k == "MARCH_PURE_PYTHON"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env


class RedisServer(_Process):
    """A real redis-server with no persistence, for tests whose expected values come from Redis."""

    name = "redis-server"

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        binary: str = "redis-server",
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(workdir / "redis-server.log", port)
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.binary = binary

    def command(self) -> list[str]:
        return [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--daemonize", "no",
            *self.extra_args,
        ]  # fmt: skip


@contextmanager
def serving(server: P, *, during: str | None = None, clean_exit: bool = False) -> Iterator[P]:
    """Start ``server`` for the ``with`` block and always stop (and reap) it afterwards.

    With ``during`` (what the server had to survive, for the message), the server must still be
    running when the block ends; with ``clean_exit``, SIGTERM must end it with exit code 0. The
    server is stopped whether the block or a check fails.
    """
    try:
        server.start()
        yield server
        if during is not None:
            assert server.running, f"{server.name} died during {during}\n{server.describe()}"
    finally:
        code = server.stop()
    if clean_exit:
        assert code == 0, f"{server.name} exited with {code} on SIGTERM\n{server.describe()}"


class Pair(NamedTuple):
    """A march and a real redis-server side by side: the same requests to both, Redis' reply expected."""

    march: MarchServer
    redis: RedisServer


@contextmanager
def paired(base: Path, redis_binary: str, *, during: str, requirepass: str | None = None) -> Iterator[Pair]:
    """A `Pair` in ``base`` for the ``with`` block (both with ``requirepass`` when given; redis-server
    without persistence), both always stopped afterwards. March must still be running at the end
    (it survived ``during``) and exit 0 on SIGTERM."""
    password = [] if requirepass is None else ["--requirepass", requirepass]
    with (
        serving(RedisServer(base / "redis", binary=redis_binary, extra_args=password)) as redis,
        serving(MarchServer.in_dir(base / "march", requirepass=requirepass), during=during, clean_exit=True) as march,
    ):
        yield Pair(march, redis)

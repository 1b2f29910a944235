"""A throwaway PostgreSQL cluster for the client's ORM tests: `PostgresCluster` and the
session-scoped `postgres` fixture.

The binaries come from Debian's `postgresql` package (`/usr/lib/postgresql/<version>/bin`, the
newest version), or from PATH. `initdb` refuses to run as root, so as root every PostgreSQL
process runs as the `postgres` system user, in a fresh temporary directory that user owns. The
server listens on 127.0.0.1 on a free port (and a Unix socket inside that directory, never in
/var/run), trusts every local connection (tests only), keeps nothing durable (`fsync=off`) and is
ready when a connection succeeds, polled with a deadline.

`stop()` always ends the postmaster (fast shutdown, then SIGKILL) and deletes the directory.
Nothing here touches a system-wide PostgreSQL, its data or its config. No binaries: the fixture
skips with the reason (a failure under CI, where scripts/test installs the package).

tests/clients/conftest.py imports the fixture, so the client tests share one cluster per session
(a module importing it itself would get its own cluster, stopped with the module's tests).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from march_harness.ports import free_port
from march_harness.servers import START_TIMEOUT, STOP_TIMEOUT, ServerExited

SYSTEM_USER = "postgres"  # Debian's package creates it; initdb will not run as root
SUPERUSER = "march"  # the database superuser initdb creates (trust auth: no password)


def postgres_bindir() -> Path | None:
    """The directory holding initdb and postgres: the newest /usr/lib/postgresql/*/bin, else PATH."""

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if all(os.access(Path(bindir) / b, os.X_OK) for b in ("initdb", "postgres")):
            return Path(bindir)
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    return None


def _run_as() -> dict[str, Any]:
    """Popen arguments that drop root to the postgres user (no-op for anyone else)."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam(SYSTEM_USER)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


class PostgresCluster:
    """One PostgreSQL server (initdb + postgres) in a temporary directory on a free loopback port."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="march-pg-"))
        self.data_dir = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log_path = self.base / "postgres.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT) -> None:
        as_user = _run_as()
        self.socket_dir.mkdir()
        if as_user:  # the postgres user must own its data and socket dirs (and reach them)
            for p in (self.base, self.socket_dir):
                os.chown(p, as_user["user"], as_user["group"])
        cmd = [str(self.bindir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "-A", "trust"]
        cmd += ["-E", "UTF8", "--locale=C", "--no-sync"]
        init = subprocess.run(
            cmd,
            capture_output=True,
            env=self._env(),
            cwd=self.base,
            timeout=120,
            check=False,
            **as_user,
        )
        if init.returncode != 0:
            raise AssertionError(f"initdb failed ({init.returncode}):\n{init.stdout.decode()}{init.stderr.decode()}")
        for attempt in range(5):
            self._spawn(as_user)
            try:
                self._wait_ready(timeout)
                return
            except ServerExited:
                if "in use" not in self.log_tail() or attempt == 4:
                    raise
                self.port = free_port()  # taken between free_port() and postgres' bind

    def _spawn(self, as_user: dict[str, Any]) -> None:
        self._reap()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap()
        cmd = [
            str(self.bindir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.socket_dir),
        ]
        # Tests only: nothing must survive a machine crash, and fsync on a shared CI disk costs seconds.
        cmd += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off"]
        cmd += ["-c", "full_page_writes=off", "-c", "max_connections=50"]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self.base,
            start_new_session=True,  # a Ctrl-C aimed at pytest must not reach it first
            **as_user,
        )

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                self._reap()
                raise ServerExited(f"postgres exited with code {code} before it was ready\n{self.describe()}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as e:
                last = e
            if time.monotonic() >= deadline:
                message = f"postgres not ready after {timeout}s (last: {last!r})\n{self.describe()}"
                self.stop()  # deletes the directory, the log with it: read first
                raise AssertionError(message)
            time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after a bounded wait; reap; delete the directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the backends too
                self.proc.wait()
        self._reap()
        shutil.rmtree(self.base, ignore_errors=True)

    def _reap(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _env(self) -> dict[str, str]:
        # The developer's own PG* settings (PGDATA, PGHOST, ...) must not redirect us.
        return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}

    # -- use -----------------------------------------------------------------------------
    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its name (tests use one each, so they never see each other's tables)."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-limit:].decode(errors="replace")
        except FileNotFoundError:
            return ""

    def describe(self) -> str:
        return f"--- postgres log ({self.log_path}) ---\n{self.log_tail()}--- end of log ---"

    def __repr__(self) -> str:
        return f"<PostgresCluster 127.0.0.1:{self.port} {self.base}>"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A started throwaway PostgreSQL for the session; skipped (CI: failed) without binaries."""
    bindir = postgres_bindir()
    if bindir is None:
        missing = "no PostgreSQL binaries (initdb, postgres): apt-get install postgresql"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    cluster = PostgresCluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()

"""A real Prometheus server (Debian's ``prometheus`` package) for tests: its own temp dir, a free
loopback port, scraping only the loopback targets it is given, stopped (and reaped) by ``stop()``.

It never reaches anything but 127.0.0.1: the configuration names only the targets the test passes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from march_harness.ports import free_port
from march_harness.resp import wait_until

START_TIMEOUT = 30.0  # seconds: a cold start opens a fresh TSDB and loads the rules


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def promtool_binary() -> str | None:
    return shutil.which("promtool")


class Prometheus:
    """``prometheus`` scraping ``targets`` (host:port) as job ``job`` every second, with ``rules``."""

    def __init__(
        self,
        base: Path,
        binary: str,
        targets: Sequence[str],
        *,
        rules: Sequence[Path] = (),
        job: str = "march",
        interval: str = "1s",
    ) -> None:
        self.base = base
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        base.mkdir(parents=True, exist_ok=True)
        self.config = base / "prometheus.yml"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(r) for r in rules],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
        }
        self.config.write_text(json.dumps(config, indent=2))  # JSON is YAML
        self.log_path = base / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [
            self.binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.base / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.base)
        wait_until(self._ready, timeout=START_TIMEOUT, interval=0.1, message=f"prometheus ready ({self.log_path})")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited {self.proc.returncode}: {self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self.proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """``data`` of one HTTP API call (``/api/v1/...``); fails on an error status."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def rule_states(self) -> dict[str, str]:
        """Each alerting rule's name -> state (inactive, pending, firing)."""
        return {
            rule["name"]: rule["state"]
            for group in self.api("rules")["groups"]
            for rule in group["rules"]
            if rule["type"] == "alerting"
        }

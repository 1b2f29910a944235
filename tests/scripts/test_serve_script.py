"""`scripts/serve` starts a node from config/march.toml (flags override the file): INCR answers
1, 2, 3 and, after a restart on the same data dir, continues above them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from march_harness import MarchServer
from march_harness.servers import REPO_ROOT

pytestmark = pytest.mark.e2e


class ServeScript(MarchServer):
    name = "scripts/serve"

    def command(self) -> list[str]:
        # scripts/serve execs the server, so signals reach it directly.
        script = str(REPO_ROOT / "scripts" / "serve")
        return ["bash", script, "--port", str(self.port), "--data-dir", str(self.data_dir)]


@pytest.fixture
def serve_script(tmp_path: Path) -> ServeScript:
    if not (REPO_ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("scripts/serve uses .venv, which scripts/test creates")
    return ServeScript(tmp_path / "data", log_path=tmp_path / "serve.log")


def test_serve_script_then_restart(serve_script: ServeScript) -> None:
    try:
        serve_script.start()
        out = [_cli(serve_script.port, "INCR", "x") for _ in range(3)]
        assert out == ["1", "2", "3"], serve_script.describe()
        assert serve_script.stop() == 0, serve_script.describe()
        serve_script.start()
        assert int(_cli(serve_script.port, "INCR", "x")) > 3
    finally:
        serve_script.stop()
    assert any(serve_script.data_dir.iterdir()), "the --data-dir flag must override the config file's data_dir"


def _cli(port: int, *args: str) -> str:
    proc = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30
    )
    assert proc.returncode == 0, proc
    return proc.stdout.strip()

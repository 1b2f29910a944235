"""docker-compose.yml brought up for real with podman by `scripts/compose-check`: the image built
from source online (when a package index is reachable) and offline (a wheelhouse, under
`--network=none`), `podman-compose up -d --build`, three etcd members, three March nodes and the
monitoring profile's Prometheus scraping them; IDs through the published ports with `redis-cli -c`,
the primary's container killed, IDs again after the failover, every one greater than the one before.

The script takes the project down on every exit; this test also takes it down (by its project
name) when the script fails or runs out of time, and checks that nothing of it is left.
Skipped where podman is not installed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compose-check"
LABEL = "label=io.podman.compose.project={}"

pytestmark = [
    pytest.mark.compose,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
]


def _podman(*args: str) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120, check=False)
    return done.stdout


def _leftovers(project: str) -> list[str]:
    return _podman("ps", "-a", "-q", "--filter", LABEL.format(project)).split()


def _down(project: str) -> None:
    """Whatever the script left behind: compose's own down, then anything labelled as ours."""
    if shutil.which("podman-compose"):
        subprocess.run(
            ["podman-compose", "-p", project, "-f", "docker-compose.yml", "down", "-v"],
            cwd=ROOT,
            capture_output=True,
            timeout=180,
            check=False,
        )
    if ids := _leftovers(project):
        _podman("rm", "-f", *ids)
    if volumes := _podman("volume", "ls", "-q", "--filter", LABEL.format(project)).split():
        _podman("volume", "rm", "-f", *volumes)
    _podman("network", "rm", "-f", f"{project}_default")


def _run(project: str) -> tuple[int, str]:
    env = {**os.environ, "MARCH_COMPOSE_PROJECT": project}
    proc = subprocess.Popen(
        [str(SCRIPT)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        # SIGTERM: the script's trap still takes the project down; SIGKILL if even that hangs.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return -1, out + "\n(timed out after 600 s)"
    return proc.returncode, out


@pytest.mark.timeout(800)
def test_compose_cluster_keeps_ids_increasing_when_the_primary_is_killed() -> None:
    project = f"march-test-{uuid.uuid4().hex[:8]}"
    try:
        rc, out = _run(project)
    finally:
        _down(project)
    assert rc == 0, out
    assert "OK:" in out, out
    assert "offline build: OK" in out, out
    assert "scrapes 3 nodes" in out, out
    assert _leftovers(project) == []

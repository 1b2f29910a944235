"""The README's compose command, run for real by each of the three common tools through
`scripts/compose-check`: from a fresh copy of the source, `<tool> up -d --build` builds the nodes'
image itself (a tag no earlier run made, so a failed build cannot hide behind an old image: Debian's
podman-compose 1.0.3 exits 0 even then), three etcd members and three March nodes come up in the
file's default layout (three groups, each node the primary of one, a forwarding port on each, the
links' secret written by the first node into a shared volume), IDs of a key of every group are drawn
through every published RESP port with `redis-cli -c`, every forwarding port and the port
`SENTINEL get-master-addr-by-name` names, the container of group 0's primary gets `podman kill`
(SIGKILL), IDs of every key are drawn again through the failover (and through the port Sentinel
names then), and each key's IDs must increase.

The tools: Debian 12's podman-compose (1.0.3), the current podman-compose from PyPI (the version
scripts/_env.sh pins, in its own venv) and Debian's docker-compose 1.29 against podman's Docker API
socket (`podman system service`, started and stopped by the script). To keep the suite short, one
run is the full check (the monitoring profile's Prometheus scraping the three nodes, the killed
node back and drawing again), on the PyPI podman-compose because it has `--profile`; the other two
run `--quick`: the same build through compose, bring-up, IDs, kill -9 of a primary and IDs after it,
without those extras (about 40 s each once podman's layer cache is warm). The online build (a
`podman build` of its own, pip fetching from the index) is left to scripts/compose-check by hand:
with changed code it costs a minute of downloads.

The script takes the project down on every exit; the test also removes whatever carries the
project's label, in a finally, and checks that nothing of it is left. scripts/test installs podman
and the tools (scripts/_env.sh march_containers), so in CI this runs; elsewhere it skips without
podman.
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
LABEL = "label=com.docker.compose.project={}"
RUN_TIMEOUT = 600  # seconds for one run: a cold machine builds the base and node images first

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.compose,
    pytest.mark.skipif(
        shutil.which("podman") is None and not os.environ.get("CI"),
        reason="podman is not installed (scripts/test installs it)",
    ),
]


def _podman(*args: str) -> str:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120, check=False)
    return done.stdout


def _leftovers(project: str) -> list[str]:
    return _podman("ps", "-a", "-q", "--filter", LABEL.format(project)).split()


def _down(project: str) -> None:
    """Whatever the script left behind, by the label every tool puts on a project's containers,
    volumes and networks."""
    if ids := _leftovers(project):
        _podman("rm", "-f", *ids)
    if volumes := _podman("volume", "ls", "-q", "--filter", LABEL.format(project)).split():
        _podman("volume", "rm", "-f", *volumes)
    if networks := _podman("network", "ls", "-q", "--filter", LABEL.format(project)).split():
        _podman("network", "rm", "-f", *networks)
    _podman("network", "rm", "-f", f"{project}_default")
    _podman("rmi", "-f", f"localhost/march:check-{project}")


def _run(project: str, *args: str) -> tuple[int, str]:
    # No online build here: it is a `podman build` of its own (not compose's path), and with changed
    # code it costs a minute of pip downloads; scripts/compose-check by hand does it.
    env = {**os.environ, "MARCH_COMPOSE_PROJECT": project, "MARCH_COMPOSE_ONLINE": "0"}
    proc = subprocess.Popen(
        [str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        # SIGTERM: the script's trap still takes the project down; SIGKILL if even that hangs.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return -1, out + f"\n(timed out after {RUN_TIMEOUT} s)"
    return proc.returncode, out


@pytest.mark.timeout(RUN_TIMEOUT + 200)
@pytest.mark.parametrize(
    ("tool", "quick"),
    [("podman-compose-pypi", False), ("podman-compose", True), ("docker-compose", True)],
    ids=["podman-compose-pypi-full", "podman-compose-debian-quick", "docker-compose-quick"],
)
def test_compose_cluster_keeps_ids_increasing_when_the_primary_is_killed(tool: str, quick: bool) -> None:
    project = f"march-test-{uuid.uuid4().hex[:8]}"
    try:
        rc, out = _run(project, "--tool", tool, *(["--quick"] if quick else []))
    finally:
        _down(project)
    assert rc == 0, out
    assert f"OK ({tool}):" in out, out
    assert "built by compose" in out and f"built localhost/march:check-{project}" in out, out
    assert "failover: first ID of orders" in out, out
    assert "the master Sentinel names now" in out, out  # a Sentinel-style draw through a forwarding port
    if not quick:
        assert "scrapes 3 nodes" in out, out
        assert "rejoined" in out, out
    assert _leftovers(project) == []

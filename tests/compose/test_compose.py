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
without those extras. The three runs overlap: the full one starts first, and the quick ones as soon
as compose has built its image (so their builds find podman's layer cache warm, as they did one
after the other, and copy its wheelhouse: MARCH_COMPOSE_WHEELS), each with a project, ports, a tag
and a log of its own. The script's waits are all bounded and it asserts no speed, so the overlap
changes nothing the runs prove; it takes the three from 2.5 to 3.5 minutes one after the other to
1 to 2.5 (the machine's load decides). The online build (a `podman build` of its own, pip fetching
from the index) is left to scripts/compose-check by hand: with changed code it costs a minute of
downloads.

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
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from march_harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compose-check"
LABEL = "label=com.docker.compose.project={}"
RUN_TIMEOUT = 600  # seconds for one run: a cold machine builds the base and node images first
# (tool, quick): the full run first; the quick ones start once it has built its image.
TOOLS = [("podman-compose-pypi", False), ("podman-compose", True), ("docker-compose", True)]
BUILT = "built localhost/march:check-"  # the line compose-check prints once compose built the image

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


@dataclass
class Run:
    """One `scripts/compose-check` run in the background: its project, its log file, its process."""

    tool: str
    quick: bool
    log: Path
    wheels: Path  # the wheelhouse the runs share (MARCH_COMPOSE_WHEELS): the first fills it
    project: str = field(default_factory=lambda: f"march-test-{uuid.uuid4().hex[:8]}")
    proc: subprocess.Popen[bytes] | None = None
    out: IO[bytes] | None = None
    deadline: float = 0.0
    result: tuple[int, str] | None = None

    def start(self) -> None:
        # No online build here: it is a `podman build` of its own (not compose's path), and with
        # changed code it costs a minute of pip downloads; scripts/compose-check by hand does it.
        env = {
            **os.environ,
            "MARCH_COMPOSE_PROJECT": self.project,
            "MARCH_COMPOSE_ONLINE": "0",
            "MARCH_COMPOSE_WHEELS": str(self.wheels),
        }
        self.out = self.log.open("wb")  # a file, not a pipe: nobody reads while the runs overlap
        self.proc = subprocess.Popen(
            [str(SCRIPT), "--tool", self.tool, *(["--quick"] if self.quick else [])],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.deadline = time.monotonic() + RUN_TIMEOUT

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def built_or_ended(self) -> bool:
        """Compose has built the run's image (before it creates the containers), or the run ended."""
        if self.proc is None or self.proc.poll() is not None or BUILT in self.text():
            return True
        image = f"localhost/march:check-{self.project}"
        return subprocess.run(["podman", "image", "exists", image], timeout=60, check=False).returncode == 0

    def finish(self) -> tuple[int, str]:
        """Wait for the run (until its deadline), then take its project down: (exit status, output)."""
        if self.result is None:
            self.result = self._wait()
            _down(self.project)
        return self.result

    def _wait(self) -> tuple[int, str]:
        assert self.proc is not None and self.out is not None
        try:
            self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            # SIGTERM: the script's trap still takes the project down; SIGKILL if even that hangs.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.out.close()
            return -1, self.text() + f"\n(timed out after {RUN_TIMEOUT} s)"
        self.out.close()
        return self.proc.returncode, self.text()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """The selected tools' runs, overlapping: the first (the full one, when selected) alone until
    compose has built its image, then the others. Each test waits for its own; every run is
    finished and its project taken down at the end, whatever happened."""
    here = request.node.nodeid
    chosen = {
        item.callspec.params["tool"]
        for item in request.session.items
        if item.nodeid.startswith(here) and hasattr(item, "callspec") and "tool" in item.callspec.params
    }
    logs = tmp_path_factory.mktemp("compose")
    started = {tool: Run(tool, quick, logs / f"{tool}.log", logs / "wheels") for tool, quick in TOOLS if tool in chosen}
    try:
        first, *rest = started.values()
        first.start()
        wait_until(first.built_or_ended, timeout=RUN_TIMEOUT, interval=1.0, message=f"{first.tool} building")
        for run in rest:
            run.start()
        yield started
    finally:
        for run in started.values():
            if run.proc is not None:
                run.finish()


@pytest.mark.timeout(2 * RUN_TIMEOUT + 300)
@pytest.mark.parametrize(
    ("tool", "quick"),
    TOOLS,
    ids=["podman-compose-pypi-full", "podman-compose-debian-quick", "docker-compose-quick"],
)
def test_compose_cluster_keeps_ids_increasing_when_the_primary_is_killed(
    tool: str, quick: bool, runs: dict[str, Run]
) -> None:
    run = runs[tool]
    rc, out = run.finish()
    assert rc == 0, out
    assert f"OK ({tool}):" in out, out
    assert "built by compose" in out and f"built localhost/march:check-{run.project}" in out, out
    assert "failover: first ID of orders" in out, out
    assert "the master Sentinel names now" in out, out  # a Sentinel-style draw through a forwarding port
    if not quick:
        assert "scrapes 3 nodes" in out, out
        assert "rejoined" in out, out
    assert _leftovers(run.project) == []

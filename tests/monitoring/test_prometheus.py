"""The monitoring kit in ``monitoring/`` against the real Prometheus (Debian's ``prometheus``
package; ``scripts/test`` installs it):

- ``promtool`` checks the rules and the compose profile's configuration, and runs the rules' unit
  tests (``march-rules.test.yml``: every alert fires on input that should fire it and stays silent
  on input that should not);
- a real ``prometheus`` scrapes a running three-node cluster (real etcd) with the rules loaded: a
  March metric and the alerts' states are read back through its HTTP API (two WORKER.ACQUIREs with
  ``--worker-max-holders 2`` fire MarchWorkerIdsNearExhaustion; MarchNoPrimary stays inactive), and
  every panel query of the Grafana dashboard returns data from it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import redis
from march_harness import free_port, wait_until
from march_harness.cluster import MarchCluster
from march_harness.etcd import EtcdCluster
from march_harness.prometheus import Prometheus, prometheus_binary, promtool_binary

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "prometheus" / "march-rules.yml"
RULE_TESTS = ROOT / "monitoring" / "prometheus" / "march-rules.test.yml"
COMPOSE_CONFIG = ROOT / "monitoring" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "march-dashboard.json"
SCRAPE_WAIT = 30.0  # seconds for Prometheus (1 s scrapes and rule evaluations) to see a change


def _required(path: str | None, what: str) -> str:
    """``path``, or skip (a failure under CI, where scripts/test installs the package)."""
    if path is None:
        message = f"{what} not found on PATH (scripts/test installs Debian's prometheus package)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _promtool(*args: str) -> str:
    done = subprocess.run(
        [_required(promtool_binary(), "promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_rules_unit_tests_pass_under_promtool() -> None:
    out = _promtool("test", "rules", str(RULE_TESTS))
    assert "SUCCESS" in out


def test_rules_and_compose_config_are_valid() -> None:
    assert "SUCCESS" in _promtool("check", "rules", str(RULES))
    assert "SUCCESS" in _promtool("check", "config", str(COMPOSE_CONFIG))


def test_every_alert_has_a_unit_test() -> None:
    alerts = {line.split(":", 1)[1].strip() for line in RULES.read_text().splitlines() if "- alert:" in line}
    tested = {line.split(":", 1)[1].strip() for line in RULE_TESTS.read_text().splitlines() if "alertname:" in line}
    assert alerts and alerts <= tested, f"alerts without a unit test: {sorted(alerts - tested)}"


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel of the Grafana dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def _has_finite_value(result: list[dict[str, object]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)  # type: ignore[index]


def test_prometheus_scrapes_a_cluster_evaluates_the_rules_and_answers_the_dashboard(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    binary = _required(prometheus_binary(), "prometheus")
    metrics_ports = [free_port() for _ in range(3)]
    cluster = MarchCluster(tmp_path / "m", etcd.endpoints, extra_args=["--worker-max-holders", "2"])
    for node, port in zip(cluster.nodes, metrics_ports, strict=True):
        node.extra_args += ["--metrics-port", str(port)]
    targets = [f"127.0.0.1:{p}" for p in metrics_ports]
    with cluster, Prometheus(tmp_path / "prometheus", binary, targets, rules=[RULES]) as prom:
        primary = cluster.wait_settled()
        primary_target = targets[cluster.nodes.index(primary)]

        # Every node scraped, exactly one serving.
        def scraped() -> list[dict[str, object]] | None:
            up = prom.query('up{job="march"} == 1')
            return up if len(up) == 3 else None

        wait_until(scraped, timeout=SCRAPE_WAIT, message="prometheus scrapes all three nodes")
        serving = prom.query("march_serving == 1")
        assert [r["metric"]["instance"] for r in serving] == [primary_target]

        # Traffic after the first scrape, so that every rate() and quantile has something to show.
        with redis.Redis(port=primary.port, socket_timeout=10) as r:
            ids = [r.incr(f"mon:{i % 5}") for i in range(50)]
            held = [r.execute_command("WORKER.ACQUIRE", "svc") for _ in range(2)]
        assert ids and len(held) == 2

        # A March metric read back: the primary's IDs handed out.
        def issued() -> float | None:
            got = prom.query(f'march_ids_issued_total{{instance="{primary_target}"}}')
            return float(got[0]["value"][1]) if got and float(got[0]["value"][1]) >= 50 else None

        assert wait_until(issued, timeout=SCRAPE_WAIT, message="prometheus sees the 50 IDs") == 50
        # More of the same once those series are in Prometheus: a rate over them is not zero (new
        # keys, so that the store's create transactions grow too).
        with redis.Redis(port=primary.port, socket_timeout=10) as r:
            ids += [r.incr(f"mon2:{i % 5}") for i in range(50)]
        wait_until(lambda: (issued() or 0) >= 100, timeout=SCRAPE_WAIT, message="prometheus sees 100 IDs")

        # An alert's state: both worker ids of the namespace held (limit 2) fires the exhaustion alert
        # on the primary; a cluster with a primary has no MarchNoPrimary.
        def firing() -> dict[str, str] | None:
            states = prom.rule_states()
            return states if states.get("MarchWorkerIdsNearExhaustion") == "firing" else None

        states = wait_until(firing, timeout=SCRAPE_WAIT, message="MarchWorkerIdsNearExhaustion fires")
        assert states["MarchNoPrimary"] == "inactive"
        active = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "MarchWorkerIdsNearExhaustion"]
        assert [(a["state"], a["labels"]["instance"]) for a in active] == [("firing", primary_target)]

        # Every dashboard query returns data (at least one finite sample) from this Prometheus.
        for title, expr in dashboard_queries():
            wait_until(
                lambda expr=expr: _has_finite_value(prom.query(expr)),  # type: ignore[misc]
                timeout=SCRAPE_WAIT,
                message=f"dashboard panel {title!r}: {expr} returns data",
            )

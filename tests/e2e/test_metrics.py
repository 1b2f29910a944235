"""The Prometheus endpoint (``--metrics-port``): a real march process, scraped with urllib and read
with prometheus-client's own parser. The counts must be exactly what the test did; histograms
must be well formed; role, term and lease come from the serving state (a cluster on a real etcd
for the lease and the leader change).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import MarchServer, RespConn, RespError, free_port, serving, wait_until
from support.cluster import ClusterNode, MarchCluster
from support.etcd import EtcdCluster

PASSWORD = "metrics-pw-4471"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """Every sample at ``/metrics``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def buckets(samples: Samples, name: str, **labels: str) -> list[tuple[float, float]]:
    """(le, cumulative count) of one histogram series, in order of le."""
    out = []
    for (n, ls), v in samples.items():
        d = dict(ls)
        le = d.pop("le", None)
        if n == name + "_bucket" and d == labels and le is not None:
            out.append((float(le), v))
    return sorted(out)


def check_histogram(samples: Samples, name: str, count: int, **labels: str) -> None:
    series = buckets(samples, name, **labels)
    counts = [c for _, c in series]
    assert counts == sorted(counts), series  # cumulative
    assert series[-1] == (float("inf"), count)
    assert value(samples, name + "_count", **labels) == count
    assert value(samples, name + "_sum", **labels) > 0


def test_metrics_of_a_single_node(march_factory: Callable[..., MarchServer]) -> None:
    port = free_port()
    server = march_factory(requirepass=PASSWORD, extra_args=["--metrics-port", str(port)])
    with RespConn(server.port) as bad:
        for _ in range(2):
            assert isinstance(bad.call("AUTH", "wrong-one"), RespError)
    with RespConn(server.port) as c:
        assert c.call("AUTH", PASSWORD) == "OK"
        for n in range(1, 6):
            assert c.call("INCR", "m:a") == n
        for _ in range(3):
            c.call("INCRBY", "m:a", "3")
        assert isinstance(c.call("INCRBY", "m:a", "0"), RespError)  # ERR
        assert isinstance(c.call("NOSUCH"), RespError)
        assert c.call("MONITOR") == "OK"  # this connection now monitors: one gauge
        samples = scrape(port)

    def commands(command: str, outcome: str) -> float:
        return value(samples, "march_commands_total", command=command, outcome=outcome)

    assert commands("incr", "ok") == 5
    assert commands("incrby", "ok") == 3
    assert commands("incrby", "err") == 1
    assert commands("auth", "wrongpass") == 2
    assert commands("auth", "ok") == 1
    assert commands("unknown", "err") == 1
    check_histogram(samples, "march_command_duration_seconds", 5, command="incr")
    check_histogram(samples, "march_command_duration_seconds", 4, command="incrby")
    assert value(samples, "march_command_waits_total", command="incr") >= 1  # the first: the key is created
    assert value(samples, "march_auth_failures_total") == 2
    assert value(samples, "march_ids_issued_total") == 5 + 3 * 3
    assert value(samples, "march_sequence_ids_issued", sequence="m:a") == 14
    assert value(samples, "march_sequences_active") == 1
    assert value(samples, "march_serving") == 1 and value(samples, "march_primary") == 1
    assert value(samples, "march_phase", phase="serving") == 1
    assert value(samples, "march_phase", phase="standby") == 0
    assert value(samples, "march_term") == 1
    assert value(samples, "march_connected_clients") == 1
    assert value(samples, "march_monitors") == 1
    assert value(samples, "march_rejected_connections_total") == 0
    assert value(samples, "march_store_healthy") == 1
    assert value(samples, "march_store_transactions_total", operation="create", outcome="ok") >= 1
    check_histogram(
        samples,
        "march_store_duration_seconds",
        int(value(samples, "march_store_duration_seconds_count", operation="create")),
        operation="create",
    )
    info = [ls for (n, ls) in samples if n == "march_node_info"]
    assert info and dict(info[0])["node_id"] == f"127.0.0.1:{server.port}" and dict(info[0])["mode"] == "single"
    assert not any(n == "march_lease_remaining_seconds" for n, _ in samples)  # no lease on a single node
    assert value(samples, "march_process_resident_memory_bytes") > 0
    assert PASSWORD not in repr(samples)

    with RespConn(server.port) as c:  # the monitor is gone with its connection
        assert c.call("AUTH", PASSWORD) == "OK"
        wait_until(lambda: value(scrape(port), "march_monitors") == 0, message="monitor gauge back to 0")


def test_metrics_endpoint_answers_only_metrics(march_factory: Callable[..., MarchServer]) -> None:
    port = free_port()
    march_factory(extra_args=["--metrics-port", str(port)])
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert missing.value.code == 404
    missing.value.close()
    assert scrape(port)  # still serving after a bad request


def test_metrics_of_a_cluster_primary_and_standby(tmp_path: Path, etcd: EtcdCluster) -> None:
    """The primary serves and its lease has time left; the standby does not serve; when the
    primary goes, the standby takes over and counts one leader change."""
    primary_port, standby_port = free_port(), free_port()
    cluster = MarchCluster(tmp_path / "m", etcd.endpoints, size=1, extra_args=["--metrics-port", str(primary_port)])
    with cluster:
        primary = cluster.nodes[0]
        standby = ClusterNode(
            tmp_path / "m" / "n2",
            node_id="n2",
            etcd=etcd.endpoints,
            prefix=cluster.prefix,
            lease_ttl=cluster.lease_ttl,
            extra_args=["--metrics-port", str(standby_port)],
            log_path=tmp_path / "m" / "n2.log",
        )
        with serving(standby):
            with RespConn(primary.port) as c:
                assert c.call("INCR", "m:c") == 1
            p = wait_until(lambda: _serving(primary_port), message="primary's metrics say it serves")
            assert value(p, "march_primary") == 1
            assert 0 < value(p, "march_lease_remaining_seconds") <= cluster.lease_ttl
            assert value(p, "march_term") > 0
            assert value(p, "march_promotions_total") == 1
            assert dict(next(ls for n, ls in p if n == "march_node_info"))["node_id"] == "n1"
            # The standby learns the primary from its watch: wait until it has (the leader key's revision).
            s = wait_until(
                lambda: _with_term(standby_port, value(p, "march_term")), message="the standby knows the term"
            )
            assert value(s, "march_serving") == 0 and value(s, "march_primary") == 0
            assert value(s, "march_phase", phase="standby") == 1
            with RespConn(standby.port) as c:  # SLOWLOG and LATENCY: every node answers its own
                assert isinstance(c.call("SLOWLOG", "LEN"), int)
                assert isinstance(c.call("LATENCY", "LATEST"), list)
            primary.stop()
            after = wait_until(lambda: _serving(standby_port), timeout=30, message="the standby takes over")
            assert value(after, "march_leader_changes_total") == 1
            assert value(after, "march_promotions_total") == 1
            assert value(after, "march_term") > value(p, "march_term")


def _serving(port: int) -> Samples | None:
    samples = scrape(port)
    return samples if value(samples, "march_serving") == 1 else None


def _with_term(port: int, term: float) -> Samples | None:
    samples = scrape(port)
    return samples if value(samples, "march_term") == term else None

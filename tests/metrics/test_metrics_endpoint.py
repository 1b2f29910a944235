"""The Prometheus endpoint (``--metrics-port``): a real march process, scraped with urllib and read
with prometheus-client's own parser. The counts must be exactly what the test did; histograms
must be well formed; role, term and lease come from the serving state (a cluster on a real etcd
for the lease and the leader change).

What a scraper may cost (raw sockets): a silent client and one that never finishes its request
are cut after ``metrics_timeout`` (their request head: after at most a second); connections past
``metrics_max_connections_per_address`` from one address get 503 at once; slow connections from
one address (16, or 1,000) or from many never make ``/ready`` or ``/metrics`` fail for another;
40 concurrent scrapes share at most two renders, each render's body identical for all who got it;
and while a render runs (made to take 300 ms of CPU, as a large keyspace would), another client's
INCRs keep being answered before the scrape's reply arrives.
"""

from __future__ import annotations

import selectors
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from march_harness import MarchServer, RespConn, RespError, free_port, serving, wait_until
from march_harness.cluster import ClusterNode, MarchCluster
from march_harness.etcd import EtcdCluster
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

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
    # m:a needed no store write after its creation: it is a row of the table (``march.keyspace.sequence_table``),
    # with no generator and no count of its own; its IDs are in the node's total
    assert ("march_sequence_ids_issued", (("sequence", "m:a"),)) not in samples
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
            assert value(p, "march_lease_renewal_failures_total") == 0
            assert value(p, "march_lease_renewal_failures_in_a_row") == 0
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


# --- what a scraper may cost: connections, time, renders, the loop --------------------------------

# A march process whose /metrics render takes 300 ms of CPU (the time a render takes with ~100,000
# active sequences, which a test cannot afford to create): only the render is slowed, everything
# else is the real server started from the real command line.
SLOW_RENDER = """
import sys, time
from prometheus_client.registry import Collector
import march.server
from march.cli import main

class Slow(Collector):
    def collect(self):
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:  # CPU, holding the GIL as a real render does
            pass
        return iter(())

real = march.server.registry_for

def slow_registry(app):
    registry = real(app)
    registry.register(Slow())
    return registry

march.server.registry_for = slow_registry
sys.exit(main(sys.argv[1:]))
"""


class SlowRenderMarch(MarchServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", SLOW_RENDER, *super().command()[3:]]


def http_get(port: int, path: str = "/metrics") -> socket.socket:
    """A connection with a GET sent, its reply unread."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    except OSError:
        s.close()
        raise
    return s


def http_reply(s: socket.socket) -> tuple[bytes, bytes]:
    """(status line, body) of the reply on ``s``; closes it."""
    data = b""
    with s:
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


def renders_in(body: bytes) -> float:
    for line in body.decode().splitlines():
        if line.startswith("march_metrics_renders_total "):
            return float(line.split()[1])
    raise AssertionError("no march_metrics_renders_total in the body")


def closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_silent_and_slow_clients_are_cut_after_the_timeout(march_factory: Callable[..., MarchServer]) -> None:
    port = free_port()
    march_factory(extra_args=["--metrics-port", str(port), "--metrics-timeout", "0.5"])
    wait_until(lambda: scrape(port), message="the metrics port is open")
    silent = socket.create_connection(("127.0.0.1", port), timeout=10)
    dripping = socket.create_connection(("127.0.0.1", port), timeout=10)
    with silent, dripping:
        dripping.sendall(b"GET /metr")  # a request head that never ends
        silent.settimeout(10)
        started = time.monotonic()
        assert closed_by_server(silent)
        assert closed_by_server(dripping)
        assert time.monotonic() - started < 9  # by the 0.5 s timeout, not by the test's 10 s one
    cut = wait_until(  # a body is rendered once a second at most: the next one counts them
        lambda: _with(scrape(port), "march_metrics_closed_connections_total", 2, reason="cut"), message="2 cut"
    )
    assert value(cut, "march_metrics_connections") == 1  # the scrape itself


def test_connections_over_the_limit_are_refused(march_factory: Callable[..., MarchServer]) -> None:
    port = free_port()
    march_factory(
        extra_args=[
            "--metrics-port", str(port), "--metrics-max-connections", "8",
            "--metrics-max-connections-per-address", "3", "--metrics-timeout", "3",
        ]
    )  # fmt: skip
    wait_until(lambda: scrape(port), message="the metrics port is open")
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    try:
        wait_until(lambda: _refused(port), timeout=10, message="a fourth connection from the address refused")
        status, body = _refused_reply(port)
        assert status == b"HTTP/1.1 503 Service Unavailable"
        assert body == b"too many connections from this address to metrics port\n"
        assert _probe(port, "/ready", "127.0.0.2") == 200  # another address still gets in
    finally:
        for s in idle:
            s.close()
    wait_until(
        lambda: (
            (got := _served(port)) is not None
            and value(got, "march_metrics_closed_connections_total", reason="refused_address") >= 2
        ),
        message="served again once the idle ones are gone, the refusals counted",
    )


def test_a_request_head_has_a_second(march_factory: Callable[..., MarchServer]) -> None:
    """Whatever ``metrics_timeout`` (5 s here, the default), a connection that has not sent its
    whole request head after HEAD_TIMEOUT (1 s) is cut: a slowloris holds a slot that long."""
    port = free_port()
    march_factory(extra_args=["--metrics-port", str(port)])
    wait_until(lambda: scrape(port), message="the metrics port is open")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as dripping:
        dripping.sendall(b"GET /rea")
        started = time.monotonic()
        assert closed_by_server(dripping)
        assert time.monotonic() - started < 4  # by the 1 s head deadline, not metrics_timeout's 5 s


class SlowFlood:
    """``count`` connections from each of ``sources`` (loopback addresses) to the metrics port, each
    sending an unfinished request head; a connection the server closes (cut, refused, evicted) is
    opened again at once, as an attacker's would be. One thread, bounded: it stops when the test
    leaves the ``with`` block (and after ``limit`` seconds in any case)."""

    def __init__(self, port: int, count: int, sources: list[str], limit: float = 120.0) -> None:
        self.port, self.count, self.sources, self.limit = port, count, sources, limit
        self.opened = 0
        self.closed_by_server = 0
        self._held = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-flood", daemon=True)
        self._selector = selectors.DefaultSelector()

    def __enter__(self) -> SlowFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the flood thread did not stop"

    @property
    def held(self) -> int:
        return self._held

    def _open(self, source: str) -> None:
        s = socket.socket()
        try:
            s.bind((source, 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", self.port))
            s.sendall(b"GET /metr")  # a request head that never ends
            s.setblocking(False)
        except OSError:
            s.close()
            return
        self.opened += 1
        self._selector.register(s, selectors.EVENT_READ, source)

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit
        try:
            for source in self.sources:
                for _ in range(self.count):
                    if self._stop.is_set():
                        return
                    self._open(source)
            while not self._stop.is_set() and time.monotonic() < deadline:
                self._held = len(self._selector.get_map())
                for key, _ in self._selector.select(timeout=0.05):
                    s = key.fileobj
                    assert isinstance(s, socket.socket)
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    if not data or b"503" in data:  # closed (cut, evicted) or refused: back at once
                        self.closed_by_server += 1
                        self._selector.unregister(s)
                        s.close()
                        self._open(key.data)
        finally:
            for key in list(self._selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            self._selector.close()


def _probe(port: int, path: str, source: str = "127.0.0.1") -> int:
    """The status of one GET ``path`` from ``source``, read whole."""
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as s:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("count", "sources"),
    [(16, ["127.0.0.2"]), (1000, ["127.0.0.2"]), (8, [f"127.0.0.{i}" for i in range(2, 10)])],
    ids=["16-from-one-address", "1000-from-one-address", "8-each-from-8-addresses"],
)
def test_probes_answer_while_slow_connections_flood_the_port(
    march_factory: Callable[..., MarchServer], count: int, sources: list[str]
) -> None:
    """The issue's case: slow connections sending an unfinished request head (cut, then back at
    once) took every slot, and 100 of 100 ``/ready`` probes and 10 of 10 scrapes got ``503 too
    many connections``. Now one address holds at most ``metrics_max_connections_per_address``
    (4), and slow connections from many addresses are evicted for a newcomer: every probe and
    every scrape from 127.0.0.1 is answered 200."""
    port = free_port()
    march_factory(extra_args=["--metrics-port", str(port)])
    wait_until(lambda: scrape(port), message="the metrics port is open")
    with SlowFlood(port, count, sources) as flood:
        wait_until(lambda: flood.held >= min(16, count * len(sources)) - 4, timeout=30, message="the flood holds")
        ready = [_probe(port, "/ready") for _ in range(100)]
        scrapes = [_probe(port, "/metrics") for _ in range(10)]
        assert flood.opened >= count * len(sources)
    assert ready == [200] * 100
    assert scrapes == [200] * 10
    # what held them off: one address's extra connections refused; many addresses' slow ones evicted
    reason = "evicted" if len(sources) > 1 else "refused_address"
    wait_until(
        lambda: value(scrape(port), "march_metrics_closed_connections_total", reason=reason) > 0,
        message=f"connections {reason} counted",
    )


def _served(port: int) -> Samples | None:
    """A scrape, or None while the port still refuses (503)."""
    try:
        return scrape(port)
    except urllib.error.HTTPError as refused:
        refused.close()
        assert refused.code == 503
        return None


def _with(samples: Samples, name: str, expected: float, **labels: str) -> Samples | None:
    return samples if value(samples, name, **labels) == expected else None


def _refused_reply(port: int) -> tuple[bytes, bytes]:
    return http_reply(http_get(port))


def _refused(port: int) -> bool:
    return _refused_reply(port)[0].endswith(b"503 Service Unavailable")


def test_concurrent_scrapes_share_one_render(tmp_path: Path) -> None:
    port = free_port()
    limits = ["--metrics-max-connections", "64", "--metrics-max-connections-per-address", "64"]  # 40 from one address
    server = SlowRenderMarch.in_dir(tmp_path, extra_args=["--metrics-port", str(port), *limits])
    with serving(server, during="the scrape flood", clean_exit=True):
        wait_until(lambda: http_reply(http_get(port, "/"))[0].endswith(b"200 OK"), message="the metrics port is open")
        scrapers = [http_get(port) for _ in range(40)]  # all sent within the first render's 300 ms
        replies = [http_reply(s) for s in scrapers]
    assert all(status == b"HTTP/1.1 200 OK" for status, _ in replies)
    by_render: dict[float, set[bytes]] = {}
    for _, body in replies:
        by_render.setdefault(renders_in(body), set()).add(body)
    assert len(by_render) <= 2, sorted(by_render)  # 40 scrapes, at most 2 renders (one may have just ended)
    assert all(len(bodies) == 1 for bodies in by_render.values())  # each render's body, byte for byte, to all


def test_incr_is_answered_while_a_scrape_renders(tmp_path: Path) -> None:
    port = free_port()
    server = SlowRenderMarch.in_dir(tmp_path, extra_args=["--metrics-port", str(port)])
    with serving(server, during="the slow scrape", clean_exit=True), RespConn(server.port) as c:
        assert c.call("INCR", "busy") == 1
        wait_until(lambda: http_reply(http_get(port, "/"))[0].endswith(b"200 OK"), message="the metrics port is open")
        scraper = http_get(port)  # its render holds the CPU for 300 ms
        scraper.setblocking(False)
        answered = 0  # INCRs sent after the GET and answered before its reply arrived
        while True:
            try:
                first = scraper.recv(65536)
                break
            except BlockingIOError:
                pass
            assert c.call("INCR", "busy") == answered + 2
            answered += 1
        scraper.setblocking(True)
        scraper.settimeout(10)
        rest = b""
        while chunk := scraper.recv(65536):
            rest += chunk
        scraper.close()
        assert (first + rest).startswith(b"HTTP/1.1 200 OK")
        assert answered >= 10, f"only {answered} INCRs were answered while the scrape rendered"


def test_headroom_metrics(march_factory: Callable[..., MarchServer]) -> None:
    """The gauges the monitoring rules alert on: the highest ceiling against the ID maximum, and
    the worker ids held in the fullest namespace against worker_max_holders."""
    port = free_port()
    server = march_factory(extra_args=["--metrics-port", str(port), "--worker-max-holders", "4"])
    with RespConn(server.port) as c:
        assert c.call("INCR", "h:small") == 1
        before = scrape(port)
        assert 0 < value(before, "march_sequence_ceiling_ratio_max") < 1e-9
        assert value(before, "march_worker_ids_busy_max") == 0
        assert value(before, "march_worker_ids_limit") == 4
        assert value(before, "march_timestamp_lead_seconds_max") == 0
        assert value(before, "march_timestamp_lead_ratio_max") == 0
        big = 9 * 10**18  # 97.6 % of 2**63-1
        assert c.call("SET", "h:big", str(big)) == "OK"
        assert c.call("INCR", "h:big") == big + 1
        for _ in range(3):
            assert isinstance(c.call("WORKER.ACQUIRE", "svc"), list)
        assert isinstance(c.call("WORKER.ACQUIRE", "other"), list)

    def acquired() -> Samples | None:  # a body is rendered at most once a second: wait for a new one
        s = scrape(port)
        return s if value(s, "march_worker_ids_busy_max") == 3 else None

    after = wait_until(acquired, message="a scrape after the acquires")
    assert big / (2**63 - 1) < value(after, "march_sequence_ceiling_ratio_max") <= 1
    assert value(after, "march_worker_ids_limit") == 4

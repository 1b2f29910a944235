"""redis-benchmark drives march the way the benchmark script does, and the counters agree
with the number of requests afterwards. Speed is never asserted here (see scripts/bench)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from march_harness import MarchServer

pytestmark = pytest.mark.e2e


def run_benchmark(port: int, *args: str) -> str:
    binary = shutil.which("redis-benchmark")
    if binary is None:
        pytest.skip("redis-benchmark not installed (scripts/test installs it)")
    proc = subprocess.run(
        [binary, "-h", "127.0.0.1", "-p", str(port), "-t", "incr", "--csv", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, out
    lowered = out.lower()
    assert "error" not in lowered and "warning" not in lowered, out
    assert '"INCR"' in out, out
    return out


@pytest.mark.parametrize("pipeline", [1, 16])
def test_redis_benchmark_incr_on_one_key(march_server: MarchServer, pipeline: int) -> None:
    n = 20000
    run_benchmark(march_server.port, "-n", str(n), "-c", "20", "-P", str(pipeline))
    key = "counter:__rand_int__"  # redis-benchmark's key when -r is not given
    with march_server.conn() as c:
        watermark = int(c.call("GET", key))
        after = c.call("INCR", key)
    assert watermark >= n
    # No crash, so no gap: the n INCRs got exactly 1..n.
    assert after == n + 1, (watermark, after)


def test_redis_benchmark_random_keys(march_server: MarchServer) -> None:
    n = 20000
    run_benchmark(march_server.port, "-n", str(n), "-c", "20", "-P", "4", "-r", "100")
    with march_server.conn() as c:
        keys = c.call("KEYS", "counter:*")
        assert 1 <= len(keys) <= 100
        assert c.call("DBSIZE") == len(keys)
        values = [int(v) for v in c.call("MGET", *keys)]
    # Each key counted its own INCRs from 1 without gaps, so the watermarks add up to n.
    assert sum(values) == n

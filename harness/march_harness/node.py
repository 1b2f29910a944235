"""ioredis (Node.js) for tests: installed the way a fresh CI machine would, and a small script that
draws IDs through it as a given user.

``install_ioredis(dir)`` runs ``npm install ioredis@5`` into ``dir`` (a test's temporary
directory: nothing is left in the repository) and returns the package path; ``run_ioredis``
runs ``APP_SCRIPT`` with node against a server (``standalone`` or ``cluster``) and returns what
it printed: the IDs from three INCRs, a MULTI/EXEC of two, a pipeline, and every warning the
library printed (console.warn), or the error. Tests skip only when node is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

IOREDIS = "ioredis@5"

APP_SCRIPT = r"""
const Redis = require(process.env.IOREDIS);
const [mode, port, user, pass, readyCheck] = process.argv.slice(2);
const warnings = [];
console.warn = (...a) => warnings.push(a.join(" "));
async function main() {
  // Standalone: the ready check asks INFO. Cluster: the cluster's asks CLUSTER INFO, its nodes' none.
  const opts = {
    username: user, password: pass, enableReadyCheck: mode !== "cluster" && readyCheck === "yes",
    maxRetriesPerRequest: 0, retryStrategy: () => null,
  };
  const c = mode === "cluster"
    ? new Redis.Cluster([{ host: "127.0.0.1", port: Number(port) }], {
        redisOptions: opts, enableReadyCheck: readyCheck === "yes", clusterRetryStrategy: () => null,
      })
    : new Redis({ host: "127.0.0.1", port: Number(port), ...opts });
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(await c.incr("orders:eu"));
  const tx = (await c.multi().incr("orders:eu").incr("orders:eu").exec()).map(([e, v]) => e ? String(e) : v);
  const piped = (await c.pipeline().incr("orders:eu").get("orders:eu").exec()).map(([e, v]) => e ? String(e) : v);
  await c.quit();
  console.log(JSON.stringify({ ids, tx, piped, warnings }));
}
main().catch((e) => { console.log(JSON.stringify({ error: String(e), warnings })); process.exit(1); });
"""


def node_binary() -> str | None:
    return shutil.which("node")


def install_ioredis(directory: Path) -> Path:
    """``npm install ioredis@5`` into ``directory``; the package's path (raises with npm's output)."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("node is installed but npm is not")
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(directory), IOREDIS],
        capture_output=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"npm install {IOREDIS} failed:\n{proc.stdout.decode()}\n{proc.stderr.decode()}")
    package = directory / "node_modules" / "ioredis"
    (directory / "app.js").write_text(APP_SCRIPT)
    return package


def run_ioredis(
    package: Path, mode: str, port: int, user: str, password: str, ready_check: bool = False
) -> dict[str, Any]:
    """Run ``APP_SCRIPT`` (``mode``: standalone or cluster); its JSON output."""
    node = node_binary()
    assert node is not None
    proc = subprocess.run(
        [node, str(package.parent.parent / "app.js"), mode, str(port), user, password, "yes" if ready_check else "no"],
        capture_output=True,
        timeout=60,
        env={**os.environ, "IOREDIS": str(package)},
    )
    out = proc.stdout.decode().strip().splitlines()
    assert out, f"ioredis printed nothing (exit {proc.returncode}): {proc.stderr.decode()}"
    result: dict[str, Any] = json.loads(out[-1])
    return result

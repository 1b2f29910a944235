// ioredis through Sentinel discovery: every March node answers as a sentinel of the cluster, and
// names the primary's forwarding port (forward_port), which serves every key of every group.
// Run (from anywhere, after `npm install --prefix docs/clients/node`), against the README's cluster:
//   MARCH_SENTINELS=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 node docs/clients/node/ioredis-sentinel.js
// First says which node it reached (`reached HOST:PORT, cluster node ID`; a single node, which names
// itself as its own master, is refused: exit 1). Then it draws IDs from the keys in MARCH_KEYS
// (default orders,payments,invoices: one in each group of the README's cluster) in turn and prints
// one line per draw: `id KEY N`, or `error KEY MESSAGE` when a draw failed (retrying is always
// safe: a failed INCR handed out no ID), and `resumed KEY after S s (N errors)` when a key draws
// again after errors.
const fs = require("fs");
const Redis = require("ioredis");

const sentinels = process.env.MARCH_SENTINELS.split(",").map((hostPort) => {
  const [host, port] = hostPort.split(":");
  return { host, port: Number(port) };
});
const redis = new Redis({
  sentinels,
  name: process.env.MARCH_MASTER_NAME || "march", // the server's sentinel_master_name
  password: process.env.MARCH_PASSWORD, // the data nodes' password (undefined: none)
  sentinelPassword: process.env.MARCH_PASSWORD, // every node is also the sentinel: the same one
  maxRetriesPerRequest: 2,
  // A node that is no longer (or not yet) the primary answers MOVED or TRYAGAIN: reconnect, which
  // asks the sentinels for the primary again, and resend the command (2).
  reconnectOnError: (err) => (/^(MOVED|TRYAGAIN|READONLY)/.test(err.message) ? 2 : false),
});

// COUNT IDs; without COUNT, until the input ends (a closed pipe, Ctrl-D in a terminal), or 10 when
// the input is no pipe or terminal (< /dev/null, a file): it would end before the first draw.
const input = fs.fstatSync(0);
const follow = !process.env.COUNT && (process.stdin.isTTY || input.isFIFO() || input.isSocket());
const limit = Number(process.env.COUNT || (follow ? Infinity : 10));
let done = false;
if (follow) process.stdin.on("end", () => { done = true; }).resume();

// The sentinels' answer must be a node of a March cluster: a single node names itself as the master
// too, and IDs from it would look just as good.
async function reachedClusterNode() {
  const info = await redis.info("cluster");
  const field = (name) => (info.match(new RegExp(`^${name}:(.*)$`, "m")) || [])[1];
  const where = `${redis.stream.remoteAddress}:${redis.stream.remotePort}`;
  if (field("cluster_enabled") !== "1") {
    console.error(`MARCH_SENTINELS led to ${where}, a single node, not a cluster node: list the cluster's nodes`);
    process.exit(1);
  }
  console.log(`reached ${where}, cluster node ${field("march_node_id").trim()}`);
}

const keys = (process.env.MARCH_KEYS || "orders,payments,invoices").split(",");
const interval = Number(process.env.INTERVAL_MS || 10);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  await reachedClusterNode();
  const failing = new Map(); // key => [time of its first error, errors since]
  for (let i = 0, n = 0; !done && n < limit; i++) {
    const key = keys[i % keys.length];
    try {
      const id = await redis.incr(key);
      if (failing.has(key)) {
        const [since, errors] = failing.get(key);
        console.log(`resumed ${key} after ${((Date.now() - since) / 1000).toFixed(2)} s (${errors} errors)`);
        failing.delete(key);
      }
      console.log(`id ${key} ${id}`);
      n++;
      await sleep(interval);
    } catch (err) {
      // A failover: the old primary is gone (connection error), a standby answers MOVED/TRYAGAIN, or
      // the primary of another key's group died while the request was forwarded to it.
      const [since, errors] = failing.get(key) || [Date.now(), 0];
      failing.set(key, [since, errors + 1]);
      console.log(`error ${key} ${err.message.split("\n")[0]}`);
      await sleep(50);
    }
  }
  await redis.quit();
}
main().catch((err) => { console.error(err); process.exit(1); });

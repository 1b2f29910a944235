// node-redis (the "redis" package, v4) in cluster mode: March nodes answer CLUSTER SLOTS (the
// primary owns every slot) and standbys answer MOVED, so the client finds the primary by itself.
// Run (from anywhere, after `npm install --prefix docs/clients/node`), against the README's cluster:
//   MARCH_NODES=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 [MARCH_PASSWORD=...] node docs/clients/node/node-redis-cluster.js
// Prints one line per ID (`id N`), or an error line when a draw failed (retrying is always safe: a
// failed INCR handed out no ID).
//
// node-redis v4 reads the topology again only on MOVED: when the primary dies, its client keeps
// waiting for that node. So this example does not queue commands for a lost node and, on a lost
// connection, makes a new cluster client, which asks the nodes for the new primary.
const fs = require("fs");
const { createCluster } = require("redis");

const options = {
  rootNodes: process.env.MARCH_NODES.split(",").map((hostPort) => ({ url: `redis://${hostPort}` })),
  defaults: {
    password: process.env.MARCH_PASSWORD, // undefined: no password
    disableOfflineQueue: true, // a command for a lost node fails at once instead of waiting
    socket: { reconnectStrategy: false }, // TLS: add tls: true, ca: fs.readFileSync("ca.crt")
  },
};

async function connect() {
  const cluster = createCluster(options);
  cluster.on("error", () => {}); // reported by the command that failed
  await cluster.connect();
  return cluster;
}

// COUNT IDs; without COUNT, until the input ends (a closed pipe, Ctrl-D in a terminal), or 10 when
// the input is no pipe or terminal (< /dev/null, a file): it would end before the first draw.
const input = fs.fstatSync(0);
const follow = !process.env.COUNT && (process.stdin.isTTY || input.isFIFO() || input.isSocket());
const limit = Number(process.env.COUNT || (follow ? Infinity : 10));
let done = false;
if (follow) process.stdin.on("end", () => { done = true; }).resume();
const pause = () => new Promise((r) => setTimeout(r, 50));

async function main() {
  let cluster = null;
  for (let n = 0; !done && n < limit; ) {
    try {
      cluster = cluster || (await connect());
      console.log(`id ${await cluster.incr("orders")}`);
      n++;
    } catch (err) {
      console.log(`error ${err.message.split("\n")[0]}`);
      if (cluster && !/^(TRYAGAIN|CLUSTERDOWN)/.test(err.message)) {
        cluster.disconnect().catch(() => {});
        cluster = null; // connect again: CLUSTER SLOTS names the new primary
      }
      await pause();
    }
  }
  if (cluster) await cluster.quit();
}
main().catch((err) => { console.error(err); process.exit(1); });

// ioredis in cluster mode: March nodes answer CLUSTER SLOTS (the primary owns every slot) and
// standbys answer MOVED, so ioredis finds and follows the primary by itself.
// Run (from anywhere, after `npm install --prefix docs/clients/node`), against the README's cluster:
//   MARCH_NODES=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 node docs/clients/node/ioredis-cluster.js
// Prints one line per ID (`id N`), or an error line when a draw failed (retrying is always safe: a
// failed INCR handed out no ID).
const fs = require("fs");
const Redis = require("ioredis");

const nodes = process.env.MARCH_NODES.split(",").map((hostPort) => {
  const [host, port] = hostPort.split(":");
  return { host, port: Number(port) };
});
const redis = new Redis.Cluster(nodes, {
  redisOptions: { password: process.env.MARCH_PASSWORD }, // undefined: no password
  // TLS: add `tls: { ca: fs.readFileSync("ca.crt") }` to redisOptions and list the TLS ports.
});

// COUNT IDs; without COUNT, until the input ends (a closed pipe, Ctrl-D in a terminal), or 10 when
// the input is no pipe or terminal (< /dev/null, a file): it would end before the first draw.
const input = fs.fstatSync(0);
const follow = !process.env.COUNT && (process.stdin.isTTY || input.isFIFO() || input.isSocket());
const limit = Number(process.env.COUNT || (follow ? Infinity : 10));
let done = false;
if (follow) process.stdin.on("end", () => { done = true; }).resume();

async function main() {
  for (let n = 0; !done && n < limit; ) {
    try {
      console.log(`id ${await redis.incr("orders")}`);
      n++;
    } catch (err) {
      console.log(`error ${err.message.split("\n")[0]}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  await redis.quit();
}
main().catch((err) => { console.error(err); process.exit(1); });

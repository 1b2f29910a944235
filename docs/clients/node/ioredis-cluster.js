// ioredis in cluster mode: March nodes answer CLUSTER SLOTS (the primary owns every slot) and
// standbys answer MOVED, so ioredis finds and follows the primary by itself.
// Run: MARCH_NODES=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381 node ioredis-cluster.js
// Draws IDs until stdin closes (or COUNT ids, if set), one per line; an error line when a draw
// failed (retrying is always safe: a failed INCR handed out no ID).
const Redis = require("ioredis");

const nodes = process.env.MARCH_NODES.split(",").map((hostPort) => {
  const [host, port] = hostPort.split(":");
  return { host, port: Number(port) };
});
const redis = new Redis.Cluster(nodes, {
  redisOptions: { password: process.env.MARCH_PASSWORD }, // undefined: no password
  // TLS: add `tls: { ca: fs.readFileSync("ca.crt") }` to redisOptions and list the TLS ports.
});

let done = false;
process.stdin.on("end", () => { done = true; }).resume();
const limit = Number(process.env.COUNT || Infinity);

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

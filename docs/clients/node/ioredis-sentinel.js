// ioredis through Sentinel discovery: every March node answers as a sentinel of the cluster.
// Run: MARCH_SENTINELS=127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381 node ioredis-sentinel.js
// Draws IDs until stdin closes (or COUNT ids, if set), one per line; an error line when a draw
// failed (retrying is always safe: a failed INCR handed out no ID).
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

let done = false;
process.stdin.on("end", () => { done = true; }).resume();
const limit = Number(process.env.COUNT || Infinity);

async function main() {
  for (let n = 0; !done && n < limit; ) {
    try {
      console.log(`id ${await redis.incr("orders")}`);
      n++;
    } catch (err) {
      // A failover: the old primary is gone (connection error) or a standby answers MOVED/TRYAGAIN.
      console.log(`error ${err.message.split("\n")[0]}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  await redis.quit();
}
main().catch((err) => { console.error(err); process.exit(1); });

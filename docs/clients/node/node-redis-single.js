// node-redis (the "redis" package, v4) against one March node: plain or TLS, with or without a password.
// Run (from anywhere, after `npm install --prefix docs/clients/node`):
//   MARCH_PORT=7379 [MARCH_PASSWORD=...] [MARCH_TLS_CA=ca.crt [MARCH_TLS_CERT=c.crt MARCH_TLS_KEY=c.key]] node docs/clients/node/node-redis-single.js
// Prints COUNT (default 3) new IDs of the sequence "orders", one per line.
const fs = require("fs");
const { createClient } = require("redis");

const env = process.env;
const socket = {
  host: env.MARCH_HOST || "127.0.0.1",
  port: Number(env.MARCH_PORT || 7379),
  // node-redis reconnects forever by default (a wrong password too): give up after a few tries
  reconnectStrategy: (retries) => (retries < 5 ? 100 * retries : new Error("giving up")),
  ...(env.MARCH_TLS_CA && {
    tls: true,
    ca: fs.readFileSync(env.MARCH_TLS_CA),
    // only when the server checks client certificates (tls_auth_clients = yes, the default)
    ...(env.MARCH_TLS_CERT && { cert: fs.readFileSync(env.MARCH_TLS_CERT), key: fs.readFileSync(env.MARCH_TLS_KEY) }),
  }),
};
const client = createClient({ socket, password: env.MARCH_PASSWORD }); // add `username` for an ACL user

async function main() {
  client.on("error", (err) => console.error(`error ${err.message}`));
  await client.connect();
  for (let i = 0; i < Number(env.COUNT || 3); i++) console.log(`id ${await client.incr("orders")}`);
  await client.quit();
}
main().catch((err) => { console.error(err); process.exit(1); });

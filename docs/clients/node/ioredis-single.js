// ioredis against one March node: plain or TLS, with or without a password.
// Run (from anywhere, after `npm install --prefix docs/clients/node`):
//   MARCH_PORT=7379 [MARCH_PASSWORD=...] [MARCH_TLS_CA=ca.crt [MARCH_TLS_CERT=c.crt MARCH_TLS_KEY=c.key]] node docs/clients/node/ioredis-single.js
// Prints COUNT (default 3) new IDs of the sequence "orders", one per line.
const fs = require("fs");
const Redis = require("ioredis");

const env = process.env;
const tls = env.MARCH_TLS_CA && {
  ca: fs.readFileSync(env.MARCH_TLS_CA),
  // only when the server checks client certificates (tls_auth_clients = yes, the default)
  ...(env.MARCH_TLS_CERT && { cert: fs.readFileSync(env.MARCH_TLS_CERT), key: fs.readFileSync(env.MARCH_TLS_KEY) }),
};
const redis = new Redis({
  host: env.MARCH_HOST || "127.0.0.1",
  port: Number(env.MARCH_PORT || 7379),
  password: env.MARCH_PASSWORD, // undefined: no AUTH (add `username` for an ACL user)
  tls, // undefined: plain TCP
});

async function main() {
  for (let i = 0; i < Number(env.COUNT || 3); i++) console.log(`id ${await redis.incr("orders")}`);
  await redis.quit();
}
main().catch((err) => { console.error(err); process.exit(1); });

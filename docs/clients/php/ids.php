<?php
// phpredis 5.3 (Debian 12's php-redis) against March: RedisCluster, or RedisSentinel to find the
// primary and a Redis connection to it.
//
//   MARCH_NODES=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 php ids.php       (cluster mode)
//   MARCH_SENTINELS=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 php ids.php   (Sentinel mode)
//
// It draws IDs from the keys in MARCH_KEYS (default orders,payments,invoices) in turn, one every
// INTERVAL_MS (default 10), until its input ends or COUNT IDs are drawn, and prints one line per
// draw: "id <key> <id>", or "error <key> <message>" (no ID was handed out: retrying is safe), and
// "resumed <key> after <seconds> s (<errors> errors)" when a key draws again after errors.
// MARCH_PASSWORD: the password, if the nodes have one.

$password = getenv('MARCH_PASSWORD') ?: null;

if ($nodes = getenv('MARCH_NODES')) {
    // Cluster mode: CLUSTER SLOTS when constructed, each key to its slot's primary, MOVED followed.
    // After a lost node it tries the other primaries it knows (never a replica): see
    // docs/clients/php.md for the cluster layout it needs.
    $cluster = new RedisCluster(null, explode(',', $nodes), 1.0, 1.0, false, $password);
    $incr = fn (string $key) => $cluster->incr($key);
} elseif ($sentinels = getenv('MARCH_SENTINELS')) {
    // Sentinel mode: RedisSentinel only answers where the master is (phpredis has no client that
    // follows it by itself, its documentation leaves that to the application): connect to it,
    // and ask again after an error (a failover, or a node that stopped leading).
    $redis = null;
    $incr = function (string $key) use ($sentinels, $password, &$redis) {
        try {
            $redis ??= master(explode(',', $sentinels), $password);
            $id = $redis->incr($key);
            if ($id === false) {
                throw new RedisException($redis->getLastError() ?? 'no reply');
            }
            return $id;
        } catch (RedisException $e) {
            $redis = null;
            throw $e;
        }
    };
} else {
    fwrite(STDERR, "set MARCH_NODES (cluster mode) or MARCH_SENTINELS (Sentinel mode)\n");
    exit(2);
}

function master(array $sentinels, ?string $password): Redis
{
    foreach ($sentinels as $address) {
        [$host, $port] = explode(':', $address);
        try {
            // (auth only when there is a password: phpredis 5.3 sends AUTH even for a null one)
            $auth = $password === null ? [] : [$password];
            $sentinel = new RedisSentinel($host, (int) $port, 1.0, null, 0, 1.0, ...$auth);
            $master = $sentinel->getMasterAddrByName('march');
        } catch (RedisException $e) {
            continue; // this sentinel is down: ask the next one
        }
        if ($master) {
            $redis = new Redis();
            $redis->connect($master[0], (int) $master[1], 1.0, null, 0, 1.0);
            if ($password !== null) {
                $redis->auth($password);
            }
            return $redis;
        }
    }
    throw new RedisException('no sentinel knows the master');
}

$keys = explode(',', getenv('MARCH_KEYS') ?: 'orders,payments,invoices');
$limit = (int) (getenv('COUNT') ?: 0);
$interval = (int) (getenv('INTERVAL_MS') ?: 10) * 1000;
$failing = []; // key => [hrtime of its first error, errors since]
for ($i = 0, $drawn = 0; $limit === 0 || $drawn < $limit; $i++) {
    $input = [STDIN];
    $none = null;
    if (stream_select($input, $none, $none, 0) > 0 && fread(STDIN, 65536) === '' && feof(STDIN)) {
        break; // input ended
    }
    $key = $keys[$i % count($keys)];
    try {
        $id = $incr($key);
    } catch (RedisException | RedisClusterException $e) { // no ID was handed out: retrying is safe
        $failing[$key] ??= [hrtime(true), 0];
        $failing[$key][1]++;
        echo "error $key ", strtok($e->getMessage(), "\n"), "\n";
        usleep(50000);
        continue;
    }
    if (isset($failing[$key])) {
        [$since, $errors] = $failing[$key];
        printf("resumed %s after %.2f s (%d errors)\n", $key, (hrtime(true) - $since) / 1e9, $errors);
        unset($failing[$key]);
    }
    echo "id $key $id\n";
    $drawn++;
    usleep($interval);
}

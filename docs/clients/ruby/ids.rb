# redis-rb 4.8 (Debian 12's ruby-redis) against March: cluster mode or Sentinel mode.
#
#   MARCH_NODES=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 ruby ids.rb       (cluster mode)
#   MARCH_SENTINELS=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 ruby ids.rb   (Sentinel mode)
#
# It draws IDs from the keys in MARCH_KEYS (default orders,payments,invoices) in turn, one every
# INTERVAL_MS (default 10), until its input ends or COUNT IDs are drawn, and prints one line per
# draw: "id <key> <id>", or "error <key> <message>" (no ID was handed out: retrying is safe), and
# "resumed <key> after <seconds> s (<errors> errors)" when a key draws again after errors.
# MARCH_PASSWORD: the password, if the nodes have one.
require "redis"

$stdout.sync = true
password = ENV["MARCH_PASSWORD"] # nil: no password
redis =
  if ENV["MARCH_NODES"]
    # Cluster mode: CLUSTER SLOTS, each key to its slot's primary, MOVED followed; a node it
    # cannot reach makes it read the slot map again from any node it knows (standbys included).
    Redis.new(cluster: ENV["MARCH_NODES"].split(",").map { |n| "redis://#{n}" },
              password: password, connect_timeout: 1, timeout: 1)
  elsif ENV["MARCH_SENTINELS"]
    # Sentinel mode: every March node answers as a sentinel, master name "march"; the client asks
    # them for the primary on every (re)connect.
    sentinels = ENV["MARCH_SENTINELS"].split(",").map do |n|
      host, port = n.split(":")
      { host: host, port: Integer(port), password: password }
    end
    Redis.new(url: "redis://march", sentinels: sentinels, role: :master,
              password: password, connect_timeout: 1, timeout: 1)
  else
    abort "set MARCH_NODES (cluster mode) or MARCH_SENTINELS (Sentinel mode)"
  end

keys = (ENV["MARCH_KEYS"] || "orders,payments,invoices").split(",")
limit = Integer(ENV["COUNT"] || 0)
interval = Integer(ENV["INTERVAL_MS"] || 10) / 1000.0
input_done = false
Thread.new do
  $stdin.read
  input_done = true
end
failing = {} # key => [monotonic time of its first error, errors since]
drawn = 0
keys.cycle do |key|
  break if input_done || (limit.positive? && drawn >= limit)

  begin
    id = redis.incr(key)
  rescue Redis::BaseError => e
    failing[key] ||= [Process.clock_gettime(Process::CLOCK_MONOTONIC), 0]
    failing[key][1] += 1
    puts "error #{key} #{e.message.lines.first&.strip}"
    sleep 0.05
    next
  end
  if (since, errors = failing.delete(key))
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - since
    puts format("resumed %s after %.2f s (%d errors)", key, elapsed, errors)
  end
  puts "id #{key} #{id}"
  drawn += 1
  sleep interval
end
redis.close

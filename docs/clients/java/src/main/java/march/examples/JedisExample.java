package march.examples;

import java.util.Set;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisCluster;

/**
 * Jedis against March. Usage: JedisExample single|cluster host:port[,host:port...] [password] [tls]
 * "tls" uses the JVM's trust store (-Djavax.net.ssl.trustStore=... holding March's CA).
 */
public final class JedisExample {
  public static void main(String[] args) {
    String mode = args[0];
    String[] nodes = args[1].split(",");
    String password = args.length > 2 && !args[2].isEmpty() ? args[2] : null;
    boolean tls = args.length > 3 && args[3].equals("tls");
    JedisClientConfig config = DefaultJedisClientConfig.builder().password(password).ssl(tls).build();
    if (mode.equals("single")) {
      try (Jedis jedis = new Jedis(HostAndPort.from(nodes[0]), config)) {
        for (int i = 0; i < 3; i++) System.out.println("id " + jedis.incr("orders"));
      }
    } else {
      // Cluster mode follows MOVED to a new primary by itself (JedisSentinelPool does not: see
      // docs/sentinel.md, March publishes no +switch-master).
      Set<HostAndPort> seeds = new java.util.HashSet<>();
      for (String n : nodes) seeds.add(HostAndPort.from(n));
      try (JedisCluster cluster = new JedisCluster(seeds, config)) {
        for (int i = 0; i < 3; i++) System.out.println("id " + cluster.incr("orders"));
      }
    }
  }
}

package march.examples;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import java.util.ArrayList;
import java.util.List;

/**
 * Lettuce against March. Usage: LettuceExample single|cluster|sentinel host:port[,host:port...] [password] [tls]
 * "tls" uses the JVM's trust store (-Djavax.net.ssl.trustStore=... holding March's CA).
 */
public final class LettuceExample {
  public static void main(String[] args) {
    String mode = args[0];
    String[] nodes = args[1].split(",");
    String password = args.length > 2 && !args[2].isEmpty() ? args[2] : null;
    boolean tls = args.length > 3 && args[3].equals("tls");
    List<RedisURI> uris = new ArrayList<>();
    for (String n : nodes) {
      String[] hp = n.split(":");
      RedisURI.Builder b = RedisURI.builder().withHost(hp[0]).withPort(Integer.parseInt(hp[1])).withSsl(tls);
      if (password != null) b.withPassword(password.toCharArray());
      uris.add(b.build());
    }
    if (mode.equals("cluster")) {
      RedisClusterClient client = RedisClusterClient.create(uris);
      try (StatefulRedisClusterConnection<String, String> c = client.connect()) {
        for (int i = 0; i < 3; i++) System.out.println("id " + c.sync().incr("orders"));
      } finally {
        client.shutdown();
      }
      return;
    }
    RedisURI uri = uris.get(0);
    if (mode.equals("sentinel")) {
      // Every March node is a sentinel of the cluster, master name "march" (sentinel_master_name).
      RedisURI.Builder b = RedisURI.builder().withSentinelMasterId("march").withSsl(tls);
      for (String n : nodes) {
        String[] hp = n.split(":");
        b.withSentinel(hp[0], Integer.parseInt(hp[1]), password);
      }
      if (password != null) b.withPassword(password.toCharArray());
      uri = b.build();
    }
    RedisClient client = RedisClient.create(uri);
    try (StatefulRedisConnection<String, String> c = client.connect()) {
      for (int i = 0; i < 3; i++) System.out.println("id " + c.sync().incr("orders"));
    } finally {
      client.shutdown();
    }
  }
}

// go-redis (v9) against March. Usage:
//
//	go run . single|cluster|sentinel host:port[,host:port...] [password] [ca.crt]
//
// With a CA file the connection uses TLS (March's tls_port; give the client a certificate too,
// tls.Config.Certificates, when the server checks them: tls_auth_clients = yes).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	mode, nodes := os.Args[1], strings.Split(os.Args[2], ",")
	password, tlsConfig := "", (*tls.Config)(nil)
	if len(os.Args) > 3 {
		password = os.Args[3]
	}
	if len(os.Args) > 4 {
		pem, err := os.ReadFile(os.Args[4])
		if err != nil {
			panic(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsConfig = &tls.Config{RootCAs: pool}
	}

	var client redis.UniversalClient
	switch mode {
	case "single":
		client = redis.NewClient(&redis.Options{Addr: nodes[0], Password: password, TLSConfig: tlsConfig})
	case "cluster": // follows MOVED to a new primary by itself
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes, Password: password, TLSConfig: tlsConfig})
	case "sentinel": // every March node is a sentinel of the cluster, master name "march"
		client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: "march", SentinelAddrs: nodes,
			Password: password, SentinelPassword: password, TLSConfig: tlsConfig,
		})
	default:
		panic("mode: single, cluster or sentinel")
	}
	defer client.Close()
	for i := 0; i < 3; i++ {
		id, err := client.Incr(ctx, "orders").Result()
		if err != nil {
			panic(err) // no ID was handed out: retrying is safe
		}
		fmt.Println("id", id)
	}
}

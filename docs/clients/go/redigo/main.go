// redigo against March, from Debian 12's packages (no module proxy needed): cluster mode through
// redisc, Sentinel mode through FZambia/sentinel. Build (GOPATH mode: the packages' sources are
// in /usr/share/gocode):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o march-ids .
//
// Run:
//
//	MARCH_NODES=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 ./march-ids       (cluster mode)
//	MARCH_SENTINELS=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 ./march-ids   (Sentinel mode)
//
// It draws IDs from the keys in MARCH_KEYS (default orders,payments,invoices) in turn, one every
// INTERVAL_MS (default 10), until its input ends or COUNT IDs are drawn, and prints one line per
// draw: "id <key> <id>", or "error <key> <message>" (no ID was handed out: retrying is safe), and
// "resumed <key> after <seconds> s (<errors> errors)" when a key draws again after errors.
// MARCH_PASSWORD: the password, if the nodes have one.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/FZambia/sentinel"
	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"
)

func dialOptions() []redis.DialOption {
	opts := []redis.DialOption{
		redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second),
		redis.DialWriteTimeout(time.Second),
	}
	if password := os.Getenv("MARCH_PASSWORD"); password != "" {
		opts = append(opts, redis.DialPassword(password))
	}
	return opts
}

// clusterIncr: redisc as its documentation shows it: a pool per node, Refresh once, then a
// connection from the cluster per use, wrapped in RetryConn to follow MOVED and TRYAGAIN.
// redisc reads the slot map again (CLUSTER SLOTS) after a MOVED, and only from the nodes that
// were primaries in the map it has: see docs/clients/go.md for the cluster layout it needs.
func clusterIncr(nodes string) (func(string) (int64, error), func() error, error) {
	cluster := &redisc.Cluster{
		StartupNodes: strings.Split(nodes, ","),
		DialOptions:  dialOptions(),
		CreatePool: func(addr string, opts ...redis.DialOption) (*redis.Pool, error) {
			return &redis.Pool{
				MaxIdle:     4,
				IdleTimeout: time.Minute,
				Dial:        func() (redis.Conn, error) { return redis.Dial("tcp", addr, opts...) },
				TestOnBorrow: func(c redis.Conn, t time.Time) error {
					_, err := c.Do("PING")
					return err
				},
			}, nil
		},
	}
	if err := cluster.Refresh(); err != nil {
		return nil, nil, err
	}
	incr := func(key string) (int64, error) {
		conn := cluster.Get()
		defer conn.Close()
		retry, err := redisc.RetryConn(conn, 3, 100*time.Millisecond)
		if err != nil {
			return 0, err
		}
		return redis.Int64(retry.Do("INCR", key))
	}
	return incr, cluster.Close, nil
}

// sentinelIncr: FZambia/sentinel as its documentation shows it: a redigo Pool whose Dial asks the
// sentinels (every March node is one, master name "march") for the primary, and whose
// TestOnBorrow drops a pooled connection to a node that is no longer master.
func sentinelIncr(sentinels string) (func(string) (int64, error), func() error) {
	sntnl := &sentinel.Sentinel{
		Addrs:      strings.Split(sentinels, ","),
		MasterName: "march",
		Dial:       func(addr string) (redis.Conn, error) { return redis.Dial("tcp", addr, dialOptions()...) },
	}
	pool := &redis.Pool{
		MaxIdle:     4,
		IdleTimeout: time.Minute,
		Dial: func() (redis.Conn, error) {
			addr, err := sntnl.MasterAddr()
			if err != nil {
				return nil, err
			}
			return redis.Dial("tcp", addr, dialOptions()...)
		},
		TestOnBorrow: func(c redis.Conn, t time.Time) error {
			if !sentinel.TestRole(c, "master") {
				return errors.New("role check failed")
			}
			return nil
		},
	}
	incr := func(key string) (int64, error) {
		conn := pool.Get()
		defer conn.Close()
		return redis.Int64(conn.Do("INCR", key))
	}
	return incr, func() error { pool.Close(); return sntnl.Close() }
}

func main() {
	var incr func(string) (int64, error)
	var closeAll func() error
	if nodes := os.Getenv("MARCH_NODES"); nodes != "" {
		var err error
		if incr, closeAll, err = clusterIncr(nodes); err != nil {
			fmt.Fprintln(os.Stderr, "cluster:", err)
			os.Exit(1)
		}
	} else if sentinels := os.Getenv("MARCH_SENTINELS"); sentinels != "" {
		incr, closeAll = sentinelIncr(sentinels)
	} else {
		fmt.Fprintln(os.Stderr, "set MARCH_NODES (cluster mode) or MARCH_SENTINELS (Sentinel mode)")
		os.Exit(2)
	}
	defer closeAll()

	keys := strings.Split(envOr("MARCH_KEYS", "orders,payments,invoices"), ",")
	limit, _ := strconv.Atoi(os.Getenv("COUNT"))
	interval, _ := strconv.Atoi(envOr("INTERVAL_MS", "10"))
	inputDone := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(inputDone) }()
	type failing struct {
		since  time.Time
		errors int
	}
	failures := map[string]*failing{}
	for i, drawn := 0, 0; limit == 0 || drawn < limit; i++ {
		select {
		case <-inputDone:
			return
		default:
		}
		key := keys[i%len(keys)]
		id, err := incr(key)
		if err != nil {
			if failures[key] == nil {
				failures[key] = &failing{since: time.Now()}
			}
			failures[key].errors++
			fmt.Printf("error %s %s\n", key, strings.SplitN(err.Error(), "\n", 2)[0])
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if f := failures[key]; f != nil {
			fmt.Printf("resumed %s after %.2f s (%d errors)\n", key, time.Since(f.since).Seconds(), f.errors)
			delete(failures, key)
		}
		fmt.Printf("id %s %d\n", key, id)
		drawn++
		time.Sleep(time.Duration(interval) * time.Millisecond)
	}
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

/* Draw IDs from March with hiredis (Debian 12's libhiredis-dev 0.14, which has no cluster mode):
 * a plain connection per node, MOVED followed by hand.
 *
 *   cc -O2 -o march-ids ids.c $(pkg-config --cflags --libs hiredis)
 *   MARCH_NODES=127.0.0.1:7381,127.0.0.1:7382,127.0.0.1:7383 COUNT=5 ./march-ids
 *
 * It draws IDs from the keys in MARCH_KEYS (default orders,payments,invoices) in turn, one every
 * INTERVAL_MS (default 10), until its input ends or COUNT IDs are drawn, and prints one line per
 * draw: "id <key> <id>", or "error <key> <message>" (no ID was handed out: retrying is safe), and
 * "resumed <key> after <seconds> s (<errors> errors)" when a key draws again after errors.
 * MARCH_PASSWORD: the password, if the nodes have one.
 *
 * Each key remembers the node that last served it (a MOVED reply names the node to use, so each
 * key goes straight to its group's primary); a node that cannot be reached sends the key back to
 * the seed list, tried in turn, whose nodes answer MOVED to the new primary once there is one.
 */
#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 16 /* seeds plus nodes named by MOVED: plenty for a cluster of a few nodes */
#define MAX_KEYS 16
#define MAX_REDIRECTS 3 /* MOVED hops for one draw before it counts as a failed draw */

struct node {
    char host[256];
    int port;
    redisContext *conn; /* NULL: not connected */
};

static struct node nodes[MAX_NODES];
static int n_nodes, n_seeds;
static const char *password;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The index of host:port in nodes[], added if new (-1 if the table is full). */
static int node_index(const char *host, int port) {
    for (int i = 0; i < n_nodes; i++)
        if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0) return i;
    if (n_nodes == MAX_NODES) return -1;
    snprintf(nodes[n_nodes].host, sizeof nodes[n_nodes].host, "%s", host);
    nodes[n_nodes].port = port;
    return n_nodes++;
}

static int parse_address(const char *text, char *host, size_t size, int *port) {
    const char *colon = strrchr(text, ':');
    if (colon == NULL || (size_t)(colon - text) >= size) return -1;
    memcpy(host, text, colon - text);
    host[colon - text] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 ? 0 : -1;
}

static void disconnect(struct node *n) {
    if (n->conn) redisFree(n->conn);
    n->conn = NULL;
}

/* A connected context for node i, or NULL with the reason in err. */
static redisContext *connection(int i, char *err, size_t size) {
    struct node *n = &nodes[i];
    if (n->conn) return n->conn;
    struct timeval timeout = {1, 0};
    redisContext *c = redisConnectWithTimeout(n->host, n->port, timeout);
    if (c == NULL || c->err) {
        snprintf(err, size, "%s:%d: %s", n->host, n->port, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, timeout);
    if (password) {
        redisReply *r = redisCommand(c, "AUTH %s", password);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        snprintf(err, size, "%s", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    n->conn = c;
    return c;
}

/* One INCR of key, starting at node *at (updated to the node that answered, or to the next seed
 * after a node could not be reached). Returns 0 and the ID, or -1 and the error text. */
static int draw(const char *key, int *at, long long *id, char *err, size_t size) {
    for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
        redisContext *c = connection(*at, err, size);
        if (c == NULL) {
            *at = (*at + 1) % n_seeds; /* unreachable: ask the next seed */
            return -1;
        }
        redisReply *r = redisCommand(c, "INCR %s", key);
        if (r == NULL) { /* connection lost: the request may or may not have run; no ID either way */
            snprintf(err, size, "%s:%d: %s", nodes[*at].host, nodes[*at].port, c->errstr);
            disconnect(&nodes[*at]);
            *at = (*at + 1) % n_seeds;
            return -1;
        }
        if (r->type == REDIS_REPLY_INTEGER) {
            *id = r->integer;
            freeReplyObject(r);
            return 0;
        }
        snprintf(err, size, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        char address[300], host[256];
        int slot, port, to;
        if (r->type == REDIS_REPLY_ERROR && sscanf(r->str, "MOVED %d %299s", &slot, address) == 2 &&
            parse_address(address, host, sizeof host, &port) == 0 && (to = node_index(host, port)) >= 0) {
            freeReplyObject(r);
            *at = to; /* MOVED <slot> <host:port>: that node serves the key now */
            continue;
        }
        freeReplyObject(r); /* CLUSTERDOWN, TRYAGAIN, ...: no ID; try again later */
        return -1;
    }
    return -1;
}

int main(void) {
    const char *list = getenv("MARCH_NODES");
    if (list == NULL) {
        fprintf(stderr, "set MARCH_NODES=host:port[,host:port...]\n");
        return 2;
    }
    password = getenv("MARCH_PASSWORD");
    char *seeds = strdup(list);
    for (char *item = strtok(seeds, ","); item; item = strtok(NULL, ",")) {
        char host[256];
        int port;
        if (parse_address(item, host, sizeof host, &port) == 0 && node_index(host, port) >= 0) n_seeds = n_nodes;
    }
    char *keys[MAX_KEYS];
    int n_keys = 0;
    char *names = strdup(getenv("MARCH_KEYS") ? getenv("MARCH_KEYS") : "orders,payments,invoices");
    for (char *k = strtok(names, ","); k && n_keys < MAX_KEYS; k = strtok(NULL, ",")) keys[n_keys++] = k;
    if (n_seeds == 0 || n_keys == 0) {
        fprintf(stderr, "no nodes or no keys\n");
        return 2;
    }
    long limit = getenv("COUNT") ? atol(getenv("COUNT")) : 0;
    long pause_us = (getenv("INTERVAL_MS") ? atol(getenv("INTERVAL_MS")) : 10) * 1000;
    int at[MAX_KEYS] = {0}, errors[MAX_KEYS] = {0};
    double failing_since[MAX_KEYS] = {0};
    setvbuf(stdout, NULL, _IOLBF, 0);

    for (long i = 0, drawn = 0; limit == 0 || drawn < limit; i++) {
        struct pollfd input = {STDIN_FILENO, POLLIN, 0};
        char buf[4096];
        if (poll(&input, 1, 0) > 0 && read(STDIN_FILENO, buf, sizeof buf) <= 0) break; /* input ended */
        int k = i % n_keys;
        long long id;
        char err[512];
        if (draw(keys[k], &at[k], &id, err, sizeof err) != 0) {
            if (errors[k]++ == 0) failing_since[k] = now();
            printf("error %s %s\n", keys[k], err);
            usleep(50000);
            continue;
        }
        if (errors[k]) {
            printf("resumed %s after %.2f s (%d errors)\n", keys[k], now() - failing_since[k], errors[k]);
            errors[k] = 0;
        }
        printf("id %s %lld\n", keys[k], id);
        drawn++;
        usleep(pause_us);
    }
    for (int i = 0; i < n_nodes; i++) disconnect(&nodes[i]);
    free(seeds);
    free(names);
    return 0;
}

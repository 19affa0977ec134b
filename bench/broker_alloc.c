/* broker_alloc.c — alloc+free round trips per second through the real broker.sock, next
 * to baselines measured in the same run:
 *   pool      in-process pool_alloc + pool_unref_seq (the allocator alone)
 *   core      in-process broker_handle() of encoded alloc + free (allocator + protocol)
 *   echo      nanomsg REQ/REP echo of a same-size message over ipc:// to a child
 *             process (the transport alone: two of them per alloc+free)
 *   socket    alloc + free requests to a real kvd-broker process (what clients see)
 * Usage: broker-alloc-bench [--iters N] [--pages K]   (KVD_BIN_DIR names kvd-broker)
 */
#include "broker/core.h"
#include "broker_harness.h"
#include "common/log.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_ITERS_DEFAULT 20000
#define BENCH_WARMUP 500

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct result {
    const char *name;
    double per_s;     /* alloc+free pairs (or echo pairs) per second */
    double p50_us;    /* per pair */
    double p99_us;
};

static void summarize(struct result *r, double *lat, int n, double total_s)
{
    qsort(lat, (size_t)n, sizeof(*lat), cmp_double);
    r->per_s = n / total_s;
    r->p50_us = lat[n / 2] * 1e6;
    r->p99_us = lat[(int)(n * 0.99)] * 1e6;
}

static struct pool_desc bench_desc(void)
{
    struct pool_desc d;
    memset(&d, 0, sizeof(d));
    kv_geom_init(&d.geom, 2, 2, 8, 4, KV_DTYPE_F32);
    d.backend = MEM_BACKEND_HOST;
    d.layout_version = KV_LAYOUT_VERSION;
    d.model_fp = 0xfeed;
    pool_desc_layout(&d, 16ull << 20, 4096, 1);
    return d;
}

static int bench_pool(struct result *r, int iters, uint32_t k, double *lat)
{
    struct pool p;
    uint32_t pages[BROKER_ALLOC_MAX];
    if (pool_init(&p, bench_desc().num_pages, NULL, NULL))
        return -1;
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        double a = now_s();
        if (pool_alloc(&p, k, pages))
            return -1;
        pool_unref_seq(&p, pages, k);
        lat[i] = now_s() - a;
    }
    summarize(r, lat, iters, now_s() - t0);
    pool_release(&p);
    return 0;
}

static int bench_core(struct result *r, int iters, uint32_t k, double *lat)
{
    struct broker b;
    struct pool_desc d = bench_desc();
    struct wbuf req, rep;
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    uint64_t lease;
    if (broker_init(&b, &d, 3000, 0))
        return -1;
    wbuf_init(&req);
    wbuf_init(&rep);
    broker_req_attach_encode(&req, "bench", 0, NULL);
    broker_handle(&b, req.sb.data, req.sb.size, 0, &rep);
    if (wmsg_parse(&m, rep.sb.data, rep.sb.size, err) ||
        broker_rep_attach_decode(&m, &lease, NULL, NULL, err))
        return -1;
    wmsg_release(&m);
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        double a = now_s();
        uint32_t *pages = NULL;
        size_t np;
        wbuf_release(&req);
        wbuf_release(&rep);
        broker_req_alloc_encode(&req, lease, 1, k);
        broker_handle(&b, req.sb.data, req.sb.size, 0, &rep);
        if (wmsg_parse(&m, rep.sb.data, rep.sb.size, err) ||
            broker_rep_alloc_decode(&m, &pages, &np, err))
            return -1;
        free(pages);
        wmsg_release(&m);
        wbuf_release(&req);
        wbuf_release(&rep);
        broker_req_free_encode(&req, lease, 1);
        broker_handle(&b, req.sb.data, req.sb.size, 0, &rep);
        if (wmsg_parse(&m, rep.sb.data, rep.sb.size, err) ||
            broker_rep_free_decode(&m, NULL, err))
            return -1;
        wmsg_release(&m);
        lat[i] = now_s() - a;
    }
    summarize(r, lat, iters, now_s() - t0);
    wbuf_release(&req);
    wbuf_release(&rep);
    broker_release(&b);
    return 0;
}

/* Child: REP echo server until killed. */
static void echo_server(const char *addr)
{
    int s = nn_socket(AF_SP, NN_REP);
    if (s < 0 || nn_bind(s, addr) < 0)
        _exit(1);
    for (;;) {
        void *buf = NULL;
        int n = nn_recv(s, &buf, NN_MSG, 0);
        if (n < 0)
            continue;
        nn_send(s, &buf, NN_MSG, 0); /* hands buf to nanomsg */
    }
}

static int req_socket(const char *addr)
{
    int s = nn_socket(AF_SP, NN_REQ);
    int to = 5000;
    if (s < 0 || nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to)) < 0 ||
        nn_connect(s, addr) < 0)
        return -1;
    return s;
}

/* The two socket paths run interleaved in BENCH_ROUNDS blocks so that machine load
 * drifting during the run hits both alike. */
#define BENCH_ROUNDS 10

struct sock_run {
    int echo;            /* REQ socket to the echo child */
    int broker;          /* REQ socket to kvd-broker */
    uint64_t lease;
    uint32_t k;          /* pages per alloc */
    struct wbuf echo_msg;/* an alloc-sized message */
};

static int echo_pair(struct sock_run *sr)
{
    for (int i = 0; i < 2; i++) { /* an alloc+free is two round trips */
        void *buf = NULL;
        if (nn_send(sr->echo, sr->echo_msg.sb.data, sr->echo_msg.sb.size, 0) < 0 ||
            nn_recv(sr->echo, &buf, NN_MSG, 0) < 0)
            return -1;
        nn_freemsg(buf);
    }
    return 0;
}

static int broker_pair(struct sock_run *sr)
{
    struct wbuf w;
    struct wmsg m;
    void *raw;
    char err[WIRE_ERR_LEN];
    if (bh_alloc(sr->broker, sr->lease, 1, sr->k, NULL))
        return -1;
    wbuf_init(&w);
    broker_req_free_encode(&w, sr->lease, 1);
    if (bh_call(sr->broker, &w, &m, &raw) || broker_rep_free_decode(&m, NULL, err))
        return -1;
    bh_reply_free(&m, raw);
    return 0;
}

/* Runs n pairs of fn, writing per-pair latencies into lat; returns the summed time. */
static double run_block(int (*fn)(struct sock_run *), struct sock_run *sr, int n, double *lat)
{
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double a = now_s();
        if (fn(sr))
            return -1;
        lat[i] = now_s() - a;
        sum += lat[i];
    }
    return sum;
}

static int bench_sockets(struct result *echo, struct result *sock, int iters, uint32_t k,
                         const struct bh *h, double *lat_e, double *lat_s)
{
    char addr[PATHS_MAX + 8];
    struct sock_run sr = {.echo = -1, .broker = -1, .k = k};
    int rc = -1;
    paths_ipc_addr(addr, sizeof(addr), h->dir, "echo.sock");
    pid_t pid = fork();
    if (pid == 0)
        echo_server(addr);
    wbuf_init(&sr.echo_msg);
    broker_req_alloc_encode(&sr.echo_msg, 1, 1, k);
    usleep(100000);
    sr.echo = req_socket(addr);
    sr.broker = bh_connect(h);
    if (sr.echo < 0 || sr.broker < 0 || bh_attach(sr.broker, &sr.lease, NULL))
        goto out;
    double scratch[BENCH_WARMUP];
    if (run_block(echo_pair, &sr, BENCH_WARMUP, scratch) < 0 ||
        run_block(broker_pair, &sr, BENCH_WARMUP, scratch) < 0)
        goto out;
    int per = iters / BENCH_ROUNDS;
    double te = 0, ts = 0, t;
    for (int r = 0; r < BENCH_ROUNDS; r++) {
        if ((t = run_block(echo_pair, &sr, per, lat_e + r * per)) < 0)
            goto out;
        te += t;
        if ((t = run_block(broker_pair, &sr, per, lat_s + r * per)) < 0)
            goto out;
        ts += t;
    }
    summarize(echo, lat_e, per * BENCH_ROUNDS, te);
    summarize(sock, lat_s, per * BENCH_ROUNDS, ts);
    rc = 0;
out:
    if (sr.echo >= 0)
        nn_close(sr.echo);
    if (sr.broker >= 0)
        nn_close(sr.broker);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    wbuf_release(&sr.echo_msg);
    return rc;
}

int main(int argc, char **argv)
{
    int iters = BENCH_ITERS_DEFAULT;
    uint32_t k = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc)
            k = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: broker-alloc-bench [--iters N] [--pages K]\n"
                   "alloc+free round trips per second: allocator, protocol, transport, socket\n");
            return 0;
        } else {
            fprintf(stderr, "broker-alloc-bench: unknown argument '%s'\n", argv[i]);
            return 64;
        }
    }
    if (iters < 100 || k == 0 || k > BROKER_ALLOC_MAX) {
        fprintf(stderr, "broker-alloc-bench: --iters >= 100, --pages 1..%d\n", BROKER_ALLOC_MAX);
        return 64;
    }
    log_setup("broker-alloc-bench", LOG_LEVEL_WARN);
    signal(SIGPIPE, SIG_IGN);
    double *lat = calloc((size_t)iters, sizeof(*lat));
    struct result r[4] = {{"pool (in-process allocator)", 0, 0, 0},
                          {"core (in-process encode+handle+decode)", 0, 0, 0},
                          {"echo (nanomsg ipc REQ/REP, 2 round trips)", 0, 0, 0},
                          {"socket (kvd-broker alloc+free)", 0, 0, 0}};
    struct bh h;
    const char *extra[] = {"--pool-bytes", "16M", NULL};
    if (!lat || bench_pool(&r[0], iters, k, lat) || bench_core(&r[1], iters, k, lat)) {
        fprintf(stderr, "broker-alloc-bench: in-process baseline failed\n");
        return 1;
    }
    if (bh_start(&h, extra, NULL)) {
        fprintf(stderr, "broker-alloc-bench: cannot start kvd-broker (KVD_BIN_DIR?)\n");
        return 1;
    }
    double *lat2 = calloc((size_t)iters, sizeof(*lat2));
    int rc = !lat2 || bench_sockets(&r[2], &r[3], iters, k, &h, lat, lat2);
    free(lat2);
    bh_stop(&h);
    if (rc) {
        fprintf(stderr, "broker-alloc-bench: socket run failed\n");
        return 1;
    }
    printf("broker alloc+free round trips, %u page(s) per alloc, %d iterations\n", k, iters);
    printf("%-44s %14s %10s %10s %12s\n", "path", "pairs/s", "p50 us", "p99 us",
           "x socket");
    for (int i = 0; i < 4; i++)
        printf("%-44s %14.0f %10.2f %10.2f %12.2f\n", r[i].name, r[i].per_s, r[i].p50_us,
               r[i].p99_us, r[i].per_s / r[3].per_s);
    printf("the broker's own work per alloc+free is the core row (%.2f us p50); the socket path\n"
           "costs %.2fx the bare nanomsg transport of the same two round trips (echo and socket\n"
           "interleaved in %d blocks)\n",
           r[1].p50_us, r[2].per_s / r[3].per_s, BENCH_ROUNDS);
    free(lat);
    return 0;
}

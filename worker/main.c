/* kvd-worker — loads a GGUF llama model, attaches the broker's KV pool and executes the
 * steps kvd sends over ipc://DIR/worker-N.sock (proto/step_msg.h).
 *
 * Start: load the model (exit 78 if it is invalid), attach the pool via DIR/broker.fd
 * (checks model fingerprint, layers, kv heads, head dim and layout version; adopts the
 * pool's block size and kv dtype; exit 78 on a mismatch), connect an NN_PAIR to
 * worker-N.sock, send "hello". Loop: receive "step" -> validate against the pool ->
 * compute -> "result", or "err" naming the problem (never crash, never write outside the
 * step's pages). SIGTERM/SIGINT: finish the step in flight, then exit 0. The worker dies
 * with its parent (PR_SET_PDEATHSIG). Stateless between steps (DESIGN.md principle 1).
 */
#include "common/err.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/pool_attach.h"
#include "proto/step_msg.h"
#include "worker/exec.h"

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#define WORKER_RECV_POLL_MS 200        /* recv timeout: how often SIGTERM is noticed */
#define WORKER_SEND_TIMEOUT_MS 5000    /* a reply kvd does not take in this time is dropped */
#define WORKER_ATTACH_WAIT_MS 10000    /* keep retrying a broker that is not up yet */
#define WORKER_ATTACH_RETRY_MS 100     /* between attach attempts */
#define WORKER_DEFAULT_STEP_ROWS 512   /* forward-pass rows (tokens) per sub-batch */
#define WORKER_INDEX_MAX STEP_WORKER_INDEX_MAX

static volatile sig_atomic_t g_stop; /* signal flag: the only mutable global */

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

struct worker_opts {
    const char *runtime_dir;
    const char *model;
    uint32_t index;
    uint32_t threads;
    uint32_t step_rows;
    enum log_level level;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvd-worker --model PATH [options]\n"
            "Executes kvd's model steps against the broker's shared KV page pool.\n"
            "  --model PATH          GGUF llama model (F32/F16/BF16/Q8_0 weights); required\n"
            "  --runtime-dir DIR     sockets dir (default $KVD_RUNTIME_DIR, "
            "$XDG_RUNTIME_DIR/kvd, /tmp/kvd-$UID)\n"
            "  --index N             worker index: connects DIR/worker-N.sock (default 0, "
            "max %d)\n"
            "  --threads T           compute threads: matmul slices, attention (default: online\n"
            "                        CPUs, max %d; OpenBLAS itself runs single-threaded)\n"
            "  --step-rows N         tokens per forward sub-batch (default %d; K/M suffix ok)\n"
            "  --log-level LEVEL     error|warn|info|debug (default info)\n"
            "  --help                this text\n"
            "Exit: 0 on SIGTERM, 64 bad usage, 78 bad model or pool mismatch, 69 no broker.\n",
            WORKER_INDEX_MAX, TPOOL_THREADS_MAX, WORKER_DEFAULT_STEP_ROWS);
}

/* Unsigned with optional K/M/G suffix (x1024). 0 or -EINVAL. */
static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -EINVAL;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (*end || v > max)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

/* 0 = run, else the exit code. */
static int parse_args(int argc, char **argv, struct worker_opts *o)
{
    enum { O_RT = 1, O_MODEL, O_INDEX, O_THREADS, O_ROWS, O_LOG, O_HELP };
    static const struct option lo[] = {
        {"runtime-dir", 1, 0, O_RT}, {"model", 1, 0, O_MODEL},   {"index", 1, 0, O_INDEX},
        {"threads", 1, 0, O_THREADS}, {"step-rows", 1, 0, O_ROWS}, {"log-level", 1, 0, O_LOG},
        {"help", 0, 0, O_HELP},       {0, 0, 0, 0}};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (struct worker_opts){NULL, NULL, 0, ncpu > 0 ? (uint32_t)ncpu : 1,
                              WORKER_DEFAULT_STEP_ROWS, LOG_LEVEL_INFO};
    if (o->threads > TPOOL_THREADS_MAX)
        o->threads = TPOOL_THREADS_MAX;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case O_RT:
            o->runtime_dir = optarg;
            break;
        case O_MODEL:
            o->model = optarg;
            break;
        case O_INDEX:
            if (parse_u32(optarg, WORKER_INDEX_MAX, &o->index) < 0)
                return fprintf(stderr, "kvd-worker: bad --index '%s'\n", optarg), EX_USAGE;
            break;
        case O_THREADS:
            if (parse_u32(optarg, TPOOL_THREADS_MAX, &o->threads) < 0 || o->threads == 0)
                return fprintf(stderr, "kvd-worker: bad --threads '%s' (1..%d)\n", optarg,
                               TPOOL_THREADS_MAX),
                       EX_USAGE;
            break;
        case O_ROWS:
            if (parse_u32(optarg, FWD_MAX_TOKENS_LIMIT, &o->step_rows) < 0 || o->step_rows == 0)
                return fprintf(stderr, "kvd-worker: bad --step-rows '%s' (1..%d)\n", optarg,
                               FWD_MAX_TOKENS_LIMIT),
                       EX_USAGE;
            break;
        case O_LOG:
            if (log_level_parse(optarg, &o->level) < 0)
                return fprintf(stderr, "kvd-worker: bad --log-level '%s'\n", optarg), EX_USAGE;
            break;
        case O_HELP:
            usage(stdout);
            return -1;
        default:
            fprintf(stderr, "kvd-worker: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return EX_USAGE;
        }
    }
    if (optind < argc)
        return fprintf(stderr, "kvd-worker: unexpected argument '%s'\n", argv[optind]),
               EX_USAGE;
    if (!o->model)
        return fprintf(stderr, "kvd-worker: --model is required\n"), EX_USAGE;
    return 0;
}

/* Attaches the pool, retrying while the broker is not up yet. */
static int worker_attach(const char *dir, const struct model *m, struct mem_pool *mp)
{
    char path[PATHS_MAX];
    int rc = paths_join(path, sizeof(path), dir, PATHS_SOCK_FD);
    if (rc < 0)
        return rc;
    struct pool_desc expect = {0};
    expect.model_fp = m->fingerprint;
    expect.layout_version = KV_LAYOUT_VERSION;
    expect.geom.n_layers = m->n_layers;
    expect.geom.n_kv_heads = m->n_kv_heads;
    expect.geom.head_dim = m->head_dim;
    for (uint32_t waited = 0;; waited += WORKER_ATTACH_RETRY_MS) {
        rc = pool_attach(path, &expect, mp);
        if ((rc != -ENOENT && rc != -ECONNREFUSED) || waited >= WORKER_ATTACH_WAIT_MS || g_stop)
            break;
        struct timespec ts = {0, WORKER_ATTACH_RETRY_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (rc < 0)
        log_err("cannot attach the KV pool at '%s': %s", path, kvd_strerror(rc));
    return rc;
}

static int worker_send(int sock, struct wbuf *w)
{
    if (nn_send(sock, w->sb.data, w->sb.size, 0) < 0) {
        int rc = -nn_errno();
        log_warn("cannot send a reply to kvd: %s", nn_strerror(nn_errno()));
        return rc;
    }
    return 0;
}

/* Handles one received message; always answers a step (result or err). */
static void worker_handle(struct exec *e, int sock, const void *buf, size_t len)
{
    char err[WIRE_ERR_LEN], why[EXEC_WHY_LEN];
    struct wmsg m;
    struct step_msg s;
    struct step_result r;
    struct wbuf w;
    wbuf_init(&w);
    int rc = wmsg_parse(&m, buf, len, err);
    if (rc == 0 && !wmsg_is(&m, "step")) {
        snprintf(err, sizeof(err), "unexpected message '%s'", m.type);
        rc = KVD_EMSG;
    }
    if (rc < 0) {
        log_warn("bad message from kvd: %s", err);
        step_err_encode(&w, 0, rc, err);
        goto out_send;
    }
    if ((rc = step_msg_decode(&m, &s, err)) < 0) {
        log_warn("bad step from kvd: %s", err);
        step_err_encode(&w, step_err_step_id(&m), rc, err);
        goto out_send;
    }
    if ((rc = exec_step(e, &s, &r, why)) < 0) {
        log_warn("refusing step %llu: %s", (unsigned long long)s.step_id, why);
        step_err_encode(&w, s.step_id, rc, why);
    } else {
        log_debug("step %llu done: %u sequences", (unsigned long long)s.step_id, s.n_seqs);
        step_result_encode(&w, &r);
    }
    step_msg_release(&s);
out_send:
    wmsg_release(&m);
    worker_send(sock, &w);
    wbuf_release(&w);
}

static int worker_loop(struct exec *e, int sock)
{
    while (!g_stop) {
        void *buf = NULL;
        int n = nn_recv(sock, &buf, NN_MSG, 0);
        if (n < 0) {
            int en = nn_errno();
            if (en == ETIMEDOUT || en == EAGAIN || en == EINTR)
                continue;
            log_err("cannot receive from kvd: %s", nn_strerror(en));
            return -en;
        }
        worker_handle(e, sock, buf, (size_t)n);
        nn_freemsg(buf);
    }
    return 0;
}

static int worker_connect(const char *dir, uint32_t index, int *out)
{
    char name[64], addr[PATHS_MAX + 8];
    snprintf(name, sizeof(name), PATHS_SOCK_WORKER_FMT, (int)index);
    int rc = paths_ipc_addr(addr, sizeof(addr), dir, name);
    if (rc < 0)
        return rc;
    int sock = nn_socket(AF_SP, NN_PAIR);
    if (sock < 0)
        return -nn_errno();
    int rcv_to = WORKER_RECV_POLL_MS, snd_to = WORKER_SEND_TIMEOUT_MS, max = WIRE_MSG_MAX;
    if (nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVTIMEO, &rcv_to, sizeof(rcv_to)) < 0 ||
        nn_setsockopt(sock, NN_SOL_SOCKET, NN_SNDTIMEO, &snd_to, sizeof(snd_to)) < 0 ||
        nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof(max)) < 0 ||
        nn_connect(sock, addr) < 0) {
        rc = -nn_errno();
        log_err("cannot connect to '%s': %s", addr, nn_strerror(nn_errno()));
        nn_close(sock);
        return rc;
    }
    *out = sock;
    return 0;
}

int main(int argc, char **argv)
{
    struct worker_opts o;
    int rc = parse_args(argc, argv, &o), code = EX_SOFTWARE, sock = -1;
    if (rc)
        return rc < 0 ? 0 : rc;
    log_setup("kvd-worker", o.level);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char dir[PATHS_MAX];
    if (paths_runtime_dir(dir, sizeof(dir), o.runtime_dir) < 0) {
        log_err("runtime dir too long");
        return EX_CONFIG;
    }
    struct model m;
    if (model_load(&m, o.model) < 0)
        return EX_CONFIG;
    log_info("model '%s': %u layers, dim %u, %u heads / %u kv heads x %u, ffn %u, vocab %u",
             o.model, m.n_layers, m.dim, m.n_heads, m.n_kv_heads, m.head_dim, m.ff, m.vocab);
    openblas_set_num_threads(1); /* our pool splits the matmuls (forward.h) */
    struct tpool tp;
    struct mem_pool mp;
    struct kv_view kv;
    struct exec e;
    if ((rc = tpool_init(&tp, o.threads)) < 0) {
        log_err("cannot start %u compute threads: %s", o.threads, kvd_strerror(rc));
        goto out_model;
    }
    if ((rc = worker_attach(dir, &m, &mp)) < 0) {
        code = rc == KVD_EMISMATCH || rc == -ENOTSUP ? EX_CONFIG : EX_UNAVAILABLE;
        goto out_tpool;
    }
    if ((rc = kv_view_from_pool(&kv, &mp)) < 0) {
        log_err("cannot compute on pool: %s backend, kv dtype %u (the CPU path needs a host "
                "pool of f32 or f16)", mem_backend_name(mp.desc.backend), mp.desc.geom.kv_dtype);
        code = EX_CONFIG;
        goto out_pool;
    }
    log_info("pool attached: %u pages of %u tokens, kv %s, %llu bytes per page", kv.num_pages,
             kv.block_size, kv_dtype_get(kv.kv_dtype)->name,
             (unsigned long long)mp.desc.geom.page_bytes);
    if (exec_init(&e, &m, &tp, &kv, o.step_rows) < 0)
        goto out_pool;
    if (worker_connect(dir, o.index, &sock) < 0) {
        code = EX_UNAVAILABLE;
        goto out_exec;
    }
    struct wbuf w;
    struct step_hello h = {o.index, (uint32_t)getpid(), m.fingerprint, m.vocab};
    wbuf_init(&w);
    step_hello_encode(&w, &h);
    rc = worker_send(sock, &w);
    wbuf_release(&w);
    if (rc == 0) {
        log_info("worker %u ready (%u threads, %u rows per sub-batch)", o.index, o.threads,
                 o.step_rows);
        rc = worker_loop(&e, sock);
    }
    code = rc == 0 ? 0 : EX_UNAVAILABLE;
    if (g_stop)
        log_info("worker %u stopping on signal", o.index);
    nn_close(sock);
out_exec:
    exec_release(&e);
out_pool:
    mem_pool_release(&mp);
out_tpool:
    tpool_release(&tp);
out_model:
    model_release(&m);
    return code;
}

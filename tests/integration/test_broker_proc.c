/* test_broker_proc.c — kvd-broker as a real process on real sockets in a temp runtime
 * dir: serve and clean stop, two worker processes attaching one host pool through
 * broker.fd and seeing each other's writes, descriptor mismatch at attach (worker side
 * and broker.sock side), lease release after a client is SIGKILLed, bad input on the
 * socket answered while the broker keeps serving, a foreign process guessing a lease id
 * refused (QA item 11), a second broker refused, the
 * command-line conventions (--help 0, unknown flag 64, bad config 78). */
#include "broker_harness.h"
#include "tests/unit/hash_helper.h"
#include "common/err.h"
#include "common/log.h"
#include "common/pool_attach.h"

#include "common/fdpass.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <nanomsg/nn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXPIRY_WAIT_MS 5000 /* the broker runs with a 300 ms lease timeout */

static struct pool_desc test_expect(void)
{
    struct pool_desc e;
    memset(&e, 0, sizeof(e));
    ck_assert_int_eq(kv_geom_init(&e.geom, 2, 2, 8, 4, KV_DTYPE_F32), 0);
    e.model_fp = 0xfeed;
    e.layout_version = KV_LAYOUT_VERSION;
    e.backend = MEM_BACKEND_HOST;
    return e;
}

START_TEST(test_serve_and_stop)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    struct stat st;
    ck_assert_int_eq(stat(h.sock_path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0660);
    ck_assert_int_eq(stat(h.fd_path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0660);
    ck_assert_int_eq(stat(h.dir, &st), 0);
    int s = bh_connect(&h);
    ck_assert_int_ge(s, 0);
    uint64_t lease;
    struct pool_desc d;
    ck_assert_int_eq(bh_attach(s, &lease, &d), 0);
    ck_assert_uint_eq(d.geom.page_bytes, 2 * 2 * 2 * 4 * 8 * 4); /* layers*KV*heads*block*hd*4 */
    ck_assert_uint_eq(d.num_pages, (1u << 20) / d.geom.page_bytes);
    ck_assert_uint_eq(d.backend, MEM_BACKEND_HOST);
    uint32_t pages[8];
    ck_assert_int_eq(bh_alloc(s, lease, 1, 8, pages), 0);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.pages_used, 8);
    ck_assert_uint_eq(bs.pages_total, d.num_pages);
    ck_assert_uint_eq(bs.block_size, 4);
    nn_close(s);
    char sock_path[PATHS_MAX];
    snprintf(sock_path, sizeof(sock_path), "%s", h.sock_path);
    char fd_path[PATHS_MAX];
    snprintf(fd_path, sizeof(fd_path), "%s", h.fd_path);
    pid_t pid = h.pid;
    kill(pid, SIGTERM);
    int wst;
    ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
    ck_assert(WIFEXITED(wst));
    ck_assert_int_eq(WEXITSTATUS(wst), 0);
    ck_assert_int_eq(access(sock_path, F_OK), -1); /* sockets unlinked */
    ck_assert_int_eq(access(fd_path, F_OK), -1);
    h.pid = 0;
    bh_stop(&h);
}
END_TEST

/* Child: attach, write its pattern into page `mine`, tell the other, wait, check page
 * `theirs` holds the other's pattern. Exit code 0 only when everything held. */
static int worker_child(const char *fd_path, uint32_t mine, uint32_t theirs, uint8_t pat_mine,
                        uint8_t pat_theirs, int tell_w, int wait_r)
{
    struct mem_pool mp;
    struct pool_desc e = test_expect();
    if (pool_attach(fd_path, &e, &mp))
        return 10;
    size_t pb = mp.desc.geom.page_bytes;
    memset(mem_pool_page_ptr(&mp, mine), pat_mine, pb);
    char c = 'x';
    if (write(tell_w, &c, 1) != 1 || read(wait_r, &c, 1) != 1)
        return 11;
    const uint8_t *p = mem_pool_page_ptr(&mp, theirs);
    for (size_t i = 0; i < pb; i++)
        if (p[i] != pat_theirs)
            return 12;
    mem_pool_release(&mp);
    return 0;
}

START_TEST(test_two_processes_share_pool)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "4M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    int ab[2], ba[2];
    ck_assert_int_eq(pipe(ab), 0);
    ck_assert_int_eq(pipe(ba), 0);
    pid_t a = fork();
    if (a == 0)
        _exit(worker_child(h.fd_path, 3, 5, 0xa5, 0x5a, ab[1], ba[0]));
    pid_t b = fork();
    if (b == 0)
        _exit(worker_child(h.fd_path, 5, 3, 0x5a, 0xa5, ba[1], ab[0]));
    int sa, sb;
    ck_assert_int_eq(waitpid(a, &sa, 0), a);
    ck_assert_int_eq(waitpid(b, &sb, 0), b);
    ck_assert_msg(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "worker a: status %d", sa);
    ck_assert_msg(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "worker b: status %d", sb);
    /* a third process (this one) sees both writes, and the pool is sealed */
    struct mem_pool mp;
    struct pool_desc e = test_expect();
    ck_assert_int_eq(pool_attach(h.fd_path, &e, &mp), 0);
    ck_assert_uint_eq(((uint8_t *)mem_pool_page_ptr(&mp, 3))[17], 0xa5);
    ck_assert_uint_eq(((uint8_t *)mem_pool_page_ptr(&mp, 5))[mp.desc.geom.page_bytes - 1], 0x5a);
    ck_assert_uint_eq(((uint8_t *)mem_pool_page_ptr(&mp, 4))[0], 0); /* untouched page */
    ck_assert_ptr_eq(mem_pool_page_ptr(&mp, 5), mp.base + kv_page_offset(&mp.desc.geom, 5));
    mem_pool_release(&mp);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

START_TEST(test_attach_mismatch)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    struct mem_pool mp;
    struct pool_desc e = test_expect();
    e.model_fp = 0xbeef;
    ck_assert_int_eq(pool_attach(h.fd_path, &e, &mp), KVD_EMISMATCH);
    ck_assert_ptr_null(mp.base);
    e = test_expect();
    ck_assert_int_eq(kv_geom_init(&e.geom, 2, 2, 8, 4, KV_DTYPE_F16), 0);
    ck_assert_int_eq(pool_attach(h.fd_path, &e, &mp), KVD_EMISMATCH);
    e = test_expect();
    e.layout_version = KV_LAYOUT_VERSION + 1;
    ck_assert_int_eq(pool_attach(h.fd_path, &e, &mp), KVD_EMISMATCH);
    e = test_expect();
    e.backend = MEM_BACKEND_CUDA_VMM;
    ck_assert_int_eq(pool_attach(h.fd_path, &e, &mp), KVD_EMISMATCH);
    /* the broker.sock side: attach with an expect that differs */
    int s = bh_connect(&h);
    ck_assert_int_ge(s, 0);
    struct wbuf w;
    struct wmsg m;
    void *raw;
    uint64_t lease;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    e = test_expect();
    e.geom.block_size = 16;
    e.geom.page_bytes = 0;
    broker_req_attach_encode(&w, "daemon", 1, &e);
    ck_assert_int_eq(bh_call(s, &w, &m, &raw), 0);
    ck_assert_int_eq(broker_rep_attach_decode(&m, &lease, NULL, NULL, err), KVD_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err, "block_size is 4, expected 16"));
    bh_reply_free(&m, raw);
    /* still serving, and a matching attach works */
    ck_assert_int_eq(pool_attach(h.fd_path, NULL, &mp), 0);
    mem_pool_release(&mp);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.leases, 0);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

START_TEST(test_sigkill_releases_lease)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", "--lease-timeout-ms", "300", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t c = fork();
    if (c == 0) { /* a client that takes pages and then hangs until killed */
        int s = bh_connect(&h);
        uint64_t lease;
        if (s < 0 || bh_attach(s, &lease, NULL) || bh_alloc(s, lease, 1, 10, NULL) ||
            bh_alloc(s, lease, 2, 5, NULL))
            _exit(1);
        char x = 'x';
        if (write(p[1], &x, 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    char x;
    ck_assert_int_eq(read(p[0], &x, 1), 1);
    int s = bh_connect(&h);
    ck_assert_int_ge(s, 0);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.pages_used, 15);
    ck_assert_uint_eq(bs.leases, 1);
    ck_assert_int_eq(kill(c, SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(c, &st, 0), c);
    ck_assert(WIFSIGNALED(st));
    int waited = 0;
    do {
        usleep(50 * 1000);
        waited += 50;
        ck_assert_int_eq(bh_stats(s, &bs), 0);
    } while (bs.pages_used && waited < EXPIRY_WAIT_MS);
    ck_assert_uint_eq(bs.pages_used, 0);
    ck_assert_uint_eq(bs.pages_free, bs.pages_total);
    ck_assert_uint_eq(bs.leases, 0);
    ck_assert_uint_eq(bs.leases_expired, 1);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

static int reply_code(int s, const void *buf, size_t len, char *msg, size_t cap)
{
    struct wmsg m;
    void *raw;
    const char *t;
    size_t tl;
    ck_assert_int_eq(bh_call_raw(s, buf, len, &m, &raw), 0);
    ck_assert(wmsg_is(&m, "err"));
    int code = wmsg_error(&m, &t, &tl);
    snprintf(msg, cap, "%.*s", (int)tl, t);
    bh_reply_free(&m, raw);
    return code;
}

START_TEST(test_bad_input_on_socket)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    int s = bh_connect(&h);
    ck_assert_int_ge(s, 0);
    uint64_t lease;
    ck_assert_int_eq(bh_attach(s, &lease, NULL), 0);
    ck_assert_int_eq(bh_alloc(s, lease, 1, 3, NULL), 0);
    char msg[WIRE_ERR_LEN];
    ck_assert_int_eq(reply_code(s, "\xc1garbage", 8, msg, sizeof(msg)), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(msg, "malformed"));
    struct wbuf w;
    wbuf_init(&w);
    wire_begin(&w, "reboot", 0);
    ck_assert_int_eq(reply_code(s, w.sb.data, w.sb.size, msg, sizeof(msg)), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(msg, "unknown message type 'reboot'"));
    wbuf_release(&w);
    wire_begin(&w, "free", 3);
    wire_put_u64(&w, "lease", lease);
    wire_put_u64(&w, "seq", 1);
    wire_put_bool(&w, "force", true);
    ck_assert_int_eq(reply_code(s, w.sb.data, w.sb.size, msg, sizeof(msg)), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(msg, "unknown field 'force'"));
    wbuf_release(&w);
    wire_begin(&w, "alloc", 3);
    wire_put_u64(&w, "lease", lease);
    wire_put_u64(&w, "seq", 1);
    wire_put_u64(&w, "n", 100000000);
    ck_assert_int_eq(reply_code(s, w.sb.data, w.sb.size, msg, sizeof(msg)), KVD_EMSG);
    wbuf_release(&w);
    const unsigned char v9[] = {0x82, 0xa1, 'v', 0x09, 0xa1, 't', 0xa5, 's', 't', 'a', 't', 's'};
    ck_assert_int_eq(reply_code(s, v9, sizeof(v9), msg, sizeof(msg)), KVD_EPROTO);
    ck_assert_int_eq(bh_alloc(s, lease, 2, 4000, NULL), KVD_ENOPAGES);
    /* still serving; nothing lost */
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.pages_used, 3);
    ck_assert_uint_eq(bs.errors, 6); /* five bad messages and one full-pool alloc */
    ck_assert_int_eq(bh_alloc(s, lease, 1, 2, NULL), 0);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

/* QA item 11 on the real socket: kvd attaches and allocates; a second client (another
 * nanomsg socket, as a foreign process would use) sends the reported raw message
 * {"v":1,"t":"alloc","lease":1,"seq":424242,"n":5} and small guesses: all ENOTFOUND,
 * no page changes hands, and two attaches got distinct non-sequential ids. */
START_TEST(test_guessed_lease_on_socket)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    int kvd = bh_connect(&h), foreign = bh_connect(&h);
    ck_assert_int_ge(kvd, 0);
    ck_assert_int_ge(foreign, 0);
    uint64_t lease, other;
    ck_assert_int_eq(bh_attach(kvd, &lease, NULL), 0);
    ck_assert_int_eq(bh_attach(foreign, &other, NULL), 0);
    ck_assert_uint_ne(lease, other);
    ck_assert_uint_ne(other, lease + 1);
    ck_assert_uint_gt(lease, 1ull << 24); /* random: below 2^24 with probability 2^-40 */
    ck_assert_int_eq(bh_alloc(kvd, lease, 1, 4, NULL), 0);
    char msg[WIRE_ERR_LEN];
    struct wbuf w;
    wbuf_init(&w);
    for (uint64_t g = 0; g <= BROKER_LEASES_MAX; g++) {
        wire_begin(&w, "alloc", 3);
        wire_put_u64(&w, "lease", g);
        wire_put_u64(&w, "seq", 424242);
        wire_put_u64(&w, "n", 5);
        ck_assert_int_eq(reply_code(foreign, w.sb.data, w.sb.size, msg, sizeof(msg)),
                         KVD_ENOTFOUND);
        wbuf_release(&w);
    }
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(foreign, &bs), 0);
    ck_assert_uint_eq(bs.pages_used, 4);
    ck_assert_uint_eq(bs.seqs, 1);
    ck_assert_int_eq(bh_alloc(kvd, lease, 2, 1, NULL), 0);
    nn_close(foreign);
    nn_close(kvd);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

START_TEST(test_second_broker_refused)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    const char *args[] = {"--runtime-dir", h.dir, "--layers", "2", "--kv-heads", "2",
                          "--head-dim", "8", "--pool-bytes", "1M", "--backend", "host",
                          "--log-level", "error", NULL};
    ck_assert_int_eq(bh_run(args, 10000), 69);
    int s = bh_connect(&h); /* the first one still serves */
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

START_TEST(test_command_line)
{
    const char *help[] = {"--help", NULL};
    const char *unknown[] = {"--frobnicate", NULL};
    const char *no_geom[] = {"--pool-bytes", "1M", NULL};
    const char *bad_size[] = {"--layers", "2", "--kv-heads", "2", "--head-dim", "8",
                              "--pool-bytes", "12Q", NULL};
    const char *tiny[] = {"--layers", "2", "--kv-heads", "2", "--head-dim", "8",
                          "--pool-bytes", "1K", "--backend", "host", "--runtime-dir",
                          "/tmp/kvd-bt-tiny", NULL};
    const char *dtype[] = {"--layers", "2", "--kv-heads", "2", "--head-dim", "8",
                           "--kv-dtype", "q3", NULL};
    const char *badmodel[] = {"--model", "/nonexistent.gguf", "--runtime-dir",
                              "/tmp/kvd-bt-tiny", NULL};
    ck_assert_int_eq(bh_run(help, 5000), 0);
    ck_assert_int_eq(bh_run(unknown, 5000), 64);
    ck_assert_int_eq(bh_run(no_geom, 5000), 78);
    ck_assert_int_eq(bh_run(bad_size, 5000), 64);
    ck_assert_int_eq(bh_run(tiny, 5000), 78);
    ck_assert_int_eq(bh_run(dtype, 5000), 64);
    ck_assert_int_eq(bh_run(badmodel, 5000), 78);
    rmdir("/tmp/kvd-bt-tiny");
}
END_TEST

/* --model: the geometry and fingerprint come from the bundled GGUF. */
START_TEST(test_model_flag)
{
    char model[PATHS_MAX];
    const char *src = getenv("KVD_SOURCE_DIR");
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf", src ? src : ".");
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "test_model_flag: no model at '%s'\n", model);
        ck_abort_msg("bundled model missing");
    }
    /* bh_start adds by-hand geometry; run this one by hand */
    char dir[] = "/tmp/kvd-bt-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    struct bh h;
    memset(&h, 0, sizeof(h));
    const char *args[] = {"--model", model, "--runtime-dir", dir, "--pool-bytes", "1M",
                          "--backend", "host", "--log-level", "warn", NULL};
    char bin[PATHS_MAX];
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[16] = {bh_bin("kvd-broker", bin, sizeof(bin))};
        for (int i = 0; args[i]; i++)
            argv[i + 1] = args[i];
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    snprintf(h.dir, sizeof(h.dir), "%s", dir);
    paths_join(h.sock_path, sizeof(h.sock_path), dir, PATHS_SOCK_BROKER);
    paths_join(h.fd_path, sizeof(h.fd_path), dir, PATHS_SOCK_FD);
    paths_ipc_addr(h.addr, sizeof(h.addr), dir, PATHS_SOCK_BROKER);
    h.pid = pid;
    for (int i = 0; i < 500 && (access(h.fd_path, F_OK) || access(h.sock_path, F_OK)); i++)
        usleep(20000);
    usleep(100000);
    int s = bh_connect(&h);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.n_layers, 5); /* stories260K: 5 layers, 4 kv heads, head dim 8 */
    ck_assert_uint_eq(bs.n_kv_heads, 4);
    ck_assert_uint_eq(bs.head_dim, 8);
    ck_assert_uint_eq(bs.block_size, 16);
    ck_assert(bs.model_fp != 0);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

#define CC_CLIENTS 4
#define CC_SEQS 4
#define CC_OPS 400

/* One of several concurrent clients: random alloc/free over its sequences; it marks
 * every page it holds with its id in the shared pool and checks the marks before each
 * free, so a page handed to two clients at once would show. Exit 0 when all held. */
static int cc_client(const struct bh *h, uint32_t id)
{
    int s = bh_connect(h);
    uint64_t lease;
    struct mem_pool mp;
    if (s < 0 || bh_attach(s, &lease, NULL) || pool_attach(h->fd_path, NULL, &mp))
        return 20;
    static uint32_t held[CC_SEQS][BROKER_ALLOC_MAX];
    uint32_t n_held[CC_SEQS] = {0}, got[8];
    srand(1000 + id);
    for (int op = 0; op < CC_OPS; op++) {
        uint32_t q = (uint32_t)rand() % CC_SEQS;
        if (rand() % 3) {
            uint32_t k = 1 + (uint32_t)rand() % 8;
            int rc = bh_alloc(s, lease, q, k, got);
            if (rc == KVD_ENOPAGES)
                continue;
            if (rc)
                return 21;
            for (uint32_t i = 0; i < k; i++) {
                memcpy(mem_pool_page_ptr(&mp, got[i]), &id, sizeof(id));
                held[q][n_held[q]++] = got[i];
            }
        } else {
            for (uint32_t i = 0; i < n_held[q]; i++) {
                uint32_t mark;
                memcpy(&mark, mem_pool_page_ptr(&mp, held[q][i]), sizeof(mark));
                if (mark != id)
                    return 22; /* someone else wrote into a page we hold */
            }
            struct wbuf w;
            struct wmsg m;
            void *raw;
            uint64_t released;
            char err[WIRE_ERR_LEN];
            wbuf_init(&w);
            broker_req_free_encode(&w, lease, q);
            if (bh_call(s, &w, &m, &raw) || broker_rep_free_decode(&m, &released, err) ||
                released != n_held[q])
                return 23;
            bh_reply_free(&m, raw);
            n_held[q] = 0;
        }
    }
    struct wbuf w;
    struct wmsg m;
    void *raw;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_detach_encode(&w, lease);
    if (bh_call(s, &w, &m, &raw) || broker_rep_ok_decode(&m, NULL, err))
        return 24;
    bh_reply_free(&m, raw);
    mem_pool_release(&mp);
    return 0;
}

START_TEST(test_concurrent_clients)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "512K", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    pid_t pids[CC_CLIENTS];
    for (uint32_t i = 0; i < CC_CLIENTS; i++)
        if ((pids[i] = fork()) == 0)
            _exit(cc_client(&h, i + 1));
    for (int i = 0; i < CC_CLIENTS; i++) {
        int st;
        ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d: status %d", i, st);
    }
    int s = bh_connect(&h);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.pages_used, 0);
    ck_assert_uint_eq(bs.pages_free, bs.pages_total);
    ck_assert_uint_eq(bs.leases, 0);
    ck_assert_uint_ge(bs.requests, CC_CLIENTS * CC_OPS / 2);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

/* A broker killed with SIGKILL: an attached worker's mapping stays valid (the memfd
 * lives while mapped), and a new broker starts in the dir the dead one left behind. */
START_TEST(test_broker_killed)
{
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    struct mem_pool mp;
    ck_assert_int_eq(pool_attach(h.fd_path, NULL, &mp), 0);
    memset(mem_pool_page_ptr(&mp, 2), 0x77, mp.desc.geom.page_bytes);
    uint64_t old_id = mp.desc.pool_id;
    ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(h.pid, NULL, 0), h.pid);
    ck_assert_int_eq(access(h.fd_path, F_OK), 0); /* left behind */
    ck_assert_uint_eq(((uint8_t *)mem_pool_page_ptr(&mp, 2))[100], 0x77);
    memset(mem_pool_page_ptr(&mp, 3), 0x78, mp.desc.geom.page_bytes); /* no SIGBUS */
    mem_pool_release(&mp);
    /* restart in the same dir */
    char dir[PATHS_MAX];
    snprintf(dir, sizeof(dir), "%s", h.dir);
    const char *again[] = {"--runtime-dir", dir, "--layers", "2", "--kv-heads", "2",
                           "--head-dim", "8", "--block-size", "4", "--pool-bytes", "1M",
                           "--backend", "host", "--log-level", "warn", NULL};
    pid_t pid = fork();
    if (pid == 0) {
        char bin[PATHS_MAX];
        const char *argv[20] = {bh_bin("kvd-broker", bin, sizeof(bin))};
        for (int i = 0; again[i]; i++)
            argv[i + 1] = again[i];
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    h.pid = pid;
    int rc = -1;
    for (int i = 0; i < 250 && rc != 0; i++) {
        usleep(20000);
        rc = pool_attach(h.fd_path, NULL, &mp);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert(mp.desc.pool_id != old_id); /* a fresh pool */
    mem_pool_release(&mp);
    int s = bh_connect(&h);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
}
END_TEST

/* Receives notify datagrams until one carries FDNAME=name with an fd; returns the fd. */
static int notify_recv_fd(int n, const char *name)
{
    for (int i = 0; i < 100; i++) {
        char buf[512];
        union {
            char c[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {buf, sizeof(buf) - 1};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.c,
                            .msg_controllen = sizeof(ctl.c)};
        ssize_t k = recvmsg(n, &mh, MSG_CMSG_CLOEXEC);
        if (k <= 0)
            return -1;
        buf[k] = '\0';
        int fd = -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                memcpy(&fd, CMSG_DATA(c), sizeof(fd));
        char want[64];
        snprintf(want, sizeof(want), "FDNAME=%s", name);
        if (fd >= 0 && strstr(buf, "FDSTORE=1") && strstr(buf, want))
            return fd;
        if (fd >= 0)
            close(fd);
    }
    return -1;
}

/* Under systemd the pool and the prefix index are parked in the fd store; a restarted
 * broker takes them back (same pool id, epoch + 1) and serves the old KV as cached. */
START_TEST(test_fdstore_restart)
{
    char ndir[] = "/tmp/kvd-bt-XXXXXX", npath[PATHS_MAX];
    ck_assert_ptr_nonnull(mkdtemp(ndir));
    paths_join(npath, sizeof(npath), ndir, "notify");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, npath, strlen(npath) + 1);
    int n = socket(AF_UNIX, SOCK_DGRAM, 0);
    ck_assert_int_eq(bind(n, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(fdpass_set_timeout(n, 5000), 0);
    setenv("NOTIFY_SOCKET", npath, 1);
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    int pool_fd = notify_recv_fd(n, "kvd-pool");
    ck_assert_int_ge(pool_fd, 0);
    /* a daemon fills 3 blocks and commits them; a worker writes their KV */
    struct broker_hash hs[3];
    uint32_t toks[4] = {1, 2, 3, 4}, pages[3];
    for (int i = 0; i < 3; i++)
        hs[i] = test_hash_block(0xfeed, 4, i ? &hs[i - 1] : NULL, toks);
    int s = bh_connect(&h);
    uint64_t lease;
    struct pool_desc d1;
    ck_assert_int_eq(bh_attach(s, &lease, &d1), 0);
    ck_assert_int_eq(bh_alloc(s, lease, 9, 3, pages), 0);
    struct wbuf w;
    struct wmsg m;
    void *raw;
    uint64_t added;
    char err[WIRE_ERR_LEN];
    wbuf_init(&w);
    broker_req_commit_encode(&w, lease, 9, 0, hs, 3);
    ck_assert_int_eq(bh_call(s, &w, &m, &raw), 0);
    ck_assert_int_eq(broker_rep_commit_decode(&m, &added, err), 0);
    ck_assert_uint_eq(added, 3);
    bh_reply_free(&m, raw);
    nn_close(s);
    struct mem_pool mp;
    ck_assert_int_eq(pool_attach(h.fd_path, NULL, &mp), 0);
    for (int i = 0; i < 3; i++)
        memset(mem_pool_page_ptr(&mp, pages[i]), 0x40 + i, mp.desc.geom.page_bytes);
    mem_pool_release(&mp);
    /* clean stop: the index is parked */
    kill(h.pid, SIGTERM);
    int st;
    ck_assert_int_eq(waitpid(h.pid, &st, 0), h.pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int state_fd = notify_recv_fd(n, "kvd-state");
    ck_assert_int_ge(state_fd, 0);
    /* "systemd" starts the next broker with both fds */
    const char *args[] = {"--runtime-dir", h.dir, "--layers", "2", "--kv-heads", "2",
                          "--head-dim", "8", "--block-size", "4", "--model-fp", "0xfeed",
                          "--pool-bytes", "2M", "--backend", "host", "--log-level", "warn",
                          NULL};
    pid_t pid = fork();
    if (pid == 0) {
        char bin[PATHS_MAX], lpid[32];
        const char *argv[24] = {bh_bin("kvd-broker", bin, sizeof(bin))};
        for (int i = 0; args[i]; i++)
            argv[i + 1] = args[i];
        if (dup2(pool_fd, 3) < 0 || dup2(state_fd, 4) < 0)
            _exit(126);
        snprintf(lpid, sizeof(lpid), "%d", (int)getpid()); /* exec keeps the pid */
        setenv("LISTEN_PID", lpid, 1);
        setenv("LISTEN_FDS", "2", 1);
        setenv("LISTEN_FDNAMES", "kvd-pool:kvd-state", 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pool_fd);
    close(state_fd);
    h.pid = pid;
    int rc = -1;
    for (int i = 0; i < 250 && rc != 0; i++) {
        usleep(20000);
        rc = pool_attach(h.fd_path, NULL, &mp);
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(mp.desc.pool_id, d1.pool_id); /* the same pool */
    ck_assert_uint_eq(mp.desc.epoch, d1.epoch + 1);
    ck_assert_uint_eq(mp.desc.num_pages, d1.num_pages); /* its size, not the new flag's */
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(((uint8_t *)mem_pool_page_ptr(&mp, pages[i]))[5], 0x40 + i);
    mem_pool_release(&mp);
    s = bh_connect(&h);
    ck_assert_int_eq(bh_attach(s, &lease, NULL), 0);
    struct broker_stats bs;
    ck_assert_int_eq(bh_stats(s, &bs), 0);
    ck_assert_uint_eq(bs.pages_cached, 3);
    ck_assert_uint_eq(bs.prefix_entries, 3);
    broker_req_lookup_encode(&w, lease, 1, hs, 3);
    ck_assert_int_eq(bh_call(s, &w, &m, &raw), 0);
    uint32_t *hit = NULL;
    size_t nh = 0;
    ck_assert_int_eq(broker_rep_lookup_decode(&m, &hit, &nh, err), 0);
    ck_assert_uint_eq(nh, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(hit[i], pages[i]);
    free(hit);
    bh_reply_free(&m, raw);
    nn_close(s);
    ck_assert_int_eq(bh_stop(&h), 0);
    unsetenv("NOTIFY_SOCKET");
    close(n);
    unlink(npath);
    rmdir(ndir);
}
END_TEST

/* A fake broker.fd that sends frame bytes (and fd, if >= 0), then closes. */
static pid_t fake_fd_server(const char *path, const void *frame, size_t len, int fd)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(l, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int c = accept(l, NULL, NULL);
        _exit(c >= 0 && fdpass_send(c, frame, len, &fd, fd >= 0) == 0 ? 0 : 1);
    }
    close(l);
    return pid;
}

/* pool_attach refuses bad hand-over frames with KVD_EMSG and leaks no fd. */
START_TEST(test_attach_bad_frames)
{
    char dir[] = "/tmp/kvd-bt-XXXXXX", path[PATHS_MAX];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    paths_join(path, sizeof(path), dir, PATHS_SOCK_FD);
    struct pool_desc d;
    memset(&d, 0, sizeof(d));
    ck_assert_int_eq(kv_geom_init(&d.geom, 2, 2, 8, 4, KV_DTYPE_F32), 0);
    d.backend = MEM_BACKEND_HOST;
    d.layout_version = KV_LAYOUT_VERSION;
    ck_assert_int_eq(pool_desc_layout(&d, 1 << 20, 4096, 1), 0);
    uint8_t frame[256];
    size_t n = 0;
    const uint32_t magic = POOL_ATTACH_MAGIC, ver = POOL_ATTACH_VERSION, zero = 0;
    memcpy(frame, &magic, 4);
    memcpy(frame + 4, &ver, 4);
    n = 8 + pool_desc_encode(&d, frame + 8, sizeof(frame) - 8);
    memcpy(frame + n, &zero, 4);
    n += 4;
    struct {
        const char *what;
        size_t len;
        uint32_t patch_off, patch_val;
    } cases[] = {
        {"truncated descriptor", 40, 0, 0},
        {"wrong magic", 0, 0, 0x12345678},
        {"wrong version", 0, 4, 99},
        {"blob length past the frame", 0, 8 + POOL_DESC_WIRE_BYTES, 1000},
        {"no fd for a host pool", 0, 0, POOL_ATTACH_MAGIC},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t f[256];
        memcpy(f, frame, n);
        if (cases[i].patch_val)
            memcpy(f + cases[i].patch_off, &cases[i].patch_val, 4);
        unlink(path);
        pid_t pid = fake_fd_server(path, f, cases[i].len ? cases[i].len : n, -1);
        struct mem_pool mp;
        int rc = pool_attach(path, NULL, &mp);
        ck_assert_msg(rc != 0, "%s: accepted", cases[i].what);
        ck_assert_ptr_null(mp.base);
        int st;
        waitpid(pid, &st, 0);
    }
    /* a descriptor that claims more bytes than the memfd holds */
    int fd = memfd_create("fake", MFD_ALLOW_SEALING);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    unlink(path);
    pid_t pid = fake_fd_server(path, frame, n, fd);
    struct mem_pool mp;
    ck_assert_int_eq(pool_attach(path, NULL, &mp), -EINVAL);
    waitpid(pid, NULL, 0);
    close(fd);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Under systemd: READY=1 once serving, STATUS= lines, WATCHDOG=1 when asked for. */
START_TEST(test_sd_notify)
{
    char dir[] = "/tmp/kvd-bt-XXXXXX", path[PATHS_MAX];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    paths_join(path, sizeof(path), dir, "notify");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int n = socket(AF_UNIX, SOCK_DGRAM, 0);
    ck_assert_int_eq(bind(n, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(fdpass_set_timeout(n, 3000), 0);
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "200000", 1);
    struct bh h;
    const char *extra[] = {"--pool-bytes", "1M", NULL};
    ck_assert_int_eq(bh_start(&h, extra, NULL), 0);
    bool ready = false, status = false, watchdog = false;
    char buf[512];
    for (int i = 0; i < 50 && !(ready && status && watchdog); i++) {
        ssize_t k = recv(n, buf, sizeof(buf) - 1, 0);
        if (k <= 0)
            break;
        buf[k] = '\0';
        ready |= strstr(buf, "READY=1") != NULL;
        status |= strstr(buf, "STATUS=") != NULL && strstr(buf, "pages") != NULL;
        watchdog |= strstr(buf, "WATCHDOG=1") != NULL;
    }
    ck_assert(ready);
    ck_assert(status);
    ck_assert(watchdog);
    ck_assert_int_eq(bh_stop(&h), 0);
    close(n);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    log_setup("test_broker_proc", LOG_LEVEL_WARN);
    Suite *s = suite_create("broker_proc");
    TCase *tc = tcase_create("proc");
    tcase_add_test(tc, test_serve_and_stop);
    tcase_add_test(tc, test_two_processes_share_pool);
    tcase_add_test(tc, test_attach_mismatch);
    tcase_add_test(tc, test_sigkill_releases_lease);
    tcase_add_test(tc, test_bad_input_on_socket);
    tcase_add_test(tc, test_guessed_lease_on_socket);
    tcase_add_test(tc, test_second_broker_refused);
    tcase_add_test(tc, test_command_line);
    tcase_add_test(tc, test_model_flag);
    tcase_add_test(tc, test_attach_bad_frames);
    tcase_add_test(tc, test_sd_notify);
    tcase_add_test(tc, test_concurrent_clients);
    tcase_add_test(tc, test_broker_killed);
    tcase_add_test(tc, test_fdstore_restart);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

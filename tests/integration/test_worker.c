/* test_worker.c — the real kvd-worker process against the real kvd-broker, on real
 * sockets in a temp runtime dir. The test plays kvd: it binds worker-0.sock (NN_PAIR),
 * waits for "hello", sends steps and reads results. Page ids are chosen by the test
 * (the broker's allocator is not what is under test here; the pool is).
 *
 * Proves: hello carries the model's fingerprint; greedy decoding of stories260K through
 * the process matches the NumPy reference token by token (the golden sample); two
 * sequences in one step on different pages agree; a sampled step re-run gives the same
 * token (stateless worker, (seed, position) randomness); every kind of bad step gets an
 * "err" and the worker keeps serving; a pool of the wrong geometry is refused with exit
 * 78; SIGTERM ends the worker with exit 0.
 */
#include "../unit/fwd_harness.h"

#include "common/gguf.h"
#include "common/tok.h"
#include "proto/step_msg.h"

#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define T_RECV_TIMEOUT_MS 30000 /* model load + attach + one step, generously */
#define T_EXIT_WAIT_MS 10000    /* a signalled process must be gone by then */

struct proc_env {
    char dir[128];
    char model[1024];
    pid_t broker;
    pid_t worker;
    int sock;
};

static struct proc_env P;

static pid_t spawn(char *const argv[], int keep_fd)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (int fd = 3; fd < 256; fd++)
            if (fd != keep_fd)
                close(fd);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static int wait_exit(pid_t pid, int ms)
{
    int st;
    for (int waited = 0; waited < ms; waited += 10) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

static void start_broker(const char *const *geom_args)
{
    char bin[1024], rfd[16];
    int pfd[2];
    h_path(bin, sizeof(bin), "KVD_BIN_DIR", ".", "kvd-broker");
    ck_assert_int_eq(pipe(pfd), 0);
    snprintf(rfd, sizeof(rfd), "%d", pfd[1]);
    char *argv[24] = {bin, "--runtime-dir", P.dir, "--backend", "host", "--pool-bytes", "1M",
                      "--ready-fd", rfd, "--log-level", "warn"};
    int n = 11;
    for (int i = 0; geom_args[i]; i++)
        argv[n++] = (char *)geom_args[i];
    argv[n] = NULL;
    P.broker = spawn(argv, pfd[1]);
    close(pfd[1]);
    char buf[8] = "";
    ck_assert_msg(read(pfd[0], buf, sizeof(buf)) > 0, "kvd-broker did not get ready");
    close(pfd[0]);
}

static void start_worker(void)
{
    char bin[1024];
    h_path(bin, sizeof(bin), "KVD_BIN_DIR", ".", "kvd-worker");
    char *argv[] = {bin, "--runtime-dir", P.dir, "--model", P.model, "--index", "0",
                    "--threads", "1", "--log-level", "warn", NULL};
    P.worker = spawn(argv, -1);
}

static void setup(void)
{
    memset(&P, 0, sizeof(P));
    P.sock = -1;
    snprintf(P.dir, sizeof(P.dir), "/tmp/kvd-wtest-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(P.dir));
    h_path(P.model, sizeof(P.model), "KVD_SHARED_DIR", "../shared", "data/models/stories260K.gguf");
    char addr[256];
    snprintf(addr, sizeof(addr), "ipc://%s/worker-0.sock", P.dir);
    P.sock = nn_socket(AF_SP, NN_PAIR);
    ck_assert_int_ge(P.sock, 0);
    int to = T_RECV_TIMEOUT_MS, max = WIRE_MSG_MAX;
    ck_assert_int_eq(nn_setsockopt(P.sock, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to)), 0);
    ck_assert_int_eq(nn_setsockopt(P.sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof(max)), 0);
    ck_assert_int_ge(nn_bind(P.sock, addr), 0);
}

static void teardown(void)
{
    if (P.worker > 0) {
        kill(P.worker, SIGKILL);
        waitpid(P.worker, NULL, 0);
    }
    if (P.broker > 0) {
        kill(P.broker, SIGTERM);
        wait_exit(P.broker, T_EXIT_WAIT_MS);
    }
    if (P.sock >= 0)
        nn_close(P.sock);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", P.dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Receives one message into m; returns the buffer m points into. Release both with
 * msg_done(). */
static void *recv_msg(struct wmsg *m)
{
    void *buf = NULL;
    char err[WIRE_ERR_LEN];
    int n = nn_recv(P.sock, &buf, NN_MSG, 0);
    ck_assert_msg(n > 0, "no message from the worker: %s", nn_strerror(nn_errno()));
    ck_assert_msg(wmsg_parse(m, buf, (size_t)n, err) == 0, "%s", err);
    return buf;
}

static void msg_done(struct wmsg *m, void *buf)
{
    wmsg_release(m);
    nn_freemsg(buf);
}

static void send_buf(const void *p, size_t n)
{
    ck_assert_int_eq(nn_send(P.sock, p, n, 0), (int)n);
}

static void send_step(const struct step_msg *s)
{
    struct wbuf w;
    wbuf_init(&w);
    step_msg_encode(&w, s);
    send_buf(w.sb.data, w.sb.size);
    wbuf_release(&w);
}

/* Sends s, expects a result; fills out (caller releases). */
static void run_step(const struct step_msg *s, struct step_result *out)
{
    struct wmsg m;
    char err[WIRE_ERR_LEN];
    send_step(s);
    void *buf = recv_msg(&m);
    if (wmsg_is(&m, "err")) {
        const char *msg;
        size_t len;
        wmsg_error(&m, &msg, &len);
        ck_abort_msg("worker answered err: %.*s", (int)len, msg);
    }
    ck_assert_msg(step_result_decode(&m, out, err) == 0, "%s", err);
    ck_assert_uint_eq(out->step_id, s->step_id);
    msg_done(&m, buf);
}

/* Sends raw bytes or a step; expects "err" with code and a message containing needle. */
static void expect_err(const void *raw, size_t raw_len, const struct step_msg *s, int code,
                       const char *needle)
{
    struct wmsg m;
    const char *msg;
    size_t len;
    if (s)
        send_step(s);
    else
        send_buf(raw, raw_len);
    void *buf = recv_msg(&m);
    ck_assert_msg(wmsg_is(&m, "err"), "expected err, got '%s'", m.type);
    ck_assert_int_eq(wmsg_error(&m, &msg, &len), code);
    char text[600];
    snprintf(text, sizeof(text), "%.*s", (int)len, msg);
    ck_assert_msg(strstr(text, needle), "err '%s' does not mention '%s'", text, needle);
    msg_done(&m, buf);
}

static void hello(void)
{
    struct wmsg m;
    struct step_hello h;
    char err[WIRE_ERR_LEN];
    void *buf = recv_msg(&m);
    ck_assert_msg(step_hello_decode(&m, &h, err) == 0, "%s", err);
    msg_done(&m, buf);
    struct gguf_file g;
    char gerr[GGUF_ERR_LEN];
    ck_assert_int_eq(gguf_open(&g, P.model, gerr), 0);
    ck_assert_uint_eq(h.model_fp, gguf_model_fingerprint(&g));
    gguf_close(&g);
    ck_assert_uint_eq(h.index, 0);
    ck_assert_uint_eq(h.pid, (uint32_t)P.worker);
    ck_assert_uint_eq(h.vocab, 512);
}

static const char *const stories_geom[] = {"--model", NULL, "--block-size", "16", "--kv-dtype",
                                           "f32", NULL};

static void start_all(void)
{
    const char *geom[7];
    memcpy(geom, stories_geom, sizeof(geom));
    geom[1] = P.model;
    start_broker(geom);
    start_worker();
    hello();
}

#define GOLDEN_PROMPT "Once upon a time"
#define GOLDEN_TEXT ", there was a little girl named Lily. She loved to play outside in the park."
#define GOLDEN_TOKENS 27

START_TEST(test_worker_golden_two_seqs)
{
    uint32_t prompt[64], n_prompt = 0, ref[GOLDEN_TOKENS];
    char text[1024];
    h_ref_greedy(P.model, GOLDEN_PROMPT, GOLDEN_TOKENS, prompt, &n_prompt, ref, text,
                 sizeof(text));
    ck_assert_str_eq(text, GOLDEN_TEXT);
    /* kvd's own tokenizer agrees with the reference's encoding of the prompt */
    struct gguf_file g;
    struct tok tk;
    char gerr[GGUF_ERR_LEN];
    int32_t ids[64], gen_ids[GOLDEN_TOKENS];
    size_t n_ids = 0, text_len = 0;
    ck_assert_int_eq(gguf_open(&g, P.model, gerr), 0);
    ck_assert_int_eq(tok_load(&tk, &g, gerr), 0);
    gguf_close(&g);
    ck_assert_int_eq(tok_encode(&tk, GOLDEN_PROMPT, strlen(GOLDEN_PROMPT), true, ids, 64, &n_ids),
                     0);
    ck_assert_uint_eq(n_ids, n_prompt);
    for (uint32_t i = 0; i < n_prompt; i++)
        ck_assert_uint_eq((uint32_t)ids[i], prompt[i]);
    start_all();
    /* two sequences with the same prompt on different, scrambled pages */
    uint32_t ta[64], tb[64], bta[3] = {7, 2, 30}, btb[3] = {11, 40, 5}, n = n_prompt;
    memcpy(ta, prompt, n * sizeof(uint32_t));
    memcpy(tb, prompt, n * sizeof(uint32_t));
    struct step_seq q[2];
    memset(q, 0, sizeof(q));
    q[0] = (struct step_seq){.seq_id = 100, .tokens = ta, .n_tokens = n, .blocks = bta,
                             .n_blocks = 3, .sample = true, .logprobs = 2};
    q[1] = (struct step_seq){.seq_id = 200, .tokens = tb, .n_tokens = n, .blocks = btb,
                             .n_blocks = 3, .sample = true};
    step_sampling_default(&q[0].sp);
    step_sampling_default(&q[1].sp);
    struct step_msg s = {1, 2, q};
    for (uint32_t i = 0; i < GOLDEN_TOKENS; i++, s.step_id++) {
        struct step_result r;
        run_step(&s, &r);
        ck_assert_uint_eq(r.n_seqs, 2);
        ck_assert_uint_eq(r.seqs[0].seq_id, 100);
        ck_assert_uint_eq(r.seqs[1].seq_id, 200);
        ck_assert_msg(r.seqs[0].token == ref[i], "token %u: %u, reference %u", i,
                      r.seqs[0].token, ref[i]);
        ck_assert_uint_eq(r.seqs[1].token, r.seqs[0].token);
        ck_assert_uint_eq(r.seqs[0].n_top, 2);
        ck_assert_uint_eq(r.seqs[1].n_top, 0);
        gen_ids[i] = (int32_t)r.seqs[0].token;
        ta[n] = tb[n] = r.seqs[0].token;
        n++;
        q[0].tokens = ta + n - 1;
        q[1].tokens = tb + n - 1;
        q[0].n_tokens = q[1].n_tokens = 1;
        q[0].pos0 = q[1].pos0 = n - 1;
        step_result_release(&r);
    }
    /* and the worker's tokens, decoded by kvd's tokenizer, spell the published sample */
    ck_assert_int_eq(tok_decode(&tk, gen_ids, GOLDEN_TOKENS, 0, text, sizeof(text) - 1,
                                &text_len), 0);
    text[text_len] = '\0';
    ck_assert_str_eq(text, GOLDEN_TEXT);
    tok_release(&tk);
}
END_TEST

/* A pool of f16 pages: the worker adopts the pool's kv dtype; greedy decoding still
 * gives the golden sample (f16 K/V moves logits by ~1e-3 relative, far below this
 * trained model's top-1 margins on this prompt; deterministic, not a tolerance). */
START_TEST(test_worker_f16_pool_golden)
{
    uint32_t prompt[64], n_prompt = 0, ref[GOLDEN_TOKENS];
    char text[1024];
    h_ref_greedy(P.model, GOLDEN_PROMPT, GOLDEN_TOKENS, prompt, &n_prompt, ref, text,
                 sizeof(text));
    const char *geom[] = {"--model", P.model, "--block-size", "8", "--kv-dtype", "f16", NULL};
    start_broker(geom);
    start_worker();
    hello();
    uint32_t t[64], bt[6] = {9, 3, 17, 0, 40, 22}, n = n_prompt;
    memcpy(t, prompt, n * sizeof(uint32_t));
    struct step_seq q;
    memset(&q, 0, sizeof(q));
    q = (struct step_seq){.seq_id = 1, .tokens = t, .n_tokens = n, .blocks = bt, .n_blocks = 6,
                          .sample = true};
    step_sampling_default(&q.sp);
    struct step_msg s = {1, 1, &q};
    for (uint32_t i = 0; i < GOLDEN_TOKENS; i++, s.step_id++) {
        struct step_result r;
        run_step(&s, &r);
        ck_assert_msg(r.seqs[0].token == ref[i], "f16 pool, token %u: %u, reference %u", i,
                      r.seqs[0].token, ref[i]);
        t[n++] = r.seqs[0].token;
        q.tokens = t + n - 1;
        q.n_tokens = 1;
        q.pos0 = n - 1;
        step_result_release(&r);
    }
}
END_TEST

START_TEST(test_worker_rerun_same_token)
{
    start_all();
    uint32_t t[6] = {1, 403, 407, 261, 378, 0}, bt[1] = {3};
    struct step_seq q;
    memset(&q, 0, sizeof(q));
    q = (struct step_seq){.seq_id = 1, .tokens = t, .n_tokens = 5, .blocks = bt, .n_blocks = 1,
                          .sample = true};
    step_sampling_default(&q.sp);
    q.sp.temperature = 1.5f;
    q.sp.seed = 77;
    struct step_msg s = {1, 1, &q};
    uint32_t first[8];
    for (int rerun = 0; rerun < 2; rerun++)
        for (uint32_t i = 0; i < 8; i++) { /* 8 sampled decode positions, each re-run */
            struct step_result r;
            q.tokens = i == 0 ? t : &first[i - 1];
            q.n_tokens = i == 0 ? 5 : 1;
            q.pos0 = i == 0 ? 0 : 4 + i;
            run_step(&s, &r);
            if (rerun == 0)
                first[i] = r.seqs[0].token;
            else
                ck_assert_uint_eq(r.seqs[0].token, first[i]);
            step_result_release(&r);
        }
}
END_TEST

START_TEST(test_worker_bad_steps)
{
    start_all();
    uint32_t t[3] = {1, 403, 407}, bt[2] = {0, 1}, bad_page[2] = {0, 1000000};
    struct step_seq q;
    memset(&q, 0, sizeof(q));
    q = (struct step_seq){.seq_id = 9, .tokens = t, .n_tokens = 3, .blocks = bad_page,
                          .n_blocks = 2, .sample = true};
    step_sampling_default(&q.sp);
    struct step_msg s = {5, 1, &q};
    expect_err(NULL, 0, &s, KVD_EMSG, "page 1000000");
    q.blocks = bt;
    q.pos0 = 30; /* 30..32 do not fit in 2 blocks of 16 */
    expect_err(NULL, 0, &s, KVD_EMSG, "block table");
    q.pos0 = 0;
    t[1] = 512; /* vocab is 512 */
    expect_err(NULL, 0, &s, KVD_EMSG, "vocab");
    t[1] = 403;
    static const char garbage[] = "\xc1\xff not msgpack";
    expect_err(garbage, sizeof(garbage), NULL, KVD_EMSG, "msgpack");
    struct wbuf w;
    wbuf_init(&w);
    wire_begin(&w, "dance", 0);
    expect_err(w.sb.data, w.sb.size, NULL, KVD_EMSG, "dance");
    wbuf_release(&w);
    wbuf_init(&w);
    wire_begin(&w, "step", 1);
    wire_put_u64(&w, "step_id", 3); /* no seqs */
    expect_err(w.sb.data, w.sb.size, NULL, KVD_EMSG, "seqs");
    wbuf_release(&w);
    /* still serving */
    struct step_result r;
    run_step(&s, &r);
    ck_assert(r.seqs[0].has_token);
    step_result_release(&r);
    ck_assert_int_eq(kill(P.worker, 0), 0);
}
END_TEST

START_TEST(test_worker_sigterm)
{
    start_all();
    ck_assert_int_eq(kill(P.worker, SIGTERM), 0);
    ck_assert_int_eq(wait_exit(P.worker, T_EXIT_WAIT_MS), 0);
    P.worker = 0;
}
END_TEST

START_TEST(test_worker_refuses_wrong_pool)
{
    /* a pool for 3 layers: the worker's model has 5 */
    static const char *const geom[] = {"--layers", "3", "--kv-heads", "4", "--head-dim", "8",
                                       NULL};
    start_broker(geom);
    start_worker();
    ck_assert_int_eq(wait_exit(P.worker, T_RECV_TIMEOUT_MS), 78);
    P.worker = 0;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("worker-process");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_worker_golden_two_seqs);
    tcase_add_test(tc, test_worker_f16_pool_golden);
    tcase_add_test(tc, test_worker_rerun_same_token);
    tcase_add_test(tc, test_worker_bad_steps);
    tcase_add_test(tc, test_worker_sigterm);
    tcase_add_test(tc, test_worker_refuses_wrong_pool);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

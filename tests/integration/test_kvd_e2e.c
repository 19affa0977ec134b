/* test_kvd_e2e.c — the real kvd (spawning the real kvd-broker and kvd-worker) through
 * the SDK: greedy output vs the published llama2.c sample, many concurrent streams,
 * streaming order, cancellation, timeout, overload, prompt too long, SIGKILL of a worker
 * mid-generation, SIGTERM with requests in flight. After every test the broker reports
 * zero pages in use. */
#include "test_kvd_harness.h"

#include "common/err.h"
#include "proto/admin_msg.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define GEN_TIMEOUT_MS 60000
/* The sample published with llama2.c for stories260K, greedy from "Once upon a time"
 * (../shared/data/README.md): an independent reference. */
#define STORY_REF ", there was a little girl named Lily. She loved to play outside in the park."

struct env {
    char dir[256];
    struct kh_kvd kvd;
    struct kvd_client *c;
};

static void env_start(struct env *e, const char *const *extra)
{
    kh_tmpdir(e->dir);
    ck_assert_int_eq(kh_start(&e->kvd, "kvd", e->dir, "kvd.sock", extra), 0);
    ck_assert_int_eq(kvd_connect(e->dir, 5000, &e->c), 0);
}

static void env_stop(struct env *e)
{
    if (e->c)
        kvd_close(e->c);
    ck_assert_uint_eq(kh_wait_pages_used_zero(e->dir), 0);
    ck_assert_int_eq(kh_stop(&e->kvd, SIGTERM), 0);
    kh_rmdir(e->dir);
}

START_TEST(test_greedy_matches_reference)
{
    struct env e;
    env_start(&e, NULL);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 40;
    p.temperature = 0;
    static struct kh_result r, r2;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(r.finish, KVD_FINISH_LENGTH);
    ck_assert_uint_eq(r.completion_tokens, 40);
    ck_assert_uint_eq(r.n_tokens, 40);
    ck_assert_uint_eq(r.prompt_tokens, 5);
    ck_assert_msg(strncmp(r.text, STORY_REF, strlen(STORY_REF)) == 0, "got '%s'", r.text);
    /* Non-streaming gives the same tokens and text in the DONE. */
    p.stream = false;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &r2);
    ck_assert_int_eq(r2.rc, 0);
    ck_assert_uint_eq(r2.n_events, 0);
    ck_assert_uint_eq(r2.n_tokens, 40);
    ck_assert_mem_eq(r2.tokens, r.tokens, 40 * sizeof(uint32_t));
    ck_assert_str_eq(r2.text, r.text);
    /* A stop string ends it, and is not part of the text. */
    static const char *const stop[] = {"Lily"};
    p.stop = stop;
    p.n_stop = 1;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &r2);
    ck_assert_int_eq(r2.finish, KVD_FINISH_STOP);
    ck_assert_str_eq(r2.text, ", there was a little girl named ");
    env_stop(&e);
}
END_TEST

START_TEST(test_many_concurrent_streams)
{
    static const char *const extra[] = {"--workers", "2", NULL};
    struct env e;
    env_start(&e, extra);
    enum { N = 24, MAXT = 48 };
    static const char *const prompts[] = {"Once upon a time", "The cat", "Tom and Sue", "One day"};
    /* Reference: each prompt alone, greedy. */
    static struct kh_result ref[4];
    struct kvd_params p;
    for (int i = 0; i < 4; i++) {
        kvd_params_init(&p);
        p.prompt = prompts[i];
        p.max_tokens = MAXT;
        p.temperature = 0;
        p.stream = false;
        kh_generate(e.c, &p, GEN_TIMEOUT_MS, &ref[i]);
        ck_assert_int_eq(ref[i].rc, 0);
    }
    /* N at once on two sessions. */
    struct kvd_client *c2;
    ck_assert_int_eq(kvd_connect(e.dir, 5000, &c2), 0);
    uint64_t ids[N];
    static uint32_t got[N][MAXT + 1];
    size_t n_got[N] = {0};
    bool done[N] = {false};
    for (int i = 0; i < N; i++) {
        kvd_params_init(&p);
        p.prompt = prompts[i % 4];
        p.max_tokens = MAXT;
        p.temperature = 0;
        ck_assert_int_eq(kvd_submit(i % 2 ? c2 : e.c, &p, &ids[i]), 0);
    }
    int n_done = 0;
    for (int iter = 0; n_done < N && iter < 100000; iter++) {
        for (int cl = 0; cl < 2; cl++) {
            struct kvd_event ev;
            if (kvd_next_event(cl ? c2 : e.c, &ev, 10) != 0)
                continue;
            int i = -1;
            for (int k = cl; k < N; k += 2)
                if (ids[k] == ev.id)
                    i = k;
            ck_assert_int_ge(i, 0);
            ck_assert_msg(!done[i], "event after done for request %d", i);
            if (ev.type == KVD_EVENT_TOKENS) {
                ck_assert_uint_le(n_got[i] + ev.n_tokens, MAXT);
                memcpy(&got[i][n_got[i]], ev.tokens, ev.n_tokens * sizeof(uint32_t));
                n_got[i] += ev.n_tokens;
            } else {
                ck_assert_int_eq(ev.finish, ref[i % 4].finish);
                ck_assert_uint_eq(ev.completion_tokens, n_got[i]);
                done[i] = true;
                n_done++;
            }
        }
    }
    ck_assert_int_eq(n_done, N);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(n_got[i], ref[i % 4].n_tokens);
        ck_assert_mem_eq(got[i], ref[i % 4].tokens, n_got[i] * sizeof(uint32_t));
    }
    kvd_close(c2);
    env_stop(&e);
}
END_TEST

START_TEST(test_cancel_mid_stream)
{
    static const char *const extra[] = {"--max-model-len", "2048", NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 2000;
    p.ignore_eos = true;
    p.temperature = 0;
    uint64_t id;
    ck_assert_int_eq(kvd_submit(e.c, &p, &id), 0);
    struct kvd_event ev;
    size_t n = 0;
    bool cancelled = false;
    for (;;) {
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        ck_assert_uint_eq(ev.id, id);
        if (ev.type == KVD_EVENT_DONE)
            break;
        n += ev.n_tokens;
        if (!cancelled && n >= 5) {
            ck_assert_int_eq(kvd_cancel(e.c, id), 0);
            cancelled = true;
        }
    }
    ck_assert_int_eq(ev.finish, KVD_FINISH_CANCELLED);
    ck_assert_int_eq(ev.code, KVD_ECANCELLED);
    ck_assert_uint_lt(ev.completion_tokens, 2000);
    env_stop(&e);
}
END_TEST

START_TEST(test_timeout)
{
    static const char *const extra[] = {"--max-model-len", "4096", NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 4000;
    p.ignore_eos = true;
    p.temperature = 0;
    p.timeout_ms = 30;
    static struct kh_result r;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &r);
    ck_assert_int_eq(r.finish, KVD_FINISH_ERROR);
    ck_assert_int_eq(r.code, KVD_ETIMEDOUT);
    ck_assert_uint_lt(r.completion_tokens, 4000);
    env_stop(&e);
}
END_TEST

START_TEST(test_overload_rejected)
{
    static const char *const extra[] = {"--max-running",   "1",    "--max-queue", "1",
                                        "--max-model-len", "2048", NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 1500;
    p.ignore_eos = true;
    p.temperature = 0;
    enum { N = 6 };
    uint64_t ids[N];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(kvd_submit(e.c, &p, &ids[i]), 0);
    int overloaded = 0, done = 0;
    struct kvd_event ev;
    while (done < N) {
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        if (ev.type != KVD_EVENT_DONE)
            continue;
        done++;
        if (ev.finish == KVD_FINISH_ERROR) {
            ck_assert_int_eq(ev.code, KVD_EOVERLOAD);
            overloaded++;
        } else {
            ck_assert_int_eq(ev.finish, KVD_FINISH_LENGTH);
        }
    }
    /* One runs, one waits; the others arrive while both places are taken. */
    ck_assert_int_ge(overloaded, 1);
    ck_assert_int_le(overloaded, N - 1);
    env_stop(&e);
}
END_TEST

START_TEST(test_prompt_too_long)
{
    /* 64 KiB pool = 3 pages of 20 KiB = 48 tokens (stories260K, f32, block 16). */
    static const char *const extra[] = {"--max-model-len", "256", "--pool-bytes", "64K", NULL};
    struct env e;
    env_start(&e, extra);
    static uint32_t toks[300];
    for (int i = 0; i < 300; i++)
        toks[i] = 100 + (uint32_t)(i % 300);
    struct kvd_params p;
    static struct kh_result r;
    kh_params_greedy(&p, toks, 300, 4); /* longer than max-model-len */
    kh_generate(e.c, &p, 5000, &r);
    ck_assert_int_eq(r.finish, KVD_FINISH_ERROR);
    ck_assert_int_eq(r.code, KVD_ETOOLONG);
    ck_assert_uint_eq(r.prompt_tokens, 300); /* the real count, not 0 */
    kh_params_greedy(&p, toks, 100, 4); /* fits max-model-len, not the whole pool */
    kh_generate(e.c, &p, 5000, &r);
    ck_assert_int_eq(r.finish, KVD_FINISH_ERROR);
    ck_assert_int_eq(r.code, KVD_ETOOLONG);
    ck_assert_uint_eq(r.prompt_tokens, 100);
    kh_params_greedy(&p, toks, 20, 4); /* fits */
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &r);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_uint_eq(r.completion_tokens, 4);
    /* Invalid: token id outside the vocabulary. */
    toks[0] = 100000;
    kh_params_greedy(&p, toks, 4, 4);
    kh_generate(e.c, &p, 5000, &r);
    ck_assert_int_eq(r.code, KVD_EMSG);
    env_stop(&e);
}
END_TEST

START_TEST(test_hung_worker_killed_and_step_rerun)
{
    /* A worker that stops answering (SIGSTOP) mid-generation is killed after
     * --step-timeout-ms; its step re-runs on the restarted worker; same greedy output. */
    static const char *const extra[] = {"--max-model-len", "2048", "--step-timeout-ms", "500",
                                        NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 1000;
    p.ignore_eos = true;
    p.temperature = 0;
    p.stream = false;
    static struct kh_result ref, r;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &ref);
    ck_assert_int_eq(ref.rc, 0);
    pid_t wpid = kh_worker_pid(e.dir, 0);
    ck_assert_int_gt(wpid, 0);
    p.stream = true;
    uint64_t id;
    ck_assert_int_eq(kvd_submit(e.c, &p, &id), 0);
    struct kvd_event ev;
    size_t n = 0;
    bool stopped = false;
    for (;;) {
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        if (ev.type == KVD_EVENT_DONE)
            break;
        memcpy(&r.tokens[n], ev.tokens, ev.n_tokens * sizeof(uint32_t));
        n += ev.n_tokens;
        if (!stopped && n >= 20) {
            ck_assert_int_eq(kill(wpid, SIGSTOP), 0);
            stopped = true;
        }
    }
    ck_assert_msg(ev.finish == KVD_FINISH_LENGTH, "finish %d code %d: %s", ev.finish, ev.code,
                  ev.msg);
    ck_assert_uint_eq(n, 1000);
    ck_assert_mem_eq(r.tokens, ref.tokens, 1000 * sizeof(uint32_t));
    ck_assert_int_ne(kh_worker_pid(e.dir, 0), wpid);
    env_stop(&e);
}
END_TEST

START_TEST(test_preemption_keeps_outputs)
{
    /* 20 pages x 16 tokens; 6 sequences of 5 + 100 tokens (7 pages each) admitted on
     * their 1-page prompts, so decoding runs out of pages and the newest are preempted
     * and recomputed. Greedy outputs must equal the ones computed alone. */
    static const char *const extra[] = {"--pool-bytes", "400K", NULL};
    struct env e;
    env_start(&e, extra);
    enum { N = 6, MAXT = 100 };
    static const char *const prompts[] = {"Once upon a time", "The cat", "Tom and Sue"};
    static struct kh_result ref[3];
    struct kvd_params p;
    for (int i = 0; i < 3; i++) {
        kvd_params_init(&p);
        p.prompt = prompts[i];
        p.max_tokens = MAXT;
        p.ignore_eos = true;
        p.temperature = 0;
        p.stream = false;
        kh_generate(e.c, &p, GEN_TIMEOUT_MS, &ref[i]);
        ck_assert_int_eq(ref[i].rc, 0);
        ck_assert_uint_eq(ref[i].n_tokens, MAXT);
    }
    struct admin_pool before, after;
    ck_assert_int_eq(kh_admin_pool(e.dir, &before), 0);
    uint64_t ids[N];
    for (int i = 0; i < N; i++) {
        kvd_params_init(&p);
        p.prompt = prompts[i % 3];
        p.max_tokens = MAXT;
        p.ignore_eos = true;
        p.temperature = 0;
        p.stream = false;
        ck_assert_int_eq(kvd_submit(e.c, &p, &ids[i]), 0);
    }
    for (int done = 0; done < N;) {
        struct kvd_event ev;
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        if (ev.type != KVD_EVENT_DONE)
            continue;
        int i = -1;
        for (int k = 0; k < N; k++)
            if (ids[k] == ev.id)
                i = k;
        ck_assert_int_ge(i, 0);
        ck_assert_msg(ev.finish == KVD_FINISH_LENGTH, "request %d: %d %s", i, ev.code, ev.msg);
        ck_assert_uint_eq(ev.n_tokens, MAXT);
        ck_assert_mem_eq(ev.tokens, ref[i % 3].tokens, MAXT * sizeof(uint32_t));
        done++;
    }
    ck_assert_int_eq(kh_admin_pool(e.dir, &after), 0);
    ck_assert_uint_gt(after.preemptions, before.preemptions);
    env_stop(&e);
}
END_TEST

START_TEST(test_worker_sigkill_mid_generation)
{
    static const char *const extra[] = {"--max-model-len", "2048", NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 1800;
    p.ignore_eos = true;
    p.temperature = 0;
    p.stream = false;
    static struct kh_result ref, r;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &ref);
    ck_assert_int_eq(ref.rc, 0);
    ck_assert_uint_eq(ref.n_tokens, 1800);
    pid_t wpid = kh_worker_pid(e.dir, 0);
    ck_assert_int_gt(wpid, 0);
    p.stream = true;
    uint64_t id;
    ck_assert_int_eq(kvd_submit(e.c, &p, &id), 0);
    struct kvd_event ev;
    size_t n = 0;
    bool killed = false;
    for (;;) {
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        if (ev.type == KVD_EVENT_DONE)
            break;
        memcpy(&r.tokens[n], ev.tokens, ev.n_tokens * sizeof(uint32_t));
        n += ev.n_tokens;
        if (!killed && n >= 20) {
            ck_assert_int_eq(kill(wpid, SIGKILL), 0);
            killed = true;
        }
    }
    ck_assert(killed);
    ck_assert_msg(ev.finish == KVD_FINISH_LENGTH, "finish %d code %d: %s", ev.finish, ev.code,
                  ev.msg);
    ck_assert_uint_eq(n, 1800);
    ck_assert_mem_eq(r.tokens, ref.tokens, 1800 * sizeof(uint32_t));
    pid_t w2 = kh_worker_pid(e.dir, 0);
    ck_assert_int_ne(w2, wpid); /* restarted */
    env_stop(&e);
}
END_TEST

START_TEST(test_client_loss_releases_pages)
{
    /* A client process that dies without "bye": kvd notices the silent session
     * (KVD_SESSION_TIMEOUT_MS), cancels its request and releases its pages. */
    static const char *const extra[] = {"--max-model-len", "16384", NULL};
    struct env e;
    env_start(&e, extra);
    /* The client is a separate process (kvctl from the SDK): nanomsg does not survive
     * a fork of this multithreaded test. */
    char kvctl[512];
    snprintf(kvctl, sizeof(kvctl), "%s/kvctl", getenv("KVD_BIN_DIR"));
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(kvctl, kvctl, "--runtime-dir", e.dir, "generate", "--prompt", "Once upon a time",
              "--max-tokens", "16000", "--ignore-eos", "--stream", (char *)NULL);
        _exit(127);
    }
    struct broker_stats bs = {0};
    for (int i = 0; i < 200 && bs.pages_used == 0; i++) {
        usleep(20 * 1000);
        ck_assert_int_eq(kh_broker_stats(e.dir, &bs), 0);
    }
    ck_assert_int_eq(kill(child, SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ck_assert_int_eq(kh_broker_stats(e.dir, &bs), 0);
    uint32_t used_then = bs.pages_used;
    ck_assert_uint_gt(used_then, 0); /* the orphan is still generating */
    /* Within the session timeout plus a sweep, its pages come back. */
    for (int i = 0; i < 160 && bs.pages_used; i++) {
        usleep(50 * 1000);
        ck_assert_int_eq(kh_broker_stats(e.dir, &bs), 0);
    }
    ck_assert_uint_eq(bs.pages_used, 0);
    /* Released because kvd ended the silent session (cancelled), not because the
     * 16000 tokens were done. */
    struct admin_pool ap;
    ck_assert_int_eq(kh_admin_pool(e.dir, &ap), 0);
    ck_assert_uint_eq(ap.requests_failed, 1);
    ck_assert_uint_eq(ap.requests_finished, 0);
    env_stop(&e);
}
END_TEST

/* Runs kvd with args, returns its exit status (stdout/stderr to /dev/null). */
static int run_kvd_status(const char *const *args)
{
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/kvd", getenv("KVD_BIN_DIR"));
    char *argv[16];
    int a = 0;
    argv[a++] = bin;
    for (int i = 0; args[i] && a < 15; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execv(bin, argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(test_exit_codes)
{
    static const char *const help[] = {"--help", NULL};
    static const char *const bogus[] = {"--bogus", "1", NULL};
    static const char *const bad[] = {"--workers", "0", NULL};
    static const char *const nofile[] = {"--config", "/nonexistent/kvd.conf", NULL};
    static const char *const nomodel[] = {"--model", "/nonexistent/m.gguf", "--runtime-dir", "/tmp",
                                          NULL};
    ck_assert_int_eq(run_kvd_status(help), 0);
    ck_assert_int_eq(run_kvd_status(bogus), 64);
    ck_assert_int_eq(run_kvd_status(bad), 78);
    ck_assert_int_eq(run_kvd_status(nofile), 78);
    ck_assert_int_eq(run_kvd_status(nomodel), 78);
}
END_TEST

START_TEST(test_config_file_and_sd_notify)
{
    /* Settings from a config file, and READY=1 over $NOTIFY_SOCKET (systemd's protocol). */
    char dir[256], conf[300], nsock[300];
    kh_tmpdir(dir);
    snprintf(conf, sizeof(conf), "%s/kvd.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# test config\nworkers = 2\nmax-model-len = 300\n");
    fclose(f);
    snprintf(nsock, sizeof(nsock), "%s/notify.sock", dir);
    int ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(nsock), sizeof(sa.sun_path));
    memcpy(sa.sun_path, nsock, strlen(nsock) + 1);
    ck_assert_int_eq(bind(ns, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setenv("NOTIFY_SOCKET", nsock, 1);
    struct env e;
    const char *const extra[] = {"--config", conf, NULL};
    snprintf(e.dir, sizeof(e.dir), "%s", dir);
    ck_assert_int_eq(kh_start(&e.kvd, "kvd", dir, "kvd.sock", extra), 0);
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(kvd_connect(dir, 5000, &e.c), 0);
    ck_assert_uint_eq(kvd_client_info(e.c)->max_model_len, 300);
    ck_assert_int_ne(kh_worker_pid(dir, 1), 0); /* two workers */
    /* A second kvd on the same runtime dir refuses to start (69), the first keeps serving. */
    const char *const second[] = {"--runtime-dir", dir, NULL};
    ck_assert_int_eq(run_kvd_status(second), 69);
    ck_assert_uint_eq(kvd_client_info(e.c)->max_model_len, 300);
    char buf[512];
    bool ready = false;
    struct timeval tv = {5, 0};
    setsockopt(ns, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (int i = 0; i < 8 && !ready; i++) {
        ssize_t n = recv(ns, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            break;
        buf[n] = '\0';
        ready = strstr(buf, "READY=1") != NULL;
    }
    close(ns);
    ck_assert_msg(ready, "no READY=1 on NOTIFY_SOCKET");
    env_stop(&e);
}
END_TEST

START_TEST(test_spawned_broker_death)
{
    /* The broker kvd spawned dies (SIGKILL) mid-generation: the pool is gone, but a
     * sequence is its tokens. kvd restarts the broker, the workers re-attach, the
     * sequence is recomputed and the stream goes on: same greedy output as undisturbed. */
    static const char *const extra[] = {"--max-model-len", "4096", NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 3000;
    p.ignore_eos = true;
    p.temperature = 0;
    p.stream = false;
    static struct kh_result ref, r;
    kh_generate(e.c, &p, GEN_TIMEOUT_MS, &ref);
    ck_assert_int_eq(ref.rc, 0);
    p.stream = true;
    uint64_t id;
    ck_assert_int_eq(kvd_submit(e.c, &p, &id), 0);
    struct kvd_event ev;
    size_t n = 0;
    pid_t broker = kh_find_pid("kvd-broker", e.dir);
    ck_assert_int_gt(broker, 0);
    bool killed = false;
    for (;;) {
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        if (ev.type == KVD_EVENT_DONE)
            break;
        memcpy(&r.tokens[n], ev.tokens, ev.n_tokens * sizeof(uint32_t));
        n += ev.n_tokens;
        if (!killed && n >= 20) {
            ck_assert_int_eq(kill(broker, SIGKILL), 0);
            killed = true;
        }
    }
    ck_assert_msg(ev.finish == KVD_FINISH_LENGTH, "finish %d code %d: %s", ev.finish, ev.code,
                  ev.msg);
    ck_assert_uint_eq(n, 3000);
    ck_assert_mem_eq(r.tokens, ref.tokens, 3000 * sizeof(uint32_t));
    pid_t broker2 = kh_find_pid("kvd-broker", e.dir);
    ck_assert_int_gt(broker2, 0);
    ck_assert_int_ne(broker2, broker);
    struct admin_pool ap;
    ck_assert_int_eq(kh_admin_pool(e.dir, &ap), 0);
    ck_assert_uint_ge(ap.preemptions, 1); /* recomputed */
    env_stop(&e);
}
END_TEST

START_TEST(test_sigterm_with_requests_in_flight)
{
    static const char *const extra[] = {"--max-model-len", "2048", "--grace-ms", "300", NULL};
    struct env e;
    env_start(&e, extra);
    struct kvd_params p;
    kvd_params_init(&p);
    p.prompt = "Once upon a time";
    p.max_tokens = 2000;
    p.ignore_eos = true;
    p.temperature = 0;
    enum { N = 4 };
    uint64_t ids[N];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(kvd_submit(e.c, &p, &ids[i]), 0);
    struct kvd_event ev;
    ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0); /* running */
    ck_assert_int_eq(kill(e.kvd.pid, SIGTERM), 0);
    int done = 0;
    while (done < N) {
        ck_assert_int_eq(kvd_next_event(e.c, &ev, GEN_TIMEOUT_MS), 0);
        if (ev.type != KVD_EVENT_DONE)
            continue;
        done++;
        ck_assert(ev.finish == KVD_FINISH_LENGTH ||
                  (ev.finish == KVD_FINISH_ERROR && ev.code == KVD_ESHUTDOWN));
    }
    /* New work is refused while it stops. */
    uint64_t late;
    if (kvd_submit(e.c, &p, &late) == 0) {
        int rc = kvd_next_event(e.c, &ev, 5000);
        if (rc == 0 && ev.type == KVD_EVENT_DONE)
            ck_assert_int_eq(ev.code, KVD_ESHUTDOWN);
    }
    kvd_close(e.c);
    e.c = NULL;
    ck_assert_int_eq(kh_stop(&e.kvd, 0 /* already signalled: just wait */), 0);
    /* The broker it spawned is gone with it. */
    struct broker_stats st;
    ck_assert_int_ne(kh_broker_stats(e.dir, &st), 0);
    kh_rmdir(e.dir);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("kvd_e2e");
    TCase *tc = tcase_create("e2e");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_greedy_matches_reference);
    tcase_add_test(tc, test_many_concurrent_streams);
    tcase_add_test(tc, test_cancel_mid_stream);
    tcase_add_test(tc, test_timeout);
    tcase_add_test(tc, test_overload_rejected);
    tcase_add_test(tc, test_prompt_too_long);
    tcase_add_test(tc, test_preemption_keeps_outputs);
    tcase_add_test(tc, test_hung_worker_killed_and_step_rerun);
    tcase_add_test(tc, test_worker_sigkill_mid_generation);
    tcase_add_test(tc, test_client_loss_releases_pages);
    tcase_add_test(tc, test_exit_codes);
    tcase_add_test(tc, test_config_file_and_sd_notify);
    tcase_add_test(tc, test_spawned_broker_death);
    tcase_add_test(tc, test_sigterm_with_requests_in_flight);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

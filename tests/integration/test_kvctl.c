/* test_kvctl.c — kvctl, libkvd-client and kvd-bench against the real kvd (spawning its
 * real kvd-broker and kvd-worker) on real sockets in a temp runtime dir.
 *
 * Proves: every kvctl command answers with aligned text and with the documented --json
 * fields; the pool's three-way accounting adds up; greedy generation reproduces the
 * published stories260K sample (an independent reference); prompt_logprobs start with
 * null; the SDK streams in order, cancels mid-stream, times out waits with -EAGAIN,
 * runs concurrent requests on one handle; evict --cached empties the cache; kvd-bench
 * completes a run with all fields; a missing, stale, silent or killed daemon gives a
 * one-line error and exit 69 (SDK: an error code) within a bounded time, never a hang;
 * global flags work before and after the command; usage errors of kvctl, kvd-bench and
 * kvd-mkmodel exit 64 naming the flag and its accepted values;
 * after each test no page is left in use. Skips (77) when kvd is not built. */
#include "kvd_client.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_WAIT_MS 60000   /* kvd + broker + worker start-up on a loaded machine (ASan) */
#define OUT_MAX (1u << 20)
/* Wall-clock bounds only tell "never hangs" from "hangs"; they are set far above what a
 * loaded 2-core machine running the ASan suite needs (kvctl answers in ~0.1 s there). */
#define FAIL_FAST_TIMEOUT_MS 60000 /* --timeout-ms given to fail-fast calls: a call that waited
                                    * it out instead of failing fast would take 60 s */
#define FAIL_FAST_BOUND_S 45.0     /* all fail-fast calls of one test together */
#define SILENT_BOUND_S 30.0        /* 3 calls with a 500 ms timeout against a silent kvd */
#define DEAD_SLACK_S 20.0          /* over KVD_CLIENT_DEAD_MS for noticing a killed kvd */
#define BENCH_DURATION_BOUND_S 120.0 /* kvd-bench --duration 1 with 100000 requests queued */
#define GOLDEN ", there was a little girl named Lily. She loved to play outside in the park."

static char g_bin[512];          /* KVD_BIN_DIR */
static char g_dir[256];          /* runtime dir of the shared kvd */
static pid_t g_kvd = -1;         /* its pid (process group leader) */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs a shell command; stdout/stderr into out/err (NUL-terminated); returns exit code. */
static int run(char *out, char *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, char *err, const char *fmt, ...)
{
    char cmd[4096], full[4600], fo[] = "/tmp/kvctl-out-XXXXXX", fe[] = "/tmp/kvctl-err-XXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int a = mkstemp(fo), b = mkstemp(fe);
    close(a);
    close(b);
    snprintf(full, sizeof(full), "%s >%s 2>%s", cmd, fo, fe);
    int st = system(full);
    const char *files[2] = {fo, fe};
    char *bufs[2] = {out, err};
    for (int i = 0; i < 2; i++) {
        if (bufs[i]) {
            FILE *f = fopen(files[i], "r");
            size_t n = f ? fread(bufs[i], 1, OUT_MAX - 1, f) : 0;
            bufs[i][n] = '\0';
            if (f)
                fclose(f);
        }
        unlink(files[i]);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The number after "key": in a JSON text, or NAN. */
static double jnum(const char *js, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    const char *p = strstr(js, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static bool has_key(const char *js, const char *key)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    return strstr(js, pat) != NULL;
}

static pid_t spawn_kvd(const char *dir)
{
    char kvd[600];
    snprintf(kvd, sizeof(kvd), "%s/kvd", g_bin);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* kvd, its broker and workers: one group we can always kill */
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* and kvd dies with the test process */
        char log[300];
        snprintf(log, sizeof(log), "%s/kvd.log", dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(kvd, "kvd", "--runtime-dir", dir, "--pool-bytes", "8M", "--max-running", "16",
              "--log-level", "info", (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

/* Waits until kvctl pool answers. */
static bool wait_ready(const char *dir)
{
    char *out = malloc(OUT_MAX);
    double end = now_s() + START_WAIT_MS / 1000.0;
    bool ok = false;
    while (!ok && now_s() < end) {
        ok = run(out, NULL, "%s/kvctl --runtime-dir %s --timeout-ms 1000 pool", g_bin, dir) == 0;
        if (!ok)
            usleep(100000);
    }
    free(out);
    return ok;
}

static void stop_kvd(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 150; i++) { /* 15 s */
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            kill(-pid, SIGKILL); /* anything of its group left behind */
            return;
        }
        usleep(100000);
    }
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void setup(void)
{
    const char *b = getenv("KVD_BIN_DIR");
    snprintf(g_bin, sizeof(g_bin), "%s", b ? b : "bin");
    snprintf(g_dir, sizeof(g_dir), "/tmp/kvd-test-kvctl-XXXXXX");
    if (!mkdtemp(g_dir))
        abort();
    g_kvd = spawn_kvd(g_dir);
    if (!wait_ready(g_dir)) {
        fprintf(stderr, "kvd did not become ready; its log:\n");
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "tail -20 %s/kvd.log >&2", g_dir);
        if (system(cmd)) {
        }
        stop_kvd(g_kvd);
        g_kvd = -1;
    }
}

static void teardown(void)
{
    stop_kvd(g_kvd);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
    if (system(cmd)) {
    }
}

/* After a test: no page in use (requests are over) — waits briefly for the last frees. */
static void assert_pool_idle(void)
{
    char *out = malloc(OUT_MAX);
    double used = -1;
    for (int i = 0; i < 50 && used != 0; i++) {
        ck_assert_int_eq(run(out, NULL, "%s/kvctl --runtime-dir %s --json pool", g_bin, g_dir), 0);
        used = jnum(out, "pages_used");
        if (used != 0)
            usleep(100000);
    }
    ck_assert_msg(used == 0, "pages still in use: %s", out);
    double total = jnum(out, "pages_total"), free_ = jnum(out, "pages_free"),
           cached = jnum(out, "pages_cached");
    ck_assert(total > 0);
    ck_assert(used + free_ + cached == total);
    free(out);
}

START_TEST(test_pool_json_and_text)
{
    ck_assert_int_ge(g_kvd, 0);
    char *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json pool", g_bin, g_dir), 0);
    static const char *const keys[] = {
        "pages_total", "pages_free", "pages_used", "pages_cached", "page_bytes", "block_size",
        "kv_dtype", "tokens_stored", "waste_ratio", "prefix_query_tokens", "prefix_hit_tokens",
        "preemptions", "prefix_hit_ratio", "requests_running", "output_tokens_total"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        ck_assert_msg(has_key(out, keys[i]), "pool --json lacks '%s': %s", keys[i], out);
    ck_assert(out[0] == '{' && strchr(out, '\n') == out + strlen(out) - 1); /* one line */
    ck_assert_double_eq(jnum(out, "block_size"), 16);
    ck_assert_double_eq(jnum(out, "pages_used") + jnum(out, "pages_free") + jnum(out, "pages_cached"),
                        jnum(out, "pages_total"));
    /* 8 MiB pool of 20 KiB pages (5 layers x 2 x 4 heads x 16 x 8 x 4 bytes) */
    ck_assert_double_eq(jnum(out, "page_bytes"), 20480);
    ck_assert_double_eq(jnum(out, "pages_total"), 409);
    /* the global flags after the command are the same flags */
    ck_assert_int_eq(run(out, err, "%s/kvctl pool --json --runtime-dir %s --timeout-ms 5000 "
                                   "--log-level warn",
                         g_bin, g_dir),
                     0);
    ck_assert_msg(out[0] == '{' && has_key(out, "pages_total"), "%s", out);
    ck_assert_double_eq(jnum(out, "pages_total"), 409);
    ck_assert_int_eq(run(out, err, "%s/kvctl pool --runtime-dir=%s --json", g_bin, g_dir), 0);
    ck_assert_double_eq(jnum(out, "pages_total"), 409);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s pool", g_bin, g_dir), 0);
    ck_assert(strstr(out, "pages total") && strstr(out, "409") && strstr(out, "waste"));
    ck_assert(strstr(out, "prefix cache"));
    free(out);
    free(err);
}
END_TEST

START_TEST(test_generate_golden_and_json)
{
    ck_assert_int_ge(g_kvd, 0);
    char *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    int rc = run(out, err,
                 "%s/kvctl --runtime-dir %s --json generate --prompt 'Once upon a time' "
                 "--max-tokens 20 --temperature 0 --logprobs 3 --prompt-logprobs",
                 g_bin, g_dir);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(out, "\"text\": \", there was a little girl named Lily") != NULL, "%s",
                  out);
    ck_assert(strstr(out, "\"finish_reason\": \"length\""));
    ck_assert_double_eq(jnum(out, "prompt_tokens"), 5); /* BOS + 4 */
    ck_assert(has_key(out, "cached_prompt_tokens"));
    ck_assert(strstr(out, "\"prompt_logprobs\": [null, {"));
    ck_assert(strstr(out, "\"logprobs\": [{\"token\": "));
    /* 20 tokens, each logprob entry with 3 alternatives */
    const char *t = strstr(out, "\"tokens\": [");
    ck_assert_ptr_nonnull(t);
    int commas = 0;
    for (const char *p = t; *p && *p != ']'; p++)
        commas += *p == ',';
    ck_assert_int_eq(commas, 19);
    /* plain, streamed: same text */
    rc = run(out, err,
             "%s/kvctl --runtime-dir %s generate --prompt 'Once upon a time' --max-tokens 40 "
             "--temperature 0 --stream",
             g_bin, g_dir);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strncmp(out, GOLDEN, strlen(GOLDEN)) == 0, "got '%s'", out);
    ck_assert(strstr(err, "[length: 5 prompt tokens"));
    /* token ids in, same continuation: BOS 1 + "Once upon a time"; --json after the command */
    rc = run(out, err,
             "%s/kvctl --runtime-dir %s generate --tokens 1,403,407,261,378 "
             "--max-tokens 5 --temperature 0 --json",
             g_bin, g_dir);
    ck_assert_int_eq(rc, 0);
    ck_assert(strstr(out, "\"text\": \", there was a little\""));
    /* every global flag after the command, --json first (as issue 4 writes it) */
    rc = run(out, err,
             "%s/kvctl generate --json --tokens 1,403,407,261,378 --max-tokens 5 "
             "--temperature 0 --runtime-dir %s --log-level warn",
             g_bin, g_dir);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert(strstr(out, "\"text\": \", there was a little\""));
    /* bad usage */
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s generate", g_bin, g_dir), 64);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s generate --prompt x --logprobs 21",
                         g_bin, g_dir),
                     64);
    ck_assert_msg(strstr(err, "bad value '21' for --logprobs (expected an integer 0..20)"), "%s",
                  err);
    /* a prompt longer than max-model-len is refused with its stable code */
    char toks[8192] = "1";
    for (int i = 0; i < 600; i++)
        strcat(toks, ",300");
    rc = run(out, err, "%s/kvctl --runtime-dir %s --json generate --tokens %s --max-tokens 4",
             g_bin, g_dir, toks);
    ck_assert_int_eq(rc, 1);
    ck_assert(strstr(out, "\"finish_reason\": \"error\""));
    ck_assert(strstr(out, "\"code\": \"ETOOLONG\""));
    assert_pool_idle();
    free(out);
    free(err);
}
END_TEST

START_TEST(test_views)
{
    ck_assert_int_ge(g_kvd, 0);
    char *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json workers", g_bin, g_dir), 0);
    ck_assert(out[0] == '[');
    ck_assert(jnum(out, "pid") > 0);
    ck_assert(has_key(out, "state") && has_key(out, "steps") && has_key(out, "restarts"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s workers", g_bin, g_dir), 0);
    ck_assert(strstr(out, "PID") && strstr(out, "RESTARTS"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json seqs", g_bin, g_dir), 0);
    ck_assert(has_key(out, "seqs") && has_key(out, "n_total"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s seqs", g_bin, g_dir), 0);
    ck_assert(strstr(out, "STATE") && strstr(out, "SHARED"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json prefix", g_bin, g_dir), 0);
    ck_assert(has_key(out, "entries") && has_key(out, "hit_tokens") &&
              has_key(out, "query_tokens") && has_key(out, "evictions") && has_key(out, "top"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s map", g_bin, g_dir), 0);
    ck_assert(strstr(out, "409 pages") && strstr(out, "free") && strstr(out, "cached"));
    ck_assert(strstr(out, "\033[") == NULL); /* not a terminal: no colours */
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json map", g_bin, g_dir), 0);
    ck_assert_double_eq(jnum(out, "pages_total"), 409);
    const char *cells = strstr(out, "\"cells\": \"");
    ck_assert_ptr_nonnull(cells);
    ck_assert_int_eq((int)strcspn(cells + 10, "\""), 409);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s top --iterations 2 --interval-ms 100",
                         g_bin, g_dir),
                     0);
    ck_assert(strstr(out, "throughput") && strstr(out, "prefix hits") && strstr(out, "waste"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s evict", g_bin, g_dir), 64);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s frobnicate", g_bin, g_dir), 64);
    free(out);
    free(err);
}
END_TEST

START_TEST(test_prefix_and_evict)
{
    ck_assert_int_ge(g_kvd, 0);
    char *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    char toks[2048] = "1";
    for (int i = 0; i < 40; i++) { /* 41 tokens: 2 full blocks of 16 */
        char t[16];
        snprintf(t, sizeof(t), ",%d", 10 + i * 7);
        strcat(toks, t);
    }
    for (int round = 0; round < 2; round++) {
        int rc = run(out, err,
                     "%s/kvctl --runtime-dir %s --json generate --tokens %s --max-tokens 4 "
                     "--temperature 0",
                     g_bin, g_dir, toks);
        ck_assert_msg(rc == 0, "%s", err);
        /* second time: both full blocks come from the prefix cache */
        ck_assert_double_eq(jnum(out, "cached_prompt_tokens"), round ? 32 : 0);
    }
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json pool", g_bin, g_dir), 0);
    ck_assert(jnum(out, "prefix_hit_tokens") >= 32);
    ck_assert(jnum(out, "pages_cached") >= 2);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s prefix", g_bin, g_dir), 0);
    ck_assert(strstr(out, "hit tokens"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json evict --cached", g_bin, g_dir),
                     0);
    ck_assert(jnum(out, "evicted") >= 2);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json pool", g_bin, g_dir), 0);
    ck_assert_double_eq(jnum(out, "pages_cached"), 0);
    /* after eviction: a miss again */
    ck_assert_int_eq(run(out, err,
                         "%s/kvctl --runtime-dir %s --json generate --tokens %s --max-tokens 4 "
                         "--temperature 0",
                         g_bin, g_dir, toks),
                     0);
    ck_assert_double_eq(jnum(out, "cached_prompt_tokens"), 0);
    assert_pool_idle();
    free(out);
    free(err);
}
END_TEST

START_TEST(test_sdk_stream_cancel_concurrent)
{
    ck_assert_int_ge(g_kvd, 0);
    struct kvd_client *c;
    ck_assert_int_eq(kvd_connect(g_dir, 3000, &c), 0);
    const struct kvd_info *info = kvd_client_info(c);
    ck_assert_uint_eq(info->max_model_len, 512);
    ck_assert_uint_eq(info->vocab_size, 512);
    ck_assert_uint_eq(info->block_size, 16);
    struct kvd_event ev;
    ck_assert_int_eq(kvd_next_event(c, &ev, 50), -EAGAIN); /* nothing pending */

    /* stream: text deltas concatenate to the golden text; tokens arrive in order */
    struct kvd_params p = KVD_PARAMS_INIT;
    p.prompt = "Once upon a time";
    p.max_tokens = 30;
    p.temperature = 0;
    uint64_t id;
    ck_assert_int_eq(kvd_submit(c, &p, &id), 0);
    char text[4096] = "";
    size_t n_tok = 0;
    for (;;) {
        ck_assert_int_eq(kvd_next_event(c, &ev, 10000), 0);
        ck_assert_uint_eq(ev.id, id);
        strncat(text, ev.text, sizeof(text) - strlen(text) - 1);
        n_tok += ev.n_tokens;
        if (ev.type == KVD_EVENT_DONE)
            break;
    }
    ck_assert_int_eq(ev.finish, KVD_FINISH_LENGTH);
    ck_assert_int_eq(ev.code, 0);
    ck_assert_uint_eq(ev.completion_tokens, 30);
    ck_assert_uint_eq(n_tok, 30);
    ck_assert_msg(strncmp(text, GOLDEN, 40) == 0, "'%s'", text);

    /* cancel mid-stream */
    p.max_tokens = 400;
    p.ignore_eos = true;
    ck_assert_int_eq(kvd_submit(c, &p, &id), 0);
    ck_assert_int_eq(kvd_next_event(c, &ev, 10000), 0);
    ck_assert_int_eq(kvd_cancel(c, id), 0);
    do
        ck_assert_int_eq(kvd_next_event(c, &ev, 10000), 0);
    while (ev.type != KVD_EVENT_DONE);
    ck_assert_int_eq(ev.finish, KVD_FINISH_CANCELLED);
    ck_assert_int_eq(ev.code, KVD_ECANCELLED);
    ck_assert_uint_lt(ev.completion_tokens, 400);

    /* 12 concurrent requests on one handle, each ends exactly once */
    enum { N = 12 };
    uint64_t ids[N];
    bool done[N] = {false};
    p.max_tokens = 24;
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(kvd_submit(c, &p, &ids[i]), 0);
    for (int left = N; left > 0;) {
        ck_assert_int_eq(kvd_next_event(c, &ev, 20000), 0);
        int k = (int)(ev.id - ids[0]);
        ck_assert(k >= 0 && k < N && !done[k]);
        if (ev.type == KVD_EVENT_DONE) {
            ck_assert_int_eq(ev.finish, KVD_FINISH_LENGTH);
            ck_assert_uint_eq(ev.completion_tokens, 24);
            done[k] = true;
            left--;
        }
    }

    /* kvd_generate without a callback: waits for the DONE */
    struct kvd_event d;
    p.max_tokens = 300;
    int rc = kvd_generate(c, &p, NULL, NULL, 20000, &d);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(d.completion_tokens, 300);
    /* invalid params are refused locally */
    p.logprobs = KVD_MAX_LOGPROBS + 1;
    ck_assert_int_eq(kvd_submit(c, &p, &id), KVD_EMSG);
    kvd_close(c);
    assert_pool_idle();
}
END_TEST

START_TEST(test_live_accounting)
{
    /* while a request runs, seqs / pool / map show it; after cancel, nothing is held */
    ck_assert_int_ge(g_kvd, 0);
    char *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    struct kvd_client *c;
    ck_assert_int_eq(kvd_connect(g_dir, 3000, &c), 0);
    struct kvd_params p = KVD_PARAMS_INIT;
    struct kvd_event ev;
    uint64_t id;
    p.prompt = "Once upon a time";
    p.max_tokens = 480;
    p.ignore_eos = true;
    p.temperature = 0;
    ck_assert_int_eq(kvd_submit(c, &p, &id), 0);
    ck_assert_int_eq(kvd_next_event(c, &ev, 10000), 0); /* it is decoding now */
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json seqs", g_bin, g_dir), 0);
    ck_assert_msg(jnum(out, "n_total") >= 1, "%s", out);
    ck_assert(jnum(out, "pages") >= 1);
    ck_assert(strstr(out, "\"state\": \"decode\"") || strstr(out, "\"state\": \"prefill\""));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json pool", g_bin, g_dir), 0);
    ck_assert(jnum(out, "pages_used") >= 1);
    ck_assert(jnum(out, "tokens_stored") >= 5);
    ck_assert(jnum(out, "requests_running") >= 1);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --json map", g_bin, g_dir), 0);
    ck_assert(jnum(out, "pages_used") >= 1);
    ck_assert(strchr(strstr(out, "\"cells\""), '#') || strchr(strstr(out, "\"cells\""), 'S'));
    ck_assert_int_eq(kvd_cancel(c, id), 0);
    do
        ck_assert_int_eq(kvd_next_event(c, &ev, 10000), 0);
    while (ev.type != KVD_EVENT_DONE);
    kvd_close(c);
    assert_pool_idle();
    free(out);
    free(err);
}
END_TEST

#define STOP_MS 500 /* how long kvd is stopped around the 1 ms deadline */

/* Resumes a SIGSTOPped process after ms. */
struct cont_after {
    pid_t pid;
    int ms;
};

static void *cont_after_run(void *arg)
{
    const struct cont_after *ca = arg;
    usleep((useconds_t)ca->ms * 1000);
    kill(ca->pid, SIGCONT);
    return NULL;
}

static int stop_after_first(const struct kvd_event *ev, void *arg)
{
    (void)ev;
    ++*(int *)arg;
    return 1;
}

START_TEST(test_sdk_generate_callback_cancel_and_timeout)
{
    ck_assert_int_ge(g_kvd, 0);
    struct kvd_client *c;
    ck_assert_int_eq(kvd_connect(g_dir, 3000, &c), 0);
    struct kvd_params p = KVD_PARAMS_INIT;
    struct kvd_event d;
    int calls = 0;
    p.prompt = "Once upon a time";
    p.max_tokens = 400;
    p.ignore_eos = true;
    p.temperature = 0;
    ck_assert_int_eq(kvd_generate(c, &p, stop_after_first, &calls, 20000, &d), KVD_ECANCELLED);
    ck_assert_int_eq(calls, 1);
    ck_assert_int_eq(d.finish, KVD_FINISH_CANCELLED);
    /* a 1 ms client-side deadline: cancelled, reported as KVD_ETIMEDOUT. kvd is stopped
     * when the request goes out and for STOP_MS after, so no reply can come before the
     * deadline however fast the machine (the request and the cancel wait in the socket);
     * a slow machine only makes the deadline pass sooner. STOP_MS stays far under the
     * broker lease (3 s) and session (5 s) timeouts, so kvd carries on afterwards. */
    struct cont_after ca = {.pid = g_kvd, .ms = STOP_MS};
    pthread_t th;
    ck_assert_int_eq(kill(g_kvd, SIGSTOP), 0);
    ck_assert_int_eq(pthread_create(&th, NULL, cont_after_run, &ca), 0);
    int rc_stopped = kvd_generate(c, &p, NULL, NULL, 1, &d);
    pthread_join(th, NULL);
    kill(g_kvd, SIGCONT);
    ck_assert_msg(rc_stopped == KVD_ETIMEDOUT, "rc %s", kvd_errname(rc_stopped));
    /* kvd's own request timeout */
    p.timeout_ms = 1;
    p.max_tokens = 500;
    int rc = kvd_generate(c, &p, NULL, NULL, 20000, &d);
    ck_assert_msg(rc == KVD_ETIMEDOUT, "rc %s", kvd_errname(rc));
    kvd_close(c);
    assert_pool_idle();
}
END_TEST

START_TEST(test_bench_run)
{
    ck_assert_int_ge(g_kvd, 0);
    char *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    int rc = run(out, err,
                 "%s/kvd-bench --runtime-dir %s --synthetic shared-prefix --requests 24 "
                 "--concurrency 4 --json --sample-ms 50",
                 g_bin, g_dir);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    static const char *const keys[] = {"requests_ok", "requests_failed", "output_tokens",
                                       "duration_s", "output_tok_per_s", "ttft_ms", "tpot_ms",
                                       "kv_waste_ratio", "peak_running", "preemptions",
                                       "prefix_hit_ratio", "ideal_hit_ratio"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        ck_assert_msg(has_key(out, keys[i]), "bench --json lacks '%s': %s", keys[i], out);
    ck_assert_double_eq(jnum(out, "requests_ok"), 24);
    ck_assert_double_eq(jnum(out, "requests_failed"), 0);
    ck_assert(jnum(out, "output_tokens") >= 24 * 16);
    ck_assert(jnum(out, "peak_running") >= 1 && jnum(out, "peak_running") <= 4);
    double w = jnum(out, "kv_waste_ratio");
    ck_assert(w >= 0 && w < 1);
    ck_assert(jnum(out, "prefix_hit_ratio") > 0.3); /* 4 prefixes of 256 tokens, 24 requests */
    ck_assert(strstr(out, "\"ttft_ms\": {\"p50\": "));
    /* like with like: kvd computed exactly the prompt tokens the cache did not serve (the
     * counters' baseline is sampled before the first submit; no preemption recomputes) */
    if (jnum(out, "preemptions") == 0)
        ck_assert_msg(jnum(out, "prefill_tokens_computed") + jnum(out, "cached_prompt_tokens") ==
                          jnum(out, "prompt_tokens"),
                      "%s", out);
    /* the table mode and a trace replay (first 20 Mooncake requests, 100x faster) */
    rc = run(out, err,
             "%s/kvd-bench --runtime-dir %s --trace %s/data/traces/mooncake_synthetic_trace.jsonl "
             "--requests 20 --time-scale 100 --no-progress",
             g_bin, g_dir, getenv("KVD_SHARED_DIR") ? getenv("KVD_SHARED_DIR") : "../shared");
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert(strstr(out, "Mooncake trace") && strstr(out, "requests ok / failed"));
    ck_assert(strstr(out, "trace ideal (unscaled)"));
    ck_assert_int_eq(run(out, err, "%s/kvd-bench --runtime-dir %s", g_bin, g_dir), 64);
    /* open loop (Poisson) completes every request */
    rc = run(out, err,
             "%s/kvd-bench --runtime-dir %s --synthetic chat --rate 40 --requests 20 --json "
             "--no-progress",
             g_bin, g_dir);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert_double_eq(jnum(out, "requests_ok"), 20);
    if (jnum(out, "preemptions") == 0)
        ck_assert_msg(jnum(out, "prefill_tokens_computed") + jnum(out, "cached_prompt_tokens") ==
                          jnum(out, "prompt_tokens"),
                      "%s", out);
    /* --duration stops issuing: far fewer than 100000 requests, within a bounded time */
    double t = now_s();
    rc = run(out, err,
             "%s/kvd-bench --runtime-dir %s --synthetic chat --requests 100000 --duration 1 "
             "--concurrency 2 --json --no-progress",
             g_bin, g_dir);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, err);
    ck_assert(jnum(out, "requests_unsent") > 90000);
    ck_assert(jnum(out, "requests_ok") >= 1);
    ck_assert_double_eq(jnum(out, "requests_failed"), 0);
    ck_assert(now_s() - t < BENCH_DURATION_BOUND_S);
    assert_pool_idle();
    free(out);
    free(err);
}
END_TEST

/* ---- unreachable daemons (no shared kvd needed) ---- */

START_TEST(test_missing_and_stale_daemon)
{
    const char *b = getenv("KVD_BIN_DIR");
    char bin[512], dir[] = "/tmp/kvd-test-dead-XXXXXX", *out = malloc(OUT_MAX),
                   *err = malloc(OUT_MAX);
    snprintf(bin, sizeof(bin), "%s", b ? b : "bin");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    double t = now_s();
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --timeout-ms %d pool", bin, dir,
                         FAIL_FAST_TIMEOUT_MS),
                     69);
    ck_assert(strstr(err, "kvctl: ") == err && strchr(err, '\n') == err + strlen(err) - 1);
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --timeout-ms %d generate --prompt hi",
                         bin, dir, FAIL_FAST_TIMEOUT_MS),
                     69);
    ck_assert_int_eq(run(out, err, "%s/kvd-bench --runtime-dir %s --synthetic chat --timeout-ms %d",
                         bin, dir, FAIL_FAST_TIMEOUT_MS),
                     69);
    /* stale sockets: bound once, nobody listening */
    const char *names[] = {"admin.sock", "kvd.sock"};
    for (int i = 0; i < 2; i++) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, names[i]);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
    }
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --timeout-ms %d seqs", bin, dir,
                         FAIL_FAST_TIMEOUT_MS),
                     69);
    ck_assert(strstr(err, "Connection refused"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --timeout-ms %d generate --prompt hi",
                         bin, dir, FAIL_FAST_TIMEOUT_MS),
                     69);
    struct kvd_client *c;
    ck_assert_int_eq(kvd_connect(dir, FAIL_FAST_TIMEOUT_MS, &c), -ECONNREFUSED);
    /* all of the above fail fast: waiting out even one timeout would take 60 s */
    ck_assert(now_s() - t < FAIL_FAST_BOUND_S);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(out);
    free(err);
}
END_TEST

/* Usage errors of kvctl, kvd-bench and kvd-mkmodel: exit 64, one message naming the flag
 * and what it accepts; kvctl generate --help states --json and every default. */
START_TEST(test_usage_errors)
{
    const char *b = getenv("KVD_BIN_DIR");
    char bin[512], *out = malloc(OUT_MAX), *err = malloc(OUT_MAX);
    snprintf(bin, sizeof(bin), "%s", b ? b : "bin");
    static const struct {
        const char *cmd;  /* after the binary dir */
        const char *want; /* in stderr */
    } cases[] = {
        {"kvctl generate --prompt x --temperature -1",
         "bad value '-1' for --temperature (expected a number 0..100; 0 = greedy)"},
        {"kvctl generate --prompt x --top-p 2", "bad value '2' for --top-p (expected a number 0..1)"},
        {"kvctl generate --prompt x --max-tokens 0", "for --max-tokens (expected an integer 1.."},
        {"kvctl generate --prompt x --bogus", "unknown option or missing value '--bogus'"},
        {"kvctl pool --timeout-ms 0", "bad value '0' for --timeout-ms (expected milliseconds, 1.."},
        {"kvctl --log-level loud pool", "bad value 'loud' for --log-level (expected error|warn"},
        {"kvctl --bogus pool", "unknown option '--bogus'"},
        {"kvctl frobnicate", "unknown command 'frobnicate'"},
        {"kvd-bench --synthetic nope",
         "bad value 'nope' for --synthetic (expected chat|shared-prefix|long)"},
        {"kvd-bench --synthetic chat --rate -1", "bad value '-1' for --rate (expected requests/s"},
        {"kvd-bench --synthetic chat --bogus", "unknown option or missing value '--bogus'"},
        {"kvd-mkmodel --out /nonexistent/m.gguf --dtype q4",
         "bad value 'q4' for --dtype (expected f32|f16|bf16|q8_0)"},
        {"kvd-mkmodel --out /nonexistent/m.gguf --dim 1Q", "bad value '1Q' for --dim (expected"},
        {"kvd-mkmodel --bogus", "unknown option or missing value '--bogus'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run(out, err, "%s/%s", bin, cases[i].cmd);
        ck_assert_msg(rc == 64, "'%s': rc %d, %s", cases[i].cmd, rc, err);
        ck_assert_msg(strstr(err, cases[i].want), "'%s' said '%s'", cases[i].cmd, err);
    }
    ck_assert_int_eq(run(out, err, "%s/kvctl generate --help", bin), 0);
    static const char *const help[] = {"--json", "--max-tokens N", "(default 16)",
                                       "(default 1.0", "--top-p P", "(default 1.0 = off)",
                                       "--top-k K", "(default 0)", "--timeout-ms MS",
                                       "(default 0 = none)", "--runtime-dir", "--log-level"};
    for (size_t i = 0; i < sizeof(help) / sizeof(help[0]); i++)
        ck_assert_msg(strstr(out, help[i]), "generate --help lacks '%s': %s", help[i], out);
    ck_assert_int_eq(run(out, err, "%s/kvctl --help", bin), 0);
    ck_assert(strstr(out, "before or after the command"));
    ck_assert_int_eq(run(out, err, "%s/kvctl pool --help", bin), 0);
    ck_assert(strstr(out, "before or after the command"));
    free(out);
    free(err);
}
END_TEST

START_TEST(test_silent_daemon_times_out)
{
    /* a listener that accepts and never answers: the bounded wait is the only way out */
    const char *b = getenv("KVD_BIN_DIR");
    char bin[512], dir[] = "/tmp/kvd-test-silent-XXXXXX", addr[300], *out = malloc(OUT_MAX),
                   *err = malloc(OUT_MAX);
    snprintf(bin, sizeof(bin), "%s", b ? b : "bin");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    int s1 = nn_socket(AF_SP, NN_REP), s2 = nn_socket(AF_SP, NN_REP);
    snprintf(addr, sizeof(addr), "ipc://%s/admin.sock", dir);
    ck_assert_int_ge(nn_bind(s1, addr), 0);
    snprintf(addr, sizeof(addr), "ipc://%s/kvd.sock", dir);
    ck_assert_int_ge(nn_bind(s2, addr), 0);
    double t = now_s();
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --timeout-ms 500 pool", bin, dir), 69);
    ck_assert(strstr(err, "no reply"));
    ck_assert_int_eq(run(out, err, "%s/kvctl --runtime-dir %s --timeout-ms 500 top --iterations 3",
                         bin, dir),
                     69);
    struct kvd_client *c;
    ck_assert_int_eq(kvd_connect(dir, 500, &c), -ETIMEDOUT);
    ck_assert(now_s() - t < SILENT_BOUND_S); /* bounded, not forever */
    nn_close(s1);
    nn_close(s2);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(out);
    free(err);
}
END_TEST

START_TEST(test_killed_daemon_sdk_epeer)
{
    const char *b = getenv("KVD_BIN_DIR");
    snprintf(g_bin, sizeof(g_bin), "%s", b ? b : "bin");
    char dir[] = "/tmp/kvd-test-kill-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pid_t pid = spawn_kvd(dir);
    /* nothing may fail between spawn and kill: a failed assert would leak the group */
    struct kvd_client *c = NULL;
    int rc_gen = -1, rc_conn = -1;
    bool ready = wait_ready(dir);
    if (ready)
        rc_conn = kvd_connect(dir, 3000, &c);
    if (rc_conn == 0) {
        struct kvd_params p = KVD_PARAMS_INIT;
        struct kvd_event d;
        p.prompt = "Once upon a time";
        p.max_tokens = 8;
        p.temperature = 0;
        rc_gen = kvd_generate(c, &p, NULL, NULL, 10000, &d);
    }
    kill(-pid, SIGKILL); /* kvd and its children, no goodbye */
    waitpid(pid, NULL, 0);
    ck_assert_msg(ready, "kvd did not start (log in %s)", dir);
    ck_assert_int_eq(rc_conn, 0);
    ck_assert_int_eq(rc_gen, 0);
    double t = now_s();
    struct kvd_event ev;
    int rc;
    do
        rc = kvd_next_event(c, &ev, 1000);
    while (rc == -EAGAIN && now_s() - t < KVD_CLIENT_DEAD_MS / 1000.0 + DEAD_SLACK_S);
    ck_assert_int_eq(rc, KVD_EPEER);
    ck_assert_int_eq(kvd_next_event(c, &ev, 0), KVD_EPEER);
    kvd_close(c); /* bounded even with kvd gone */
    ck_assert(now_s() - t <= KVD_CLIENT_DEAD_MS / 1000.0 + 2 * DEAD_SLACK_S);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    const char *b = getenv("KVD_BIN_DIR");
    char kvd[600];
    snprintf(kvd, sizeof(kvd), "%s/kvd", b ? b : "bin");
    if (access(kvd, X_OK) != 0) {
        printf("skipped: %s not built\n", kvd);
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("kvctl");
    TCase *live = tcase_create("live");
    tcase_set_timeout(live, 300);
    tcase_add_unchecked_fixture(live, setup, teardown);
    tcase_add_test(live, test_pool_json_and_text);
    tcase_add_test(live, test_generate_golden_and_json);
    tcase_add_test(live, test_views);
    tcase_add_test(live, test_prefix_and_evict);
    tcase_add_test(live, test_sdk_stream_cancel_concurrent);
    tcase_add_test(live, test_sdk_generate_callback_cancel_and_timeout);
    tcase_add_test(live, test_live_accounting);
    tcase_add_test(live, test_bench_run);
    suite_add_tcase(s, live);
    TCase *dead = tcase_create("dead");
    tcase_set_timeout(dead, 180);
    tcase_add_test(dead, test_usage_errors);
    tcase_add_test(dead, test_missing_and_stale_daemon);
    tcase_add_test(dead, test_silent_daemon_times_out);
    tcase_add_test(dead, test_killed_daemon_sdk_epeer);
    suite_add_tcase(s, dead);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

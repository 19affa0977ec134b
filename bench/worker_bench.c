/* worker-bench — prefill and decode throughput of the worker's CPU forward pass, paged
 * KV vs a contiguous KV cache, in one invocation, through the same step executor that
 * kvd-worker runs (exec_step: forward + logits of the sampled row + greedy sampling).
 *
 * For each batch size B: B sequences prefill P prompt tokens each (tokens/s = B*P / t),
 * then decode S steps of one token per sequence (tokens/s = B*S / t). "paged": block
 * size --block, each sequence's block table a shuffled set of pages of one pool;
 * "contiguous": one region per sequence holding all its positions (the same code with
 * one page per sequence, kvview.h). Prints one table row per (B, layout) and the
 * paged/contiguous ratios (best of BENCH_REPEATS passes after a warm-up). A benchmark, not a test: numbers vary with machine load.
 */
#include "common/err.h"
#include "common/log.h"
#include "worker/exec.h"

#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#define BENCH_BATCH_MAX 256 /* sequences in one step (STEP_MAX_SEQS) */
#define BENCH_ROWS 512      /* forward rows per sub-batch, as kvd-worker's default */
#define BENCH_REPEATS_DEFAULT 1 /* timed passes per layout (--repeats); best one kept */

struct bench_opts {
    const char *model;
    uint32_t threads, prompt, steps, block, kv_dtype, repeats;
    uint32_t batches[8], n_batches;
};

struct bench_row {
    double prefill_tps, decode_tps;         /* tokens per wall-clock second */
    double prefill_cpu_tps, decode_cpu_tps; /* tokens per CPU second (all threads) */
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs B sequences through prefill + decode on kv with block tables bt (B x nb). */
static int bench_pass(struct exec *e, uint32_t B, const struct bench_opts *o, uint32_t **bt,
                     uint32_t nb, struct bench_row *out)
{
    const uint32_t V = e->m->vocab, n_tok = o->prompt + o->steps;
    struct step_seq *q = calloc(B, sizeof(*q));
    uint32_t *toks = calloc((size_t)B * n_tok, sizeof(uint32_t));
    struct step_result r;
    char why[EXEC_WHY_LEN];
    int rc = -ENOMEM;
    if (!q || !toks)
        goto out_free;
    for (uint32_t i = 0; i < B * n_tok; i++)
        toks[i] = 3 + (uint32_t)(((uint64_t)i * 2654435761u) % (V - 3));
    for (uint32_t b = 0; b < B; b++) {
        q[b] = (struct step_seq){.seq_id = b, .tokens = toks + (size_t)b * n_tok,
                                 .n_tokens = o->prompt, .blocks = bt[b], .n_blocks = nb,
                                 .sample = true};
        step_sampling_default(&q[b].sp);
    }
    struct step_msg s = {1, B, q};
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if ((rc = exec_step(e, &s, &r, why)) < 0)
        goto out_err;
    double t1 = clock_s(CLOCK_MONOTONIC), c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (uint32_t st = 0; st < o->steps; st++) {
        for (uint32_t b = 0; b < B; b++) {
            q[b].pos0 = o->prompt + st;
            q[b].tokens = toks + (size_t)b * n_tok + q[b].pos0;
            q[b].n_tokens = 1;
        }
        if ((rc = exec_step(e, &s, &r, why)) < 0)
            goto out_err;
    }
    double t2 = clock_s(CLOCK_MONOTONIC), c2 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    out->prefill_tps = (double)B * o->prompt / (t1 - t0);
    out->decode_tps = (double)B * o->steps / (t2 - t1);
    out->prefill_cpu_tps = (double)B * o->prompt / (c1 - c0);
    out->decode_cpu_tps = (double)B * o->steps / (c2 - c1);
    rc = 0;
    goto out_free;
out_err:
    log_err("bench step failed: %s", why);
out_free:
    free(q);
    free(toks);
    return rc;
}

#define BEST(a, b) ((a) > (b) ? (a) : (b))

/* The best of o->repeats timed passes (re-running a step rewrites the same K/V:
 * idempotent). KV memory is pre-faulted by the caller, so no warm-up pass is needed. */
static int bench_run(struct exec *e, uint32_t B, const struct bench_opts *o, uint32_t **bt,
                     uint32_t nb, struct bench_row *out)
{
    struct bench_row r;
    int rc = 0;
    *out = (struct bench_row){0, 0, 0, 0};
    for (uint32_t i = 0; rc == 0 && i < o->repeats; i++) {
        if ((rc = bench_pass(e, B, o, bt, nb, &r)) < 0)
            break;
        out->prefill_tps = BEST(r.prefill_tps, out->prefill_tps);
        out->decode_tps = BEST(r.decode_tps, out->decode_tps);
        out->prefill_cpu_tps = BEST(r.prefill_cpu_tps, out->prefill_cpu_tps);
        out->decode_cpu_tps = BEST(r.decode_cpu_tps, out->decode_cpu_tps);
    }
    return rc;
}

static int bench_batch(const struct model *m, struct tpool *tp, uint32_t B,
                       const struct bench_opts *o, struct bench_row *paged,
                       struct bench_row *contig)
{
    const uint32_t cap = o->prompt + o->steps, nb = (cap + o->block - 1) / o->block;
    struct kv_geom g;
    struct kv_view kv;
    struct exec e;
    int rc = kv_geom_init(&g, m->n_layers, m->n_kv_heads, m->head_dim, o->block, o->kv_dtype);
    if (rc < 0)
        return rc;
    uint32_t n_pages = B * nb;
    uint32_t **bt = calloc(B, sizeof(*bt)), *perm = calloc(n_pages, sizeof(uint32_t));
    void *mem = calloc(n_pages, g.page_bytes);
    if (!bt || !perm || !mem)
        return -ENOMEM;
    memset(mem, 0, (size_t)n_pages * g.page_bytes); /* pre-fault: no first-touch in timing */
    /* paged: pages handed out in a shuffled order, so tables are scattered */
    for (uint32_t i = 0; i < n_pages; i++)
        perm[i] = i;
    uint64_t seed = 12345;
    for (uint32_t i = n_pages; i > 1; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t j = (uint32_t)((seed >> 33) % i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    for (uint32_t b = 0; b < B; b++)
        bt[b] = perm + (size_t)b * nb;
    kv_view_from_region(&kv, mem, &g, n_pages);
    if ((rc = exec_init(&e, m, tp, &kv, BENCH_ROWS)) < 0)
        goto out_free;
    rc = bench_run(&e, B, o, bt, nb, paged);
    exec_release(&e);
    free(mem);
    mem = NULL;
    if (rc < 0)
        goto out_free;
    /* contiguous: sequence b owns region b, block table {b} */
    mem = calloc(1, kv_view_contiguous_bytes(m->n_layers, m->n_kv_heads, m->head_dim,
                                             o->kv_dtype, cap, B));
    if (!mem) {
        rc = -ENOMEM;
        goto out_free;
    }
    memset(mem, 0, kv_view_contiguous_bytes(m->n_layers, m->n_kv_heads, m->head_dim,
                                            o->kv_dtype, cap, B));
    kv_view_contiguous(&kv, mem, m->n_layers, m->n_kv_heads, m->head_dim, o->kv_dtype, cap, B);
    for (uint32_t b = 0; b < B; b++)
        perm[b] = b;
    for (uint32_t b = 0; b < B; b++)
        bt[b] = perm + b;
    if ((rc = exec_init(&e, m, tp, &kv, BENCH_ROWS)) < 0)
        goto out_free;
    rc = bench_run(&e, B, o, bt, 1, contig);
    exec_release(&e);
out_free:
    free(mem);
    free(perm);
    free(bt);
    return rc;
}

static int parse_batches(const char *s, struct bench_opts *o)
{
    o->n_batches = 0;
    for (const char *p = s; *p && o->n_batches < 8;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v == 0 || v > BENCH_BATCH_MAX)
            return -EINVAL;
        o->batches[o->n_batches++] = (uint32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -EINVAL;
    }
    return o->n_batches ? 0 : -EINVAL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: worker-bench --model PATH [--threads T] [--prompt P] [--steps S]\n"
               "                    [--batches 1,8,32] [--block N] [--kv-dtype f32|f16] [--repeats N]\n"
               "Prefill and decode tokens/s of the CPU forward pass, paged vs contiguous KV.\n"
               "Defaults: threads 2, prompt 128, steps 32, batches 1,8,32, block 16, f32, repeats 1.\n"
               "Ratios paged/contiguous are on CPU time (robust to other load on the host).\n");
}

int main(int argc, char **argv)
{
    struct bench_opts o = {NULL, 2, 128, 32, 16, KV_DTYPE_F32, BENCH_REPEATS_DEFAULT,
                           {1, 8, 32}, 3};
    static const struct option lo[] = {
        {"model", 1, 0, 'm'},  {"threads", 1, 0, 't'}, {"prompt", 1, 0, 'p'},
        {"steps", 1, 0, 's'},  {"batches", 1, 0, 'b'}, {"block", 1, 0, 'k'},
        {"kv-dtype", 1, 0, 'd'}, {"repeats", 1, 0, 'r'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    enum kv_dtype dt;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 't': o.threads = (uint32_t)atoi(optarg); break;
        case 'p': o.prompt = (uint32_t)atoi(optarg); break;
        case 's': o.steps = (uint32_t)atoi(optarg); break;
        case 'k': o.block = (uint32_t)atoi(optarg); break;
        case 'r': o.repeats = (uint32_t)atoi(optarg); break;
        case 'b':
            if (parse_batches(optarg, &o) < 0)
                return fprintf(stderr, "worker-bench: bad --batches '%s'\n", optarg), EX_USAGE;
            break;
        case 'd':
            if (kv_dtype_parse(optarg, &dt) < 0)
                return fprintf(stderr, "worker-bench: bad --kv-dtype '%s'\n", optarg), EX_USAGE;
            o.kv_dtype = dt;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EX_USAGE;
        }
    }
    if (!o.model || o.threads == 0 || o.threads > TPOOL_THREADS_MAX || o.prompt == 0 ||
        o.steps == 0 || o.repeats == 0 || o.block == 0 || o.block > KV_BLOCK_TOKENS_MAX)
        return usage(stderr), EX_USAGE;
    log_setup("worker-bench", LOG_LEVEL_WARN);
    struct model m;
    struct tpool tp;
    if (model_load(&m, o.model) < 0)
        return EX_CONFIG;
    openblas_set_num_threads(1); /* our pool splits the matmuls (forward.h) */
    if (tpool_init(&tp, o.threads) < 0)
        return EX_OSERR;
    double params = (double)m.vocab * m.dim * (m.hp.tied_output ? 1 : 2);
    params += (double)m.n_layers * ((double)m.dim * (m.q_dim + 2 * m.kv_dim) +
                                    (double)m.q_dim * m.dim + 3.0 * m.dim * m.ff);
    printf("model %s: %.1fM params, %u layers, dim %u, heads %u/%u, ffn %u, vocab %u\n",
           o.model, params / 1e6, m.n_layers, m.dim, m.n_heads, m.n_kv_heads, m.ff, m.vocab);
    printf("threads %u, prompt %u tokens, %u decode steps, block %u, kv %s\n", o.threads,
           o.prompt, o.steps, o.block, kv_dtype_get(o.kv_dtype)->name);
    printf("%5s %10s | %13s %13s | %13s %13s\n", "batch", "layout", "prefill tok/s",
           "tok/cpu-s", "decode tok/s", "tok/cpu-s");
    int code = 0;
    struct bench_row warm, warm2; /* one untimed batch-1 run: BLAS buffers, thread start-up */
    if (bench_batch(&m, &tp, 1, &o, &warm, &warm2) < 0)
        code = EX_SOFTWARE;
    for (uint32_t i = 0; code == 0 && i < o.n_batches; i++) {
        struct bench_row p, c2;
        if (bench_batch(&m, &tp, o.batches[i], &o, &p, &c2) < 0) {
            code = EX_SOFTWARE;
            break;
        }
        printf("%5u %10s | %13.1f %13.1f | %13.1f %13.1f\n", o.batches[i], "paged",
               p.prefill_tps, p.prefill_cpu_tps, p.decode_tps, p.decode_cpu_tps);
        printf("%5u %10s | %13.1f %13.1f | %13.1f %13.1f\n", o.batches[i], "contiguous",
               c2.prefill_tps, c2.prefill_cpu_tps, c2.decode_tps, c2.decode_cpu_tps);
        printf("%5u %10s | %13s %13.3f | %13s %13.3f\n", o.batches[i], "ratio", "",
               p.prefill_cpu_tps / c2.prefill_cpu_tps, "", p.decode_cpu_tps / c2.decode_cpu_tps);
        fflush(stdout);
    }
    tpool_release(&tp);
    model_release(&m);
    return code;
}

/* test_forward.c — the worker's forward pass against the independent NumPy reference
 * (tests/ref/llama_ref.py), on stories260K and on models made by kvd-mkmodel.
 *
 * Tolerances (stated, not tuned per run): with f32 KV, max |c - ref| / max |ref| over
 * all logits of a sequence < 1e-4 (FWD_TOL_F32); with f16 KV < 5e-3 (FWD_TOL_F16:
 * f16 has an 11-bit mantissa, ~5e-4 relative per stored value, compounding over
 * layers); the same computation laid out differently (scrambled pages, other batch
 * members, sub-batch splits) < 1e-5 (FWD_TOL_SAME: only summation order may differ).
 */
#include "fwd_harness.h"

#define FWD_TOL_F32 1e-4
#define FWD_TOL_F16 5e-3
#define FWD_TOL_SAME 1e-5

static char g_stories[1024];

static void setup(void)
{
    h_path(g_stories, sizeof(g_stories), "KVD_SHARED_DIR", "../shared",
           "data/models/stories260K.gguf");
}

/* Prefill + many decode steps, scrambled pages, vs the reference. */
static void check_vs_ref(const char *path, uint32_t block, uint32_t dtype, uint32_t n,
                         const uint32_t *chunks, double tol, uint64_t seed)
{
    struct harness h;
    uint32_t n_blocks = (n + block - 1) / block;
    h_init(&h, path, block, dtype, n_blocks + 7, 256, 2);
    uint32_t *toks = calloc(n, sizeof(*toks)), *bt = calloc(n_blocks, sizeof(*bt));
    h_tokens(toks, n, h.m.vocab, 3, seed);
    toks[0] = 1;
    h_blocks(bt, n_blocks, 5, true, seed);
    float *got = calloc((size_t)n * h.m.vocab, sizeof(float));
    h_run_seq(&h, toks, n, bt, n_blocks, chunks, got);
    float *ref = h_ref_logits(path, toks, n, h.m.vocab);
    double err = h_rel_err(got, ref, (size_t)n * h.m.vocab);
    fprintf(stderr, "%s: block %u kv dtype %u, %u tokens: relative error %.3g (bound %.0e)\n",
            path, block, dtype, n, err, tol);
    ck_assert_msg(err < tol, "%s: relative error %.3g >= %.3g (block %u, dtype %u, %u tokens)",
                  path, err, tol, block, dtype, n);
    /* and the error is not hiding in the first rows only: check the last decode row */
    double last = h_rel_err(got + (size_t)(n - 1) * h.m.vocab, ref + (size_t)(n - 1) * h.m.vocab,
                            h.m.vocab);
    ck_assert_msg(last < tol, "last position relative error %.3g", last);
    free(got);
    free(ref);
    free(toks);
    free(bt);
    h_release(&h);
}

START_TEST(test_stories_prefill_decode_f32)
{
    /* 24-token prefill, then 56 single-token decode steps over 5 scrambled pages of 16 */
    static const uint32_t chunks[] = {24, 1, 0};
    check_vs_ref(g_stories, 16, KV_DTYPE_F32, 80, chunks, FWD_TOL_F32, 11);
}
END_TEST

START_TEST(test_stories_chunked_prefill_f32)
{
    /* prefill in uneven chunks crossing page borders (block 4: 25 pages) */
    static const uint32_t chunks[] = {7, 13, 5, 1, 1, 9, 0};
    check_vs_ref(g_stories, 4, KV_DTYPE_F32, 100, chunks, FWD_TOL_F32, 12);
}
END_TEST

START_TEST(test_stories_long_context)
{
    /* 600 positions over 38 scrambled pages of 16: prefill chunks of 200, then 200
     * single-token decode steps reading up to 600 positions each */
    static const uint32_t chunks[] = {200, 200, 1, 0};
    check_vs_ref(g_stories, 16, KV_DTYPE_F32, 600, chunks, FWD_TOL_F32, 14);
}
END_TEST

/* stories260K with rope scaling metadata added by the reference's own GGUF writer:
 * llama3 (factor 8, low 1, high 4, original context 1024: with head dim 8 the four
 * pair wavelengths 6.3, 63, 628, 6283 fall in the kept, kept, interpolated and scaled
 * bands) and linear (factor 2). 300 positions, so the scaled frequencies matter. */
static void check_rope_scaling(const char *args, uint64_t seed)
{
    char script[1024], cmd[4096], path[256];
    static const uint32_t chunks[] = {100, 1, 0};
    h_path(script, sizeof(script), "KVD_SOURCE_DIR", ".", "tests/ref/llama_ref.py");
    snprintf(path, sizeof(path), "/tmp/kvd-rope-%d.gguf", (int)getpid());
    snprintf(cmd, sizeof(cmd), "%s %s rope-scaling %s %s %s", H_PYTHON, script, g_stories, path,
             args);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
    check_vs_ref(path, 16, KV_DTYPE_F32, 300, chunks, FWD_TOL_F32, seed);
    unlink(path);
}

START_TEST(test_rope_scaling_llama3)
{
    check_rope_scaling("llama3 8 1 4 1024", 31);
}
END_TEST

START_TEST(test_rope_scaling_linear)
{
    check_rope_scaling("linear 2", 32);
}
END_TEST

START_TEST(test_stories_f16_kv)
{
    static const uint32_t chunks[] = {30, 1, 0};
    check_vs_ref(g_stories, 16, KV_DTYPE_F16, 70, chunks, FWD_TOL_F16, 13);
}
END_TEST

/* kvd-mkmodel shapes: {flags, block, tokens} */
struct shape {
    const char *flags;
    uint32_t block;
    uint32_t n;
};

static const struct shape shapes[] = {
    /* multi-head (kv == heads), f32 weights */
    {"--dim 64 --layers 2 --heads 4 --kv-heads 4 --ffn 96 --vocab 320 --ctx 256 --dtype f32 "
     "--seed 1", 16, 90},
    /* grouped-query 8:2, f16 weights, context over 40 pages of 4 */
    {"--dim 128 --layers 3 --heads 8 --kv-heads 2 --ffn 256 --vocab 400 --ctx 512 --dtype f16 "
     "--seed 2", 4, 160},
    /* grouped-query 6:3, bf16 weights, head dim 32 */
    {"--dim 192 --layers 2 --heads 6 --kv-heads 3 --ffn 320 --vocab 512 --ctx 256 --dtype bf16 "
     "--seed 3", 8, 70},
    /* q8_0 weights, multi-query (1 kv head) */
    {"--dim 128 --layers 2 --heads 4 --kv-heads 1 --ffn 256 --vocab 300 --ctx 256 --dtype q8_0 "
     "--seed 4", 16, 60},
    /* tied output weights, rope base 500000 (llama3-like), 4:2 heads */
    {"--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 300 --ctx 256 --dtype f32 "
     "--tied --rope-base 500000 --seed 5", 16, 50},
    /* tied output kept only in f16 (no f32 output matrix), prefill via converted slices */
    {"--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 300 --ctx 256 --dtype f16 "
     "--tied --seed 6", 16, 45},
};

START_TEST(test_mkmodel_shapes_f32)
{
    static const uint32_t chunks[] = {17, 1, 0};
    char path[256];
    h_mkmodel(path, sizeof(path), shapes[_i].flags);
    check_vs_ref(path, shapes[_i].block, KV_DTYPE_F32, shapes[_i].n, chunks, FWD_TOL_F32,
                 100 + (uint64_t)_i);
    unlink(path);
}
END_TEST

/* The same sequence alone and inside a mixed batch (other sequences prefilling and
 * decoding, different pages) gives the same logits. */
static void batch_invariance(const char *path)
{
    struct harness h;
    const uint32_t block = 8, n = 40;
    h_init(&h, path, block, KV_DTYPE_F32, 64, 128, 2);
    const uint32_t V = h.m.vocab;
    uint32_t a[40], b[40], c[40], bta[5], btb[5], btc[5];
    h_tokens(a, n, V, 3, 1);
    h_tokens(b, n, V, 3, 2);
    h_tokens(c, n, V, 3, 3);
    h_blocks(bta, 5, 0, true, 7);
    h_blocks(btb, 5, 20, true, 8);
    h_blocks(btc, 5, 40, true, 9);
    /* alone: one token per step (1-row matmuls: the f16 kernel when the model has f16
     * weights); in the batch below the same rows go through 62-row sgemm */
    float *alone = calloc((size_t)n * V, sizeof(float));
    static const uint32_t chunks[] = {1, 0};
    h_run_seq(&h, a, n, bta, 5, chunks, alone);
    /* batched: b prefills 12 first; then a's prefill of 30 together with b's next 12 and
     * c's first 20; then a decodes alongside b and c decoding */
    float *lg = calloc((size_t)128 * V, sizeof(float));
    uint32_t rows[128];
    struct fwd_seq s[3];
    s[0] = (struct fwd_seq){b, 12, 0, btb, 5};
    fwd_run(&h.f, &h.kv, s, 1);
    s[0] = (struct fwd_seq){b + 12, 12, 12, btb, 5};
    s[1] = (struct fwd_seq){a, 30, 0, bta, 5};
    s[2] = (struct fwd_seq){c, 20, 0, btc, 5};
    char why[256];
    ck_assert_msg(fwd_check(&h.f, &h.kv, s, 3, why, sizeof(why)) == 0, "%s", why);
    fwd_run(&h.f, &h.kv, s, 3);
    for (uint32_t i = 0; i < 30; i++)
        rows[i] = 12 + i;
    fwd_logits(&h.f, rows, 30, lg);
    double err = h_rel_err(lg, alone, (size_t)30 * V);
    ck_assert_msg(err < FWD_TOL_SAME, "prefill rows differ in a batch: %.3g", err);
    for (uint32_t t = 30; t < n; t++) {
        s[0] = (struct fwd_seq){c + t - 10, 1, t - 10, btc, 5};
        s[1] = (struct fwd_seq){a + t, 1, t, bta, 5};
        s[2] = (struct fwd_seq){b + t - 6, 1, t - 6, btb, 5};
        fwd_run(&h.f, &h.kv, s, 3);
        rows[0] = 1;
        fwd_logits(&h.f, rows, 1, lg);
        err = h_rel_err(lg, alone + (size_t)t * V, V);
        ck_assert_msg(err < FWD_TOL_SAME, "decode row %u differs in a batch: %.3g", t, err);
    }
    free(lg);
    free(alone);
    h_release(&h);
}

START_TEST(test_batch_invariance)
{
    batch_invariance(g_stories);
}
END_TEST

/* Packed weights (F16, BF16, Q8_0): a lone decode row multiplies with the dot kernels on
 * the file's rows, a 62-row batch converts them to f32 for sgemm; the weights are the
 * same numbers, so only summation order differs. */
START_TEST(test_batch_invariance_packed_weights)
{
    static const char *const dtypes[] = {"f16", "bf16", "q8_0"};
    char path[256], flags[256];
    snprintf(flags, sizeof(flags), "--dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 "
                                   "--vocab 300 --dtype %s --seed 9", dtypes[_i]);
    h_mkmodel(path, sizeof(path), flags);
    batch_invariance(path);
    unlink(path);
}
END_TEST

/* Contiguous pages 0,1,2,... vs a shuffled block table elsewhere in the pool: same
 * logits; and the pages written are exactly the ones in the table. */
START_TEST(test_scrambled_pages)
{
    struct harness h;
    const uint32_t block = 4, n = 50, nb = 13;
    h_init(&h, g_stories, block, KV_DTYPE_F32, 40, 64, 2);
    const uint32_t V = h.m.vocab;
    uint32_t toks[50], bt1[13], bt2[13];
    h_tokens(toks, n, V, 3, 5);
    h_blocks(bt1, nb, 0, false, 0);
    h_blocks(bt2, nb, 20, true, 99);
    static const uint32_t chunks[] = {9, 1, 0};
    float *l1 = calloc((size_t)n * V, sizeof(float)), *l2 = calloc((size_t)n * V, sizeof(float));
    h_run_seq(&h, toks, n, bt1, nb, chunks, l1);
    /* pages 13..19 and 33..39 were never in a table: still all zero */
    h_run_seq(&h, toks, n, bt2, nb, chunks, l2);
    double err = h_rel_err(l2, l1, (size_t)n * V);
    ck_assert_msg(err < FWD_TOL_SAME, "scrambled block table changes logits: %.3g", err);
    const uint8_t *p = h.kvmem;
    for (size_t i = 13 * h.g.page_bytes; i < 20 * h.g.page_bytes; i++)
        ck_assert_uint_eq(p[i], 0);
    for (size_t i = 33 * h.g.page_bytes; i < 40 * h.g.page_bytes; i++)
        ck_assert_uint_eq(p[i], 0);
    free(l1);
    free(l2);
    h_release(&h);
}
END_TEST

/* The contiguous (non-paged) layout used as the benchmark baseline computes the same. */
START_TEST(test_contiguous_view)
{
    struct harness h;
    const uint32_t n = 40;
    h_init(&h, g_stories, 16, KV_DTYPE_F32, 3, 64, 1);
    const uint32_t V = h.m.vocab;
    uint32_t toks[40], bt[3], one = 0;
    h_tokens(toks, n, V, 3, 21);
    h_blocks(bt, 3, 0, true, 4);
    static const uint32_t chunks[] = {10, 1, 0};
    float *l1 = calloc((size_t)n * V, sizeof(float)), *l2 = calloc((size_t)n * V, sizeof(float));
    h_run_seq(&h, toks, n, bt, 3, chunks, l1);
    void *mem = calloc(1, kv_view_contiguous_bytes(h.m.n_layers, h.m.n_kv_heads, h.m.head_dim,
                                                   KV_DTYPE_F32, 64, 1));
    kv_view_contiguous(&h.kv, mem, h.m.n_layers, h.m.n_kv_heads, h.m.head_dim, KV_DTYPE_F32, 64,
                       1);
    h_run_seq(&h, toks, n, &one, 1, chunks, l2);
    double err = h_rel_err(l2, l1, (size_t)n * V);
    ck_assert_msg(err < FWD_TOL_SAME, "contiguous view differs: %.3g", err);
    free(mem);
    free(l1);
    free(l2);
    h_release(&h);
}
END_TEST

#define GOLDEN_PROMPT "Once upon a time"
#define GOLDEN_TEXT ", there was a little girl named Lily. She loved to play outside in the park."
#define GOLDEN_TOKENS 27 /* greedy tokens that spell GOLDEN_TEXT */

/* The golden test, through the step executor: greedy decoding of stories260K from
 * BOS + "Once upon a time" matches the reference token by token and spells the
 * published sample. The prompt goes through in sub-batches of 3 rows (5 tokens), so the
 * executor's splitting of a prefill chunk is covered; prompt logprobs vs the reference. */
START_TEST(test_stories_golden_exec)
{
    struct harness h;
    struct exec e;
    uint32_t prompt[64], n_prompt = 0, ref_gen[GOLDEN_TOKENS], toks[128], bt[4] = {3, 0, 2, 1};
    char text[1024];
    h_ref_greedy(g_stories, GOLDEN_PROMPT, GOLDEN_TOKENS, prompt, &n_prompt, ref_gen, text,
                 sizeof(text));
    ck_assert_str_eq(text, GOLDEN_TEXT);
    h_init(&h, g_stories, 16, KV_DTYPE_F32, 4, 3, 1);
    ck_assert_int_eq(exec_init(&e, &h.m, &h.tp, &h.kv, 3), 0);
    memcpy(toks, prompt, n_prompt * sizeof(uint32_t));
    struct step_seq q;
    memset(&q, 0, sizeof(q));
    q = (struct step_seq){.seq_id = 7, .tokens = toks, .n_tokens = n_prompt, .pos0 = 0,
                          .blocks = bt, .n_blocks = 4, .sample = true, .logprobs = 3,
                          .prompt_logprobs = true};
    step_sampling_default(&q.sp);
    struct step_msg s = {1, 1, &q};
    struct step_result r;
    char why[EXEC_WHY_LEN];
    uint32_t n = n_prompt;
    for (uint32_t i = 0; i < GOLDEN_TOKENS; i++) {
        ck_assert_msg(exec_step(&e, &s, &r, why) == 0, "%s", why);
        ck_assert_uint_eq(r.n_seqs, 1);
        ck_assert(r.seqs[0].has_token);
        ck_assert_msg(r.seqs[0].token == ref_gen[i], "token %u: got %u, reference %u", i,
                      r.seqs[0].token, ref_gen[i]);
        ck_assert_uint_eq(r.seqs[0].top[0].token, r.seqs[0].token); /* greedy = best */
        ck_assert_float_eq(r.seqs[0].top[0].logprob, r.seqs[0].logprob);
        if (i == 0) { /* prompt logprobs: one per prompt token after BOS */
            float *ref = h_ref_logits(g_stories, prompt, n_prompt, h.m.vocab);
            ck_assert_uint_eq(r.seqs[0].n_prompt, n_prompt - 1);
            for (uint32_t t = 0; t + 1 < n_prompt; t++) {
                const float *row = ref + (size_t)t * h.m.vocab;
                double lp = row[prompt[t + 1]] - sampler_logsumexp(row, h.m.vocab);
                ck_assert_uint_eq(r.seqs[0].prompt[t].token, prompt[t + 1]);
                ck_assert_msg(fabs(r.seqs[0].prompt[t].logprob - lp) < 1e-4,
                              "prompt logprob %u: %f vs %f", t, r.seqs[0].prompt[t].logprob, lp);
            }
            /* the sampled token's logprob and the top alternatives: log-softmax of the
             * reference's last row */
            const float *last = ref + (size_t)(n_prompt - 1) * h.m.vocab;
            double lse = sampler_logsumexp(last, h.m.vocab);
            ck_assert_float_eq_tol(r.seqs[0].logprob, last[r.seqs[0].token] - lse, 1e-4);
            ck_assert_uint_eq(r.seqs[0].n_top, 3);
            for (uint32_t k = 1; k < 3; k++) {
                ck_assert(r.seqs[0].top[k].logprob <= r.seqs[0].top[k - 1].logprob);
                ck_assert_float_eq_tol(r.seqs[0].top[k].logprob,
                                       last[r.seqs[0].top[k].token] - lse, 1e-4);
            }
            free(ref);
            q.prompt_logprobs = false;
        }
        toks[n++] = r.seqs[0].token;
        q.tokens = toks + n - 1;
        q.n_tokens = 1;
        q.pos0 = n - 1;
    }
    exec_release(&e);
    h_release(&h);
}
END_TEST

/* A step that names a page outside the pool is refused before anything is written. */
START_TEST(test_exec_rejects_bad_step)
{
    struct harness h;
    struct exec e;
    h_init(&h, g_stories, 16, KV_DTYPE_F32, 4, 32, 1);
    ck_assert_int_eq(exec_init(&e, &h.m, &h.tp, &h.kv, 32), 0);
    uint32_t t[2] = {1, 2}, bt_bad[2] = {0, 9}, bt[1] = {1};
    struct step_seq q[2];
    memset(q, 0, sizeof(q));
    q[0] = (struct step_seq){.seq_id = 1, .tokens = t, .n_tokens = 2, .blocks = bt, .n_blocks = 1,
                             .sample = true};
    q[1] = (struct step_seq){.seq_id = 2, .tokens = t, .n_tokens = 2, .blocks = bt_bad,
                             .n_blocks = 2, .sample = true};
    step_sampling_default(&q[0].sp);
    step_sampling_default(&q[1].sp);
    struct step_msg s = {1, 2, q};
    struct step_result r;
    char why[EXEC_WHY_LEN];
    ck_assert_int_eq(exec_step(&e, &s, &r, why), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(why, "seq 1"));
    ck_assert_ptr_nonnull(strstr(why, "page 9"));
    const uint8_t *p = h.kvmem; /* seq 0 was valid, but nothing ran */
    for (size_t i = 0; i < 4 * h.g.page_bytes; i++)
        ck_assert_uint_eq(p[i], 0);
    q[1].has_next_token = true;
    q[1].next_token = h.m.vocab;
    q[1].blocks = bt;
    q[1].n_blocks = 1;
    ck_assert_int_eq(exec_step(&e, &s, &r, why), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(why, "next_token"));
    exec_release(&e);
    h_release(&h);
}
END_TEST

/* Pages holding garbage (NaN bytes, as a buggy or foreign writer could leave them) give
 * a result that still encodes and decodes: a token id in range, finite logprobs. */
START_TEST(test_exec_garbage_pages)
{
    struct harness h;
    struct exec e;
    h_init(&h, g_stories, 16, KV_DTYPE_F32, 4, 32, 1);
    memset(h.kvmem, 0xff, 4 * h.g.page_bytes); /* 0xffffffff is a NaN */
    ck_assert_int_eq(exec_init(&e, &h.m, &h.tp, &h.kv, 32), 0);
    uint32_t t[3] = {1, 2, 3}, bt[2] = {2, 0};
    struct step_seq q;
    memset(&q, 0, sizeof(q));
    q = (struct step_seq){.seq_id = 1, .tokens = t, .n_tokens = 3, .pos0 = 16, .blocks = bt,
                          .n_blocks = 2, .sample = true, .logprobs = 5, .prompt_logprobs = true};
    step_sampling_default(&q.sp);
    q.sp.temperature = 0.7f;
    q.sp.top_p = 0.9f;
    struct step_msg s = {1, 1, &q};
    struct step_result r, back;
    char why[EXEC_WHY_LEN], err[WIRE_ERR_LEN];
    ck_assert_int_eq(exec_step(&e, &s, &r, why), 0);
    ck_assert_uint_lt(r.seqs[0].token, h.m.vocab);
    struct wbuf w;
    struct wmsg m;
    wbuf_init(&w);
    step_result_encode(&w, &r);
    ck_assert_int_eq(wmsg_parse(&m, w.sb.data, w.sb.size, err), 0);
    ck_assert_msg(step_result_decode(&m, &back, err) == 0, "%s", err);
    ck_assert_uint_eq(back.seqs[0].n_prompt, 2);
    step_result_release(&back);
    wmsg_release(&m);
    wbuf_release(&w);
    exec_release(&e);
    h_release(&h);
}
END_TEST

/* fwd_check refuses what would read or write outside the sequence's pages. */
START_TEST(test_check_rejects)
{
    struct harness h;
    h_init(&h, g_stories, 16, KV_DTYPE_F32, 4, 32, 1);
    uint32_t toks[40] = {1, 2, 3}, bt[3] = {0, 1, 2}, bad_bt[2] = {0, 4};
    char why[256];
    struct fwd_seq s = {toks, 3, 0, bad_bt, 2};
    ck_assert_int_eq(fwd_check(&h.f, &h.kv, &s, 1, why, sizeof(why)), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(why, "page 4"));
    s = (struct fwd_seq){toks, 3, 46, bt, 3}; /* positions 46..48 need 4 blocks */
    ck_assert_int_eq(fwd_check(&h.f, &h.kv, &s, 1, why, sizeof(why)), KVD_EMSG);
    toks[1] = h.m.vocab;
    s = (struct fwd_seq){toks, 3, 0, bt, 3};
    ck_assert_int_eq(fwd_check(&h.f, &h.kv, &s, 1, why, sizeof(why)), KVD_EMSG);
    ck_assert_ptr_nonnull(strstr(why, "vocab"));
    toks[1] = 2;
    s = (struct fwd_seq){toks, 40, 0, bt, 3}; /* 40 rows > 32 of scratch */
    ck_assert_int_eq(fwd_check(&h.f, &h.kv, &s, 1, why, sizeof(why)), KVD_EMSG);
    s = (struct fwd_seq){toks, 3, 0, bt, 3};
    ck_assert_int_eq(fwd_check(&h.f, &h.kv, &s, 1, why, sizeof(why)), 0);
    h_release(&h);
}
END_TEST

START_TEST(test_load_rejects_missing_file)
{
    struct model m;
    ck_assert_int_lt(model_load(&m, "/nonexistent/model.gguf"), 0);
    ck_assert_ptr_null(m.layers);
}
END_TEST

static Suite *forward_suite(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("reference");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_stories_prefill_decode_f32);
    tcase_add_test(tc, test_stories_chunked_prefill_f32);
    tcase_add_test(tc, test_stories_long_context);
    tcase_add_test(tc, test_stories_f16_kv);
    tcase_add_test(tc, test_rope_scaling_llama3);
    tcase_add_test(tc, test_rope_scaling_linear);
    tcase_add_loop_test(tc, test_mkmodel_shapes_f32, 0, sizeof(shapes) / sizeof(shapes[0]));
    tcase_add_test(tc, test_batch_invariance);
    tcase_add_loop_test(tc, test_batch_invariance_packed_weights, 0, 3);
    tcase_add_test(tc, test_scrambled_pages);
    tcase_add_test(tc, test_contiguous_view);
    tcase_add_test(tc, test_check_rejects);
    tcase_add_test(tc, test_stories_golden_exec);
    tcase_add_test(tc, test_exec_rejects_bad_step);
    tcase_add_test(tc, test_exec_garbage_pages);
    tcase_add_test(tc, test_load_rejects_missing_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(forward_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

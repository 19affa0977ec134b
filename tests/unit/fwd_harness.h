/* fwd_harness.h — shared helpers for the worker's forward-pass tests (test_forward*.c).
 *
 * A harness = a loaded model + a KV region allocated in-process in the pool's page
 * layout (common/kvlayout.h) + a forward pass. Reference logits come from the
 * independent NumPy implementation tests/ref/llama_ref.py, run as a subprocess with
 * /usr/bin/python3. Test models are written by kvd-mkmodel ($KVD_BIN_DIR).
 * Header-only (static functions): each test binary includes it once.
 */
#ifndef KVD_TESTS_FWD_HARNESS_H
#define KVD_TESTS_FWD_HARNESS_H

#include "common/err.h"
#include "common/kvlayout.h"
#include "worker/exec.h"
#include "worker/forward.h"
#include "worker/model.h"

#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define H_PYTHON "/usr/bin/python3"  /* Debian's interpreter, where python3-numpy lives */
#define H_CMD_MAX 65536              /* bytes of a reference command line */

struct harness {
    struct model m;
    struct tpool tp;
    struct fwd f;
    struct kv_geom g;
    uint32_t num_pages;
    void *kvmem;          /* num_pages * page_bytes, the in-process "pool" */
    struct kv_view kv;
};

static __attribute__((unused)) const char *h_env(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static __attribute__((unused)) void h_path(char *out, size_t cap, const char *env, const char *def, const char *rel)
{
    snprintf(out, cap, "%s/%s", h_env(env, def), rel);
}

static __attribute__((unused)) void h_init(struct harness *h, const char *model_path, uint32_t block, uint32_t dtype,
                   uint32_t num_pages, uint32_t max_tokens, uint32_t threads)
{
    memset(h, 0, sizeof(*h));
    ck_assert_int_eq(model_load(&h->m, model_path), 0);
    openblas_set_num_threads(1); /* the pool splits matmuls, as in kvd-worker */
    ck_assert_int_eq(tpool_init(&h->tp, threads), 0);
    ck_assert_int_eq(fwd_init(&h->f, &h->m, &h->tp, max_tokens), 0);
    ck_assert_int_eq(kv_geom_init(&h->g, h->m.n_layers, h->m.n_kv_heads, h->m.head_dim, block,
                                  dtype), 0);
    h->num_pages = num_pages;
    h->kvmem = calloc(num_pages, h->g.page_bytes);
    ck_assert_ptr_nonnull(h->kvmem);
    kv_view_from_region(&h->kv, h->kvmem, &h->g, num_pages);
}

static __attribute__((unused)) void h_release(struct harness *h)
{
    fwd_release(&h->f);
    tpool_release(&h->tp);
    model_release(&h->m);
    free(h->kvmem);
}

/* A block table of n pages: a deterministic shuffle of pages [first, first + n) when
 * scramble, else first, first+1, ... */
static __attribute__((unused)) void h_blocks(uint32_t *bt, uint32_t n, uint32_t first, bool scramble, uint64_t seed)
{
    for (uint32_t i = 0; i < n; i++)
        bt[i] = first + i;
    for (uint32_t i = n; scramble && i > 1; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t j = (uint32_t)((seed >> 33) % i), t = bt[i - 1];
        bt[i - 1] = bt[j];
        bt[j] = t;
    }
}

/* Runs one sequence through the forward pass: chunk sizes from `chunks` (0-terminated;
 * the last one repeats), and stores the logits of every position in out (n, vocab). */
static __attribute__((unused)) void h_run_seq(struct harness *h, const uint32_t *toks, uint32_t n, const uint32_t *bt,
                      uint32_t n_blocks, const uint32_t *chunks, float *out)
{
    uint32_t pos = 0, ci = 0;
    uint32_t *rows = calloc(h->f.max_tokens, sizeof(*rows));
    while (pos < n) {
        uint32_t c = chunks[ci] ? chunks[ci] : chunks[ci - 1];
        if (chunks[ci])
            ci++;
        if (c > n - pos)
            c = n - pos;
        struct fwd_seq s = {toks + pos, c, pos, bt, n_blocks};
        char why[256];
        ck_assert_msg(fwd_check(&h->f, &h->kv, &s, 1, why, sizeof(why)) == 0, "%s", why);
        fwd_run(&h->f, &h->kv, &s, 1);
        for (uint32_t i = 0; i < c; i++)
            rows[i] = i;
        fwd_logits(&h->f, rows, c, out + (size_t)pos * h->m.vocab);
        pos += c;
    }
    free(rows);
}

/* Logits of the whole sequence from the NumPy reference: (n, vocab) floats. */
static __attribute__((unused)) float *h_ref_logits(const char *model_path, const uint32_t *toks, uint32_t n,
                           uint32_t vocab)
{
    char script[1024], out[] = "/tmp/kvd-ref-XXXXXX";
    char *cmd = malloc(H_CMD_MAX);
    int fd = mkstemp(out);
    ck_assert_int_ge(fd, 0);
    close(fd);
    h_path(script, sizeof(script), "KVD_SOURCE_DIR", ".", "tests/ref/llama_ref.py");
    size_t k = (size_t)snprintf(cmd, H_CMD_MAX, "%s %s logits %s %s ", H_PYTHON, script,
                                model_path, out);
    for (uint32_t i = 0; i < n; i++)
        k += (size_t)snprintf(cmd + k, H_CMD_MAX - k, "%s%u", i ? "," : "", toks[i]);
    ck_assert_uint_lt(k, H_CMD_MAX);
    ck_assert_msg(system(cmd) == 0, "reference failed: %.200s", cmd);
    float *lg = malloc((size_t)n * vocab * sizeof(float));
    FILE *f = fopen(out, "rb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fread(lg, sizeof(float), (size_t)n * vocab, f), (size_t)n * vocab);
    fclose(f);
    unlink(out);
    free(cmd);
    return lg;
}

/* Greedy decoding by the reference: BOS + SentencePiece(text), then n tokens. Fills
 * prompt ids, generated ids and the generated text (NUL-terminated). */
static __attribute__((unused)) void h_ref_greedy(const char *model_path, const char *text, uint32_t n, uint32_t *prompt,
                         uint32_t *n_prompt, uint32_t *gen, char *gen_text, size_t text_cap)
{
    char script[1024], cmd[4096], line[8192];
    h_path(script, sizeof(script), "KVD_SOURCE_DIR", ".", "tests/ref/llama_ref.py");
    snprintf(cmd, sizeof(cmd), "%s %s greedy %s '%s' %u", H_PYTHON, script, model_path, text, n);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    uint32_t *dst[2] = {prompt, gen};
    for (int k = 0; k < 2; k++) {
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        uint32_t c = 0;
        for (char *t = strtok(line, ",\n"); t; t = strtok(NULL, ",\n"))
            dst[k][c++] = (uint32_t)strtoul(t, NULL, 10);
        if (k == 0)
            *n_prompt = c;
        else
            ck_assert_uint_eq(c, n);
    }
    ck_assert_ptr_nonnull(fgets(gen_text, (int)text_cap, f));
    gen_text[strcspn(gen_text, "\n")] = '\0';
    ck_assert_int_eq(pclose(f), 0);
}

/* max |a - b| / max |b| over n values: the relative error the tests bound. */
static __attribute__((unused)) double h_rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        num = d > num ? d : num;
        den = fabs(b[i]) > den ? fabs(b[i]) : den;
    }
    return den > 0 ? num / den : num;
}

/* Deterministic pseudo-random token ids in [lo, vocab). */
static __attribute__((unused)) void h_tokens(uint32_t *t, uint32_t n, uint32_t vocab, uint32_t lo, uint64_t seed)
{
    for (uint32_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = lo + (uint32_t)((seed >> 33) % (vocab - lo));
    }
}

/* Writes a model with kvd-mkmodel into out (a temp path); flags is the shape. */
static __attribute__((unused)) void h_mkmodel(char *out, size_t cap, const char *flags)
{
    char tool[1024], cmd[4096];
    h_path(tool, sizeof(tool), "KVD_BIN_DIR", ".", "kvd-mkmodel");
    snprintf(out, cap, "/tmp/kvd-fwdtest-%d-%lx.gguf", (int)getpid(),
             (unsigned long)random());
    snprintf(cmd, sizeof(cmd), "%s %s --out %s >/dev/null", tool, flags, out);
    ck_assert_msg(system(cmd) == 0, "kvd-mkmodel failed: %s", cmd);
}

#endif

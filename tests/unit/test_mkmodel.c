/* test_mkmodel.c — kvd-mkmodel: models of several shapes and dtypes open, validate and
 * carry the requested hyper-parameters; weights are deterministic per seed, sane in scale,
 * the same across dtypes up to quantization; bad flags exit 64, bad config 78, and a
 * failed run leaves no file. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/gguf.h"

static char g_tmp[256];

static void tmp_setup(void)
{
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/kvd-test-mkmodel-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static void tmp_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs kvd-mkmodel with args, writing g_tmp/name; returns its exit status. */
static int mkmodel(const char *name, const char *args, char *out, size_t cap)
{
    const char *bin = getenv("KVD_BIN_DIR");
    char cmd[1024];
    snprintf(out, cap, "%s/%s", g_tmp, name);
    snprintf(cmd, sizeof(cmd), "'%s/kvd-mkmodel' --log-level error --out '%s' %s",
             bin ? bin : "bin", out, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void read_file(const char *p, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    *buf = malloc(*len);
    ck_assert_uint_eq(fread(*buf, 1, *len, f), *len);
    fclose(f);
}

START_TEST(test_mkmodel_shapes)
{
    static const struct {
        const char *args;
        uint32_t embd, layers, heads, kv, ff, vocab, type;
        bool tied;
    } cases[] = {
        {"--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96", 64, 2, 4, 2, 96, 512,
         GGUF_DT_F32, false},
        {"--dim 128 --layers 3 --heads 8 --kv-heads 1 --ffn 256 --dtype f16 --tied", 128, 3, 8,
         1, 256, 512, GGUF_DT_F16, true},
        {"--dim 96 --layers 1 --heads 3 --ffn 160 --dtype q8_0 --vocab 1000", 96, 1, 3, 3, 160,
         1000, GGUF_DT_Q8_0, false},
        {"--dim 64 --layers 2 --heads 2 --dtype bf16 --vocab 300 --ctx 4K", 64, 2, 2, 2, 192,
         300, GGUF_DT_BF16, false},
        {"--dim 32 --layers 1 --heads 2 --vocab-kind bytes", 32, 1, 2, 2, 96, 354, GGUF_DT_F32,
         false},
        {"--dim 32 --layers 1 --heads 2 --vocab-kind gpt2 --tied", 32, 1, 2, 2, 96, 284,
         GGUF_DT_F32, true},
    };
    uint64_t fps[sizeof(cases) / sizeof(cases[0])];
    char path[512], err[GGUF_ERR_LEN], name[32];
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct gguf_file g;
        struct gguf_llama_hparams hp;
        snprintf(name, sizeof(name), "m%zu.gguf", c);
        ck_assert_int_eq(mkmodel(name, cases[c].args, path, sizeof(path)), 0);
        ck_assert_msg(gguf_open(&g, path, err) == 0, "%s", err);
        ck_assert_msg(gguf_llama_hparams(&g, &hp, err) == 0, "%s", err);
        ck_assert_msg(gguf_llama_validate(&g, &hp, err) == 0, "%s: %s", cases[c].args, err);
        ck_assert_uint_eq(hp.n_embd, cases[c].embd);
        ck_assert_uint_eq(hp.n_layer, cases[c].layers);
        ck_assert_uint_eq(hp.n_head, cases[c].heads);
        ck_assert_uint_eq(hp.n_head_kv, cases[c].kv);
        ck_assert_uint_eq(hp.n_ff, cases[c].ff);
        ck_assert_msg(hp.n_vocab == cases[c].vocab, "%s: vocab %u", cases[c].args, hp.n_vocab);
        ck_assert_int_eq(hp.tied_output, cases[c].tied);
        ck_assert_uint_eq(gguf_tensor_find(&g, "blk.0.ffn_up.weight")->type, cases[c].type);
        ck_assert_uint_eq(gguf_tensor_find(&g, "blk.0.ffn_norm.weight")->type, GGUF_DT_F32);
        fps[c] = gguf_model_fingerprint(&g);
        for (size_t k = 0; k < c; k++)
            ck_assert_uint_ne(fps[k], fps[c]);
        /* weights are sane: finite, roughly unit-variance rows scaled by 1/sqrt(fan-in) */
        const struct gguf_tensor *t = gguf_tensor_find(&g, "blk.0.attn_q.weight");
        float *row = malloc(t->ne[0] * sizeof(*row));
        double ss = 0;
        for (uint64_t r = 0; r < t->ne[1]; r++) {
            const uint8_t *src = (const uint8_t *)t->data + r * gguf_row_bytes(t->type, t->ne[0]);
            ck_assert_int_eq(gguf_dequant_row(t->type, src, row, t->ne[0]), 0);
            for (uint64_t i = 0; i < t->ne[0]; i++) {
                if (!isfinite(row[i]))
                    ck_abort_msg("weight %g not finite", (double)row[i]);
                ss += (double)row[i] * row[i];
            }
        }
        double var = ss / (double)t->n_elems * (double)t->ne[0];
        ck_assert_msg(var > 0.8 && var < 1.2, "variance*fan_in %g", var);
        free(row);
        gguf_close(&g);
    }
}
END_TEST

START_TEST(test_mkmodel_deterministic)
{
    char a[512], b[512], c[512], d[512], e[512], err[GGUF_ERR_LEN];
    uint8_t *ba, *bb, *bc;
    size_t la, lb, lc;
    const char *args = "--dim 64 --layers 2 --heads 4 --kv-heads 2 --dtype f16 --seed 7";
    ck_assert_int_eq(mkmodel("a.gguf", args, a, sizeof(a)), 0);
    ck_assert_int_eq(mkmodel("b.gguf", args, b, sizeof(b)), 0);
    ck_assert_int_eq(mkmodel("c.gguf", "--dim 64 --layers 2 --heads 4 --kv-heads 2 --dtype f16 "
                                       "--seed 8", c, sizeof(c)), 0);
    read_file(a, &ba, &la);
    read_file(b, &bb, &lb);
    read_file(c, &bc, &lc);
    ck_assert_uint_eq(la, lb);
    ck_assert_int_eq(memcmp(ba, bb, la), 0); /* same seed: same bytes */
    ck_assert_uint_eq(la, lc);
    ck_assert_int_ne(memcmp(ba, bc, la), 0); /* other seed: other weights */
    free(ba), free(bb), free(bc);

    /* same seed, f32 vs q8_0: the same weights up to quantization */
    ck_assert_int_eq(mkmodel("d.gguf", "--dim 64 --layers 1 --heads 4 --seed 3", d, sizeof(d)), 0);
    ck_assert_int_eq(mkmodel("e.gguf", "--dim 64 --layers 1 --heads 4 --seed 3 --dtype q8_0", e,
                             sizeof(e)), 0);
    struct gguf_file gd, ge;
    ck_assert_int_eq(gguf_open(&gd, d, err), 0);
    ck_assert_int_eq(gguf_open(&ge, e, err), 0);
    ck_assert_uint_ne(gguf_model_fingerprint(&gd), gguf_model_fingerprint(&ge));
    const struct gguf_tensor *td = gguf_tensor_find(&gd, "blk.0.ffn_down.weight");
    const struct gguf_tensor *te = gguf_tensor_find(&ge, "blk.0.ffn_down.weight");
    float x[256], y[256];
    ck_assert_uint_le(td->ne[0], 256);
    ck_assert_int_eq(gguf_dequant_row(td->type, td->data, x, td->ne[0]), 0);
    ck_assert_int_eq(gguf_dequant_row(te->type, te->data, y, te->ne[0]), 0);
    for (uint64_t i = 0; i < td->ne[0]; i++)
        ck_assert_float_le(fabsf(x[i] - y[i]), 0.02f);
    gguf_close(&gd);
    gguf_close(&ge);
}
END_TEST

START_TEST(test_mkmodel_cli)
{
    char p[512];
    ck_assert_int_eq(mkmodel("x.gguf", "--bogus", p, sizeof(p)), 64);
    ck_assert_int_eq(mkmodel("x.gguf", "--dim 63 --heads 4", p, sizeof(p)), 64);
    ck_assert_int_eq(mkmodel("x.gguf", "--dim 64 --heads 4 --kv-heads 3", p, sizeof(p)), 64);
    ck_assert_int_eq(mkmodel("x.gguf", "--dtype q4_k", p, sizeof(p)), 64);
    ck_assert_int_eq(mkmodel("x.gguf", "--vocab 100", p, sizeof(p)), 78);
    ck_assert_int_eq(mkmodel("x.gguf", "--vocab-from /nonexistent.gguf", p, sizeof(p)), 78);
    struct stat st;
    ck_assert_int_ne(stat(p, &st), 0); /* nothing written by a failed run */
    const char *bin = getenv("KVD_BIN_DIR");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "'%s/kvd-mkmodel' --help | grep -q -- --kv-heads",
             bin ? bin : "bin");
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("mkmodel");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_mkmodel_shapes);
    tcase_add_test(tc, test_mkmodel_deterministic);
    tcase_add_test(tc, test_mkmodel_cli);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

/* test_gguf.c — the GGUF reader, writer, dtype conversions and llama hparams
 * (kvd-mkmodel's own tests: test_mkmodel.c).
 *
 * Valid files: the trained stories260K.gguf and llamas built in memory with the writer.
 * Invalid files: built in memory with the writer (or mutated bytes of
 * a valid one) — each must fail with KVD_EMODEL / -ENOENT and a message naming the file
 * and the fault, never crash (this test also runs under ASan+UBSan). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/gguf.h"
#include "common/gguf_write.h"

static char g_tmp[256]; /* per-process temp dir (fork mode: each test has its own) */

static const char *src_path(const char *rel, char *buf, size_t cap)
{
    const char *src = getenv("KVD_SOURCE_DIR");
    snprintf(buf, cap, "%s/%s", src ? src : ".", rel);
    return buf;
}

static void tmp_setup(void)
{
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/kvd-test-gguf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static void tmp_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- a small llama built in memory with the writer ---- */

struct mini {
    uint32_t embd, layers, heads, kv_heads, ff, vocab;
    uint32_t wtype;            /* dtype of the matrices */
    const char *arch;
    const char *skip;          /* tensor name to leave out */
    const char *bad_shape;     /* tensor name written with ne[1] + 1 */
    bool tied;
};

static const struct mini MINI = {32, 2, 4, 2, 64, 40, GGUF_DT_F32, "llama", NULL, NULL, false};

static void mini_tensor(struct gguf_writer *w, const struct mini *m, const char *name,
                        uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1)
{
    uint64_t ne[2] = {ne0, ne1};
    if (m->skip && !strcmp(m->skip, name))
        return;
    if (m->bad_shape && !strcmp(m->bad_shape, name))
        ne[n_dims - 1]++;
    gguf_writer_tensor(w, name, type, n_dims, ne, NULL, NULL);
}

static void mini_build(const struct mini *m, uint8_t **buf, size_t *len)
{
    struct gguf_writer w;
    const uint64_t hd = m->embd / m->heads;
    char nm[64];
    gguf_writer_init(&w);
    gguf_writer_str(&w, "general.architecture", m->arch);
    gguf_writer_u32(&w, "llama.context_length", 128);
    gguf_writer_u32(&w, "llama.embedding_length", m->embd);
    gguf_writer_u32(&w, "llama.block_count", m->layers);
    gguf_writer_u32(&w, "llama.feed_forward_length", m->ff);
    gguf_writer_u32(&w, "llama.attention.head_count", m->heads);
    gguf_writer_u32(&w, "llama.attention.head_count_kv", m->kv_heads);
    gguf_writer_u32(&w, "llama.vocab_size", m->vocab);
    mini_tensor(&w, m, "token_embd.weight", m->wtype, 2, m->embd, m->vocab);
    mini_tensor(&w, m, "output_norm.weight", GGUF_DT_F32, 1, m->embd, 1);
    if (!m->tied)
        mini_tensor(&w, m, "output.weight", m->wtype, 2, m->embd, m->vocab);
    for (uint32_t l = 0; l < m->layers; l++) {
#define T(s, nd, a, b)                                                                   \
    snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, s);                                  \
    mini_tensor(&w, m, nm, nd == 1 ? GGUF_DT_F32 : m->wtype, nd, a, b)
        T("attn_norm", 1, m->embd, 1);
        T("attn_q", 2, m->embd, m->embd);
        T("attn_k", 2, m->embd, hd * m->kv_heads);
        T("attn_v", 2, m->embd, hd * m->kv_heads);
        T("attn_output", 2, m->embd, m->embd);
        T("ffn_norm", 1, m->embd, 1);
        T("ffn_gate", 2, m->embd, m->ff);
        T("ffn_up", 2, m->embd, m->ff);
        T("ffn_down", 2, m->ff, m->embd);
#undef T
    }
    ck_assert_int_eq(gguf_writer_write_mem(&w, buf, len), 0);
    gguf_writer_release(&w);
}

/* Opens, reads hparams, validates; returns the first failing code with err filled. */
static int mini_check(const struct mini *m, char *err)
{
    uint8_t *buf;
    size_t len;
    struct gguf_file g;
    struct gguf_llama_hparams hp;
    mini_build(m, &buf, &len);
    int rc = gguf_open_mem(&g, buf, len, "mini.gguf", err);
    if (!rc) {
        rc = gguf_llama_hparams(&g, &hp, err);
        if (!rc)
            rc = gguf_llama_validate(&g, &hp, err);
        gguf_close(&g);
    }
    free(buf);
    return rc;
}

/* Offset in buf of the u64 `offset` field of tensor `name`'s info. */
static size_t tensor_info_field(const uint8_t *buf, size_t len, const char *name, int field)
{
    size_t nl = strlen(name);
    for (size_t i = 8; i + nl < len; i++) {
        uint64_t l;
        memcpy(&l, buf + i - 8, 8);
        if (l == nl && !memcmp(buf + i, name, nl)) {
            uint32_t nd;
            memcpy(&nd, buf + i + nl, 4);
            size_t dims = i + nl + 4, type = dims + 8 * nd, off = type + 4;
            return field == 0 ? dims : field == 1 ? type : off;
        }
    }
    ck_abort_msg("tensor info '%s' not found", name);
    return 0;
}

static int open_buf(const uint8_t *buf, size_t len, char *err)
{
    struct gguf_file g;
    int rc = gguf_open_mem(&g, buf, len, "bad.gguf", err);
    if (!rc)
        gguf_close(&g);
    return rc;
}

/* ---- tests ---- */

START_TEST(test_stories260k)
{
    char path[512], err[GGUF_ERR_LEN];
    struct gguf_file g, g2;
    struct gguf_llama_hparams hp;
    src_path("models/stories260K.gguf", path, sizeof(path));
    ck_assert_msg(gguf_open(&g, path, err) == 0, "%s", err);
    ck_assert_uint_eq(g.version, 3);
    ck_assert_uint_eq(g.n_tensors, 48);
    ck_assert_uint_eq(g.n_kv, 19);
    ck_assert_uint_eq(g.size, 1185376);
    ck_assert_int_eq(gguf_llama_hparams(&g, &hp, err), 0);
    ck_assert_str_eq(hp.arch, "llama");
    ck_assert_uint_eq(hp.n_vocab, 512);
    ck_assert_uint_eq(hp.n_embd, 64);
    ck_assert_uint_eq(hp.n_layer, 5);
    ck_assert_uint_eq(hp.n_head, 8);
    ck_assert_uint_eq(hp.n_head_kv, 4);
    ck_assert_uint_eq(hp.head_dim, 8);
    ck_assert_uint_eq(hp.n_ff, 172);
    ck_assert_uint_eq(hp.n_ctx_train, 2048);
    ck_assert_float_eq_tol(hp.rms_norm_eps, 1e-5f, 1e-9f);
    ck_assert_float_eq(hp.rope_freq_base, 10000.0f);
    ck_assert(!hp.tied_output);
    ck_assert_int_eq(hp.rope_scaling, GGUF_ROPE_SCALING_NONE);
    ck_assert_msg(gguf_llama_validate(&g, &hp, err) == 0, "%s", err);

    const struct gguf_tensor *t = gguf_tensor_find(&g, "blk.0.attn_k.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->type, GGUF_DT_F32);
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_uint_eq(t->ne[0], 64);
    ck_assert_uint_eq(t->ne[1], 32);
    ck_assert_uint_eq(t->nbytes, 64 * 32 * 4);
    ck_assert_ptr_eq(t->data, g.map + g.data_off + t->offset);
    ck_assert_ptr_null(gguf_tensor_find(&g, "blk.5.attn_k.weight"));

    /* output.weight is a copy of token_embd.weight in this file (README) */
    const struct gguf_tensor *e = gguf_tensor_find(&g, "token_embd.weight");
    const struct gguf_tensor *o = gguf_tensor_find(&g, "output.weight");
    ck_assert_int_eq(memcmp(e->data, o->data, e->nbytes), 0);

    struct gguf_str s;
    ck_assert_int_eq(gguf_get_str(&g, "general.name", &s, err), 0);
    ck_assert(gguf_str_eq(s, "llama"));
    uint32_t u;
    ck_assert_int_eq(gguf_get_u32(&g, "tokenizer.ggml.padding_token_id", &u, err), 0);
    ck_assert_uint_eq(u, UINT32_MAX);

    uint64_t fp = gguf_model_fingerprint(&g);
    ck_assert_uint_ne(fp, 0);
    ck_assert_int_eq(gguf_open(&g2, path, err), 0);
    ck_assert_uint_eq(gguf_model_fingerprint(&g2), fp);
    gguf_close(&g2);
    gguf_close(&g);
    gguf_close(&g); /* idempotent on a zeroed struct */
}
END_TEST

START_TEST(test_metadata_getters)
{
    char path[512], err[GGUF_ERR_LEN];
    struct gguf_file g;
    src_path("models/stories260K.gguf", path, sizeof(path));
    ck_assert_int_eq(gguf_open(&g, path, err), 0);
    uint32_t u = 7;
    uint64_t u64;
    int32_t i;
    float f;
    bool b;
    struct gguf_str s;
    struct gguf_arr a;
    ck_assert_int_eq(gguf_get_u32(&g, "no.such.key", &u, err), -ENOENT);
    ck_assert_uint_eq(u, 7); /* untouched */
    ck_assert_int_eq(gguf_get_u32(&g, "general.architecture", &u, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "general.architecture"));
    ck_assert_ptr_nonnull(strstr(err, "string"));
    ck_assert_int_eq(gguf_get_u64(&g, "llama.block_count", &u64, err), 0);
    ck_assert_uint_eq(u64, 5);
    ck_assert_int_eq(gguf_get_i32(&g, "llama.block_count", &i, err), 0);
    ck_assert_int_eq(i, 5);
    ck_assert_int_eq(gguf_get_i32(&g, "tokenizer.ggml.padding_token_id", &i, err), KVD_EMODEL);
    ck_assert_int_eq(gguf_get_f32(&g, "llama.block_count", &f, err), KVD_EMODEL);
    ck_assert_int_eq(gguf_get_f32(&g, "llama.attention.layer_norm_rms_epsilon", &f, err), 0);
    ck_assert_int_eq(gguf_get_bool(&g, "general.name", &b, err), KVD_EMODEL);
    ck_assert_int_eq(gguf_get_str(&g, "llama.block_count", &s, err), KVD_EMODEL);
    ck_assert_int_eq(gguf_get_arr(&g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &a, err), 0);
    ck_assert_uint_eq(a.n, 512);
    ck_assert(gguf_str_eq(gguf_arr_str(&a, 0), "<unk>"));
    ck_assert(gguf_str_eq(gguf_arr_str(&a, 3), "<0x00>"));
    ck_assert_uint_gt(gguf_arr_str(&a, 511).len, 0);
    ck_assert_int_eq(gguf_get_arr(&g, "tokenizer.ggml.tokens", GGUF_VT_I32, &a, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "array of string"));
    ck_assert_int_eq(gguf_get_arr(&g, "tokenizer.ggml.token_type", GGUF_VT_I32, &a, err), 0);
    ck_assert_int_eq(gguf_arr_i32(&a, 0), 2); /* <unk>: UNKNOWN */
    ck_assert_int_eq(gguf_arr_i32(&a, 1), 3); /* <s>: CONTROL */
    ck_assert_int_eq(gguf_arr_i32(&a, 3), 6); /* <0x00>: BYTE */
    ck_assert_int_eq(gguf_get_arr(&g, "tokenizer.ggml.scores", GGUF_VT_F32, &a, err), 0);
    ck_assert_float_eq(gguf_arr_f32(&a, 260), -1.0f);
    gguf_close(&g);
}
END_TEST

START_TEST(test_dtype_tables)
{
    ck_assert_str_eq(gguf_dtype_name(GGUF_DT_Q4_K), "Q4_K");
    ck_assert_str_eq(gguf_dtype_name(GGUF_DT_BF16), "BF16");
    ck_assert_ptr_null(gguf_dtype_name(4));  /* removed Q4_2 */
    ck_assert_ptr_null(gguf_dtype_name(GGUF_DT_COUNT_));
    ck_assert_uint_eq(gguf_dtype_block_bytes(GGUF_DT_Q8_0), 34);
    ck_assert_uint_eq(gguf_dtype_block_elems(GGUF_DT_Q6_K), 256);
    ck_assert_uint_eq(gguf_dtype_block_bytes(GGUF_DT_Q6_K), 210);
    ck_assert(gguf_dtype_is_supported(GGUF_DT_Q8_0));
    ck_assert(!gguf_dtype_is_supported(GGUF_DT_Q4_0));
    ck_assert_uint_eq(gguf_row_bytes(GGUF_DT_Q8_0, 64), 68);
    ck_assert_uint_eq(gguf_row_bytes(GGUF_DT_Q8_0, 33), 0);
    enum gguf_dtype d;
    ck_assert_int_eq(gguf_dtype_parse("Q8_0", &d), 0);
    ck_assert_int_eq(d, GGUF_DT_Q8_0);
    ck_assert_int_eq(gguf_dtype_parse("q4_k", &d), -EINVAL);
}
END_TEST

START_TEST(test_f16_bf16_conversion)
{
    /* every finite f16 survives f16 -> f32 -> f16 */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gguf_f16_to_f32((uint16_t)h);
        uint16_t back = gguf_f32_to_f16(f);
        if (isnan(f) ? !isnan(gguf_f16_to_f32(back)) : back != h) /* no ck_assert: hot */
            ck_abort_msg("f16 0x%04x -> %g -> 0x%04x", h, (double)f, back);
    }
    ck_assert_float_eq(gguf_f16_to_f32(0x3c00), 1.0f);
    ck_assert_float_eq(gguf_f16_to_f32(0xc000), -2.0f);
    ck_assert_float_eq(gguf_f16_to_f32(0x0001), 5.9604644775390625e-8f); /* smallest subnormal */
    ck_assert_uint_eq(gguf_f32_to_f16(65504.0f), 0x7bff);                 /* max finite */
    ck_assert_uint_eq(gguf_f32_to_f16(65520.0f), 0x7c00);                 /* rounds to inf */
    ck_assert_uint_eq(gguf_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);       /* tie -> even */
    ck_assert_uint_eq(gguf_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);       /* tie -> even */
    ck_assert_uint_eq(gguf_f32_to_f16(1e-9f), 0x0000);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gguf_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && gguf_f32_to_bf16(f) != h)
            ck_abort_msg("bf16 0x%04x -> %g -> 0x%04x", h, (double)f, gguf_f32_to_bf16(f));
    }
    ck_assert_uint_eq(gguf_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie -> even */
}
END_TEST

START_TEST(test_quant_roundtrip)
{
    float x[256], y[256];
    uint8_t q[256 * 4];
    for (int i = 0; i < 256; i++)
        x[i] = sinf((float)i * 0.37f) * (i % 32 == 5 ? 3.0f : 1.0f);
    ck_assert_int_eq(gguf_quant_row(GGUF_DT_Q8_0, x, q, 256), 0);
    ck_assert_int_eq(gguf_dequant_row(GGUF_DT_Q8_0, q, y, 256), 0);
    for (int b = 0; b < 8; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        for (int j = 0; j < 32; j++) /* half a quantization step, plus the f16 scale error */
            ck_assert_float_le(fabsf(y[b * 32 + j] - x[b * 32 + j]), amax / 127 * 0.5f + amax * 1e-3f);
    }
    ck_assert_int_eq(gguf_quant_row(GGUF_DT_F16, x, q, 256), 0);
    ck_assert_int_eq(gguf_dequant_row(GGUF_DT_F16, q, y, 256), 0);
    for (int i = 0; i < 256; i++)
        ck_assert_float_le(fabsf(y[i] - x[i]), fabsf(x[i]) * 1e-3f);
    ck_assert_int_eq(gguf_quant_row(GGUF_DT_BF16, x, q, 256), 0);
    ck_assert_int_eq(gguf_dequant_row(GGUF_DT_BF16, q, y, 256), 0);
    for (int i = 0; i < 256; i++)
        ck_assert_float_le(fabsf(y[i] - x[i]), fabsf(x[i]) * 4e-3f);
    y[0] = 42.0f;
    ck_assert_int_eq(gguf_dequant_row(GGUF_DT_Q4_K, q, y, 256), -EINVAL);
    ck_assert_int_eq(gguf_dequant_row(GGUF_DT_Q8_0, q, y, 31), -EINVAL);
    ck_assert_float_eq(y[0], 42.0f);
}
END_TEST

START_TEST(test_mini_valid_and_gqa)
{
    char err[GGUF_ERR_LEN];
    struct mini m = MINI;
    ck_assert_msg(mini_check(&m, err) == 0, "%s", err);
    m.tied = true;
    ck_assert_msg(mini_check(&m, err) == 0, "%s", err);
    m = MINI;
    m.wtype = GGUF_DT_Q8_0;
    ck_assert_msg(mini_check(&m, err) == 0, "%s", err);
    m.wtype = GGUF_DT_BF16;
    ck_assert_msg(mini_check(&m, err) == 0, "%s", err);
}
END_TEST

START_TEST(test_mini_faults)
{
    char err[GGUF_ERR_LEN];
    struct mini m = MINI;

    m.skip = "blk.1.ffn_up.weight";
    ck_assert_int_eq(mini_check(&m, err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "'mini.gguf'"));
    ck_assert_ptr_nonnull(strstr(err, "tensor 'blk.1.ffn_up.weight' is missing"));

    m = MINI;
    m.bad_shape = "blk.0.attn_k.weight";
    ck_assert_int_eq(mini_check(&m, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "tensor 'blk.0.attn_k.weight' has shape {32, 17}, "
                                      "expected {32, 16}"));

    m = MINI;
    m.wtype = GGUF_DT_Q4_K; /* rows of 32 are not a Q4_K block multiple: use Q4_0 too */
    m.embd = 256, m.ff = 256;
    ck_assert_int_eq(mini_check(&m, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "has type Q4_K, which kvd does not support"));
    m.wtype = GGUF_DT_Q4_0;
    ck_assert_int_eq(mini_check(&m, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "token_embd.weight' has type Q4_0"));

    m = MINI;
    m.arch = "qwen2";
    ck_assert_int_eq(mini_check(&m, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "architecture 'qwen2' is not supported"));

    m = MINI;
    m.kv_heads = 3; /* does not divide 4 */
    ck_assert_int_eq(mini_check(&m, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "head_count_kv 3"));

    m = MINI; /* more tokenizer tokens than embedding rows */
    uint8_t *buf;
    size_t len;
    struct gguf_file g;
    struct gguf_llama_hparams hp;
    {
        struct gguf_writer w;
        const char *toks[41];
        for (int i = 0; i < 41; i++)
            toks[i] = "t";
        gguf_writer_init(&w);
        gguf_writer_str(&w, "general.architecture", "llama");
        gguf_writer_u32(&w, "llama.context_length", 128);
        gguf_writer_u32(&w, "llama.embedding_length", 32);
        gguf_writer_u32(&w, "llama.block_count", 1);
        gguf_writer_u32(&w, "llama.feed_forward_length", 64);
        gguf_writer_u32(&w, "llama.attention.head_count", 4);
        gguf_writer_u32(&w, "llama.vocab_size", 40);
        gguf_writer_arr_str(&w, "tokenizer.ggml.tokens", toks, NULL, 41);
        ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
        gguf_writer_release(&w);
        ck_assert_int_eq(gguf_open_mem(&g, buf, len, "mini.gguf", err), 0);
        ck_assert_int_eq(gguf_llama_hparams(&g, &hp, err), 0);
        ck_assert_int_eq(gguf_llama_validate(&g, &hp, err), KVD_EMODEL);
        ck_assert_ptr_nonnull(strstr(err, "41 tokens but the model only 40"));
        gguf_close(&g);
        free(buf);
    }

    m = MINI;
    m.skip = "output_norm.weight";
    ck_assert_int_eq(mini_check(&m, err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "output_norm.weight"));
}
END_TEST

START_TEST(test_truncated_everywhere)
{
    char err[GGUF_ERR_LEN];
    uint8_t *buf;
    size_t len;
    struct mini m = MINI;
    m.layers = 1, m.embd = 8, m.heads = 2, m.kv_heads = 1, m.ff = 8, m.vocab = 4;
    mini_build(&m, &buf, &len);
    ck_assert_int_eq(open_buf(buf, len, err), 0);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size: ASan sees any overread */
        memcpy(copy, buf, cut);
        err[0] = '\0';
        ck_assert_int_eq(open_buf(copy, cut, err), KVD_EMODEL);
        ck_assert_msg(strstr(err, "'bad.gguf'") != NULL, "cut %zu: %s", cut, err);
        free(copy);
    }
    free(buf);
}
END_TEST

START_TEST(test_truncated_real_file)
{
    char path[512], err[GGUF_ERR_LEN];
    FILE *f = fopen(src_path("models/stories260K.gguf", path, sizeof(path)), "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t buf[1185376];
    ck_assert_uint_eq(fread(buf, 1, sizeof(buf), f), sizeof(buf));
    fclose(f);
    /* every cut in the header/metadata/tensor-info region, then every 997 bytes */
    for (size_t cut = 0; cut < sizeof(buf); cut += cut < 16000 ? 1 : 997) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        ck_assert_int_eq(open_buf(copy, cut, err), KVD_EMODEL);
        free(copy);
    }
    /* a truncated file on disk: the error names the path and says truncated/past end */
    char tp[300];
    snprintf(tp, sizeof(tp), "%s/cut.gguf", g_tmp);
    f = fopen(tp, "wb");
    fwrite(buf, 1, 600000, f);
    fclose(f);
    struct gguf_file g;
    ck_assert_int_eq(gguf_open(&g, tp, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, tp));
    ck_assert_ptr_nonnull(strstr(err, "past the end of the file"));
}
END_TEST

START_TEST(test_header_faults)
{
    char err[GGUF_ERR_LEN];
    uint8_t *buf;
    size_t len;
    uint64_t big = UINT64_MAX / 2;
    mini_build(&MINI, &buf, &len);

    buf[0] = 'X';
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "not a GGUF file"));
    buf[0] = 'G';

    uint32_t v = 1;
    memcpy(buf + 4, &v, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "version 1 is not supported"));
    v = 2; /* v2 has v3's layout (v3 only added big-endian files): accepted */
    memcpy(buf + 4, &v, 4);
    ck_assert_msg(open_buf(buf, len, err) == 0, "%s", err);
    v = 4;
    memcpy(buf + 4, &v, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    v = 0x03000000; /* a big-endian v3 */
    memcpy(buf + 4, &v, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    v = 3;
    memcpy(buf + 4, &v, 4);

    uint64_t saved;
    memcpy(&saved, buf + 8, 8);
    memcpy(buf + 8, &big, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "tensor count"));
    memcpy(buf + 8, &saved, 8);
    memcpy(&saved, buf + 16, 8);
    memcpy(buf + 16, &big, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "metadata count"));
    memcpy(buf + 16, &saved, 8);

    /* first key's length absurd */
    memcpy(&saved, buf + 24, 8);
    memcpy(buf + 24, &big, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "over the limit"));
    memcpy(buf + 24, &saved, 8);

    /* first value type unknown: key "general.architecture" (20 bytes) at 32 */
    uint32_t ty;
    memcpy(&ty, buf + 52, 4);
    ck_assert_uint_eq(ty, GGUF_VT_STRING);
    uint32_t bad = 99;
    memcpy(buf + 52, &bad, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "unknown value type 99"));
    memcpy(buf + 52, &ty, 4);
    /* its string length absurd */
    memcpy(&saved, buf + 56, 8);
    memcpy(buf + 56, &big, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    memcpy(buf + 56, &saved, 8);
    ck_assert_int_eq(open_buf(buf, len, err), 0); /* all restored */
    free(buf);
}
END_TEST

START_TEST(test_tensor_info_faults)
{
    char err[GGUF_ERR_LEN];
    uint8_t *buf;
    size_t len;
    mini_build(&MINI, &buf, &len);
    const char *nm = "blk.0.attn_q.weight";
    size_t dims = tensor_info_field(buf, len, nm, 0), type = tensor_info_field(buf, len, nm, 1);
    size_t off = tensor_info_field(buf, len, nm, 2);
    uint64_t o, x;
    uint32_t t, y;

    memcpy(&o, buf + off, 8);
    x = o + 4; /* not a multiple of 32 */
    memcpy(buf + off, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "offset"));
    ck_assert_ptr_nonnull(strstr(err, "alignment"));
    x = ((uint64_t)len + 31) / 32 * 32; /* aligned, past the end */
    memcpy(buf + off, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "past the end"));
    x = UINT64_MAX - 31; /* aligned, overflows when added */
    memcpy(buf + off, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    x = 0; /* overlaps token_embd */
    memcpy(buf + off, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "overlap"));
    memcpy(buf + off, &o, 8);

    memcpy(&t, buf + type, 4);
    y = 4; /* a hole in ggml's numbering */
    memcpy(buf + type, &y, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "unknown type id 4"));
    y = 1000;
    memcpy(buf + type, &y, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    memcpy(buf + type, &t, 4);

    memcpy(&o, buf + dims, 8);
    x = 0;
    memcpy(buf + dims, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    x = UINT64_MAX;
    memcpy(buf + dims, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    x = 1ull << 40; /* huge but no overflow: must not fit the file */
    memcpy(buf + dims, &x, 8);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    memcpy(buf + dims, &o, 8);

    uint32_t nd;
    memcpy(&nd, buf + dims - 4, 4);
    y = 5;
    memcpy(buf + dims - 4, &y, 4);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "5 dimensions"));
    memcpy(buf + dims - 4, &nd, 4);

    /* duplicate name: rename attn_q to attn_k (same length) */
    memcpy(buf + dims - 4 - strlen(nm) + strlen("blk.0.attn_"), "k", 1);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "appears twice"));
    free(buf);
}
END_TEST

START_TEST(test_metadata_faults)
{
    char err[GGUF_ERR_LEN];
    uint8_t *buf;
    size_t len;
    struct gguf_writer w;

    gguf_writer_init(&w); /* duplicate key */
    gguf_writer_u32(&w, "a.b", 1);
    gguf_writer_u32(&w, "a.b", 2);
    ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
    gguf_writer_release(&w);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "'a.b' appears twice"));
    free(buf);

    gguf_writer_init(&w); /* alignment not a power of two */
    gguf_writer_u32(&w, "general.alignment", 48);
    ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
    gguf_writer_release(&w);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "general.alignment is 48"));
    free(buf);

    gguf_writer_init(&w); /* array of arrays */
    uint8_t nested[12] = {GGUF_VT_ARRAY, 0, 0, 0, 0};
    gguf_writer_raw(&w, "x", GGUF_VT_ARRAY, nested, sizeof(nested));
    ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
    gguf_writer_release(&w);
    ck_assert_int_eq(open_buf(buf, len, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "element type 9"));
    free(buf);

    gguf_writer_init(&w); /* a metadata-only file is valid; u32 getter range checks */
    gguf_writer_raw(&w, "big", GGUF_VT_U64, &(uint64_t){1ull << 33}, 8);
    gguf_writer_i32(&w, "neg", -5);
    gguf_writer_f32(&w, "f", 0.5f);
    ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
    gguf_writer_release(&w);
    struct gguf_file g;
    ck_assert_int_eq(gguf_open_mem(&g, buf, len, "meta.gguf", err), 0);
    uint32_t u;
    int32_t i;
    ck_assert_int_eq(gguf_get_u32(&g, "big", &u, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "does not fit"));
    ck_assert_int_eq(gguf_get_u32(&g, "neg", &u, err), KVD_EMODEL);
    ck_assert_int_eq(gguf_get_i32(&g, "neg", &i, err), 0);
    ck_assert_int_eq(i, -5);
    struct gguf_llama_hparams hp;
    ck_assert_int_eq(gguf_llama_hparams(&g, &hp, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "general.architecture' is missing"));
    gguf_close(&g);
    free(buf);
}
END_TEST

START_TEST(test_open_errors)
{
    char err[GGUF_ERR_LEN], p[300];
    struct gguf_file g;
    ck_assert_int_eq(gguf_open(&g, "/nonexistent/x.gguf", err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.gguf"));
    ck_assert_int_eq(gguf_open(&g, g_tmp, err), KVD_EMODEL); /* a directory */
    snprintf(p, sizeof(p), "%s/empty.gguf", g_tmp);
    FILE *f = fopen(p, "wb");
    fclose(f);
    ck_assert_int_eq(gguf_open(&g, p, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "too short"));
    ck_assert_ptr_null(g.map);
}
END_TEST

START_TEST(test_rope_scaling)
{
    char err[GGUF_ERR_LEN];
    struct gguf_writer w;
    uint8_t *buf;
    size_t len;
    struct gguf_file g;
    struct gguf_llama_hparams hp;
    float inv[64];

    gguf_writer_init(&w);
    gguf_writer_str(&w, "general.architecture", "llama");
    gguf_writer_u32(&w, "llama.embedding_length", 1024);
    gguf_writer_u32(&w, "llama.block_count", 1);
    gguf_writer_u32(&w, "llama.attention.head_count", 8);
    gguf_writer_u32(&w, "llama.feed_forward_length", 64);
    gguf_writer_u32(&w, "llama.context_length", 131072);
    gguf_writer_u32(&w, "llama.vocab_size", 10);
    gguf_writer_f32(&w, "llama.rope.freq_base", 500000.0f);
    gguf_writer_str(&w, "llama.rope.scaling.type", "llama3");
    gguf_writer_f32(&w, "llama.rope.scaling.factor", 8.0f);
    gguf_writer_u32(&w, "llama.rope.scaling.original_context_length", 8192);
    ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
    gguf_writer_release(&w);
    ck_assert_int_eq(gguf_open_mem(&g, buf, len, "l3.gguf", err), 0);
    ck_assert_msg(gguf_llama_hparams(&g, &hp, err) == 0, "%s", err);
    ck_assert_uint_eq(hp.head_dim, 128);
    ck_assert_int_eq(hp.rope_scaling, GGUF_ROPE_SCALING_LLAMA3);
    gguf_llama_rope_inv_freq(&g, &hp, inv);
    for (int i = 0; i < 64; i++) {
        double f = pow(500000.0, -2.0 * i / 128), wl = 2 * M_PI / f;
        if (wl < 8192.0 / 4) /* high frequency: unchanged */
            ck_assert_double_eq_tol(inv[i], f, f * 1e-5);
        else if (wl > 8192.0 / 1) /* low frequency: divided by the factor */
            ck_assert_double_eq_tol(inv[i], f / 8, f * 1e-5);
        else /* in between: between the two */
            ck_assert(inv[i] <= f * 1.00001 && inv[i] >= f / 8 * 0.99999);
    }
    gguf_close(&g);
    free(buf);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stories260k);
    tcase_add_test(tc, test_metadata_getters);
    tcase_add_test(tc, test_dtype_tables);
    tcase_add_test(tc, test_f16_bf16_conversion);
    tcase_add_test(tc, test_quant_roundtrip);
    tcase_add_test(tc, test_mini_valid_and_gqa);
    tcase_add_test(tc, test_mini_faults);
    tcase_add_test(tc, test_truncated_everywhere);
    tcase_add_test(tc, test_truncated_real_file);
    tcase_add_test(tc, test_header_faults);
    tcase_add_test(tc, test_tensor_info_faults);
    tcase_add_test(tc, test_metadata_faults);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_rope_scaling);
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

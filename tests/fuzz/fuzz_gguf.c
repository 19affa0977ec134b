/* fuzz_gguf.c — fuzz target for the GGUF reader and everything that reads a model's
 * metadata through it (llama hparams and tensor checks, fingerprint, dequantization of a
 * row, the tokenizer). libFuzzer's entry point; tests/fuzz/fuzz_replay.c drives it in
 * ctest. Any input must give 0 or an error with a message, never a crash or an ASan/UBSan
 * report; an error without a message is a bug (abort). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/log.h"
#include "common/tok.h"

#define FUZZ_MAX_ROW 4096 /* elements dequantized per tensor */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise_kv(const struct gguf_file *g, const struct gguf_kv *kv)
{
    char err[GGUF_ERR_LEN];
    uint32_t u;
    uint64_t u64;
    int32_t i;
    float f;
    bool b;
    struct gguf_str s;
    struct gguf_arr a;
    gguf_get_u32(g, kv->key, &u, err);
    gguf_get_u64(g, kv->key, &u64, err);
    gguf_get_i32(g, kv->key, &i, err);
    gguf_get_f32(g, kv->key, &f, err);
    gguf_get_bool(g, kv->key, &b, err);
    if (gguf_get_str(g, kv->key, &s, err) == 0 && s.len)
        KVD_BUG_ON(s.p < (const char *)g->map || s.p + s.len > (const char *)g->map + g->size);
    if (gguf_get_arr(g, kv->key, GGUF_VT_STRING, &a, err) == 0 && a.n) {
        struct gguf_str first = gguf_arr_str(&a, 0), last = gguf_arr_str(&a, a.n - 1);
        KVD_BUG_ON(last.p + last.len > (const char *)g->map + g->size);
        (void)first;
    }
    if (gguf_get_arr(g, kv->key, GGUF_VT_I32, &a, err) == 0 && a.n)
        (void)gguf_arr_i32(&a, a.n - 1);
    if (gguf_get_arr(g, kv->key, GGUF_VT_F32, &a, err) == 0 && a.n)
        (void)gguf_arr_f32(&a, a.n - 1);
}

static void exercise_tok(const struct gguf_file *g)
{
    static const char text[] = "Once upon a time, caf\xc3\xa9 \xf0\x9f\x98\x80 123  \n\xff";
    char err[TOK_ERR_LEN], out[1024];
    int32_t ids[256];
    size_t n, len;
    struct tok t;
    if (tok_load(&t, g, err)) {
        KVD_BUG_ON(err[0] == '\0');
        return;
    }
    int rc = tok_encode(&t, text, sizeof(text) - 1, true, ids, 256, &n);
    KVD_BUG_ON(rc != 0 && rc != -ENOSPC);
    if (rc == 0) {
        for (size_t k = 0; k < n; k++)
            KVD_BUG_ON(ids[k] < 0 || (uint32_t)ids[k] >= t.n_vocab);
        rc = tok_decode(&t, ids, n, TOK_DECODE_STRIP_PREFIX_SPACE, out, sizeof(out), &len);
        KVD_BUG_ON(rc != 0 && rc != -ENOSPC);
    }
    static const char chat[] = "<s>[INST] hi </s><|eot_id|><|begin_of_text|>x<s";
    rc = tok_encode_ex(&t, chat, sizeof(chat) - 1, TOK_ENCODE_BOS | TOK_ENCODE_PARSE_SPECIAL,
                       ids, 256, &n);
    KVD_BUG_ON(rc != 0 && rc != -ENOSPC);
    for (size_t k = 0; rc == 0 && k < n; k++)
        KVD_BUG_ON(ids[k] < 0 || (uint32_t)ids[k] >= t.n_vocab);
    for (uint32_t id = 0; id < t.n_vocab && id < 4096; id++) {
        const char *p;
        KVD_BUG_ON(tok_piece(&t, (int32_t)id, &p, &len) != 0);
        (void)tok_is_eog(&t, (int32_t)id);
    }
    tok_release(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file g;
    struct gguf_llama_hparams hp;
    char err[GGUF_ERR_LEN] = "";
    static float row[FUZZ_MAX_ROW];

    if (gguf_open_mem(&g, data, size, "fuzz.gguf", err)) {
        KVD_BUG_ON(err[0] == '\0');
        return 0;
    }
    for (uint64_t k = 0; k < g.n_kv; k++)
        exercise_kv(&g, &g.kv[k]);
    for (uint64_t k = 0; k < g.n_tensors; k++) {
        const struct gguf_tensor *t = &g.tensors[k];
        KVD_BUG_ON((const uint8_t *)t->data + t->nbytes > g.map + g.size);
        KVD_BUG_ON(gguf_tensor_find(&g, t->name) != t);
        if (gguf_dtype_is_supported(t->type) && t->ne[0] <= FUZZ_MAX_ROW)
            KVD_BUG_ON(gguf_dequant_row(t->type, t->data, row, t->ne[0]) != 0);
    }
    if (gguf_llama_hparams(&g, &hp, err) == 0) {
        static float inv[GGUF_LLAMA_MAX_HEAD_DIM / 2];
        gguf_llama_rope_inv_freq(&g, &hp, inv);
        if (gguf_llama_validate(&g, &hp, err))
            KVD_BUG_ON(err[0] == '\0');
    } else {
        KVD_BUG_ON(err[0] == '\0');
    }
    KVD_BUG_ON(gguf_model_fingerprint(&g) == 0);
    exercise_tok(&g);
    gguf_close(&g);
    return 0;
}

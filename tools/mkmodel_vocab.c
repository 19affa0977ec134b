/* mkmodel_vocab.c — the vocabularies kvd-mkmodel can write (contract: mkmodel_vocab.h). */
#include "tools/mkmodel_vocab.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/tok.h"

#define MK_UNUSED_SCORE (-1e9f) /* padding tokens never win a merge */
#define SPM_SPACE "\xe2\x96\x81"  /* U+2581, SentencePiece's space */

static void seterr(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, GGUF_ERR_LEN, fmt, ap);
    va_end(ap);
}

int mk_vocab_kind_parse(const char *s, enum mk_vocab_kind *out)
{
    if (!strcmp(s, "spm"))
        *out = MK_VOCAB_SPM;
    else if (!strcmp(s, "bytes"))
        *out = MK_VOCAB_BYTES;
    else if (!strcmp(s, "gpt2"))
        *out = MK_VOCAB_GPT2;
    else
        return -EINVAL;
    return 0;
}

void mk_vocab_release(struct mk_vocab *v)
{
    for (uint32_t i = 0; v->tokens && i < v->n; i++)
        free(v->tokens[i]);
    for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof(*v));
}

static int alloc_n(struct mk_vocab *v, uint32_t n)
{
    v->n = n;
    v->tokens = calloc(n, sizeof(*v->tokens));
    v->scores = calloc(n, sizeof(*v->scores));
    v->types = calloc(n, sizeof(*v->types));
    return v->tokens && v->scores && v->types ? 0 : -ENOMEM;
}

static int set_tok(struct mk_vocab *v, uint32_t i, const char *s, size_t len, float score,
                   int32_t type)
{
    v->tokens[i] = strndup(s, len);
    v->scores[i] = score;
    v->types[i] = type;
    return v->tokens[i] ? 0 : -ENOMEM;
}

/* Fills ids [from, n) with <unused_N>. */
static int pad(struct mk_vocab *v, uint32_t from)
{
    char buf[32];
    for (uint32_t i = from; i < v->n; i++) {
        int k = snprintf(buf, sizeof(buf), "<unused_%u>", i);
        if (set_tok(v, i, buf, (size_t)k, MK_UNUSED_SCORE, TOK_TYPE_UNUSED))
            return -ENOMEM;
    }
    return 0;
}

/* A truncated vocabulary must keep the space piece U+2581: without it every space would
 * fall back to its three bytes, which decode as the literal U+2581, not as ' '. It takes
 * the last slot. */
static int keep_space_token(struct mk_vocab *v, const struct gguf_arr *toks,
                            const struct gguf_arr *scores)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (!strcmp(v->tokens[i], SPM_SPACE))
            return 0;
    for (uint64_t i = 0; i < toks->n; i++)
        if (gguf_str_eq(gguf_arr_str(toks, i), SPM_SPACE)) {
            free(v->tokens[v->n - 1]);
            return set_tok(v, v->n - 1, SPM_SPACE, strlen(SPM_SPACE), gguf_arr_f32(scores, i),
                           TOK_TYPE_NORMAL);
        }
    return 0;
}

static int build_spm(struct mk_vocab *v, const char *from, uint32_t want, char *err)
{
    struct gguf_file g;
    struct gguf_arr toks, scores, types;
    uint32_t id;
    int rc = gguf_open(&g, from, err);
    if (rc)
        return rc;
    if (gguf_get_arr(&g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, err) ||
        gguf_get_arr(&g, "tokenizer.ggml.scores", GGUF_VT_F32, &scores, err) ||
        gguf_get_arr(&g, "tokenizer.ggml.token_type", GGUF_VT_I32, &types, err) ||
        scores.n != toks.n || types.n != toks.n) {
        seterr(err, "'%s' has no complete SentencePiece vocabulary", from);
        rc = KVD_EMODEL;
        goto out_close;
    }
    if (want == 0)
        want = (uint32_t)toks.n;
    if (want < MK_SPM_MIN_VOCAB) {
        seterr(err, "--vocab %u is below %u (specials + byte tokens); use --vocab-kind bytes "
                    "with a larger vocab", want, MK_SPM_MIN_VOCAB);
        rc = -EINVAL;
        goto out_close;
    }
    if ((rc = alloc_n(v, want)))
        goto out_close;
    v->model = "llama";
    for (uint32_t i = 0; i < want && i < toks.n; i++) {
        struct gguf_str s = gguf_arr_str(&toks, i);
        if ((rc = set_tok(v, i, s.p, s.len, gguf_arr_f32(&scores, i), gguf_arr_i32(&types, i))))
            goto out_close;
    }
    if ((rc = pad(v, (uint32_t)(toks.n < want ? toks.n : want))))
        goto out_close;
    if ((rc = keep_space_token(v, &toks, &scores)))
        goto out_close;
    v->bos = gguf_get_u32(&g, "tokenizer.ggml.bos_token_id", &id, NULL) == 0 ? (int32_t)id : -1;
    v->eos = gguf_get_u32(&g, "tokenizer.ggml.eos_token_id", &id, NULL) == 0 ? (int32_t)id : -1;
    v->unk = gguf_get_u32(&g, "tokenizer.ggml.unknown_token_id", &id, NULL) == 0 ? (int32_t)id
                                                                                 : -1;
out_close:
    gguf_close(&g);
    return rc;
}

static int build_bytes(struct mk_vocab *v, uint32_t want, char *err)
{
    const uint32_t base = 3 + 256, n_chars = 0x7e - 0x20 + 1; /* space .. '~' */
    char buf[8];
    int rc;
    if (want == 0)
        want = base + n_chars;
    if (want < MK_SPM_MIN_VOCAB) {
        seterr(err, "--vocab %u is below %u (specials + byte tokens)", want, MK_SPM_MIN_VOCAB);
        return -EINVAL;
    }
    if ((rc = alloc_n(v, want)))
        return rc;
    v->model = "llama";
    v->unk = 0, v->bos = 1, v->eos = 2;
    if ((rc = set_tok(v, 0, "<unk>", 5, 0, TOK_TYPE_UNKNOWN)) ||
        (rc = set_tok(v, 1, "<s>", 3, 0, TOK_TYPE_CONTROL)) ||
        (rc = set_tok(v, 2, "</s>", 4, 0, TOK_TYPE_CONTROL)))
        return rc;
    for (uint32_t b = 0; b < 256; b++) {
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        if ((rc = set_tok(v, 3 + b, buf, 6, 0, TOK_TYPE_BYTE)))
            return rc;
    }
    uint32_t i = base;
    for (uint32_t c = 0x20; c <= 0x7e && i < want; c++, i++) {
        const char *s = c == ' ' ? SPM_SPACE : (buf[0] = (char)c, buf[1] = 0, buf);
        if ((rc = set_tok(v, i, s, strlen(s), -(float)(c - 0x20), TOK_TYPE_NORMAL)))
            return rc;
    }
    return pad(v, i);
}

/* A few merges of common English pairs in GPT-2's symbols (Ġ = space, Ċ = newline);
 * earlier = higher priority. Each result must be a token (added in this order). */
static const char *const gpt2_merges[][2] = {
    {"Ġ", "t"}, {"h", "e"},  {"Ġt", "he"}, {"i", "n"},   {"Ġ", "a"},  {"e", "r"},
    {"o", "n"}, {"Ġ", "s"},  {"r", "e"},   {"a", "n"},   {"Ġ", "w"},  {"o", "r"},
    {"in", "g"}, {"e", "d"}, {"Ġ", "o"},   {"a", "s"},   {"Ġw", "as"}, {"Ġ", "Ġ"},
    {"Ġ", "l"}, {"Ġl", "i"}, {"Ġli", "t"},
    {"Ã", "©"}, {"Ċ", "Ċ"},  {"Ġ", "c"},   {"a", "t"},   {"Ġc", "at"},
};

static int build_gpt2(struct mk_vocab *v, uint32_t want, char *err)
{
    const uint32_t n_m = sizeof(gpt2_merges) / sizeof(gpt2_merges[0]);
    const uint32_t base = 256 + n_m + 2;
    char buf[16];
    int rc;
    if (want == 0)
        want = base;
    if (want < base) {
        seterr(err, "--vocab %u is below %u for the gpt2 vocabulary", want, base);
        return -EINVAL;
    }
    if ((rc = alloc_n(v, want)))
        return rc;
    v->model = "gpt2";
    v->unk = -1;
    v->merges = calloc(n_m, sizeof(*v->merges));
    if (!v->merges)
        return -ENOMEM;
    for (uint32_t b = 0; b < 256; b++) {
        size_t k = tok_gpt2_byte_utf8((uint8_t)b, buf);
        if ((rc = set_tok(v, b, buf, k, 0, TOK_TYPE_NORMAL)))
            return rc;
    }
    uint32_t i = 256;
    for (uint32_t m = 0; m < n_m; m++) {
        char s[64];
        int k = snprintf(s, sizeof(s), "%s%s", gpt2_merges[m][0], gpt2_merges[m][1]);
        if ((rc = set_tok(v, i++, s, (size_t)k, 0, TOK_TYPE_NORMAL)))
            return rc;
        snprintf(s, sizeof(s), "%s %s", gpt2_merges[m][0], gpt2_merges[m][1]);
        if (!(v->merges[m] = strdup(s)))
            return -ENOMEM;
        v->n_merges = m + 1;
    }
    v->bos = (int32_t)i;
    if ((rc = set_tok(v, i++, "<|begin_of_text|>", 17, 0, TOK_TYPE_CONTROL)))
        return rc;
    v->eos = (int32_t)i;
    if ((rc = set_tok(v, i++, "<|end_of_text|>", 15, 0, TOK_TYPE_CONTROL)))
        return rc;
    return pad(v, i);
}

int mk_vocab_build(struct mk_vocab *v, enum mk_vocab_kind kind, const char *from, uint32_t want_n,
                   char err[GGUF_ERR_LEN])
{
    int rc;
    memset(v, 0, sizeof(*v));
    v->bos = v->eos = v->unk = -1;
    if (kind == MK_VOCAB_SPM)
        rc = build_spm(v, from, want_n, err);
    else if (kind == MK_VOCAB_BYTES)
        rc = build_bytes(v, want_n, err);
    else
        rc = build_gpt2(v, want_n, err);
    if (rc == -ENOMEM)
        seterr(err, "out of memory");
    if (rc)
        mk_vocab_release(v);
    return rc;
}

void mk_vocab_write(const struct mk_vocab *v, struct gguf_writer *w)
{
    gguf_writer_str(w, "tokenizer.ggml.model", v->model);
    gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, NULL, v->n);
    gguf_writer_arr_f32(w, "tokenizer.ggml.scores", v->scores, v->n);
    gguf_writer_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n);
    if (v->n_merges) {
        gguf_writer_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL,
                            v->n_merges);
        gguf_writer_str(w, "tokenizer.ggml.pre", "gpt2");
    }
    if (v->bos >= 0)
        gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0)
        gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0)
        gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", true);
}

/* tok.c — tokenizer tables from GGUF metadata, decoding, UTF-8 helpers (contract: tok.h).
 * The encoders live in tok_spm.c (SentencePiece) and tok_bpe.c (byte-level BPE). */
#include "common/tok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gguf_impl.h"
#include "common/tok_impl.h"

#define TOK_SPM_SPACE "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's space */
#define TOK_SPM_SPACE_LEN 3
#define TOK_NO_ID UINT32_MAX         /* how GGUF files spell "no such token" */

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

int32_t tok_lookup(const struct tok *t, const char *s, size_t len)
{
    const struct tok_impl *im = t->impl;
    uint32_t mask = im->hcap - 1;
    for (uint32_t i = (uint32_t)fnv1a(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = im->htab[i];
        if (id < 0)
            return -1;
        if (im->vocab_len[id] == len && !memcmp(im->vocab + im->vocab_off[id], s, len))
            return id;
    }
}

size_t tok_utf8_seq_len(const char *s, size_t avail)
{
    uint8_t c = (uint8_t)s[0];
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
    if (n > avail)
        return 1;
    for (size_t i = 1; i < n; i++)
        if (((uint8_t)s[i] & 0xc0) != 0x80)
            return 1;
    return n;
}

size_t tok_utf8_complete_len(const char *s, size_t len)
{
    /* find the last lead byte within the final 4 bytes */
    for (size_t back = 1; back <= 4 && back <= len; back++) {
        uint8_t c = (uint8_t)s[len - back];
        if ((c & 0xc0) == 0x80)
            continue; /* continuation byte: keep looking for its lead */
        size_t need = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

size_t tok_gpt2_byte_utf8(uint8_t b, char out[4])
{
    /* GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to
     * 256 + their rank among the non-printable ones. */
    uint32_t cp;
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae) {
        cp = b;
    } else {
        uint32_t rank = 0;
        for (uint32_t x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae))
                rank++;
        cp = 256 + rank;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static int read_id(const struct gguf_file *g, const char *key, uint32_t n_vocab, bool strict,
                   int32_t *out, char *err)
{
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, err);
    *out = -1;
    if (rc == -ENOENT)
        return 0;
    if (rc) /* a negative i32 -1 is also "none" */
        return gguf_get_i32(g, key, out, NULL) == 0 && *out == -1 ? 0 : rc;
    if (v == TOK_NO_ID)
        return 0;
    if (v >= n_vocab) {
        if (!strict)
            return 0;
        gguf_seterr(err, g->path, "%s = %u is outside the vocabulary (%u tokens)", key, v, n_vocab);
        return KVD_EMODEL;
    }
    *out = (int32_t)v;
    return 0;
}

static int read_flag(const struct gguf_file *g, const char *key, bool dflt, bool *out, char *err)
{
    int rc = gguf_get_bool(g, key, out, err);
    if (rc == -ENOENT) {
        *out = dflt;
        return 0;
    }
    return rc;
}

/* Decoded bytes of token i into out; returns the length. */
static size_t decode_piece(const struct tok *t, uint32_t i, char *out)
{
    const struct tok_impl *im = t->impl;
    const char *s = im->vocab + im->vocab_off[i];
    size_t len = im->vocab_len[i], n = 0;
    unsigned b;

    switch (im->types[i]) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN:
    case TOK_TYPE_UNUSED:
        return 0;
    case TOK_TYPE_BYTE:
        if (len == 6 && sscanf(s, "<0x%2X>", &b) == 1) {
            out[0] = (char)b;
            return 1;
        }
        break;
    case TOK_TYPE_USER_DEFINED:
        memcpy(out, s, len);
        return len;
    default:
        break;
    }
    if (t->kind == TOK_KIND_BPE)
        return tok_bpe_unmap(s, len, out);
    for (size_t k = 0; k < len;) {
        if (len - k >= TOK_SPM_SPACE_LEN && !memcmp(s + k, TOK_SPM_SPACE, TOK_SPM_SPACE_LEN)) {
            out[n++] = ' ';
            k += TOK_SPM_SPACE_LEN;
        } else {
            out[n++] = s[k++];
        }
    }
    return n;
}

static int load_vocab(struct tok *t, const struct gguf_file *g, char *err)
{
    struct tok_impl *im = t->impl;
    struct gguf_arr toks, scores = {0}, types = {0};
    uint64_t total = 0;
    int rc;

    if ((rc = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, err))) {
        if (rc == -ENOENT)
            gguf_seterr(err, g->path, "metadata 'tokenizer.ggml.tokens' is missing");
        return KVD_EMODEL;
    }
    if (toks.n == 0 || toks.n > TOK_MAX_VOCAB) {
        gguf_seterr(err, g->path, "vocabulary has %llu tokens (1..%u allowed)",
               (unsigned long long)toks.n, TOK_MAX_VOCAB);
        return KVD_EMODEL;
    }
    t->n_vocab = (uint32_t)toks.n;
    rc = gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_VT_F32, &scores, err);
    if (rc && rc != -ENOENT)
        return rc;
    if (!rc && scores.n != toks.n) {
        gguf_seterr(err, g->path, "tokenizer.ggml.scores has %llu entries for %u tokens",
               (unsigned long long)scores.n, t->n_vocab);
        return KVD_EMODEL;
    }
    rc = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_I32, &types, err);
    if (rc && rc != -ENOENT)
        return rc;
    if (!rc && types.n != toks.n) {
        gguf_seterr(err, g->path, "tokenizer.ggml.token_type has %llu entries for %u tokens",
               (unsigned long long)types.n, t->n_vocab);
        return KVD_EMODEL;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        struct gguf_str s = gguf_arr_str(&toks, i);
        if (s.len > TOK_MAX_PIECE_LEN || memchr(s.p, '\0', s.len)) {
            gguf_seterr(err, g->path, "token %u is longer than %d bytes or contains NUL", i,
                   TOK_MAX_PIECE_LEN);
            return KVD_EMODEL;
        }
        total += s.len + 1;
    }
    im->vocab = malloc(total);
    im->dec = malloc(total);
    im->vocab_off = calloc(t->n_vocab, sizeof(*im->vocab_off));
    im->vocab_len = calloc(t->n_vocab, sizeof(*im->vocab_len));
    im->dec_off = calloc(t->n_vocab, sizeof(*im->dec_off));
    im->dec_len = calloc(t->n_vocab, sizeof(*im->dec_len));
    im->scores = calloc(t->n_vocab, sizeof(*im->scores));
    im->types = calloc(t->n_vocab, sizeof(*im->types));
    for (im->hcap = 16; im->hcap < 2 * t->n_vocab; im->hcap *= 2)
        ;
    im->htab = malloc(im->hcap * sizeof(*im->htab));
    if (!im->vocab || !im->dec || !im->vocab_off || !im->vocab_len || !im->dec_off ||
        !im->dec_len || !im->scores || !im->types || !im->htab) {
        gguf_seterr(err, g->path, "out of memory for the vocabulary");
        return -ENOMEM;
    }
    memset(im->htab, 0xff, im->hcap * sizeof(*im->htab));
    uint64_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        struct gguf_str s = gguf_arr_str(&toks, i);
        memcpy(im->vocab + off, s.p, s.len);
        im->vocab[off + s.len] = '\0';
        im->vocab_off[i] = off;
        im->vocab_len[i] = (uint32_t)s.len;
        off += s.len + 1;
        im->scores[i] = scores.n ? gguf_arr_f32(&scores, i) : 0.0f;
        int32_t ty = types.n ? gguf_arr_i32(&types, i) : TOK_TYPE_NORMAL;
        im->types[i] = (uint8_t)(ty >= TOK_TYPE_UNDEFINED && ty <= TOK_TYPE_BYTE ? ty
                                                                               : TOK_TYPE_NORMAL);
        if (tok_lookup(t, s.p, s.len) < 0) { /* duplicates keep the lowest id */
            uint32_t mask = im->hcap - 1, h = (uint32_t)fnv1a(s.p, s.len) & mask;
            while (im->htab[h] >= 0)
                h = (h + 1) & mask;
            im->htab[h] = (int32_t)i;
        }
    }
    return 0;
}

static int load_specials(struct tok *t, const struct gguf_file *g, char *err)
{
    int32_t sep;
    bool spm = t->kind == TOK_KIND_SPM;
    int rc;
    if ((rc = read_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, true, &t->bos, err)) ||
        (rc = read_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, true, &t->eos, err)) ||
        (rc = read_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, true, &t->eot, err)) ||
        (rc = read_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, true, &t->unk, err)) ||
        (rc = read_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab, false, &t->pad, err)) ||
        (rc = read_id(g, "tokenizer.ggml.seperator_token_id", t->n_vocab, false, &sep, err)) ||
        (rc = read_flag(g, "tokenizer.ggml.add_bos_token", spm, &t->add_bos, err)) ||
        (rc = read_flag(g, "tokenizer.ggml.add_space_prefix", spm, &t->add_space_prefix, err)))
        return rc;
    return 0;
}

static int load_spm(struct tok *t, const struct gguf_file *g, char *err)
{
    struct tok_impl *im = t->impl;
    char buf[8];
    int missing = 0;
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        im->byte_tok[b] = tok_lookup(t, buf, 6);
        missing += im->byte_tok[b] < 0;
    }
    if (missing && t->unk < 0) {
        gguf_seterr(err, g->path, "SentencePiece vocabulary lacks %d byte tokens <0xNN> and has no "
                             "unknown token: some text could not be encoded", missing);
        return KVD_EMODEL;
    }
    return 0;
}

static void decode_all(struct tok *t)
{
    struct tok_impl *im = t->impl;
    uint64_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        im->dec_off[i] = off;
        im->dec_len[i] = (uint32_t)decode_piece(t, i, im->dec + off);
        off += im->dec_len[i];
    }
}

static int cmp_len_desc(const void *a, const void *b, void *ctx)
{
    const struct tok_impl *im = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = im->vocab_len[x], ly = im->vocab_len[y];
    if (lx != ly)
        return lx < ly ? 1 : -1;
    return (x > y) - (x < y);
}

/* The CONTROL / USER_DEFINED tokens TOK_ENCODE_PARSE_SPECIAL looks for. */
static int load_special_index(struct tok *t, const struct gguf_file *g, char *err)
{
    struct tok_impl *im = t->impl;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        n += (im->types[i] == TOK_TYPE_CONTROL || im->types[i] == TOK_TYPE_USER_DEFINED) &&
             im->vocab_len[i] > 0;
    im->specials = calloc(n ? n : 1, sizeof(*im->specials));
    if (!im->specials) {
        gguf_seterr(err, g->path, "out of memory");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if ((im->types[i] == TOK_TYPE_CONTROL || im->types[i] == TOK_TYPE_USER_DEFINED) &&
            im->vocab_len[i] > 0) {
            uint8_t c = (uint8_t)im->vocab[im->vocab_off[i]];
            im->specials[im->n_specials++] = (int32_t)i;
            im->special_first[c / 8] |= (uint8_t)(1u << (c % 8));
        }
    qsort_r(im->specials, im->n_specials, sizeof(*im->specials), cmp_len_desc, im);
    return 0;
}

int tok_load(struct tok *t, const struct gguf_file *g, char err[TOK_ERR_LEN])
{
    struct gguf_str model;
    int rc;

    memset(t, 0, sizeof(*t));
    t->bos = t->eos = t->eot = t->unk = t->pad = -1;
    if ((rc = gguf_get_str(g, "tokenizer.ggml.model", &model, err))) {
        if (rc == -ENOENT)
            gguf_seterr(err, g->path, "metadata 'tokenizer.ggml.model' is missing: no tokenizer");
        return KVD_EMODEL;
    }
    if (gguf_str_eq(model, "llama")) {
        t->kind = TOK_KIND_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->kind = TOK_KIND_BPE;
    } else {
        gguf_seterr(err, g->path, "tokenizer '%.*s' is not supported (llama, gpt2)",
               (int)(model.len > 32 ? 32 : model.len), model.p);
        return KVD_EMODEL;
    }
    t->impl = calloc(1, sizeof(*t->impl));
    if (!t->impl) {
        gguf_seterr(err, g->path, "out of memory");
        return -ENOMEM;
    }
    if ((rc = load_vocab(t, g, err)) || (rc = load_specials(t, g, err)))
        goto out_release;
    rc = t->kind == TOK_KIND_SPM ? load_spm(t, g, err) : tok_bpe_load(t, g, err);
    if (rc)
        goto out_release;
    if ((rc = load_special_index(t, g, err)))
        goto out_release;
    decode_all(t);
    return 0;

out_release:
    tok_release(t);
    return rc;
}

void tok_release(struct tok *t)
{
    struct tok_impl *im = t->impl;
    if (im) {
        tok_bpe_release(im);
        free(im->vocab);
        free(im->vocab_off);
        free(im->vocab_len);
        free(im->dec);
        free(im->dec_off);
        free(im->dec_len);
        free(im->scores);
        free(im->types);
        free(im->htab);
        free(im->specials);
        free(im);
    }
    memset(t, 0, sizeof(*t));
    t->bos = t->eos = t->eot = t->unk = t->pad = -1;
}

static int encode_fragment(const struct tok *t, const char *text, size_t len, bool after_special,
                           struct tok_sink *k)
{
    if (len == 0)
        return 0;
    if (t->kind == TOK_KIND_SPM)
        return tok_spm_encode(t, text, len, t->add_space_prefix && after_special, k);
    return tok_bpe_encode(t, text, len, k);
}

/* Id of the longest special token whose text starts at s[0..avail), or -1. */
static int32_t match_special(const struct tok *t, const char *s, size_t avail)
{
    const struct tok_impl *im = t->impl;
    uint8_t c = (uint8_t)s[0];
    if (!(im->special_first[c / 8] & (1u << (c % 8))))
        return -1;
    for (uint32_t i = 0; i < im->n_specials; i++) {
        int32_t id = im->specials[i];
        uint32_t l = im->vocab_len[id];
        if (l <= avail && !memcmp(s, im->vocab + im->vocab_off[id], l))
            return id;
    }
    return -1;
}

int tok_encode_ex(const struct tok *t, const char *text, size_t len, unsigned flags, int32_t *out,
                  size_t cap, size_t *n)
{
    struct tok_sink k = {out, cap, 0};
    bool after_special = true; /* the start of the text counts as after one */
    size_t start = 0;
    int rc;
    if (len > TOK_MAX_TEXT_LEN)
        return -E2BIG;
    if ((flags & TOK_ENCODE_BOS) && t->bos >= 0)
        tok_sink_put(&k, t->bos);
    if (flags & TOK_ENCODE_PARSE_SPECIAL) {
        for (size_t i = 0; i < len;) {
            int32_t id = match_special(t, text + i, len - i);
            if (id < 0) {
                i++;
                continue;
            }
            if ((rc = encode_fragment(t, text + start, i - start, after_special, &k)))
                return rc;
            tok_sink_put(&k, id);
            after_special = true;
            i += t->impl->vocab_len[id];
            start = i;
        }
    }
    if ((rc = encode_fragment(t, text + start, len - start, after_special, &k)))
        return rc;
    *n = k.n;
    return k.n > cap ? -ENOSPC : 0;
}

int tok_encode(const struct tok *t, const char *text, size_t len, bool add_bos, int32_t *out,
               size_t cap, size_t *n)
{
    return tok_encode_ex(t, text, len, add_bos ? TOK_ENCODE_BOS : 0, out, cap, n);
}

int tok_piece(const struct tok *t, int32_t id, const char **p, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) {
        *p = "";
        *len = 0;
        return -EINVAL;
    }
    *p = t->impl->dec + t->impl->dec_off[id];
    *len = t->impl->dec_len[id];
    return 0;
}

const char *tok_vocab_str(const struct tok *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return NULL;
    return t->impl->vocab + t->impl->vocab_off[id];
}

int tok_decode(const struct tok *t, const int32_t *ids, size_t n_ids, unsigned flags, char *out,
               size_t cap, size_t *len)
{
    bool strip = (flags & TOK_DECODE_STRIP_PREFIX_SPACE) && t->add_space_prefix;
    size_t n = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const char *p;
        size_t l;
        if (tok_piece(t, ids[i], &p, &l))
            return -EINVAL;
        if (strip && l) {
            if (p[0] == ' ')
                p++, l--;
            strip = false;
        }
        for (size_t j = 0; j < l; j++, n++)
            if (n < cap)
                out[n] = p[j];
    }
    *len = n;
    return n > cap ? -ENOSPC : 0;
}

uint32_t tok_n_vocab(const struct tok *t)
{
    return t->n_vocab;
}

enum tok_type tok_type_of(const struct tok *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return TOK_TYPE_UNDEFINED;
    return (enum tok_type)t->impl->types[id];
}

bool tok_is_special(const struct tok *t, int32_t id)
{
    enum tok_type ty = tok_type_of(t, id);
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return false;
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_UNUSED ||
           id == t->bos || id == t->eos || id == t->eot || id == t->unk || id == t->pad;
}

bool tok_is_eog(const struct tok *t, int32_t id)
{
    static const char *const names[] = {"<|eot_id|>", "<|end_of_text|>", "<|im_end|>",
                                        "<|endoftext|>", "</s>"};
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return false;
    if (id == t->eos || id == t->eot)
        return true;
    if (t->impl->types[id] != TOK_TYPE_CONTROL)
        return false;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(tok_vocab_str(t, id), names[i]))
            return true;
    return false;
}

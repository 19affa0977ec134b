/* tok_bpe.c — GPT-2-style byte-level BPE (contract: tok.h, "gpt2").
 *
 * Encoding: the pre-tokenizer regex (PCRE2, Unicode properties) cuts the text into
 * chunks; bytes that no match covers (invalid UTF-8) form chunks of their own. Each chunk
 * starts as one symbol per byte (the token of that byte's GPT-2 code point); the adjacent
 * pair with the lowest merge rank (ties: leftmost) is merged until no pair has a merge,
 * through a heap of candidates with stale entries skipped, O(n log n) per chunk. For the llama3
 * pre-tokenizer a chunk that is itself a token is emitted whole (llama.cpp's
 * ignore_merges). Loading checks that every byte has a token and keeps only merges whose
 * two sides and result are tokens.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gguf_impl.h"
#include "common/tok_impl.h"

/* Pre-tokenizer patterns, as llama.cpp's (llama-vocab.cpp) for these tokenizer.ggml.pre. */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

#define BPE_MAX_MERGES TOK_MAX_VOCAB /* entries of tokenizer.ggml.merges */

static uint32_t pair_hash(int32_t l, int32_t r)
{
    uint64_t x = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static const struct tok_merge *merge_find(const struct tok_impl *im, int32_t l, int32_t r)
{
    uint32_t mask = im->mcap - 1;
    for (uint32_t i = pair_hash(l, r) & mask;; i = (i + 1) & mask) {
        const struct tok_merge *m = &im->mtab[i];
        if (m->left < 0)
            return NULL;
        if (m->left == l && m->right == r)
            return m;
    }
}

size_t tok_bpe_unmap(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t l = tok_utf8_seq_len(s + i, len - i);
        uint32_t cp = (uint8_t)s[i];
        if (l == 2)
            cp = ((cp & 0x1f) << 6) | ((uint8_t)s[i + 1] & 0x3f);
        int byte = -1;
        if (l <= 2 && cp < 0x100 &&
            ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || cp >= 0xae)) {
            byte = (int)cp;
        } else if (l == 2 && cp >= 256 && cp < 256 + 68) {
            /* the rank-th non-printable byte */
            uint32_t rank = 0;
            for (uint32_t x = 0; x < 256; x++)
                if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae) &&
                    rank++ == cp - 256) {
                    byte = (int)x;
                    break;
                }
        }
        if (byte >= 0) {
            out[n++] = (char)byte;
        } else {
            memcpy(out + n, s + i, l);
            n += l;
        }
        i += l;
    }
    return n;
}

static int load_merges(struct tok *t, const struct gguf_file *g, char *err)
{
    struct tok_impl *im = t->impl;
    struct gguf_arr merges;
    int rc = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_VT_STRING, &merges, err);
    if (rc == -ENOENT) {
        gguf_seterr(err, g->path, "metadata 'tokenizer.ggml.merges' is missing (gpt2 tokenizer)");
        return KVD_EMODEL;
    }
    if (rc)
        return rc;
    if (merges.n > BPE_MAX_MERGES) {
        gguf_seterr(err, g->path, "%llu merges, over the limit %u", (unsigned long long)merges.n,
               BPE_MAX_MERGES);
        return KVD_EMODEL;
    }
    for (im->mcap = 16; im->mcap < 2 * merges.n; im->mcap *= 2)
        ;
    im->mtab = malloc(im->mcap * sizeof(*im->mtab));
    if (!im->mtab) {
        gguf_seterr(err, g->path, "out of memory for merges");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < im->mcap; i++)
        im->mtab[i].left = -1;
    char buf[2 * TOK_MAX_PIECE_LEN + 2];
    for (uint64_t i = 0; i < merges.n; i++) {
        struct gguf_str s = gguf_arr_str(&merges, i);
        const char *sp = s.len < sizeof(buf) ? memchr(s.p + 1, ' ', s.len ? s.len - 1 : 0) : NULL;
        if (!sp)
            continue; /* not "left right": cannot apply, skip */
        size_t ll = (size_t)(sp - s.p), rl = s.len - ll - 1;
        int32_t l = tok_lookup(t, s.p, ll), r = tok_lookup(t, sp + 1, rl);
        memcpy(buf, s.p, ll);
        memcpy(buf + ll, sp + 1, rl);
        int32_t res = tok_lookup(t, buf, ll + rl);
        if (l < 0 || r < 0 || res < 0 || merge_find(im, l, r))
            continue; /* unusable or duplicate: the earlier rank wins */
        uint32_t mask = im->mcap - 1, h = pair_hash(l, r) & mask;
        while (im->mtab[h].left >= 0)
            h = (h + 1) & mask;
        im->mtab[h] = (struct tok_merge){l, r, (int32_t)i, res};
    }
    return 0;
}

int tok_bpe_load(struct tok *t, const struct gguf_file *g, char *err)
{
    struct tok_impl *im = t->impl;
    struct gguf_str pre = {"gpt2", 4};
    const char *pat;
    char sym[4];
    int rc, ec;
    PCRE2_SIZE eo;

    for (int b = 0; b < 256; b++) {
        size_t n = tok_gpt2_byte_utf8((uint8_t)b, sym);
        if ((im->byte_tok[b] = tok_lookup(t, sym, n)) < 0) {
            gguf_seterr(err, g->path, "gpt2 vocabulary has no token for byte 0x%02x", b);
            return KVD_EMODEL;
        }
    }
    rc = gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
    if (rc && rc != -ENOENT)
        return rc;
    if (gguf_str_eq(pre, "gpt2") || gguf_str_eq(pre, "default")) {
        im->pre = TOK_PRE_GPT2, pat = RE_GPT2;
    } else if (gguf_str_eq(pre, "llama3") || gguf_str_eq(pre, "llama-bpe") ||
               gguf_str_eq(pre, "llama-v3")) {
        im->pre = TOK_PRE_LLAMA3, pat = RE_LLAMA3;
    } else if (gguf_str_eq(pre, "qwen2")) {
        im->pre = TOK_PRE_QWEN2, pat = RE_QWEN2;
    } else {
        gguf_seterr(err, g->path, "pre-tokenizer '%.*s' is not supported (gpt2, llama-bpe, qwen2)",
               (int)(pre.len > 32 ? 32 : pre.len), pre.p);
        return KVD_EMODEL;
    }
    im->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!im->re) {
        gguf_seterr(err, g->path, "cannot compile the pre-tokenizer regex (pcre2 error %d)", ec);
        return KVD_EINTERNAL;
    }
    return load_merges(t, g, err);
}

void tok_bpe_release(struct tok_impl *im)
{
    pcre2_code_free(im->re);
    im->re = NULL;
    free(im->mtab);
    im->mtab = NULL;
}

struct bpe_sym {
    int32_t id;         /* token id; -1: merged away */
    int32_t prev, next;
};

struct bpe_cand {
    int32_t rank;       /* merge rank: lower first */
    int32_t left;       /* symbol index: leftmost first among equal ranks */
    int32_t l_id, r_id; /* ids when queued: a changed side makes the entry stale */
};

/* Scratch shared by the chunks of one tok_bpe_encode() call, sized for the whole text. */
struct bpe_scratch {
    struct bpe_sym *sym;   /* len */
    struct bpe_cand *heap; /* 3 * len: n-1 initial pairs + at most 2 per merge */
    size_t n_heap;
    char *mapped;          /* 2 * len: the chunk in GPT-2 symbols (llama3 whole-word check) */
};

static bool cand_before(const struct bpe_cand *a, const struct bpe_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void cand_push(struct bpe_scratch *sc, const struct tok_impl *im, int32_t left)
{
    const struct bpe_sym *sym = sc->sym;
    if (left < 0 || sym[left].next < 0)
        return;
    const struct tok_merge *m = merge_find(im, sym[left].id, sym[sym[left].next].id);
    if (!m)
        return;
    size_t i = sc->n_heap++;
    sc->heap[i] = (struct bpe_cand){m->rank, left, sym[left].id, sym[sym[left].next].id};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(&sc->heap[i], &sc->heap[p]))
            break;
        struct bpe_cand tmp = sc->heap[p];
        sc->heap[p] = sc->heap[i];
        sc->heap[i] = tmp;
        i = p;
    }
}

static struct bpe_cand cand_pop(struct bpe_scratch *sc)
{
    struct bpe_cand top = sc->heap[0];
    sc->heap[0] = sc->heap[--sc->n_heap];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < sc->n_heap && cand_before(&sc->heap[l], &sc->heap[m]))
            m = l;
        if (r < sc->n_heap && cand_before(&sc->heap[r], &sc->heap[m]))
            m = r;
        if (m == i)
            break;
        struct bpe_cand tmp = sc->heap[m];
        sc->heap[m] = sc->heap[i];
        sc->heap[i] = tmp;
        i = m;
    }
    return top;
}

/* Encodes one chunk: O(len log len) whatever the chunk (a long run of one letter is one
 * chunk for every pre-tokenizer). */
static void bpe_chunk(const struct tok *t, const char *s, size_t len, struct bpe_scratch *sc,
                      struct tok_sink *k)
{
    const struct tok_impl *im = t->impl;
    struct bpe_sym *sym = sc->sym;
    if (im->pre == TOK_PRE_LLAMA3 && len <= TOK_MAX_PIECE_LEN) {
        size_t n = 0;
        for (size_t i = 0; i < len; i++)
            n += tok_gpt2_byte_utf8((uint8_t)s[i], sc->mapped + n);
        int32_t id = tok_lookup(t, sc->mapped, n);
        if (id >= 0) {
            tok_sink_put(k, id);
            return;
        }
    }
    for (size_t i = 0; i < len; i++)
        sym[i] = (struct bpe_sym){im->byte_tok[(uint8_t)s[i]], (int32_t)i - 1,
                                  i + 1 < len ? (int32_t)i + 1 : -1};
    sc->n_heap = 0;
    for (size_t i = 0; i + 1 < len; i++)
        cand_push(sc, im, (int32_t)i);
    while (sc->n_heap) {
        struct bpe_cand c = cand_pop(sc);
        int32_t r = sym[c.left].next;
        if (sym[c.left].id != c.l_id || r < 0 || sym[r].id != c.r_id)
            continue; /* stale */
        sym[c.left].id = merge_find(im, c.l_id, c.r_id)->result;
        sym[c.left].next = sym[r].next;
        if (sym[r].next >= 0)
            sym[sym[r].next].prev = c.left;
        sym[r].id = -1;
        cand_push(sc, im, sym[c.left].prev);
        cand_push(sc, im, c.left);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        tok_sink_put(k, sym[i].id);
}

int tok_bpe_encode(const struct tok *t, const char *text, size_t len, struct tok_sink *k)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->impl->re, NULL);
    struct bpe_scratch sc = {.sym = calloc(len, sizeof(*sc.sym)),
                             .heap = calloc(3 * len, sizeof(*sc.heap)),
                             .mapped = malloc(2 * len)};
    size_t pos = 0;
    int rc = 0;

    if (!md || !sc.sym || !sc.heap || !sc.mapped) {
        rc = -ENOMEM;
        goto out_free;
    }
    while (pos < len) {
        int m = pcre2_match(t->impl->re, (PCRE2_SPTR)text, len, pos, 0, md, NULL);
        size_t s = len, e = len;
        if (m > 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            s = ov[0];
            e = ov[1];
        } else if (m != PCRE2_ERROR_NOMATCH) {
            rc = KVD_EINTERNAL;
            goto out_free;
        }
        if (s > pos) /* bytes no match covers (invalid UTF-8): a chunk of their own */
            bpe_chunk(t, text + pos, s - pos, &sc, k);
        if (e <= s) /* empty match (no pattern allows one): take one byte, never loop */
            e = (s > pos ? s : pos) + 1;
        if (e > len)
            e = len;
        if (e > s && s >= pos)
            bpe_chunk(t, text + s, e - s, &sc, k);
        else if (e > pos)
            bpe_chunk(t, text + pos, e - pos, &sc, k);
        pos = e;
    }
out_free:
    free(sc.mapped);
    free(sc.heap);
    free(sc.sym);
    pcre2_match_data_free(md);
    return rc;
}

/* tok_spm.c — SentencePiece BPE encoding as llama.cpp's SPM tokenizer does it
 * (contract: tok.h, "llama").
 *
 * The text (with one leading space when space_prefix) has its spaces replaced by
 * U+2581 and is cut into UTF-8 characters, the initial symbols. Every adjacent pair whose
 * concatenation is a vocab token is a candidate; the candidate with the highest score
 * (ties: leftmost) is merged, its new neighbours become candidates, until none is left.
 * Stale candidates (a side already merged away) are skipped when popped. Each final
 * symbol is a token, or a single character without one, which falls back to <0xNN>
 * byte tokens (one unk for the character when the vocab lacks one of its bytes).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/tok_impl.h"

#define SPM_SPACE "\xe2\x96\x81"
#define SPM_SPACE_LEN 3

struct spm_sym {
    int32_t prev, next; /* neighbours in the list, -1 at the ends */
    uint32_t off, n;    /* bytes of the normalized text; n == 0: merged away */
};

struct spm_bigram {
    float score;
    int32_t left;       /* symbol index */
    uint32_t size;      /* bytes of left+right when queued (detects stale entries) */
};

struct spm_heap {
    struct spm_bigram *v;
    size_t n, cap;
};

static bool bigram_before(const struct spm_bigram *a, const struct spm_bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct spm_heap *h, struct spm_bigram b)
{
    size_t i = h->n++;
    h->v[i] = b;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&h->v[i], &h->v[p]))
            break;
        struct spm_bigram tmp = h->v[p];
        h->v[p] = h->v[i];
        h->v[i] = tmp;
        i = p;
    }
}

static struct spm_bigram heap_pop(struct spm_heap *h)
{
    struct spm_bigram top = h->v[0];
    h->v[0] = h->v[--h->n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && bigram_before(&h->v[l], &h->v[m]))
            m = l;
        if (r < h->n && bigram_before(&h->v[r], &h->v[m]))
            m = r;
        if (m == i)
            break;
        struct spm_bigram tmp = h->v[m];
        h->v[m] = h->v[i];
        h->v[i] = tmp;
        i = m;
    }
    return top;
}

static void try_bigram(const struct tok *t, const char *txt, const struct spm_sym *sym,
                       struct spm_heap *h, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = tok_lookup(t, txt + sym[left].off, size);
    if (id < 0 || h->n == h->cap)
        return; /* cap is 3x the symbols: each merge queues at most 2 (never reached) */
    heap_push(h, (struct spm_bigram){t->impl->scores[id], left, size});
}

int tok_spm_encode(const struct tok *t, const char *text, size_t len, bool space_prefix,
                   struct tok_sink *k)
{
    const struct tok_impl *im = t->impl;
    size_t cap_txt = (len + 1) * SPM_SPACE_LEN; /* worst case: every byte a space */
    char *txt = malloc(cap_txt);
    struct spm_sym *sym = NULL;
    struct spm_heap h = {0};
    size_t n_txt = 0, n_sym = 0;
    int rc = 0;

    if (!txt)
        return -ENOMEM;
    if (space_prefix) {
        memcpy(txt, SPM_SPACE, SPM_SPACE_LEN);
        n_txt = SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(txt + n_txt, SPM_SPACE, SPM_SPACE_LEN);
            n_txt += SPM_SPACE_LEN;
        } else {
            txt[n_txt++] = text[i];
        }
    }
    sym = calloc(n_txt, sizeof(*sym));
    h.cap = 3 * n_txt;
    h.v = calloc(h.cap, sizeof(*h.v));
    if (!sym || !h.v) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (size_t off = 0; off < n_txt; n_sym++) {
        size_t l = tok_utf8_seq_len(txt + off, n_txt - off);
        sym[n_sym] = (struct spm_sym){(int32_t)n_sym - 1, (int32_t)n_sym + 1, (uint32_t)off,
                                      (uint32_t)l};
        off += l;
    }
    sym[n_sym - 1].next = -1;
    for (size_t i = 1; i < n_sym; i++)
        try_bigram(t, txt, sym, &h, (int32_t)i - 1, (int32_t)i);

    while (h.n) {
        struct spm_bigram b = heap_pop(&h);
        struct spm_sym *l = &sym[b.left];
        if (l->n == 0 || l->next < 0)
            continue;
        struct spm_sym *r = &sym[l->next];
        if (l->n + r->n != b.size)
            continue; /* stale: one side changed since it was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        try_bigram(t, txt, sym, &h, l->prev, b.left);
        try_bigram(t, txt, sym, &h, b.left, l->next);
    }

    for (int32_t i = 0; i >= 0 && (size_t)i < n_sym; i = sym[i].next) {
        int32_t id = tok_lookup(t, txt + sym[i].off, sym[i].n);
        if (id >= 0) {
            tok_sink_put(k, id);
            continue;
        }
        bool all_bytes = true; /* byte fallback, else one unk for the character */
        for (uint32_t j = 0; j < sym[i].n; j++)
            all_bytes &= im->byte_tok[(uint8_t)txt[sym[i].off + j]] >= 0;
        if (!all_bytes) {
            tok_sink_put(k, t->unk); /* tok_load ensured unk exists when bytes lack */
            continue;
        }
        for (uint32_t j = 0; j < sym[i].n; j++)
            tok_sink_put(k, im->byte_tok[(uint8_t)txt[sym[i].off + j]]);
    }

out_free:
    free(h.v);
    free(sym);
    free(txt);
    return rc;
}

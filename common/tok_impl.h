/* tok_impl.h — private to common/tok*.c: the tokenizer's tables and the per-kind encoders.
 * Invariants: vocab strings and decoded pieces are stored in arenas with offsets and
 * lengths per id; the piece hash maps a vocab string to its lowest id; for BPE every
 * merge entry's result is a token and both sides are tokens. */
#ifndef KVD_COMMON_TOK_IMPL_H
#define KVD_COMMON_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/tok.h"

struct tok_merge {
    int32_t left, right; /* token ids; left == -1: empty slot */
    int32_t rank;        /* position in tokenizer.ggml.merges: lower merges first */
    int32_t result;      /* token id of left+right */
};

enum tok_pre { TOK_PRE_GPT2, TOK_PRE_LLAMA3, TOK_PRE_QWEN2 };

struct tok_impl {
    char *vocab;          /* arena: NUL-terminated vocab strings */
    uint64_t *vocab_off;  /* n_vocab */
    uint32_t *vocab_len;  /* n_vocab */
    char *dec;            /* arena: decoded bytes of each token */
    uint64_t *dec_off;    /* n_vocab */
    uint32_t *dec_len;    /* n_vocab */
    float *scores;        /* n_vocab (SPM merge priority: higher first) */
    uint8_t *types;       /* n_vocab, enum tok_type */
    int32_t *htab;        /* piece hash, hcap slots, -1 empty */
    uint32_t hcap;        /* power of two >= 2 * n_vocab */
    int32_t byte_tok[256]; /* SPM: id of <0xNN>; BPE: id of byte b's symbol; -1 if none */
    struct tok_merge *mtab; /* BPE merge hash, mcap slots */
    uint32_t mcap;
    enum tok_pre pre;
    void *re;             /* BPE: compiled pcre2_code */
    int32_t *specials;    /* CONTROL and USER_DEFINED ids, longest text first */
    uint32_t n_specials;
    uint8_t special_first[32]; /* bitmap: bytes some special's text starts with */
};

/* Token id of the bytes s[0..len), or -1. */
int32_t tok_lookup(const struct tok *t, const char *s, size_t len);

/* Output sink of the encoders: counts every id, stores the first cap. */
struct tok_sink {
    int32_t *out;
    size_t cap;
    size_t n;
};

static inline void tok_sink_put(struct tok_sink *k, int32_t id)
{
    if (k->n < k->cap)
        k->out[k->n] = id;
    k->n++;
}

/* Bytes in the UTF-8 sequence starting at s[0] (1 for an invalid or truncated one). */
size_t tok_utf8_seq_len(const char *s, size_t avail);

/* tok_spm.c */
/* space_prefix: prepend one U+2581 (the text starts, or follows a special token). */
int tok_spm_encode(const struct tok *t, const char *text, size_t len, bool space_prefix,
                   struct tok_sink *k);
/* tok_bpe.c */
int tok_bpe_load(struct tok *t, const struct gguf_file *g, char *err);
void tok_bpe_release(struct tok_impl *im);
int tok_bpe_encode(const struct tok *t, const char *text, size_t len, struct tok_sink *k);
/* Decoded bytes of a BPE vocab string (GPT-2 symbols back to bytes) into out (cap >=
 * len); returns the byte count. Code points outside the map are copied as UTF-8. */
size_t tok_bpe_unmap(const char *s, size_t len, char *out);

#endif

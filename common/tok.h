/* tok.h — the model's tokenizer, built from a GGUF file's tokenizer.ggml.* keys.
 *
 * Kinds (tokenizer.ggml.model):
 *  - "llama": SentencePiece BPE as llama.cpp's SPM tokenizer. Text is taken literally
 *    ("<s>" in a prompt is three characters) unless tok_encode_ex() is asked to parse
 *    special tokens. Spaces become U+2581 '▁', one '▁' is prepended when
 *    tokenizer.ggml.add_space_prefix is true (the default), then adjacent symbols are
 *    merged highest score first (ties: leftmost),
 *    and any UTF-8 character with no token falls back to its bytes as <0xNN> tokens
 *    (or one unk per such character when the vocab lacks byte tokens). As in
 *    SentencePiece, a literal U+2581 in the text cannot be told from a space: it
 *    decodes as ' ' (the only case where decode(encode(x)) != x).
 *  - "gpt2": byte-level BPE (Llama 3, Qwen, GPT-2): pre-tokenizer regex chosen by
 *    tokenizer.ggml.pre (llama3/llama-bpe, qwen2, default gpt2), bytes mapped to GPT-2's
 *    printable code points, merges by rank from tokenizer.ggml.merges.
 *  Anything else ("bert", "t5", "rwkv", ...) is refused by name.
 * Token types (tokenizer.ggml.token_type, default NORMAL) follow llama.cpp's numbering.
 * Invariant after tok_load(): every id in [0, n_vocab) has a decoded byte string
 * (control and unused tokens decode to ""), bos/eos/unk are -1 or < n_vocab.
 * Threads: a loaded tok is immutable; any thread may encode/decode concurrently.
 * The tok copies what it needs: the gguf_file may be closed afterwards.
 */
#ifndef KVD_COMMON_TOK_H
#define KVD_COMMON_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gguf.h"

#define TOK_ERR_LEN GGUF_ERR_LEN
#define TOK_MAX_VOCAB GGUF_LLAMA_MAX_VOCAB /* tokens */
#define TOK_MAX_PIECE_LEN 1024             /* bytes of one vocabulary entry */
#define TOK_MAX_TEXT_LEN (4u << 20)        /* bytes one tok_encode() takes (scratch ~52 B/byte) */

enum tok_kind { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2 };

enum tok_type { /* tokenizer.ggml.token_type values */
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

struct tok_impl; /* private: hash tables, merge ranks, compiled regex */

struct tok {
    enum tok_kind kind;
    uint32_t n_vocab;
    int32_t bos;            /* tokenizer.ggml.bos_token_id, -1 if none */
    int32_t eos;            /* tokenizer.ggml.eos_token_id, -1 if none */
    int32_t eot;            /* tokenizer.ggml.eot_token_id, -1 if none */
    int32_t unk;            /* tokenizer.ggml.unknown_token_id, -1 if none */
    int32_t pad;            /* tokenizer.ggml.padding_token_id, -1 if none */
    bool add_bos;           /* tokenizer.ggml.add_bos_token (default: true for llama) */
    bool add_space_prefix;  /* tokenizer.ggml.add_space_prefix (default: true for llama) */
    struct tok_impl *impl;
};

/* Builds the tokenizer from g. Returns 0, KVD_EMODEL (missing/invalid keys, unknown
 * kind, vocab larger than TOK_MAX_VOCAB, a piece longer than TOK_MAX_PIECE_LEN, ...)
 * or -ENOMEM, with the reason (naming the file) in err; on failure *t is zeroed. */
int tok_load(struct tok *t, const struct gguf_file *g, char err[TOK_ERR_LEN]);
/* Frees everything; *t zeroed. Safe on a zeroed t. */
void tok_release(struct tok *t);

/* Encodes len bytes of text (any bytes; invalid UTF-8 falls back to byte tokens),
 * preceded by bos when add_bos and the vocab has one. Writes at most cap ids to out and
 * the number of ids into *n. Returns 0; -ENOSPC when cap < needed (then *n = needed and
 * out holds the first cap ids); -E2BIG when len > TOK_MAX_TEXT_LEN; -ENOMEM. */
int tok_encode(const struct tok *t, const char *text, size_t len, bool add_bos, int32_t *out,
               size_t cap, size_t *n);

enum tok_encode_flags {
    TOK_ENCODE_BOS = 1u << 0,           /* start with bos (when the vocab has one) */
    /* Recognize the text of CONTROL and USER_DEFINED tokens ("<|eot_id|>", "<s>") in the
     * text and emit their ids (longest match first), as llama.cpp's parse_special; for
     * SPM a text fragment after such a token gets the space prefix again, as there.
     * Only for trusted text (chat templates): a user could otherwise inject control
     * tokens. decode(encode(x)) == x does not hold in this mode. */
    TOK_ENCODE_PARSE_SPECIAL = 1u << 1,
};
/* tok_encode with flags; same results and errors. */
int tok_encode_ex(const struct tok *t, const char *text, size_t len, unsigned flags, int32_t *out,
                  size_t cap, size_t *n);

/* The bytes token `id` stands for, as text generation emits them: SPM '▁' -> ' ',
 * <0xNN> -> the single byte NN, GPT-2 code points -> bytes; control, unknown-type and
 * unused tokens -> "" (use tok_vocab_str for their names). Returns 0 or -EINVAL for an id
 * out of range (then *p = "" and *len = 0). The bytes are not NUL-terminated and live
 * as long as t. */
int tok_piece(const struct tok *t, int32_t id, const char **p, size_t *len);
/* The raw vocabulary string of id ("▁Once", "<0x0A>", "<s>"), NUL-terminated; NULL if
 * out of range. */
const char *tok_vocab_str(const struct tok *t, int32_t id);

enum tok_decode_flags {
    /* Drop one leading ' ' of the first piece when the ids start the text (at BOS or
     * at position 0) and add_space_prefix is set: undoes the prefix space of encode, so
     * decode(encode(x)) == x. Do NOT set it for a continuation (a stream's later ids). */
    TOK_DECODE_STRIP_PREFIX_SPACE = 1u << 0,
};
/* Concatenates the pieces of ids[0..n_ids) into out (not NUL-terminated). Writes at most
 * cap bytes; *len = bytes needed. Returns 0, -ENOSPC when cap is short (out holds a
 * prefix), -EINVAL when an id is out of range (nothing more written). */
int tok_decode(const struct tok *t, const int32_t *ids, size_t n_ids, unsigned flags, char *out,
               size_t cap, size_t *len);

uint32_t tok_n_vocab(const struct tok *t);
/* Control/unknown/unused tokens, and bos/eos/eot/unk/pad: not text. */
bool tok_is_special(const struct tok *t, int32_t id);
/* Ends generation: eos, eot (Llama 3 "<|eot_id|>"), or a CONTROL token whose name is
 * one of "<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>", "</s>". */
bool tok_is_eog(const struct tok *t, int32_t id);
/* Token type of id (enum tok_type); TOK_TYPE_UNDEFINED when out of range. */
enum tok_type tok_type_of(const struct tok *t, int32_t id);

/* Length of the longest prefix of s[0..len) that does not end inside an incomplete
 * UTF-8 sequence (what a stream may emit now; the rest waits for more bytes). Invalid
 * bytes count as complete (they will never become valid). */
size_t tok_utf8_complete_len(const char *s, size_t len);

/* GPT-2's byte-to-symbol map: writes the UTF-8 of byte b's printable code point into out
 * (1 or 2 bytes, not NUL-terminated) and returns its length. */
size_t tok_gpt2_byte_utf8(uint8_t b, char out[4]);

#endif

/* mkmodel_vocab.h — vocabularies kvd-mkmodel writes into a GGUF (tokenizer.ggml.* keys).
 * Owned by kvd-mkmodel only; single-threaded. */
#ifndef KVD_TOOLS_MKMODEL_VOCAB_H
#define KVD_TOOLS_MKMODEL_VOCAB_H

#include <stdint.h>

#include "common/gguf.h"
#include "common/gguf_write.h"

#ifndef MK_DEFAULT_VOCAB_FROM
#define MK_DEFAULT_VOCAB_FROM "models/stories260K.gguf"
#endif
#define MK_SPM_MIN_VOCAB 259 /* <unk> <s> </s> + 256 byte tokens: byte fallback needs them */

enum mk_vocab_kind { MK_VOCAB_SPM, MK_VOCAB_BYTES, MK_VOCAB_GPT2 };

struct mk_vocab {
    const char *model;   /* tokenizer.ggml.model: "llama" or "gpt2" */
    uint32_t n;          /* tokens */
    char **tokens;       /* n NUL-terminated strings */
    float *scores;       /* n */
    int32_t *types;      /* n, enum tok_type */
    uint32_t n_merges;   /* gpt2: "left right" strings */
    char **merges;
    int32_t bos, eos, unk; /* -1 when absent */
};

/* 0 or -EINVAL/-ENOMEM/KVD_EMODEL with err. want_n 0 keeps the source's size. */
int mk_vocab_build(struct mk_vocab *v, enum mk_vocab_kind kind, const char *from, uint32_t want_n,
                   char err[GGUF_ERR_LEN]);
void mk_vocab_release(struct mk_vocab *v);
void mk_vocab_write(const struct mk_vocab *v, struct gguf_writer *w);
int mk_vocab_kind_parse(const char *s, enum mk_vocab_kind *out);

#endif

/* model.h — a llama-architecture model's weights, in f32, ready for the forward pass.
 *
 * Loading opens the GGUF (common/gguf.h), checks hyper-parameters and every tensor
 * (gguf_llama_hparams + gguf_llama_validate: unsupported architectures and weight types
 * are refused by name there) and copies the weights out of the mapping:
 *  - matrices stored as F16, BF16 or Q8_0 (pack_type, taken from blk.0.attn_q) stay in
 *    the file's format (*_p: 2, 2 or 1.06 bytes per parameter): up to FWD_DOT_ROWS_MAX
 *    rows multiply with the worker's dot kernels on those rows (decode reads 2-4x
 *    fewer bytes than f32), more rows convert slices to f32 and use sgemm. The values
 *    used are exactly the file's (f16/bf16 -> f32 is exact, Q8_0 d * q is exact in f32);
 *  - all other matrices (F32, or a tensor whose type differs from pack_type) are
 *    DEQUANTIZED to f32 once (4 bytes per parameter) and go through cblas_sgemm.
 * Exactly one of W / W_p is non-NULL per matrix. Token embeddings are always f32 (the
 * lookup copies rows); output is token_embd when tied. Q/K/V are packed into one matrix
 * per layer and gate/up into another, so a layer is 4 matrix products.
 * Immutable after model_load; any thread may read it.
 */
#ifndef KVD_WORKER_MODEL_H
#define KVD_WORKER_MODEL_H

#include "common/gguf.h"

#include <stdint.h>

struct model_layer {
    float *attn_norm; /* (dim,) */
    float *wqkv;      /* (q_dim + 2 * kv_dim, dim): rows of Q, then K, then V; or NULL */
    float *wo;        /* (dim, q_dim) */
    float *ffn_norm;  /* (dim,) */
    float *w13;       /* (2 * ff, dim): rows of gate (w1), then up (w3) */
    float *w2;        /* (dim, ff) down */
    uint8_t *wqkv_p;  /* the same matrices as the file's pack_type rows when the file has
                         them so (exactly one of W / W_p is non-NULL), else NULL */
    uint8_t *wo_p;
    uint8_t *w13_p;
    uint8_t *w2_p;
};

struct model {
    struct gguf_llama_hparams hp;
    uint64_t fingerprint;   /* gguf_model_fingerprint() */
    uint32_t dim, n_layers, n_heads, n_kv_heads, head_dim, ff, vocab;
    uint32_t q_dim, kv_dim; /* n_heads * head_dim, n_kv_heads * head_dim */
    float eps;              /* RMSNorm epsilon from metadata */
    float *inv_freq;        /* (head_dim / 2,) rotary inverse frequencies, scaling applied */
    float *tok_embd;        /* (vocab, dim) */
    float *out_norm;        /* (dim,) */
    float *output;          /* (vocab, dim); == tok_embd when tied; NULL when output_p */
    uint8_t *output_p;      /* output as pack_type rows when the file stores it so, or NULL */
    uint32_t pack_type;     /* GGUF_DT_F16, _BF16 or _Q8_0 (format of *_p), or _F32: none */
    struct model_layer *layers; /* (n_layers,) */
    char path[256];
};

/* Loads path. 0, or -errno / -ENOENT / KVD_EMODEL with the reason logged (naming the
 * file); m is zeroed on failure. The GGUF mapping is closed before returning. */
int model_load(struct model *m, const char *path);
void model_release(struct model *m);   /* safe on a zeroed model */

#endif

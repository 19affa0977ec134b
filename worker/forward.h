/* forward.h — the llama forward pass over a batch of sequences with paged K/V.
 *
 * One fwd_run() = one step: any mix of prefill chunks and single decode tokens. Token
 * rows are packed sequence by sequence; every linear layer is one cblas_sgemm over all
 * rows of the step. Per layer: RMSNorm -> QKV -> rotary (adjacent pairs (x[2i], x[2i+1]),
 * GGUF llama layout) -> the new tokens' K/V are written into their pages -> attention
 * (grouped-query, causal: the token at position p sees positions 0..p of its own
 * sequence, read in place from the pages via kv_row, online softmax per tile) -> output
 * projection -> RMSNorm -> SwiGLU FFN. Residual adds are sgemm's beta = 1.
 *
 * Matrix products: per slice of output columns, slices spread over the compute pool:
 * cblas_sgemm on f32 weights; on packed weights (F16/BF16/Q8_0 rows, model.h) dot
 * kernels for up to FWD_DOT_ROWS_MAX rows, else FWD_CONV_COLS-row slices converted to
 * f32 + sgemm. The
 * caller sets OpenBLAS to one thread (openblas_set_num_threads(1)).
 * Scratch is allocated once by fwd_init for max_tokens rows; fwd_run never allocates,
 * logs or fails: fwd_check() validates a batch first (the caller must call it).
 * One thread drives a fwd (the worker's step loop); attention fans out over f->tp.
 */
#ifndef KVD_WORKER_FORWARD_H
#define KVD_WORKER_FORWARD_H

#include "worker/kvview.h"
#include "worker/model.h"
#include "worker/tpool.h"

#include <stddef.h>
#include <stdint.h>

#define FWD_TILE 32              /* K/V slots scored together (online-softmax tile) */
#define FWD_CACHE_LINE 64        /* bytes; prefetch stride for the next page's K/V rows */
#define FWD_GROUP_ELEMS_MAX 8192 /* q heads per kv head x head_dim, attention accumulator */
#define FWD_MAX_TOKENS_LIMIT 65536 /* rows of one fwd_run, upper bound for max_tokens */
#define FWD_MM_TASKS_PER_THREAD 2 /* column slices per compute thread in one matmul */
#define FWD_MM_COL_ALIGN 16       /* slice width multiple (one AVX-512 register of floats) */
#define FWD_CONV_COLS 256          /* half-precision weight rows converted per sgemm */
#define FWD_PAR_MIN_MACS (1u << 16) /* multiply-adds below which a task is not worth a
                                       thread hand-off (~10 us of work) */
#define FWD_DOT_ROWS_MAX 16       /* up to this many rows use the packed-weight dot kernels
                                     (in groups of SIMD_ROWS_MAX); measured on AVX-512 with
                                     f16: 2-7x faster than f32 sgemm up to 8 rows, even
                                     at 32 (then sgemm on converted slices) */

struct fwd_seq {
    const uint32_t *tokens;  /* (n_tokens,) new token ids, each < vocab */
    uint32_t n_tokens;       /* >= 1 */
    uint32_t pos0;           /* position of tokens[0] */
    const uint32_t *blocks;  /* (n_blocks,) page ids of the whole block table */
    uint32_t n_blocks;       /* pos0 + n_tokens <= n_blocks * block_size */
};

struct fwd {
    const struct model *m;
    struct tpool *tp;
    uint32_t max_tokens;   /* rows one fwd_run may carry */
    uint32_t n_rows;       /* rows of the last fwd_run */
    float *x;              /* (max_tokens, dim) residual stream */
    float *xb;             /* (max_tokens, dim) normed activations; after fwd_run: final norm */
    float *qkv;            /* (max_tokens, q_dim + 2 * kv_dim) per row: q heads, k heads, v heads */
    float *att;            /* (max_tokens, q_dim) attention output */
    float *h13;            /* (max_tokens, 2 * ff) gate | up */
    float *hb;             /* (max_tokens, ff) silu(gate) * up */
    float *rope_cs;        /* (max_tokens, head_dim) cos, sin interleaved per pair */
    uint32_t *row_seq;     /* (max_tokens,) sequence index of each row */
    uint32_t *row_pos;     /* (max_tokens,) position of each row */
    float *conv;           /* (matmul tasks, FWD_CONV_COLS, max in) half -> f32 weight slices */
    size_t conv_stride;    /* floats per matmul task in conv */
};

/* Allocates scratch for max_tokens rows (1..FWD_MAX_TOKENS_LIMIT). 0, -EINVAL (model
 * shape beyond FWD_GROUP_ELEMS_MAX) or -ENOMEM (logged; f zeroed). m and tp must outlive f. */
int fwd_init(struct fwd *f, const struct model *m, struct tpool *tp, uint32_t max_tokens);
void fwd_release(struct fwd *f);   /* safe on a zeroed fwd */

/* Validates sequences against the model and the view: tokens < vocab, pages <
 * num_pages, pos0 + n_tokens <= n_blocks * block_size, view geometry == model geometry.
 * fwd_check adds: total rows <= max_tokens. 0, or KVD_EMSG with why filled. */
int fwd_check_seqs(const struct model *m, const struct kv_view *kv, const struct fwd_seq *seqs,
                   uint32_t n_seqs, char *why, size_t why_cap);
int fwd_check(const struct fwd *f, const struct kv_view *kv, const struct fwd_seq *seqs,
              uint32_t n_seqs, char *why, size_t why_cap);

/* Runs every layer for the batch (validated by fwd_check); writes the new K/V into kv;
 * leaves the final-normed hidden state of row r in f->xb + r * dim. Rows are numbered
 * sequence by sequence, token by token. */
void fwd_run(struct fwd *f, const struct kv_view *kv, const struct fwd_seq *seqs,
             uint32_t n_seqs);

/* Logits of n rows of the last fwd_run (n <= max_tokens, rows[i] < n_rows) into
 * out (n, vocab). Overwrites f->x. */
void fwd_logits(struct fwd *f, const uint32_t *rows, uint32_t n, float *out);

#endif

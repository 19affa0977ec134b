#include "worker/forward.h"

#include "common/err.h"
#include "common/log.h"
#include "worker/simd.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fwd_init(struct fwd *f, const struct model *m, struct tpool *tp, uint32_t max_tokens)
{
    memset(f, 0, sizeof(*f));
    uint32_t group = m->n_heads / m->n_kv_heads;
    if (max_tokens == 0 || max_tokens > FWD_MAX_TOKENS_LIMIT ||
        (size_t)group * m->head_dim > FWD_GROUP_ELEMS_MAX) {
        log_err("cannot set up the forward pass: %u rows, %u q heads per kv head x head dim %u "
                "(limits %u rows, %u elements)",
                max_tokens, group, m->head_dim, FWD_MAX_TOKENS_LIMIT, FWD_GROUP_ELEMS_MAX);
        return -EINVAL;
    }
    size_t T = max_tokens;
    f->m = m;
    f->tp = tp;
    f->max_tokens = max_tokens;
    f->x = calloc(T * m->dim, sizeof(float));
    f->xb = calloc(T * m->dim, sizeof(float));
    f->qkv = calloc(T * (m->q_dim + 2 * m->kv_dim), sizeof(float));
    f->att = calloc(T * m->q_dim, sizeof(float));
    f->h13 = calloc(T * 2 * m->ff, sizeof(float));
    f->hb = calloc(T * m->ff, sizeof(float));
    f->rope_cs = calloc(T * m->head_dim, sizeof(float));
    f->row_seq = calloc(T, sizeof(uint32_t));
    f->row_pos = calloc(T, sizeof(uint32_t));
    size_t in_max = m->dim > m->q_dim ? m->dim : m->q_dim;
    in_max = in_max > m->ff ? in_max : m->ff;
    f->conv_stride = (size_t)FWD_CONV_COLS * in_max;
    f->conv = calloc((size_t)tp->n_threads * FWD_MM_TASKS_PER_THREAD * f->conv_stride,
                     sizeof(float));
    if (!f->x || !f->xb || !f->qkv || !f->att || !f->h13 || !f->hb || !f->rope_cs ||
        !f->row_seq || !f->row_pos || !f->conv) {
        log_err("cannot set up the forward pass: out of memory for %u rows of scratch",
                max_tokens);
        fwd_release(f);
        return -ENOMEM;
    }
    return 0;
}

void fwd_release(struct fwd *f)
{
    free(f->x);
    free(f->xb);
    free(f->qkv);
    free(f->att);
    free(f->h13);
    free(f->hb);
    free(f->rope_cs);
    free(f->row_seq);
    free(f->row_pos);
    free(f->conv);
    memset(f, 0, sizeof(*f));
}

int fwd_check_seqs(const struct model *m, const struct kv_view *kv, const struct fwd_seq *seqs,
                   uint32_t n_seqs, char *why, size_t why_cap)
{
    if (kv->n_layers != m->n_layers || kv->n_kv_heads != m->n_kv_heads ||
        kv->head_dim != m->head_dim ||
        (kv->kv_dtype != KV_DTYPE_F32 && kv->kv_dtype != KV_DTYPE_F16)) {
        snprintf(why, why_cap, "kv pool geometry %u layers x %u kv heads x %u dims does not "
                 "match the model (%u x %u x %u)", kv->n_layers, kv->n_kv_heads, kv->head_dim,
                 m->n_layers, m->n_kv_heads, m->head_dim);
        return KVD_EMSG;
    }
    for (uint32_t s = 0; s < n_seqs; s++) {
        const struct fwd_seq *q = &seqs[s];
        if (q->n_tokens == 0 || q->n_blocks == 0) {
            snprintf(why, why_cap, "seq %u: no tokens or no blocks", s);
            return KVD_EMSG;
        }
        if ((uint64_t)q->pos0 + q->n_tokens > (uint64_t)q->n_blocks * kv->block_size) {
            snprintf(why, why_cap, "seq %u: positions %u..%u need %llu blocks, block table "
                     "has %u", s, q->pos0, q->pos0 + q->n_tokens - 1,
                     (unsigned long long)(((uint64_t)q->pos0 + q->n_tokens + kv->block_size -
                                           1) / kv->block_size), q->n_blocks);
            return KVD_EMSG;
        }
        /* only the blocks the step touches (positions 0 .. pos0 + n_tokens - 1) matter,
         * but every entry must be a real page */
        for (uint32_t b = 0; b < q->n_blocks; b++)
            if (q->blocks[b] >= kv->num_pages) {
                snprintf(why, why_cap, "seq %u: block %u is page %u, pool has %u pages", s, b,
                         q->blocks[b], kv->num_pages);
                return KVD_EMSG;
            }
        for (uint32_t t = 0; t < q->n_tokens; t++)
            if (q->tokens[t] >= m->vocab) {
                snprintf(why, why_cap, "seq %u: token %u is id %u, vocab has %u", s, t,
                         q->tokens[t], m->vocab);
                return KVD_EMSG;
            }
    }
    return 0;
}

int fwd_check(const struct fwd *f, const struct kv_view *kv, const struct fwd_seq *seqs,
              uint32_t n_seqs, char *why, size_t why_cap)
{
    uint64_t rows = 0;
    int rc = fwd_check_seqs(f->m, kv, seqs, n_seqs, why, why_cap);
    if (rc < 0)
        return rc;
    for (uint32_t s = 0; s < n_seqs; s++)
        rows += seqs[s].n_tokens;
    if (rows > f->max_tokens) {
        snprintf(why, why_cap, "batch of %llu tokens exceeds the %u rows of scratch",
                 (unsigned long long)rows, f->max_tokens);
        return KVD_EMSG;
    }
    return 0;
}

/* out (n, dim) = x (n, dim) / rms(x) * w */
static void rmsnorm_rows(float *out, const float *x, const float *w, size_t n, size_t dim,
                         float eps)
{
    for (size_t r = 0; r < n; r++) {
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        float inv = 1.0f / sqrtf(simd_sumsq(xr, dim) / (float)dim + eps);
        for (size_t i = 0; i < dim; i++)
            o[i] = xr[i] * inv * w[i];
    }
}

struct mm_job {
    float *y;
    const float *x, *W;      /* W: f32 weights, or NULL when only Wp exists */
    const uint8_t *Wp;       /* packed weights (the file's rows), or NULL */
    uint32_t ptype;          /* GGUF_DT_F16, _BF16 or _Q8_0: format of Wp */
    size_t row_bytes;        /* bytes of one packed row of `in` weights */
    bool dot;                /* few rows: the dot kernels on Wp */
    float *conv;             /* scratch: per task FWD_CONV_COLS x in floats (Wp -> f32) */
    size_t conv_stride;      /* floats per task in conv */
    size_t n, in, out, cols; /* cols: output columns per task */
    float beta;
};

/* y[:, c0 .. c0 + nc) = x @ W[c0 .. c0 + nc)^T (+ beta * y), W (nc, in) f32 rows. */
static void mm_sgemm(const struct mm_job *J, const float *W, size_t c0, size_t nc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)J->n, (int)nc, (int)J->in, 1.0f,
                J->x, (int)J->in, W, (int)J->in, J->beta, J->y + c0, (int)J->out);
}

/* out[r] = dot(x row r, packed weight row w) for nr (<= SIMD_ROWS_MAX) rows. */
static inline void mm_dot_rows(const struct mm_job *J, const float *x, const uint8_t *w,
                               size_t nr, float *out)
{
    if (J->ptype == GGUF_DT_Q8_0)
        simd_dot_q8_rows(x, J->in, w, J->in, nr, out);
    else
        simd_dot_half_rows(x, J->in, (const uint16_t *)w, J->in, nr,
                           J->ptype == GGUF_DT_BF16, out);
}

/* Task i: columns [i * cols, (i + 1) * cols) of y, by one of three paths: f32 weights ->
 * one single-threaded sgemm; few rows with packed weights -> dot products on the file's
 * rows (2-4x fewer bytes); many rows with packed weights -> FWD_CONV_COLS rows of W at
 * a time converted to f32 into this task's scratch, then sgemm. */
static void mm_task(void *ctx, uint32_t i)
{
    const struct mm_job *J = ctx;
    size_t c0 = (size_t)i * J->cols, nc = J->out - c0 < J->cols ? J->out - c0 : J->cols;
    if (J->W) {
        mm_sgemm(J, J->W + c0 * J->in, c0, nc);
        return;
    }
    if (J->dot) {
        float d[SIMD_ROWS_MAX]; /* (<= SIMD_ROWS_MAX,) one output column, a group of rows */
        for (size_t o = c0; o < c0 + nc; o++) {
            const uint8_t *w = J->Wp + o * J->row_bytes; /* stays in L1 across row groups */
            for (size_t r0 = 0; r0 < J->n; r0 += SIMD_ROWS_MAX) {
                size_t nr = J->n - r0 < SIMD_ROWS_MAX ? J->n - r0 : SIMD_ROWS_MAX;
                mm_dot_rows(J, J->x + r0 * J->in, w, nr, d);
                for (size_t r = 0; r < nr; r++) {
                    float *y = J->y + (r0 + r) * J->out + o;
                    *y = J->beta != 0.0f ? *y * J->beta + d[r] : d[r];
                }
            }
        }
        return;
    }
    float *conv = J->conv + (size_t)i * J->conv_stride; /* (FWD_CONV_COLS, in) */
    for (size_t cc = c0; cc < c0 + nc; cc += FWD_CONV_COLS) {
        size_t ncc = c0 + nc - cc < FWD_CONV_COLS ? c0 + nc - cc : FWD_CONV_COLS;
        const uint8_t *src = J->Wp + cc * J->row_bytes;
        if (J->ptype == GGUF_DT_Q8_0)
            simd_q8_to_f32(conv, src, ncc * J->in);
        else
            simd_half_to_f32(conv, (const uint16_t *)src, ncc * J->in,
                             J->ptype == GGUF_DT_BF16);
        mm_sgemm(J, conv, cc, ncc);
    }
}

/* y (n, out) = x (n, in) @ W^T (+ beta * y), W (out, in) row-major, given as f32 (W) or
 * packed rows (Wp; exactly one is non-NULL, model.h). The output columns are split over
 * the compute pool (OpenBLAS itself runs single-threaded: one pool of threads for
 * everything, no BLAS threads spinning against ours). */
static void matmul(const struct fwd *f, float *y, const float *x, const float *W,
                   const uint8_t *Wp, size_t n, size_t in, size_t out, float beta)
{
    size_t tasks = (size_t)f->tp->n_threads * FWD_MM_TASKS_PER_THREAD;
    size_t by_work = n * in * out / FWD_PAR_MIN_MACS; /* tiny products: fewer tasks */
    tasks = by_work < tasks ? (by_work ? by_work : 1) : tasks;
    size_t cols = (out + tasks - 1) / tasks;
    cols = (cols + FWD_MM_COL_ALIGN - 1) / FWD_MM_COL_ALIGN * FWD_MM_COL_ALIGN;
    struct mm_job job = {.y = y,
                         .x = x,
                         .W = W,
                         .Wp = Wp,
                         .ptype = f->m->pack_type,
                         .row_bytes = gguf_row_bytes(f->m->pack_type, in),
                         .dot = n <= FWD_DOT_ROWS_MAX,
                         .conv = f->conv,
                         .conv_stride = f->conv_stride,
                         .n = n,
                         .in = in,
                         .out = out,
                         .cols = cols,
                         .beta = beta};
    tpool_run(f->tp, mm_task, &job, (uint32_t)((out + cols - 1) / cols));
}

/* Rotates adjacent pairs (v[2i], v[2i+1]) of each of n_heads heads by cs (head_dim,). */
static void rope_heads(float *v, const float *cs, uint32_t n_heads, uint32_t head_dim)
{
    for (uint32_t h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * head_dim;
        for (uint32_t i = 0; i < head_dim; i += 2) {
            float c = cs[i], s = cs[i + 1], a = x[i], b = x[i + 1];
            x[i] = a * c - b * s;
            x[i + 1] = a * s + b * c;
        }
    }
}

/* The one place the K/V dtype varies: a dot with / an update from one K or V vector. */
static inline float kv_dot(const struct kv_view *kv, const float *q, const uint8_t *vec)
{
    return kv->kv_dtype == KV_DTYPE_F16 ? simd_dot_f16(q, (const uint16_t *)vec, kv->head_dim)
                                        : simd_dot_f32(q, (const float *)vec, kv->head_dim);
}

static inline void kv_axpy(const struct kv_view *kv, float *acc, float c, float w,
                           const uint8_t *vec)
{
    if (kv->kv_dtype == KV_DTYPE_F16)
        simd_scale_axpy_f16(acc, c, w, (const uint16_t *)vec, kv->head_dim);
    else
        simd_scale_axpy_f32(acc, c, w, (const float *)vec, kv->head_dim);
}

static inline void kv_store(const struct kv_view *kv, uint8_t *row, uint32_t t, const float *v)
{
    size_t hd = kv->head_dim;
    if (kv->kv_dtype == KV_DTYPE_F16) {
        uint16_t *o = (uint16_t *)row + (size_t)t * hd;
        for (size_t d = 0; d < hd; d++)
            o[d] = simd_f32_to_f16(v[d]);
    } else {
        memcpy((float *)row + (size_t)t * hd, v, hd * sizeof(float));
    }
}

struct att_job {
    const struct fwd *f;
    const struct kv_view *kv;
    const struct fwd_seq *seqs;
    uint32_t layer;
};

/* Resolves the K and V vector addresses of positions [t0, t0 + nt) of a sequence (they
 * may span blocks) into kp/vp, and starts fetching the block after the last one. */
static void att_tile_ptrs(const struct kv_view *kv, const struct fwd_seq *sq, uint32_t layer,
                          uint32_t g, uint32_t t0, uint32_t nt, uint32_t n_ctx,
                          const uint8_t **kp, const uint8_t **vp)
{
    const uint32_t bs = kv->block_size;
    const size_t vec = (size_t)kv->head_dim * kv->elem_bytes; /* bytes per slot vector */
    uint32_t b = t0 / bs, slot = t0 % bs;
    const uint8_t *K = kv_row(kv, sq->blocks[b], layer, 0, g); /* (bs, hd) */
    const uint8_t *V = kv_row(kv, sq->blocks[b], layer, 1, g); /* (bs, hd) */
    for (uint32_t t = 0; t < nt; t++) {
        kp[t] = K + slot * vec;
        vp[t] = V + slot * vec;
        if (++slot == bs && t + 1 < nt) {
            slot = 0;
            b++;
            K = kv_row(kv, sq->blocks[b], layer, 0, g);
            V = kv_row(kv, sq->blocks[b], layer, 1, g);
        }
    }
    if ((size_t)(b + 1) * bs < n_ctx) {
        /* the next block lies elsewhere in the pool: start fetching its rows now */
        const uint8_t *nk = kv_row(kv, sq->blocks[b + 1], layer, 0, g);
        const uint8_t *nv = kv_row(kv, sq->blocks[b + 1], layer, 1, g);
        for (size_t off = 0; off < bs * vec; off += FWD_CACHE_LINE) {
            __builtin_prefetch(nk + off);
            __builtin_prefetch(nv + off);
        }
    }
}

/* Task (row r, kv head g): the group of q heads sharing kv head g attend over positions
 * 0..pos of the row's sequence, FWD_TILE positions at a time (a tile may span pages),
 * online softmax. Pages are read where they lie. */
static void att_task(void *ctx, uint32_t task)
{
    const struct att_job *J = ctx;
    const struct fwd *f = J->f;
    const struct model *m = f->m;
    const struct kv_view *kv = J->kv;
    const uint32_t hd = m->head_dim, group = m->n_heads / m->n_kv_heads;
    const uint32_t r = task / m->n_kv_heads, g = task % m->n_kv_heads;
    const struct fwd_seq *sq = &J->seqs[f->row_seq[r]];
    const uint32_t n_ctx = f->row_pos[r] + 1;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *q = f->qkv + (size_t)r * (m->q_dim + 2 * m->kv_dim) + (size_t)g * group * hd;
    float acc[FWD_GROUP_ELEMS_MAX]; /* (group, hd) unnormalised outputs */
    float mx[FWD_GROUP_ELEMS_MAX / 2], sum[FWD_GROUP_ELEMS_MAX / 2]; /* (group,) */
    float sc[FWD_TILE];             /* (tile,) scores of one head */
    const uint8_t *kp[FWD_TILE], *vp[FWD_TILE]; /* (tile,) K and V vectors in the pages */

    memset(acc, 0, (size_t)group * hd * sizeof(float));
    for (uint32_t j = 0; j < group; j++) {
        mx[j] = -INFINITY;
        sum[j] = 0.0f;
    }
    for (uint32_t t0 = 0; t0 < n_ctx; t0 += FWD_TILE) {
        const uint32_t nt = n_ctx - t0 < FWD_TILE ? n_ctx - t0 : FWD_TILE;
        att_tile_ptrs(kv, sq, J->layer, g, t0, nt, n_ctx, kp, vp);
        for (uint32_t j = 0; j < group; j++) {
            float tile_max = -INFINITY;
            for (uint32_t t = 0; t < nt; t++) {
                sc[t] = kv_dot(kv, q + (size_t)j * hd, kp[t]) * scale;
                tile_max = sc[t] > tile_max ? sc[t] : tile_max;
            }
            float new_max = tile_max > mx[j] ? tile_max : mx[j];
            float c = expf(mx[j] - new_max); /* rescales what was summed so far */
            float *a = acc + (size_t)j * hd;
            sum[j] *= c;
            for (uint32_t t = 0; t < nt; t++) {
                float w = expf(sc[t] - new_max);
                sum[j] += w;
                kv_axpy(kv, a, t == 0 ? c : 1.0f, w, vp[t]);
            }
            mx[j] = new_max;
        }
    }
    float *out = f->att + (size_t)r * m->q_dim + (size_t)g * group * hd;
    for (uint32_t j = 0; j < group; j++)
        for (uint32_t d = 0; d < hd; d++)
            out[(size_t)j * hd + d] = acc[(size_t)j * hd + d] / sum[j];
}

static void fwd_attention(struct fwd *f, const struct kv_view *kv, const struct fwd_seq *seqs,
                          uint32_t layer)
{
    const struct model *m = f->m;
    const size_t qkv_dim = m->q_dim + 2 * m->kv_dim;
    /* rotary on q and k of every row, then the new K/V into the pages */
    for (uint32_t r = 0; r < f->n_rows; r++) {
        float *row = f->qkv + r * qkv_dim;
        const float *cs = f->rope_cs + (size_t)r * m->head_dim;
        rope_heads(row, cs, m->n_heads, m->head_dim);
        rope_heads(row + m->q_dim, cs, m->n_kv_heads, m->head_dim);
        const struct fwd_seq *sq = &seqs[f->row_seq[r]];
        uint32_t pos = f->row_pos[r], page = sq->blocks[pos / kv->block_size];
        uint32_t slot = pos % kv->block_size;
        for (uint32_t g = 0; g < m->n_kv_heads; g++) {
            kv_store(kv, kv_row(kv, page, layer, 0, g), slot,
                     row + m->q_dim + (size_t)g * m->head_dim);
            kv_store(kv, kv_row(kv, page, layer, 1, g), slot,
                     row + m->q_dim + m->kv_dim + (size_t)g * m->head_dim);
        }
    }
    struct att_job job = {f, kv, seqs, layer};
    size_t macs = 0; /* q.k and w.v multiply-adds of this layer, to skip fan-out when tiny */
    for (uint32_t r = 0; r < f->n_rows; r++)
        macs += (size_t)(f->row_pos[r] + 1) * 2 * m->q_dim;
    if (macs < FWD_PAR_MIN_MACS) {
        for (uint32_t t = 0; t < f->n_rows * m->n_kv_heads; t++)
            att_task(&job, t);
        return;
    }
    tpool_run(f->tp, att_task, &job, f->n_rows * m->n_kv_heads);
}

void fwd_run(struct fwd *f, const struct kv_view *kv, const struct fwd_seq *seqs,
             uint32_t n_seqs)
{
    const struct model *m = f->m;
    const size_t dim = m->dim, ff = m->ff, qkv_dim = m->q_dim + 2 * m->kv_dim;
    uint32_t r = 0;
    /* rows: embeddings, positions, rotary cos/sin */
    for (uint32_t s = 0; s < n_seqs; s++)
        for (uint32_t t = 0; t < seqs[s].n_tokens; t++, r++) {
            uint32_t pos = seqs[s].pos0 + t;
            f->row_seq[r] = s;
            f->row_pos[r] = pos;
            memcpy(f->x + r * dim, m->tok_embd + (size_t)seqs[s].tokens[t] * dim,
                   dim * sizeof(float));
            float *cs = f->rope_cs + (size_t)r * m->head_dim;
            for (uint32_t i = 0; i < m->head_dim / 2; i++) {
                double angle = (double)pos * (double)m->inv_freq[i];
                cs[2 * i] = (float)cos(angle);
                cs[2 * i + 1] = (float)sin(angle);
            }
        }
    f->n_rows = r;
    const size_t n = r;
    for (uint32_t l = 0; l < m->n_layers; l++) {
        const struct model_layer *L = &m->layers[l];
        rmsnorm_rows(f->xb, f->x, L->attn_norm, n, dim, m->eps);
        matmul(f, f->qkv, f->xb, L->wqkv, L->wqkv_p, n, dim, qkv_dim, 0.0f);
        fwd_attention(f, kv, seqs, l);
        matmul(f, f->x, f->att, L->wo, L->wo_p, n, m->q_dim, dim, 1.0f);
        rmsnorm_rows(f->xb, f->x, L->ffn_norm, n, dim, m->eps);
        matmul(f, f->h13, f->xb, L->w13, L->w13_p, n, dim, 2 * ff, 0.0f);
        for (size_t i = 0; i < n; i++) {
            const float *gate = f->h13 + i * 2 * ff, *up = gate + ff;
            float *h = f->hb + i * ff;
            for (size_t j = 0; j < ff; j++)
                h[j] = gate[j] / (1.0f + expf(-gate[j])) * up[j];
        }
        matmul(f, f->x, f->hb, L->w2, L->w2_p, n, ff, dim, 1.0f);
    }
    rmsnorm_rows(f->xb, f->x, m->out_norm, n, dim, m->eps);
}

void fwd_logits(struct fwd *f, const uint32_t *rows, uint32_t n, float *out)
{
    const struct model *m = f->m;
    for (uint32_t i = 0; i < n; i++)
        memcpy(f->x + (size_t)i * m->dim, f->xb + (size_t)rows[i] * m->dim,
               m->dim * sizeof(float));
    matmul(f, out, f->x, m->output, m->output_p, n, m->dim, m->vocab, 0.0f);
}

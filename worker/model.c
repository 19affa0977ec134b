#include "worker/model.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is tensor `name` stored in the model's pack_type (so its rows can be kept)? */
static bool model_is_packed(const struct gguf_file *g, const struct model *m, const char *name)
{
    const struct gguf_tensor *t = gguf_tensor_find(g, name);
    return m->pack_type != GGUF_DT_F32 && t && t->type == m->pack_type;
}

/* Dequantizes tensor `name` (rows x cols, already shape-checked by gguf_llama_validate)
 * into dst (if not NULL), row by row; dst_p (non-NULL only for a pack_type tensor) gets
 * the raw bits. */
static int model_copy_p(const struct gguf_file *g, const char *name, uint64_t rows,
                        uint64_t cols, float *dst, uint8_t *dst_p)
{
    const struct gguf_tensor *t = gguf_tensor_find(g, name);
    if (!t || t->n_elems != rows * cols) {
        log_err("cannot load '%s': tensor '%s' missing or of the wrong size", g->path, name);
        return KVD_EMODEL;
    }
    uint64_t rb = gguf_row_bytes(t->type, cols);
    if (rb == 0) {
        log_err("cannot load '%s': tensor '%s' rows of %llu elements do not fit type %s",
                g->path, name, (unsigned long long)cols, gguf_dtype_name(t->type));
        return KVD_EMODEL;
    }
    const uint8_t *src = t->data;
    if (dst_p)
        memcpy(dst_p, src, rows * rb);
    for (uint64_t r = 0; dst && r < rows; r++) {
        int rc = gguf_dequant_row(t->type, src + r * rb, dst + r * cols, cols);
        if (rc < 0) {
            log_err("cannot load '%s': tensor '%s' of type %s: %s", g->path, name,
                    gguf_dtype_name(t->type), kvd_strerror(rc));
            return KVD_EMODEL;
        }
    }
    return 0;
}

static int model_copy(const struct gguf_file *g, const char *name, uint64_t rows, uint64_t cols,
                      float *dst)
{
    return model_copy_p(g, name, rows, cols, dst, NULL);
}

static int model_copy_layer(const struct gguf_file *g, struct model *m, uint32_t l)
{
    struct model_layer *L = &m->layers[l];
    char n[GGUF_MAX_NAME_LEN];
    int rc;
#define LAYER_TENSOR(suffix, rows, cols, dst, dst_p)                                           \
    (snprintf(n, sizeof(n), "blk.%u." suffix, l), model_copy_p(g, n, rows, cols, dst, dst_p))
#define OFF(p, off) ((p) ? (p) + (off) : NULL)
    size_t d = m->dim, qd = m->q_dim, kvd = m->kv_dim, ff = m->ff;
    size_t rb = gguf_row_bytes(m->pack_type, d); /* bytes of a packed row of `dim` inputs */
    if ((rc = LAYER_TENSOR("attn_norm.weight", 1, d, L->attn_norm, NULL)) < 0 ||
        (rc = LAYER_TENSOR("attn_q.weight", qd, d, L->wqkv, L->wqkv_p)) < 0 ||
        (rc = LAYER_TENSOR("attn_k.weight", kvd, d, OFF(L->wqkv, qd * d),
                           OFF(L->wqkv_p, qd * rb))) < 0 ||
        (rc = LAYER_TENSOR("attn_v.weight", kvd, d, OFF(L->wqkv, (qd + kvd) * d),
                           OFF(L->wqkv_p, (qd + kvd) * rb))) < 0 ||
        (rc = LAYER_TENSOR("attn_output.weight", d, qd, L->wo, L->wo_p)) < 0 ||
        (rc = LAYER_TENSOR("ffn_norm.weight", 1, d, L->ffn_norm, NULL)) < 0 ||
        (rc = LAYER_TENSOR("ffn_gate.weight", ff, d, L->w13, L->w13_p)) < 0 ||
        (rc = LAYER_TENSOR("ffn_up.weight", ff, d, OFF(L->w13, ff * d), OFF(L->w13_p, ff * rb))) <
            0 ||
        (rc = LAYER_TENSOR("ffn_down.weight", d, ff, L->w2, L->w2_p)) < 0)
        return rc;
#undef OFF
#undef LAYER_TENSOR
    return 0;
}

/* A matrix is kept packed (the file's rows) when every tensor fused into it has the
 * model's pack_type in the file, else in f32 (exactly one of the two is allocated). */
static int model_alloc_layer(const struct gguf_file *g, struct model *m, uint32_t l,
                             struct model_layer *L)
{
    size_t d = m->dim;
    char a[GGUF_MAX_NAME_LEN], b[GGUF_MAX_NAME_LEN], c[GGUF_MAX_NAME_LEN];
    snprintf(a, sizeof(a), "blk.%u.attn_q.weight", l);
    snprintf(b, sizeof(b), "blk.%u.attn_k.weight", l);
    snprintf(c, sizeof(c), "blk.%u.attn_v.weight", l);
    if (model_is_packed(g, m, a) && model_is_packed(g, m, b) && model_is_packed(g, m, c) &&
        !(L->wqkv_p = calloc((size_t)(m->q_dim + 2 * m->kv_dim), gguf_row_bytes(m->pack_type, d))))
        return -ENOMEM;
    snprintf(a, sizeof(a), "blk.%u.attn_output.weight", l);
    if (model_is_packed(g, m, a) && !(L->wo_p = calloc(d, gguf_row_bytes(m->pack_type, m->q_dim))))
        return -ENOMEM;
    snprintf(a, sizeof(a), "blk.%u.ffn_gate.weight", l);
    snprintf(b, sizeof(b), "blk.%u.ffn_up.weight", l);
    if (model_is_packed(g, m, a) && model_is_packed(g, m, b) &&
        !(L->w13_p = calloc(2 * (size_t)m->ff, gguf_row_bytes(m->pack_type, d))))
        return -ENOMEM;
    snprintf(a, sizeof(a), "blk.%u.ffn_down.weight", l);
    if (model_is_packed(g, m, a) && !(L->w2_p = calloc(d, gguf_row_bytes(m->pack_type, m->ff))))
        return -ENOMEM;
    L->attn_norm = calloc(d, sizeof(float));
    L->ffn_norm = calloc(d, sizeof(float));
    if (!L->wqkv_p)
        L->wqkv = calloc((size_t)(m->q_dim + 2 * m->kv_dim) * d, sizeof(float));
    if (!L->wo_p)
        L->wo = calloc(d * m->q_dim, sizeof(float));
    if (!L->w13_p)
        L->w13 = calloc(2 * (size_t)m->ff * d, sizeof(float));
    if (!L->w2_p)
        L->w2 = calloc(d * m->ff, sizeof(float));
    return L->attn_norm && L->ffn_norm && (L->wqkv || L->wqkv_p) && (L->wo || L->wo_p) &&
                   (L->w13 || L->w13_p) && (L->w2 || L->w2_p)
               ? 0
               : -ENOMEM;
}

int model_load(struct model *m, const char *path)
{
    struct gguf_file g;
    char err[GGUF_ERR_LEN];
    int rc;
    memset(m, 0, sizeof(*m));
    if ((rc = gguf_open(&g, path, err)) < 0) {
        log_err("cannot load model '%s': %s", path, err);
        return rc;
    }
    if ((rc = gguf_llama_hparams(&g, &m->hp, err)) < 0 ||
        (rc = gguf_llama_validate(&g, &m->hp, err)) < 0) {
        log_err("cannot load model '%s': %s", path, err);
        goto out_close;
    }
    snprintf(m->path, sizeof(m->path), "%s", path);
    m->fingerprint = gguf_model_fingerprint(&g);
    m->dim = m->hp.n_embd;
    m->n_layers = m->hp.n_layer;
    m->n_heads = m->hp.n_head;
    m->n_kv_heads = m->hp.n_head_kv;
    m->head_dim = m->hp.head_dim;
    m->ff = m->hp.n_ff;
    m->vocab = m->hp.n_vocab;
    m->q_dim = m->n_heads * m->head_dim;
    m->kv_dim = m->n_kv_heads * m->head_dim;
    m->eps = m->hp.rms_norm_eps;
    rc = -ENOMEM;
    m->inv_freq = calloc(m->head_dim / 2, sizeof(float));
    m->tok_embd = calloc((size_t)m->vocab * m->dim, sizeof(float));
    m->out_norm = calloc(m->dim, sizeof(float));
    m->layers = calloc(m->n_layers, sizeof(*m->layers));
    if (!m->inv_freq || !m->tok_embd || !m->out_norm || !m->layers)
        goto out_nomem;
    gguf_llama_rope_inv_freq(&g, &m->hp, m->inv_freq);
    const struct gguf_tensor *q0 = gguf_tensor_find(&g, "blk.0.attn_q.weight");
    m->pack_type = q0 && (q0->type == GGUF_DT_F16 || q0->type == GGUF_DT_BF16 ||
                          q0->type == GGUF_DT_Q8_0)
                       ? q0->type
                       : GGUF_DT_F32;
    const char *out_name = m->hp.tied_output ? "token_embd.weight" : "output.weight";
    if (model_is_packed(&g, m, out_name) &&
        !(m->output_p = calloc(m->vocab, gguf_row_bytes(m->pack_type, m->dim))))
        goto out_nomem;
    /* f32 output only when there is no packed copy (tied: token_embd's f32 rows, which the
     * embedding lookup needs anyway) */
    if (m->hp.tied_output)
        m->output = m->output_p ? NULL : m->tok_embd;
    else if (!m->output_p && !(m->output = calloc((size_t)m->vocab * m->dim, sizeof(float))))
        goto out_nomem;
    if ((rc = model_copy_p(&g, "token_embd.weight", m->vocab, m->dim, m->tok_embd,
                           m->hp.tied_output ? m->output_p : NULL)) < 0 ||
        (rc = model_copy(&g, "output_norm.weight", 1, m->dim, m->out_norm)) < 0 ||
        (!m->hp.tied_output &&
         (rc = model_copy_p(&g, "output.weight", m->vocab, m->dim, m->output, m->output_p)) < 0))
        goto out_release;
    for (uint32_t l = 0; l < m->n_layers; l++) {
        if (model_alloc_layer(&g, m, l, &m->layers[l]) < 0) {
            rc = -ENOMEM;
            goto out_nomem;
        }
        if ((rc = model_copy_layer(&g, m, l)) < 0)
            goto out_release;
    }
    gguf_close(&g);
    return 0;
out_nomem:
    log_err("cannot load model '%s': out of memory for f32 weights", path);
out_release:
    model_release(m);
out_close:
    gguf_close(&g);
    return rc;
}

void model_release(struct model *m)
{
    for (uint32_t l = 0; m->layers && l < m->n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        free(L->attn_norm);
        free(L->ffn_norm);
        free(L->wqkv);
        free(L->wo);
        free(L->w13);
        free(L->w2);
        free(L->wqkv_p);
        free(L->wo_p);
        free(L->w13_p);
        free(L->w2_p);
    }
    free(m->output_p);
    free(m->layers);
    if (m->output != m->tok_embd)
        free(m->output); /* NULL when only a packed copy exists */
    free(m->tok_embd);
    free(m->out_norm);
    free(m->inv_freq);
    memset(m, 0, sizeof(*m));
}

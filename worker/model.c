#include "worker/model.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Dequantizes tensor `name` (rows x cols, already shape-checked by gguf_llama_validate)
 * into dst, row by row. */
static int model_copy(const struct gguf_file *g, const char *name, uint64_t rows, uint64_t cols,
                      float *dst)
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
    for (uint64_t r = 0; r < rows; r++) {
        int rc = gguf_dequant_row(t->type, src + r * rb, dst + r * cols, cols);
        if (rc < 0) {
            log_err("cannot load '%s': tensor '%s' of type %s: %s", g->path, name,
                    gguf_dtype_name(t->type), kvd_strerror(rc));
            return KVD_EMODEL;
        }
    }
    return 0;
}

static int model_copy_layer(const struct gguf_file *g, struct model *m, uint32_t l)
{
    struct model_layer *L = &m->layers[l];
    char n[GGUF_MAX_NAME_LEN];
    int rc;
#define LAYER_TENSOR(suffix, rows, cols, dst)                                                  \
    (snprintf(n, sizeof(n), "blk.%u." suffix, l), model_copy(g, n, rows, cols, dst))
    size_t d = m->dim;
    if ((rc = LAYER_TENSOR("attn_norm.weight", 1, d, L->attn_norm)) < 0 ||
        (rc = LAYER_TENSOR("attn_q.weight", m->q_dim, d, L->wqkv)) < 0 ||
        (rc = LAYER_TENSOR("attn_k.weight", m->kv_dim, d, L->wqkv + m->q_dim * d)) < 0 ||
        (rc = LAYER_TENSOR("attn_v.weight", m->kv_dim, d,
                           L->wqkv + (m->q_dim + m->kv_dim) * d)) < 0 ||
        (rc = LAYER_TENSOR("attn_output.weight", d, m->q_dim, L->wo)) < 0 ||
        (rc = LAYER_TENSOR("ffn_norm.weight", 1, d, L->ffn_norm)) < 0 ||
        (rc = LAYER_TENSOR("ffn_gate.weight", m->ff, d, L->w13)) < 0 ||
        (rc = LAYER_TENSOR("ffn_up.weight", m->ff, d, L->w13 + (size_t)m->ff * d)) < 0 ||
        (rc = LAYER_TENSOR("ffn_down.weight", d, m->ff, L->w2)) < 0)
        return rc;
#undef LAYER_TENSOR
    return 0;
}

static int model_alloc_layer(struct model *m, struct model_layer *L)
{
    size_t d = m->dim;
    L->attn_norm = calloc(d, sizeof(float));
    L->ffn_norm = calloc(d, sizeof(float));
    L->wqkv = calloc((size_t)(m->q_dim + 2 * m->kv_dim) * d, sizeof(float));
    L->wo = calloc(d * m->q_dim, sizeof(float));
    L->w13 = calloc(2 * (size_t)m->ff * d, sizeof(float));
    L->w2 = calloc(d * m->ff, sizeof(float));
    return L->attn_norm && L->ffn_norm && L->wqkv && L->wo && L->w13 && L->w2 ? 0 : -ENOMEM;
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
    if (m->hp.tied_output) {
        m->output = m->tok_embd;
    } else if (!(m->output = calloc((size_t)m->vocab * m->dim, sizeof(float)))) {
        goto out_nomem;
    }
    gguf_llama_rope_inv_freq(&g, &m->hp, m->inv_freq);
    if ((rc = model_copy(&g, "token_embd.weight", m->vocab, m->dim, m->tok_embd)) < 0 ||
        (rc = model_copy(&g, "output_norm.weight", 1, m->dim, m->out_norm)) < 0 ||
        (!m->hp.tied_output &&
         (rc = model_copy(&g, "output.weight", m->vocab, m->dim, m->output)) < 0))
        goto out_release;
    for (uint32_t l = 0; l < m->n_layers; l++) {
        if (model_alloc_layer(m, &m->layers[l]) < 0) {
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
    }
    free(m->layers);
    if (m->output != m->tok_embd)
        free(m->output);
    free(m->tok_embd);
    free(m->out_norm);
    free(m->inv_freq);
    memset(m, 0, sizeof(*m));
}

/* gguf_llama.c — the llama architecture on top of the GGUF reader: hyper-parameters,
 * the tensor checklist, rotary frequencies and the model fingerprint (contract: gguf.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "common/err.h"
#include "common/gguf_impl.h"
#include "common/gguf.h"

#define LLAMA_DEFAULT_ROPE_BASE 10000.0f /* Llama 2's theta, when the key is absent */
#define LLAMA_DEFAULT_RMS_EPS 1e-5f      /* Llama 2's epsilon, when the key is absent */
#define LLAMA3_DEFAULT_LOW_FREQ 1.0f     /* Meta's reference (Llama 3.1) */
#define LLAMA3_DEFAULT_HIGH_FREQ 4.0f

/* Required u32 key in [1, max]. */
static int need_u32(const struct gguf_file *g, const char *key, uint32_t max, uint32_t *out,
                    char *err)
{
    int rc = gguf_get_u32(g, key, out, err);
    if (rc == -ENOENT) {
        gguf_seterr(err, g->path, "metadata '%s' is missing", key);
        return KVD_EMODEL;
    }
    if (rc)
        return rc;
    if (*out == 0 || *out > max) {
        gguf_seterr(err, g->path, "metadata '%s' = %u is out of range (1..%u)", key, *out, max);
        return KVD_EMODEL;
    }
    return 0;
}

/* Optional u32/f32 key: keeps *out (the default) when absent. */
static int opt_u32(const struct gguf_file *g, const char *key, uint32_t *out, char *err)
{
    int rc = gguf_get_u32(g, key, out, err);
    return rc == -ENOENT ? 0 : rc;
}

static int opt_f32(const struct gguf_file *g, const char *key, float *out, char *err)
{
    int rc = gguf_get_f32(g, key, out, err);
    if (rc == 0 && !isfinite(*out)) {
        gguf_seterr(err, g->path, "metadata '%s' is not a finite number", key);
        return KVD_EMODEL;
    }
    return rc == -ENOENT ? 0 : rc;
}

static int read_rope_scaling(const struct gguf_file *g, struct gguf_llama_hparams *hp, char *err)
{
    struct gguf_str type;
    int rc = gguf_get_str(g, "llama.rope.scaling.type", &type, err);

    hp->rope_scaling = GGUF_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    hp->rope_low_freq_factor = LLAMA3_DEFAULT_LOW_FREQ;
    hp->rope_high_freq_factor = LLAMA3_DEFAULT_HIGH_FREQ;
    hp->rope_orig_ctx = 0;
    if (rc == -ENOENT || (rc == 0 && gguf_str_eq(type, "none")))
        return 0;
    if (rc)
        return rc;
    if (gguf_str_eq(type, "linear"))
        hp->rope_scaling = GGUF_ROPE_SCALING_LINEAR;
    else if (gguf_str_eq(type, "llama3"))
        hp->rope_scaling = GGUF_ROPE_SCALING_LLAMA3;
    else {
        gguf_seterr(err, g->path, "rope scaling '%.*s' is not supported (none, linear, llama3)",
               (int)(type.len > 32 ? 32 : type.len), type.p);
        return KVD_EMODEL;
    }
    if ((rc = opt_f32(g, "llama.rope.scaling.factor", &hp->rope_factor, err)))
        return rc;
    if (!(hp->rope_factor >= 1.0f)) {
        gguf_seterr(err, g->path, "llama.rope.scaling.factor = %g, must be >= 1",
               (double)hp->rope_factor);
        return KVD_EMODEL;
    }
    if (hp->rope_scaling != GGUF_ROPE_SCALING_LLAMA3)
        return 0;
    if ((rc = opt_f32(g, "llama.rope.scaling.low_freq_factor", &hp->rope_low_freq_factor, err)) ||
        (rc = opt_f32(g, "llama.rope.scaling.high_freq_factor", &hp->rope_high_freq_factor, err)))
        return rc;
    if ((rc = need_u32(g, "llama.rope.scaling.original_context_length", UINT32_MAX,
                       &hp->rope_orig_ctx, err)))
        return rc;
    if (!(hp->rope_high_freq_factor > hp->rope_low_freq_factor) ||
        !(hp->rope_low_freq_factor > 0.0f)) {
        gguf_seterr(err, g->path, "llama3 rope: need 0 < low_freq_factor (%g) < high_freq_factor (%g)",
               (double)hp->rope_low_freq_factor, (double)hp->rope_high_freq_factor);
        return KVD_EMODEL;
    }
    return 0;
}

int gguf_llama_hparams(const struct gguf_file *g, struct gguf_llama_hparams *out,
                       char err[GGUF_ERR_LEN])
{
    struct gguf_llama_hparams hp = {0};
    struct gguf_str arch;
    struct gguf_arr toks;
    uint32_t u, n_rot;
    int rc;

    if ((rc = gguf_get_str(g, "general.architecture", &arch, err))) {
        if (rc == -ENOENT)
            gguf_seterr(err, g->path, "metadata 'general.architecture' is missing");
        return KVD_EMODEL;
    }
    if (!gguf_str_eq(arch, "llama")) {
        gguf_seterr(err, g->path, "architecture '%.*s' is not supported (kvd runs 'llama' only)",
               (int)(arch.len > 64 ? 64 : arch.len), arch.p);
        return KVD_EMODEL;
    }
    snprintf(hp.arch, sizeof(hp.arch), "llama");
    u = 0;
    if ((rc = opt_u32(g, "llama.expert_count", &u, err)))
        return rc;
    if (u > 0) {
        gguf_seterr(err, g->path, "mixture-of-experts llama (%u experts) is not supported", u);
        return KVD_EMODEL;
    }
    if ((rc = need_u32(g, "llama.embedding_length", GGUF_LLAMA_MAX_EMBD, &hp.n_embd, err)) ||
        (rc = need_u32(g, "llama.block_count", GGUF_LLAMA_MAX_LAYERS, &hp.n_layer, err)) ||
        (rc = need_u32(g, "llama.attention.head_count", GGUF_LLAMA_MAX_HEADS, &hp.n_head, err)) ||
        (rc = need_u32(g, "llama.feed_forward_length", GGUF_LLAMA_MAX_FF, &hp.n_ff, err)) ||
        (rc = need_u32(g, "llama.context_length", UINT32_MAX, &hp.n_ctx_train, err)))
        return rc;
    hp.n_head_kv = hp.n_head;
    if ((rc = opt_u32(g, "llama.attention.head_count_kv", &hp.n_head_kv, err)))
        return rc;
    if (hp.n_head_kv == 0 || hp.n_head % hp.n_head_kv) {
        gguf_seterr(err, g->path, "head_count_kv %u does not divide head_count %u", hp.n_head_kv,
               hp.n_head);
        return KVD_EMODEL;
    }
    hp.head_dim = hp.n_embd / hp.n_head;
    if (!gguf_kv_find(g, "llama.attention.key_length") && hp.n_embd % hp.n_head) {
        gguf_seterr(err, g->path, "head_count %u does not divide embedding_length %u", hp.n_head,
               hp.n_embd);
        return KVD_EMODEL;
    }
    if ((rc = opt_u32(g, "llama.attention.key_length", &hp.head_dim, err)))
        return rc;
    u = hp.head_dim;
    if ((rc = opt_u32(g, "llama.attention.value_length", &u, err)))
        return rc;
    if (u != hp.head_dim) {
        gguf_seterr(err, g->path, "value_length %u differs from key_length %u (not supported)", u,
               hp.head_dim);
        return KVD_EMODEL;
    }
    if (hp.head_dim == 0 || hp.head_dim % 2 || hp.head_dim > GGUF_LLAMA_MAX_HEAD_DIM) {
        gguf_seterr(err, g->path, "head dimension %u must be even and in 2..%d", hp.head_dim,
               GGUF_LLAMA_MAX_HEAD_DIM);
        return KVD_EMODEL;
    }
    n_rot = hp.head_dim;
    if ((rc = opt_u32(g, "llama.rope.dimension_count", &n_rot, err)))
        return rc;
    if (n_rot != hp.head_dim) {
        gguf_seterr(err, g->path, "partial rotary (rope.dimension_count %u of head dim %u) is not "
                             "supported", n_rot, hp.head_dim);
        return KVD_EMODEL;
    }
    hp.rope_freq_base = LLAMA_DEFAULT_ROPE_BASE;
    hp.rms_norm_eps = LLAMA_DEFAULT_RMS_EPS;
    if ((rc = opt_f32(g, "llama.rope.freq_base", &hp.rope_freq_base, err)) ||
        (rc = opt_f32(g, "llama.attention.layer_norm_rms_epsilon", &hp.rms_norm_eps, err)))
        return rc;
    if (!(hp.rope_freq_base > 1.0f) || !(hp.rms_norm_eps > 0.0f) || hp.rms_norm_eps > 1.0f) {
        gguf_seterr(err, g->path, "rope.freq_base %g or rms epsilon %g out of range",
               (double)hp.rope_freq_base, (double)hp.rms_norm_eps);
        return KVD_EMODEL;
    }
    if ((rc = read_rope_scaling(g, &hp, err)))
        return rc;

    rc = gguf_get_u32(g, "llama.vocab_size", &hp.n_vocab, err);
    if (rc == -ENOENT) {
        const struct gguf_tensor *te = gguf_tensor_find(g, "token_embd.weight");
        if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, NULL) == 0)
            hp.n_vocab = (uint32_t)(toks.n > UINT32_MAX ? UINT32_MAX : toks.n);
        else if (te && te->n_dims == 2)
            hp.n_vocab = (uint32_t)(te->ne[1] > UINT32_MAX ? UINT32_MAX : te->ne[1]);
        rc = 0;
    }
    if (rc)
        return rc;
    if (hp.n_vocab == 0 || hp.n_vocab > GGUF_LLAMA_MAX_VOCAB) {
        gguf_seterr(err, g->path, "vocabulary size %u is out of range (1..%u)", hp.n_vocab,
               GGUF_LLAMA_MAX_VOCAB);
        return KVD_EMODEL;
    }
    hp.tied_output = gguf_tensor_find(g, "output.weight") == NULL;
    hp.has_rope_freqs = gguf_tensor_find(g, "rope_freqs.weight") != NULL;
    *out = hp;
    return 0;
}

static int check(const struct gguf_file *g, const char *name, uint32_t n_dims, uint64_t ne0,
                 uint64_t ne1, bool f32_only, char *err)
{
    const uint64_t ne[2] = {ne0, ne1};
    const struct gguf_tensor *t;
    int rc = gguf_tensor_get_checked(g, name, n_dims, ne, &t, err);
    if (rc)
        return rc;
    if (f32_only && t->type != GGUF_DT_F32) {
        gguf_seterr(err, g->path, "tensor '%s' has type %s, expected F32", name,
               gguf_dtype_name(t->type));
        return KVD_EMODEL;
    }
    return 0;
}

int gguf_llama_validate(const struct gguf_file *g, const struct gguf_llama_hparams *hp,
                        char err[GGUF_ERR_LEN])
{
    const uint64_t e = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim;
    const uint64_t kv = (uint64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    char nm[64];
    int rc;

    struct gguf_arr toks;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks, NULL) == 0 &&
        toks.n > hp->n_vocab) { /* the tokenizer could emit ids with no embedding row */
        gguf_seterr(err, g->path, "the tokenizer has %llu tokens but the model only %u embedding rows",
               (unsigned long long)toks.n, hp->n_vocab);
        return KVD_EMODEL;
    }
    if ((rc = check(g, "token_embd.weight", 2, e, hp->n_vocab, false, err)) ||
        (rc = check(g, "output_norm.weight", 1, e, 1, true, err)))
        return rc;
    if (!hp->tied_output && (rc = check(g, "output.weight", 2, e, hp->n_vocab, false, err)))
        return rc;
    if (hp->has_rope_freqs && (rc = check(g, "rope_freqs.weight", 1, hp->head_dim / 2, 1, true,
                                          err)))
        return rc;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        static const struct {
            const char *suffix;
            int which; /* shape: 0 {e}, 1 {e,q}, 2 {e,kv}, 3 {q,e}, 4 {e,ff}, 5 {ff,e} */
        } list[] = {
            {"attn_norm", 0}, {"attn_q", 1}, {"attn_k", 2}, {"attn_v", 2}, {"attn_output", 3},
            {"ffn_norm", 0},  {"ffn_gate", 4}, {"ffn_up", 4}, {"ffn_down", 5},
        };
        for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
            static const int n_dims[] = {1, 2, 2, 2, 2, 2};
            uint64_t ne0[] = {e, e, e, q, e, ff}, ne1[] = {1, q, kv, e, ff, e};
            int w = list[i].which;
            snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, list[i].suffix);
            if ((rc = check(g, nm, (uint32_t)n_dims[w], ne0[w], ne1[w], w == 0, err)))
                return rc;
        }
    }
    return 0;
}

void gguf_llama_rope_inv_freq(const struct gguf_file *g, const struct gguf_llama_hparams *hp,
                              float *inv_freq)
{
    const uint32_t half = hp->head_dim / 2;
    const struct gguf_tensor *ff = hp->has_rope_freqs ? gguf_tensor_find(g, "rope_freqs.weight")
                                                      : NULL;
    if (ff && (ff->type != GGUF_DT_F32 || ff->n_elems != half))
        ff = NULL; /* gguf_llama_validate() refuses such a file; stay in bounds anyway */
    for (uint32_t i = 0; i < half; i++) {
        double f = pow((double)hp->rope_freq_base, -2.0 * i / hp->head_dim);
        if (ff) {
            float d;
            memcpy(&d, (const float *)ff->data + i, sizeof(d));
            f /= d;
        } else if (hp->rope_scaling == GGUF_ROPE_SCALING_LINEAR) {
            f /= hp->rope_factor;
        } else if (hp->rope_scaling == GGUF_ROPE_SCALING_LLAMA3) {
            double orig = hp->rope_orig_ctx, lo = hp->rope_low_freq_factor;
            double hi = hp->rope_high_freq_factor, wavelen = 2.0 * M_PI / f;
            if (wavelen > orig / lo) {
                f /= hp->rope_factor;
            } else if (wavelen >= orig / hi) {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                f = (1.0 - smooth) * f / hp->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

static void h_u64(XXH3_state_t *st, uint64_t v)
{
    XXH3_64bits_update(st, &v, sizeof(v));
}

static void h_f32(XXH3_state_t *st, float v)
{
    XXH3_64bits_update(st, &v, sizeof(v));
}

uint64_t gguf_model_fingerprint(const struct gguf_file *g)
{
    struct gguf_llama_hparams hp;
    struct gguf_str arch = {"", 0};
    char err[GGUF_ERR_LEN];
    XXH3_state_t *st = XXH3_createState();
    uint64_t h;

    if (!st) /* no memory: a weaker but deterministic fingerprint (size and counts) */
        return (g->size * 0x9e3779b97f4a7c15ull) ^ (g->n_tensors << 32) ^ g->n_kv ^ 1;
    XXH3_64bits_reset(st);
    gguf_get_str(g, "general.architecture", &arch, NULL);
    h_u64(st, arch.len);
    XXH3_64bits_update(st, arch.p, arch.len);
    if (gguf_llama_hparams(g, &hp, err) == 0) {
        uint64_t u[] = {hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim,
                        hp.n_ff, hp.n_ctx_train, hp.rope_scaling, hp.rope_orig_ctx,
                        hp.has_rope_freqs, hp.tied_output};
        for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
            h_u64(st, u[i]);
        h_f32(st, hp.rope_freq_base);
        h_f32(st, hp.rope_factor);
        h_f32(st, hp.rope_low_freq_factor);
        h_f32(st, hp.rope_high_freq_factor);
        h_f32(st, hp.rms_norm_eps);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        size_t n = strlen(t->name);
        h_u64(st, n);
        XXH3_64bits_update(st, t->name, n);
        h_u64(st, t->type);
        h_u64(st, t->n_dims);
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            h_u64(st, t->ne[d]);
    }
    h_u64(st, g->size);
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h ? h : 1;
}

/* kvd-mkmodel — writes a valid Llama GGUF v3 file with deterministic random weights and a
 * real vocabulary, so tests and benchmarks never download a model.
 *
 * Weights: each tensor's values come from splitmix64 seeded with (seed, tensor name), so a
 * tensor does not depend on the order of the others; values are Irwin–Hall normals (sum
 * of four 16-bit uniforms: integer arithmetic only, identical on every machine) scaled by
 * 1/sqrt(fan_in) so activations stay near unit size through the layers. Norm weights are
 * 1 ± 0.1. Vocabulary (--vocab-kind):
 *   spm   (default) the SentencePiece vocabulary of --vocab-from (a GGUF, default the
 *         bundled stories260K.gguf), truncated to --vocab or padded with <unused_N>
 *         tokens; it must keep the 3 specials and 256 byte tokens (--vocab >= 259);
 *   bytes a synthetic SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, the
 *         printable ASCII characters (space as U+2581), then <unused_N>;
 *   gpt2  a small hand-made byte-level BPE vocabulary (the 256 GPT-2 byte symbols, a few
 *         merges of common English pairs), padded with <unused_N>.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "common/err.h"
#include "common/gguf.h"
#include "common/gguf_write.h"
#include "common/log.h"
#include "tools/mkmodel_vocab.h"

#define MK_NORM_JITTER 0.1f /* norm weights are 1 +- this */

struct mk_opts {
    uint32_t dim, layers, heads, kv_heads, ffn, vocab, ctx;
    enum gguf_dtype dtype;
    uint64_t seed;
    float rope_base, norm_eps;
    bool tied;
    const char *out, *vocab_from;
    enum mk_vocab_kind vocab_kind;
};

struct mk_fill {
    const struct mk_opts *o;
};

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Approximately N(0, 1): sum of four uniforms in [0, 1), centred, variance scaled to 1. */
static float normalish(uint64_t *s)
{
    uint64_t r = splitmix64(s);
    uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                   (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return ((float)sum / 65536.0f - 2.0f) * 1.7320508f; /* sqrt(3) */
}

static int fill_cb(void *ctx, const char *name, void *dst, uint64_t nbytes)
{
    const struct mk_opts *o = ((struct mk_fill *)ctx)->o;
    bool norm = strstr(name, "_norm.") != NULL;
    uint32_t type = norm ? GGUF_DT_F32 : o->dtype;
    uint64_t ne0, rows, s = o->seed ^ name_hash(name);
    float scale;

    /* row length from the tensor's kind: every matrix's ne[0] is its fan-in */
    if (norm)
        ne0 = o->dim;
    else if (strstr(name, "ffn_down"))
        ne0 = o->ffn;
    else
        ne0 = o->dim; /* attn_output's fan-in is heads*head_dim = dim here */
    rows = nbytes / gguf_row_bytes(type, ne0);
    scale = strstr(name, "token_embd") ? 1.0f : 1.0f / sqrtf((float)ne0);
    float *row = malloc(ne0 * sizeof(*row));
    if (!row)
        return -ENOMEM;
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t i = 0; i < ne0; i++)
            row[i] = norm ? 1.0f + MK_NORM_JITTER * (2.0f * (float)(splitmix64(&s) >> 40) /
                                                         16777216.0f - 1.0f)
                          : normalish(&s) * scale;
        gguf_quant_row(type, row, (uint8_t *)dst + r * gguf_row_bytes(type, ne0), ne0);
    }
    free(row);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvd-mkmodel --out FILE [options]\n"
            "Writes a Llama GGUF v3 model with deterministic random weights.\n"
            "  --out FILE          output path (required)\n"
            "  --dim N             model width (default 64)\n"
            "  --layers N          transformer blocks (default 2)\n"
            "  --heads N           query heads (default 4; must divide --dim)\n"
            "  --kv-heads N        key/value heads (default = --heads; must divide it)\n"
            "  --ffn N             feed-forward width (default 4*dim*2/3 rounded to 32)\n"
            "  --vocab N           vocabulary size (default: that of the vocab source)\n"
            "  --ctx N             trained context length (default 2048)\n"
            "  --dtype T           weight type f32|f16|bf16|q8_0 (default f32; norms stay f32)\n"
            "  --seed N            PRNG seed (default 1)\n"
            "  --rope-base X       rope theta (default 10000)\n"
            "  --norm-eps X        RMSNorm epsilon (default 1e-5)\n"
            "  --tied              no output.weight: logits use token_embd.weight\n"
            "  --vocab-kind K      spm|bytes|gpt2 (default spm)\n"
            "  --vocab-from FILE   GGUF to copy the spm vocabulary from\n"
            "                      (default %s)\n"
            "  --log-level L       error|warn|info|debug (default info)\n"
            "  --help              this text\n"
            "Sizes accept K/M/G suffixes (K = 1024).\n",
            MK_DEFAULT_VOCAB_FROM);
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024ull * 1024 * 1024, end++;
    if (errno || end == s || *end || s[0] == '-' || v * mul > UINT32_MAX)
        return -EINVAL;
    *out = (uint32_t)(v * mul);
    return 0;
}

static int write_model(const struct mk_opts *o, const struct mk_vocab *v)
{
    struct gguf_writer w;
    struct mk_fill fc = {o};
    const uint64_t e = o->dim, hd = o->dim / o->heads, kv = hd * o->kv_heads, ff = o->ffn;
    char nm[64];
    int rc;

    gguf_writer_init(&w);
    gguf_writer_str(&w, "general.architecture", "llama");
    gguf_writer_str(&w, "general.name", "kvd-mkmodel random llama");
    gguf_writer_u32(&w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    gguf_writer_u32(&w, "llama.vocab_size", o->vocab);
    gguf_writer_u32(&w, "llama.context_length", o->ctx);
    gguf_writer_u32(&w, "llama.embedding_length", o->dim);
    gguf_writer_u32(&w, "llama.block_count", o->layers);
    gguf_writer_u32(&w, "llama.feed_forward_length", o->ffn);
    gguf_writer_u32(&w, "llama.attention.head_count", o->heads);
    gguf_writer_u32(&w, "llama.attention.head_count_kv", o->kv_heads);
    gguf_writer_u32(&w, "llama.rope.dimension_count", (uint32_t)hd);
    gguf_writer_f32(&w, "llama.rope.freq_base", o->rope_base);
    gguf_writer_f32(&w, "llama.attention.layer_norm_rms_epsilon", o->norm_eps);
    mk_vocab_write(v, &w);

    const uint64_t emb[2] = {e, o->vocab}, nrm[1] = {e};
    gguf_writer_tensor(&w, "token_embd.weight", o->dtype, 2, emb, fill_cb, &fc);
    gguf_writer_tensor(&w, "output_norm.weight", GGUF_DT_F32, 1, nrm, fill_cb, &fc);
    if (!o->tied)
        gguf_writer_tensor(&w, "output.weight", o->dtype, 2, emb, fill_cb, &fc);
    for (uint32_t l = 0; l < o->layers; l++) {
        const struct {
            const char *s;
            uint64_t ne0, ne1;
        } ts[] = {{"attn_norm", e, 0}, {"attn_q", e, e},       {"attn_k", e, kv},
                  {"attn_v", e, kv},   {"attn_output", e, e},  {"ffn_norm", e, 0},
                  {"ffn_gate", e, ff}, {"ffn_up", e, ff},      {"ffn_down", ff, e}};
        for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
            const uint64_t ne[2] = {ts[i].ne0, ts[i].ne1};
            snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, ts[i].s);
            gguf_writer_tensor(&w, nm, ts[i].ne1 ? o->dtype : GGUF_DT_F32, ts[i].ne1 ? 2 : 1, ne,
                               fill_cb, &fc);
        }
    }
    rc = gguf_writer_write_path(&w, o->out);
    gguf_writer_release(&w);
    return rc;
}

/* Fills defaults and checks the shape; logs the first problem. 0 or -EINVAL. */
static int check_opts(struct mk_opts *o)
{
    uint32_t be = gguf_dtype_block_elems(o->dtype);
    const char *why = NULL;

    if (!o->kv_heads)
        o->kv_heads = o->heads;
    if (!o->out)
        why = "--out is required";
    else if (!o->dim || !o->layers || !o->heads || !o->ffn || !o->ctx)
        why = "dimensions must be positive";
    else if (o->dim % o->heads || (o->dim / o->heads) % 2)
        why = "--heads must divide --dim into an even head size";
    else if (o->heads % o->kv_heads)
        why = "--kv-heads must divide --heads";
    else if (o->dim % be || o->ffn % be)
        why = "--dim and --ffn must be multiples of the --dtype block (32 for q8_0)";
    else if (o->dim > GGUF_LLAMA_MAX_EMBD || o->layers > GGUF_LLAMA_MAX_LAYERS ||
             o->ffn > GGUF_LLAMA_MAX_FF || o->heads > GGUF_LLAMA_MAX_HEADS ||
             o->vocab > GGUF_LLAMA_MAX_VOCAB)
        why = "a dimension is over kvd's limits (GGUF_LLAMA_MAX_* in common/gguf.h)";
    if (why) {
        log_err("bad model shape: %s (dim %u, heads %u, kv-heads %u, ffn %u, %s)", why, o->dim,
                o->heads, o->kv_heads, o->ffn, gguf_dtype_name(o->dtype));
        return -EINVAL;
    }
    return 0;
}

enum mk_opt { O_DIM = 256, O_LAYERS, O_HEADS, O_KVH, O_FFN, O_VOCAB, O_CTX, O_DTYPE, O_SEED,
              O_OUT, O_ROPE, O_EPS, O_TIED, O_VKIND, O_VFROM, O_LOG, O_HELP };

/* What a flag accepts, for the bad-value message. */
static const char *mk_expect(int opt)
{
    switch (opt) {
    case O_DTYPE: return "f32|f16|bf16|q8_0";
    case O_VKIND: return "spm|bytes|gpt2";
    case O_SEED: return "an unsigned 64-bit integer";
    case O_ROPE:
    case O_EPS: return "a positive number";
    default: return "an integer 0..4294967295, K/M/G suffixes allowed";
    }
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"dim", 1, 0, O_DIM},       {"layers", 1, 0, O_LAYERS},   {"heads", 1, 0, O_HEADS},
        {"kv-heads", 1, 0, O_KVH},  {"ffn", 1, 0, O_FFN},         {"vocab", 1, 0, O_VOCAB},
        {"ctx", 1, 0, O_CTX},       {"dtype", 1, 0, O_DTYPE},     {"seed", 1, 0, O_SEED},
        {"out", 1, 0, O_OUT},       {"rope-base", 1, 0, O_ROPE},  {"norm-eps", 1, 0, O_EPS},
        {"tied", 0, 0, O_TIED},     {"vocab-kind", 1, 0, O_VKIND}, {"vocab-from", 1, 0, O_VFROM},
        {"log-level", 1, 0, O_LOG}, {"help", 0, 0, O_HELP},       {0, 0, 0, 0}};
    struct mk_opts o = {.dim = 64, .layers = 2, .heads = 4, .ctx = 2048, .dtype = GGUF_DT_F32,
                        .seed = 1, .rope_base = 10000.0f, .norm_eps = 1e-5f,
                        .vocab_from = MK_DEFAULT_VOCAB_FROM, .vocab_kind = MK_VOCAB_SPM};
    enum log_level lvl = LOG_LEVEL_INFO;
    struct mk_vocab v;
    char err[GGUF_ERR_LEN];
    int c, bad = 0;

    log_setup("kvd-mkmodel", lvl);
    opterr = 0;
    int li = -1;
    while ((c = getopt_long(argc, argv, "", lo, &li)) != -1) {
        char *end = NULL;
        switch (c) {
        case O_DIM: bad |= parse_u32(optarg, &o.dim); break;
        case O_LAYERS: bad |= parse_u32(optarg, &o.layers); break;
        case O_HEADS: bad |= parse_u32(optarg, &o.heads); break;
        case O_KVH: bad |= parse_u32(optarg, &o.kv_heads); break;
        case O_FFN: bad |= parse_u32(optarg, &o.ffn); break;
        case O_VOCAB: bad |= parse_u32(optarg, &o.vocab); break;
        case O_CTX: bad |= parse_u32(optarg, &o.ctx); break;
        case O_DTYPE: bad |= gguf_dtype_parse(optarg, &o.dtype); break;
        case O_SEED:
            errno = 0;
            o.seed = strtoull(optarg, &end, 0);
            bad |= *end || end == optarg || errno ? -1 : 0;
            break;
        case O_OUT: o.out = optarg; break;
        case O_ROPE:
            o.rope_base = strtof(optarg, &end);
            bad |= *end || end == optarg || !(o.rope_base > 0) ? -1 : 0;
            break;
        case O_EPS:
            o.norm_eps = strtof(optarg, &end);
            bad |= *end || end == optarg || !(o.norm_eps > 0) ? -1 : 0;
            break;
        case O_TIED: o.tied = true; break;
        case O_VKIND: bad |= mk_vocab_kind_parse(optarg, &o.vocab_kind); break;
        case O_VFROM: o.vocab_from = optarg; break;
        case O_LOG:
            if (log_level_parse(optarg, &lvl)) {
                log_err("bad value '%s' for --log-level (expected error|warn|info|debug)", optarg);
                return EX_USAGE;
            }
            log_setup("kvd-mkmodel", lvl);
            break;
        case O_HELP: usage(stdout); return 0;
        default:
            log_err("unknown option or missing value '%s' (see --help)", argv[optind - 1]);
            return EX_USAGE;
        }
        if (bad) {
            log_err("bad value '%s' for --%s (expected %s)", optarg, li >= 0 ? lo[li].name : "?",
                    mk_expect(c));
            return EX_USAGE;
        }
    }
    if (optind < argc) {
        log_err("unexpected argument '%s' (see --help)", argv[optind]);
        return EX_USAGE;
    }
    if (!o.ffn)
        o.ffn = (o.dim * 8 / 3 + 31) / 32 * 32;
    if (mk_vocab_build(&v, o.vocab_kind, o.vocab_from, o.vocab, err)) {
        log_err("cannot build vocabulary: %s", err);
        return EX_CONFIG;
    }
    o.vocab = v.n;
    if (check_opts(&o)) {
        mk_vocab_release(&v);
        return EX_USAGE;
    }
    int rc = write_model(&o, &v);
    mk_vocab_release(&v);
    if (rc) {
        log_err("cannot write '%s': %s", o.out, kvd_strerror(rc));
        return EX_CANTCREAT;
    }
    log_info("wrote '%s': dim %u, %u layers, %u/%u heads, ffn %u, vocab %u, %s", o.out, o.dim,
             o.layers, o.heads, o.kv_heads, o.ffn, o.vocab, gguf_dtype_name(o.dtype));
    return 0;
}

/* gguf.h — read-only GGUF v3 (and v2) model files, memory-mapped.
 *
 * Invariants once gguf_open() returned 0:
 *  - the whole file is mapped read-only (PROT_READ, MAP_PRIVATE) and stays mapped until
 *    gguf_close(); every pointer handed out (tensor data, metadata strings and arrays)
 *    points into that mapping or into arrays owned by the struct and dies with it;
 *  - the header, every metadata key/value and every tensor info were validated:
 *    counts and lengths under the GGUF_MAX_* limits, all arithmetic overflow-checked,
 *    every tensor of a known ggml type, its offset a multiple of general.alignment, its
 *    bytes inside the file and not overlapping another tensor, its data pointer aligned
 *    for its element type; tensor names unique and NUL-terminated copies kept;
 *  - a tensor of a type kvd cannot compute with (Q4_K, ...) does not fail the open: it
 *    fails gguf_tensor_get_checked() / gguf_llama_validate() with a message naming it.
 * Byte order: little-endian files only (GGUF's default; big-endian files fail the
 * version check, which is how they show). Errors: every function taking `err` writes a
 * one-line reason naming the file into it (never longer than GGUF_ERR_LEN - 1) and
 * logs nothing; the caller logs. After a failed call the out-params are untouched.
 * Threads: a gguf_file is immutable after gguf_open(); any thread may read it at once.
 * The file must not be truncated on disk while open: a mapping past the new end would
 * raise SIGBUS on access (model files are replaced by rename, never rewritten in place;
 * kvd-mkmodel writes a temporary file and renames it).
 *
 * Dimension convention (as ggml): ne[0] is the innermost, contiguous dimension. A weight
 * matrix W (out × in) used as y = W x has ne = {in, out}: `out` rows of `in` elements.
 */
#ifndef KVD_COMMON_GGUF_H
#define KVD_COMMON_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_ERR_LEN 256             /* bytes of an error message incl. NUL */
#define GGUF_MAGIC 0x46554747u       /* "GGUF" read as a little-endian u32 */
#define GGUF_VERSION_MIN 2           /* v2: 64-bit counts; same layout as v3 */
#define GGUF_VERSION 3               /* the version kvd writes */
#define GGUF_DEFAULT_ALIGNMENT 32    /* bytes, when general.alignment is absent */
#define GGUF_MAX_ALIGNMENT 65536     /* bytes; larger is not a real file */
#define GGUF_MAX_KV 65536            /* metadata key/values in one file */
#define GGUF_MAX_TENSORS 65536       /* tensor infos in one file (llama 405B has ~1.1k) */
#define GGUF_MAX_KEY_LEN 65535       /* bytes of a metadata key (spec: at most 65535) */
#define GGUF_MAX_STR_LEN (1u << 24)  /* bytes of one metadata string (16 MiB) */
#define GGUF_MAX_ARRAY_LEN (1u << 24) /* elements of one metadata array (vocab, merges) */
#define GGUF_MAX_NAME_LEN 256        /* bytes of a tensor name (ggml itself stops at 63) */
#define GGUF_MAX_DIMS 4              /* dimensions of a tensor (as ggml) */

/* Metadata value types, numbered as in the GGUF spec. */
enum gguf_vtype {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
    GGUF_VT_COUNT_
};

/* Tensor element types, numbered as ggml's enum ggml_type. Only F32, F16, BF16 and Q8_0
 * are computed with by kvd (gguf_dtype_is_supported); the others are known by name and
 * size so a file using them opens and the refusal can name the type. */
enum gguf_dtype {
    GGUF_DT_F32 = 0,
    GGUF_DT_F16 = 1,
    GGUF_DT_Q4_0 = 2,
    GGUF_DT_Q4_1 = 3,
    GGUF_DT_Q5_0 = 6,
    GGUF_DT_Q5_1 = 7,
    GGUF_DT_Q8_0 = 8,
    GGUF_DT_Q8_1 = 9,
    GGUF_DT_Q2_K = 10,
    GGUF_DT_Q3_K = 11,
    GGUF_DT_Q4_K = 12,
    GGUF_DT_Q5_K = 13,
    GGUF_DT_Q6_K = 14,
    GGUF_DT_Q8_K = 15,
    GGUF_DT_IQ2_XXS = 16,
    GGUF_DT_IQ2_XS = 17,
    GGUF_DT_IQ3_XXS = 18,
    GGUF_DT_IQ1_S = 19,
    GGUF_DT_IQ4_NL = 20,
    GGUF_DT_IQ3_S = 21,
    GGUF_DT_IQ2_S = 22,
    GGUF_DT_IQ4_XS = 23,
    GGUF_DT_I8 = 24,
    GGUF_DT_I16 = 25,
    GGUF_DT_I32 = 26,
    GGUF_DT_I64 = 27,
    GGUF_DT_F64 = 28,
    GGUF_DT_IQ1_M = 29,
    GGUF_DT_BF16 = 30,
    GGUF_DT_TQ1_0 = 34,
    GGUF_DT_TQ2_0 = 35,
    GGUF_DT_MXFP4 = 39,
    GGUF_DT_COUNT_ = 40 /* ids below this; holes (4, 5, 31-33, 36-38) are unknown */
};

#define GGUF_Q8_0_BLOCK 32 /* elements per Q8_0 block: f16 scale d + 32 x int8 q, x = d*q */

/* "Q4_K", "F32", ...; NULL for an id ggml does not define. */
const char *gguf_dtype_name(uint32_t type);
/* Elements per block and bytes per block (F32: 1 and 4; Q8_0: 32 and 34); 0 if unknown. */
uint32_t gguf_dtype_block_elems(uint32_t type);
uint32_t gguf_dtype_block_bytes(uint32_t type);
/* True for the types kvd computes with: F32, F16, BF16, Q8_0. */
bool gguf_dtype_is_supported(uint32_t type);
/* Parses "f32|f16|bf16|q8_0" (case-insensitive); 0 or -EINVAL. */
int gguf_dtype_parse(const char *s, enum gguf_dtype *out);

/* Scalar conversions (round to nearest even; NaN stays NaN, overflow gives inf). */
float gguf_f16_to_f32(uint16_t h);
uint16_t gguf_f32_to_f16(float f);
float gguf_bf16_to_f32(uint16_t h);
uint16_t gguf_f32_to_bf16(float f);

/* Converts n elements of a row of `type` (F32, F16, BF16, Q8_0) at src to f32 in dst.
 * n must be a multiple of the type's block elements. Returns 0, or -EINVAL for an
 * unsupported type or a bad n (dst untouched). Any thread; no allocation. */
int gguf_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n);
/* Converts n f32 to `type` (F32, F16, BF16, Q8_0: scale = max|x|/127, per block).
 * Same rules as gguf_dequant_row. Used by kvd-mkmodel and tests. */
int gguf_quant_row(uint32_t type, const float *src, void *dst, uint64_t n);
/* Bytes of a row of n elements of `type`, 0 if unknown type or n not a block multiple. */
uint64_t gguf_row_bytes(uint32_t type, uint64_t n);

/* A metadata string: NOT NUL-terminated (it points into the mapping). */
struct gguf_str {
    const char *p;
    uint64_t len;
};

/* A metadata array as found in the file. For string arrays use gguf_arr_str(). */
struct gguf_arr {
    uint32_t type;      /* enum gguf_vtype of the elements (never ARRAY: nesting refused) */
    uint64_t n;         /* elements */
    const void *data;   /* numeric: n packed little-endian elements, possibly unaligned */
    const uint64_t *str_off; /* string arrays: offset of element i's u64 length, from data */
};

struct gguf_kv {
    const char *key;    /* NUL-terminated copy */
    uint32_t type;      /* enum gguf_vtype */
    const void *val;    /* scalar: the value bytes in the mapping (possibly unaligned) */
    struct gguf_str str; /* GGUF_VT_STRING */
    struct gguf_arr arr; /* GGUF_VT_ARRAY */
};

struct gguf_tensor {
    const char *name;   /* NUL-terminated copy */
    uint32_t type;      /* enum gguf_dtype */
    uint32_t n_dims;    /* 1..GGUF_MAX_DIMS */
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension; unused ones are 1 */
    uint64_t n_elems;   /* product of ne */
    uint64_t offset;    /* bytes from the start of the data section */
    uint64_t nbytes;    /* bytes of data */
    const void *data;   /* in the mapping, aligned for the element type */
};

struct gguf_file {
    char path[4096];    /* as given to gguf_open (truncated if longer) */
    const uint8_t *map; /* whole file, read-only */
    uint64_t size;      /* bytes of the file */
    uint32_t version;
    uint32_t alignment; /* general.alignment or GGUF_DEFAULT_ALIGNMENT */
    uint64_t data_off;  /* offset of the tensor data section in the file */
    uint64_t n_kv;
    struct gguf_kv *kv; /* n_kv entries, file order */
    uint64_t n_tensors;
    struct gguf_tensor *tensors; /* n_tensors entries, file order */
    char *names_;       /* private: arena of the NUL-terminated keys and names */
    uint64_t *str_offs_; /* private: arena of the string-array offset tables */
    bool mapped_;       /* private: map came from mmap (gguf_open), munmap on close */
};

/* Maps and validates `path`. Returns 0, -errno (open/stat/mmap failed: ENOENT, EACCES,
 * ENOMEM) or KVD_EMODEL (anything wrong inside the file), with the reason in err.
 * On failure nothing stays mapped or allocated and *g is zeroed. */
int gguf_open(struct gguf_file *g, const char *path, char err[GGUF_ERR_LEN]);
/* Same checks on a buffer the caller keeps alive and unchanged until gguf_close()
 * (fuzzing, tests); `name` is used in messages. The buffer is not copied. */
int gguf_open_mem(struct gguf_file *g, const void *buf, uint64_t size, const char *name,
                  char err[GGUF_ERR_LEN]);
/* Unmaps and frees; *g is zeroed and may be gguf_open()ed again. Safe on a zeroed g. */
void gguf_close(struct gguf_file *g);

/* Metadata by key. Return 0; -ENOENT when the key is absent; KVD_EMODEL when the value
 * has another type or does not fit (err says which). Integer getters accept any integer
 * type (and bool for u32) whose value fits; float getters accept F32 and F64.
 * `err` may be NULL. */
const struct gguf_kv *gguf_kv_find(const struct gguf_file *g, const char *key);
int gguf_get_u32(const struct gguf_file *g, const char *key, uint32_t *out, char *err);
int gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out, char *err);
int gguf_get_i32(const struct gguf_file *g, const char *key, int32_t *out, char *err);
int gguf_get_f32(const struct gguf_file *g, const char *key, float *out, char *err);
int gguf_get_bool(const struct gguf_file *g, const char *key, bool *out, char *err);
int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out, char *err);
/* Array of the given element type (GGUF_VT_STRING, _I32, _F32, ...). */
int gguf_get_arr(const struct gguf_file *g, const char *key, uint32_t elem_type,
                 struct gguf_arr *out, char *err);
/* Element i of a string array (i < a->n, checked by KVD_BUG_ON). */
struct gguf_str gguf_arr_str(const struct gguf_arr *a, uint64_t i);
/* Element i of an I32 / F32 / U32 array (unaligned-safe reads; i < a->n). */
int32_t gguf_arr_i32(const struct gguf_arr *a, uint64_t i);
float gguf_arr_f32(const struct gguf_arr *a, uint64_t i);
/* True when s equals the NUL-terminated c string. */
bool gguf_str_eq(struct gguf_str s, const char *c);

/* Tensor by name; NULL if absent. */
const struct gguf_tensor *gguf_tensor_find(const struct gguf_file *g, const char *name);
/* Tensor by name with its expected shape: n_dims and ne[0..n_dims-1] must match
 * exactly, and the type must be supported. Returns 0 with *out set; -ENOENT (missing)
 * or KVD_EMODEL (wrong shape, unsupported type) with err naming file and tensor, e.g.
 * "tensor 'blk.0.attn_q.weight' has type Q4_K, which kvd does not support". */
int gguf_tensor_get_checked(const struct gguf_file *g, const char *name, uint32_t n_dims,
                            const uint64_t *ne, const struct gguf_tensor **out,
                            char err[GGUF_ERR_LEN]);

/* ---- the llama architecture ---------------------------------------------------------
 * Keys read (prefix "llama."): vocab_size (else the tokenizer's token count, else
 * token_embd's rows), embedding_length, block_count, attention.head_count,
 * attention.head_count_kv (default head_count), attention.key_length (default
 * n_embd/n_head; value_length must equal it), feed_forward_length, context_length,
 * rope.freq_base (default 10000), rope.dimension_count (must equal head_dim: partial
 * rotary is refused), attention.layer_norm_rms_epsilon (default 1e-5), rope.scaling.type
 * (none|linear|llama3) with rope.scaling.factor, rope.scaling.original_context_length,
 * rope.scaling.low_freq_factor / high_freq_factor (defaults 1 and 4 for llama3, as
 * Meta's reference), and the optional tensor rope_freqs.weight (F32, head_dim/2
 * per-dimension divisors written by llama.cpp's converter for Llama 3.1+).
 * Refused by name: any general.architecture other than "llama" ("qwen2", "gemma", ...),
 * mixture-of-experts (llama.expert_count > 0), partial rotary.
 * Rotary layout: GGUF llama files store Q/K rows permuted so that rope rotates ADJACENT
 * pairs (x[2i], x[2i+1]) of each head by angle pos * inv_freq[i] — ggml's "normal" mode. */
enum gguf_rope_scaling {
    GGUF_ROPE_SCALING_NONE = 0,
    GGUF_ROPE_SCALING_LINEAR,   /* positions divided by factor */
    GGUF_ROPE_SCALING_LLAMA3,   /* Meta's wavelength-dependent scaling */
};

#define GGUF_LLAMA_MAX_LAYERS 1024 /* blocks in one model */
#define GGUF_LLAMA_MAX_HEADS 1024  /* attention heads */
#define GGUF_LLAMA_MAX_HEAD_DIM 1024 /* elements per head */
#define GGUF_LLAMA_MAX_EMBD 65536  /* model width */
#define GGUF_LLAMA_MAX_FF (1u << 20) /* feed-forward width */
#define GGUF_LLAMA_MAX_VOCAB (1u << 22) /* tokens */

struct gguf_llama_hparams {
    char arch[32];          /* "llama" */
    uint32_t n_vocab;       /* tokens (rows of token_embd) */
    uint32_t n_embd;        /* model width */
    uint32_t n_layer;       /* transformer blocks */
    uint32_t n_head;        /* query heads */
    uint32_t n_head_kv;     /* key/value heads; n_head % n_head_kv == 0 */
    uint32_t head_dim;      /* elements per head (even) */
    uint32_t n_ff;          /* feed-forward hidden width */
    uint32_t n_ctx_train;   /* trained context length, tokens */
    float rope_freq_base;   /* theta */
    enum gguf_rope_scaling rope_scaling;
    float rope_factor;      /* linear/llama3 factor; 1 when none */
    float rope_low_freq_factor;  /* llama3 */
    float rope_high_freq_factor; /* llama3 */
    uint32_t rope_orig_ctx; /* llama3: original_context_length */
    bool has_rope_freqs;    /* rope_freqs.weight present (used instead of the formula) */
    float rms_norm_eps;
    bool tied_output;       /* no output.weight: logits use token_embd.weight */
};

/* Reads and checks the hyper-parameters (limits above, divisibility, head_dim even).
 * Returns 0, or KVD_EMODEL with err. Does not look at tensors except token_embd's
 * rows as the vocab fallback, output.weight's presence, rope_freqs.weight's. */
int gguf_llama_hparams(const struct gguf_file *g, struct gguf_llama_hparams *hp,
                       char err[GGUF_ERR_LEN]);
/* Checks that every tensor a llama forward pass needs exists with the right shape and
 * a supported type: token_embd.weight {n_embd, n_vocab}, output_norm.weight {n_embd},
 * output.weight {n_embd, n_vocab} unless tied, rope_freqs.weight {head_dim/2} F32 when
 * present, and per layer L blk.L.attn_norm.weight {n_embd}, blk.L.attn_q.weight
 * {n_embd, n_head*head_dim}, blk.L.attn_k.weight / attn_v.weight {n_embd,
 * n_head_kv*head_dim}, blk.L.attn_output.weight {n_head*head_dim, n_embd},
 * blk.L.ffn_norm.weight {n_embd}, blk.L.ffn_gate.weight / ffn_up.weight {n_embd, n_ff},
 * blk.L.ffn_down.weight {n_ff, n_embd}. Norm weights must be F32; the tokenizer (when
 * present) must not have more tokens than n_vocab. Returns 0, -ENOENT
 * or KVD_EMODEL with err naming the first bad tensor. */
int gguf_llama_validate(const struct gguf_file *g, const struct gguf_llama_hparams *hp,
                        char err[GGUF_ERR_LEN]);
/* Fills inv_freq[0 .. head_dim/2 - 1] with the rotary inverse frequency of each pair,
 * all scaling applied: base^(-2i/head_dim), divided by rope_freqs.weight[i] when that
 * tensor exists, else adjusted per rope_scaling (linear: / factor; llama3: Meta's
 * smooth interpolation between / factor and 1). Angle of pair i at position p:
 * p * inv_freq[i]. */
void gguf_llama_rope_inv_freq(const struct gguf_file *g, const struct gguf_llama_hparams *hp,
                              float *inv_freq);

/* XXH3_64 over: arch, every hparams field, every tensor's name, type, n_dims and ne (file
 * order), and the file size. Cheap (no weight bytes hashed); equal models give equal
 * fingerprints, a different shape/type/size gives a different one. Never 0 for an
 * opened file (0 is reserved for "not checked" in pool descriptors). */
uint64_t gguf_model_fingerprint(const struct gguf_file *g);

#endif

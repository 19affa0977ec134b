/* gguf_dtype.c — ggml element types: names, block sizes, f16/bf16 conversion and the
 * row (de)quantizers kvd supports (contract: gguf.h). Pure functions, any thread. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "common/gguf.h"

struct dtype_info {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
};

/* As ggml's type traits (ggml.c, type_traits[]): elements and bytes per block. */
static const struct dtype_info dtypes[GGUF_DT_COUNT_] = {
    [GGUF_DT_F32] = {"F32", 1, 4},          [GGUF_DT_F16] = {"F16", 1, 2},
    [GGUF_DT_Q4_0] = {"Q4_0", 32, 18},      [GGUF_DT_Q4_1] = {"Q4_1", 32, 20},
    [GGUF_DT_Q5_0] = {"Q5_0", 32, 22},      [GGUF_DT_Q5_1] = {"Q5_1", 32, 24},
    [GGUF_DT_Q8_0] = {"Q8_0", 32, 34},      [GGUF_DT_Q8_1] = {"Q8_1", 32, 36},
    [GGUF_DT_Q2_K] = {"Q2_K", 256, 84},     [GGUF_DT_Q3_K] = {"Q3_K", 256, 110},
    [GGUF_DT_Q4_K] = {"Q4_K", 256, 144},    [GGUF_DT_Q5_K] = {"Q5_K", 256, 176},
    [GGUF_DT_Q6_K] = {"Q6_K", 256, 210},    [GGUF_DT_Q8_K] = {"Q8_K", 256, 292},
    [GGUF_DT_IQ2_XXS] = {"IQ2_XXS", 256, 66}, [GGUF_DT_IQ2_XS] = {"IQ2_XS", 256, 74},
    [GGUF_DT_IQ3_XXS] = {"IQ3_XXS", 256, 98}, [GGUF_DT_IQ1_S] = {"IQ1_S", 256, 50},
    [GGUF_DT_IQ4_NL] = {"IQ4_NL", 32, 18},  [GGUF_DT_IQ3_S] = {"IQ3_S", 256, 110},
    [GGUF_DT_IQ2_S] = {"IQ2_S", 256, 82},   [GGUF_DT_IQ4_XS] = {"IQ4_XS", 256, 136},
    [GGUF_DT_I8] = {"I8", 1, 1},            [GGUF_DT_I16] = {"I16", 1, 2},
    [GGUF_DT_I32] = {"I32", 1, 4},          [GGUF_DT_I64] = {"I64", 1, 8},
    [GGUF_DT_F64] = {"F64", 1, 8},          [GGUF_DT_IQ1_M] = {"IQ1_M", 256, 56},
    [GGUF_DT_BF16] = {"BF16", 1, 2},        [GGUF_DT_TQ1_0] = {"TQ1_0", 256, 54},
    [GGUF_DT_TQ2_0] = {"TQ2_0", 256, 66},   [GGUF_DT_MXFP4] = {"MXFP4", 32, 17},
};

const char *gguf_dtype_name(uint32_t type)
{
    return type < GGUF_DT_COUNT_ ? dtypes[type].name : NULL;
}

uint32_t gguf_dtype_block_elems(uint32_t type)
{
    return type < GGUF_DT_COUNT_ ? dtypes[type].block_elems : 0;
}

uint32_t gguf_dtype_block_bytes(uint32_t type)
{
    return type < GGUF_DT_COUNT_ ? dtypes[type].block_bytes : 0;
}

bool gguf_dtype_is_supported(uint32_t type)
{
    return type == GGUF_DT_F32 || type == GGUF_DT_F16 || type == GGUF_DT_BF16 ||
           type == GGUF_DT_Q8_0;
}

int gguf_dtype_parse(const char *s, enum gguf_dtype *out)
{
    static const enum gguf_dtype ok[] = {GGUF_DT_F32, GGUF_DT_F16, GGUF_DT_BF16, GGUF_DT_Q8_0};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!strcasecmp(s, dtypes[ok[i]].name)) {
            *out = ok[i];
            return 0;
        }
    return -EINVAL;
}

uint64_t gguf_row_bytes(uint32_t type, uint64_t n)
{
    uint32_t be = gguf_dtype_block_elems(type);
    if (be == 0 || n % be)
        return 0;
    return n / be * gguf_dtype_block_bytes(type);
}

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float gguf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-8f; /* mant * 2^-24, exact */
        return u2f(f2u(v) | sign);
    }
    if (exp == 31)
        return u2f(sign | 0x7f800000u | (mant << 13));
    return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round to nearest even; after F. Giesen's float_to_half_fast3_rtne. */
uint16_t gguf_f32_to_f16(float ff)
{
    const uint32_t f32_inf = 255u << 23;
    const uint32_t f16_max = (127u + 16) << 23;             /* 2^16: rounds to inf */
    const uint32_t denorm_magic = ((127u - 15) + (23 - 10) + 1) << 23;
    uint32_t f = f2u(ff);
    uint32_t sign = f & 0x80000000u;
    uint16_t o;

    f ^= sign;
    if (f >= f16_max) {
        o = f > f32_inf ? 0x7e00 : 0x7c00;                   /* NaN stays NaN, else inf */
    } else if (f < (113u << 23)) {                           /* half subnormal or zero */
        f = f2u(u2f(f) + u2f(denorm_magic));
        o = (uint16_t)(f - denorm_magic);
    } else {
        uint32_t mant_odd = (f >> 13) & 1;
        f -= 112u << 23;                                     /* rebias exponent */
        f += 0xfff + mant_odd;
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

float gguf_bf16_to_f32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t gguf_f32_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);                 /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

int gguf_dequant_row(uint32_t type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;
    uint16_t h;

    if (!gguf_dtype_is_supported(type) || n % gguf_dtype_block_elems(type))
        return -EINVAL;
    switch (type) {
    case GGUF_DT_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case GGUF_DT_F16:
        for (uint64_t i = 0; i < n; i++) {
            memcpy(&h, s + 2 * i, 2);
            dst[i] = gguf_f16_to_f32(h);
        }
        break;
    case GGUF_DT_BF16:
        for (uint64_t i = 0; i < n; i++) {
            memcpy(&h, s + 2 * i, 2);
            dst[i] = gguf_bf16_to_f32(h);
        }
        break;
    case GGUF_DT_Q8_0:
        for (uint64_t b = 0; b < n / GGUF_Q8_0_BLOCK; b++) {
            const uint8_t *blk = s + b * (2 + GGUF_Q8_0_BLOCK);
            memcpy(&h, blk, 2);
            float d = gguf_f16_to_f32(h);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
                dst[b * GGUF_Q8_0_BLOCK + j] = d * (float)q[j];
        }
        break;
    }
    return 0;
}

int gguf_quant_row(uint32_t type, const float *src, void *dst, uint64_t n)
{
    uint8_t *o = dst;
    uint16_t h;

    if (!gguf_dtype_is_supported(type) || n % gguf_dtype_block_elems(type))
        return -EINVAL;
    switch (type) {
    case GGUF_DT_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case GGUF_DT_F16:
        for (uint64_t i = 0; i < n; i++) {
            h = gguf_f32_to_f16(src[i]);
            memcpy(o + 2 * i, &h, 2);
        }
        break;
    case GGUF_DT_BF16:
        for (uint64_t i = 0; i < n; i++) {
            h = gguf_f32_to_bf16(src[i]);
            memcpy(o + 2 * i, &h, 2);
        }
        break;
    case GGUF_DT_Q8_0:
        for (uint64_t b = 0; b < n / GGUF_Q8_0_BLOCK; b++) {
            const float *x = src + b * GGUF_Q8_0_BLOCK;
            uint8_t *blk = o + b * (2 + GGUF_Q8_0_BLOCK);
            float amax = 0.0f;
            for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            h = gguf_f32_to_f16(d);
            memcpy(blk, &h, 2);
            for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
                blk[2 + j] = (uint8_t)(int8_t)lroundf(x[j] * id);
        }
        break;
    }
    return 0;
}

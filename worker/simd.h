/* simd.h — the worker's element-wise and dot-product kernels on f32 and f16 vectors.
 *
 * One implementation per instruction set, chosen at compile time here (the only place
 * with #ifdef): AVX-512F, AVX2+FMA+F16C, or portable C. Every function is exact IEEE
 * arithmetic up to summation order, so results across variants agree to float rounding.
 * f16 is IEEE binary16 stored as uint16_t (the KV page format of KV_DTYPE_F16); bf16
 * (weights only) is the top half of a binary32.
 * Pure functions on caller memory; any thread.
 */
#ifndef KVD_WORKER_SIMD_H
#define KVD_WORKER_SIMD_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* Portable binary16 <-> binary32, round to nearest even (for writes and the fallback). */
static inline float simd_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* bfloat16 -> binary32: the top 16 bits of the float (exact). */
static inline float simd_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline uint16_t simd_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* subnormal or zero in f16 */
        float a;
        memcpy(&a, &ax, sizeof(a));
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f)); /* a / 2^-24 */
    }
    uint32_t r = ax - 0x38000000u;            /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);           /* round to nearest even */
    return (uint16_t)(sign | (r >> 13));
}

#if defined(__AVX512F__)

static inline float simd_dot_f32(const float *a, const float *b, size_t n)
{
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                              acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static inline float simd_dot_f16(const float *a, const uint16_t *b, size_t n)
{
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), acc);
    float s = _mm512_reduce_add_ps(acc);
    for (; i < n; i++)
        s += a[i] * simd_f16_to_f32(b[i]);
    return s;
}

/* out[r] = dot(x + r * ldx, w, n) for r < rows (<= SIMD_ROWS_MAX), w half precision:
 * IEEE binary16 (bf16 false) or bfloat16 (bf16 true). Each 16 weights are converted once
 * and used for every row. The body is instantiated per row count and format (switch
 * below) so the accumulators live in registers. */
#define SIMD_ROWS_MAX 8
static inline __attribute__((always_inline)) __m512 simd_load16_half(const uint16_t *w,
                                                                      const bool bf16)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)w);
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                : _mm512_cvtph_ps(h);
}

static inline __attribute__((always_inline)) void
simd_dot_half_rows_k(const float *x, size_t ldx, const uint16_t *w, size_t n, const size_t rows,
                     const bool bf16, float *out)
{
    __m512 acc[SIMD_ROWS_MAX];
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
        acc[r] = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wv = simd_load16_half(w + i, bf16);
#pragma GCC unroll 8
        for (size_t r = 0; r < rows; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i), wv, acc[r]);
    }
    const size_t tail = n - i; /* < 16 elements, scalar */
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++) {
        float t = _mm512_reduce_add_ps(acc[r]);
        for (size_t k = 0; k < tail; k++)
            t += x[r * ldx + i + k] * (bf16 ? simd_bf16_to_f32(w[i + k])
                                            : simd_f16_to_f32(w[i + k]));
        out[r] = t;
    }
}

#define SIMD_HALF_ROWS_CASE(R)                                                                 \
    case R:                                                                                    \
        if (bf16)                                                                              \
            simd_dot_half_rows_k(x, ldx, w, n, R, true, out);                                  \
        else                                                                                   \
            simd_dot_half_rows_k(x, ldx, w, n, R, false, out);                                 \
        break
static inline void simd_dot_half_rows(const float *x, size_t ldx, const uint16_t *w, size_t n,
                                      size_t rows, bool bf16, float *out)
{
    switch (rows) {
        SIMD_HALF_ROWS_CASE(1);
        SIMD_HALF_ROWS_CASE(2);
        SIMD_HALF_ROWS_CASE(3);
        SIMD_HALF_ROWS_CASE(4);
        SIMD_HALF_ROWS_CASE(5);
        SIMD_HALF_ROWS_CASE(6);
        SIMD_HALF_ROWS_CASE(7);
    default:
        SIMD_HALF_ROWS_CASE(8);
    }
}
#undef SIMD_HALF_ROWS_CASE

/* Q8_0 block: f16 scale d, then 32 int8 q; value = d * q (exact in f32). */
#define SIMD_Q8_BLOCK 32
#define SIMD_Q8_BYTES 34
static inline float simd_q8_scale(const uint8_t *blk)
{
    uint16_t h;
    memcpy(&h, blk, sizeof(h));
    return simd_f16_to_f32(h);
}

/* out[r] = dot(x + r * ldx, Q8_0 row w of n weights) for r < rows (<= SIMD_ROWS_MAX);
 * n is a multiple of SIMD_Q8_BLOCK (checked at model load). */
static inline __attribute__((always_inline)) void
simd_dot_q8_rows_k(const float *x, size_t ldx, const uint8_t *w, size_t n, const size_t rows,
                   float *out)
{
    __m512 acc[SIMD_ROWS_MAX];
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
        acc[r] = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += SIMD_Q8_BLOCK, w += SIMD_Q8_BYTES) {
        __m512 d = _mm512_set1_ps(simd_q8_scale(w));
        __m512 w0 = _mm512_mul_ps(
            d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 2)))));
        __m512 w1 = _mm512_mul_ps(
            d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 18)))));
#pragma GCC unroll 8
        for (size_t r = 0; r < rows; r++) {
            acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i), w0, acc[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i + 16), w1, acc[r]);
        }
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < rows; r++)
        out[r] = _mm512_reduce_add_ps(acc[r]);
}

#define SIMD_Q8_ROWS_CASE(R)                                                                   \
    case R:                                                                                    \
        simd_dot_q8_rows_k(x, ldx, w, n, R, out);                                              \
        break
static inline void simd_dot_q8_rows(const float *x, size_t ldx, const uint8_t *w, size_t n,
                                    size_t rows, float *out)
{
    switch (rows) {
        SIMD_Q8_ROWS_CASE(1);
        SIMD_Q8_ROWS_CASE(2);
        SIMD_Q8_ROWS_CASE(3);
        SIMD_Q8_ROWS_CASE(4);
        SIMD_Q8_ROWS_CASE(5);
        SIMD_Q8_ROWS_CASE(6);
        SIMD_Q8_ROWS_CASE(7);
    default:
        SIMD_Q8_ROWS_CASE(8);
    }
}
#undef SIMD_Q8_ROWS_CASE

/* y[i] = y[i] * c + w * x[i] */
static inline void simd_scale_axpy_f32(float *y, float c, float w, const float *x, size_t n)
{
    __m512 vc = _mm512_set1_ps(c), vw = _mm512_set1_ps(w);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vw, _mm512_loadu_ps(x + i),
                                                _mm512_mul_ps(vc, _mm512_loadu_ps(y + i))));
    for (; i < n; i++)
        y[i] = y[i] * c + w * x[i];
}

static inline void simd_scale_axpy_f16(float *y, float c, float w, const uint16_t *x, size_t n)
{
    __m512 vc = _mm512_set1_ps(c), vw = _mm512_set1_ps(w);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(
            y + i,
            _mm512_fmadd_ps(vw, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                            _mm512_mul_ps(vc, _mm512_loadu_ps(y + i))));
    for (; i < n; i++)
        y[i] = y[i] * c + w * simd_f16_to_f32(x[i]);
}

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

static inline float simd_hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float simd_dot_f32(const float *a, const float *b, size_t n)
{
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = simd_hsum256(acc);
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline float simd_dot_f16(const float *a, const uint16_t *b, size_t n)
{
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), acc);
    float s = simd_hsum256(acc);
    for (; i < n; i++)
        s += a[i] * simd_f16_to_f32(b[i]);
    return s;
}

static inline void simd_scale_axpy_f32(float *y, float c, float w, const float *x, size_t n)
{
    __m256 vc = _mm256_set1_ps(c), vw = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(x + i),
                                                _mm256_mul_ps(vc, _mm256_loadu_ps(y + i))));
    for (; i < n; i++)
        y[i] = y[i] * c + w * x[i];
}

static inline void simd_scale_axpy_f16(float *y, float c, float w, const uint16_t *x, size_t n)
{
    __m256 vc = _mm256_set1_ps(c), vw = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            y + i, _mm256_fmadd_ps(vw, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                   _mm256_mul_ps(vc, _mm256_loadu_ps(y + i))));
    for (; i < n; i++)
        y[i] = y[i] * c + w * simd_f16_to_f32(x[i]);
}

#else /* portable */

static inline float simd_dot_f32(const float *a, const float *b, size_t n)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline float simd_dot_f16(const float *a, const uint16_t *b, size_t n)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += a[i] * simd_f16_to_f32(b[i]);
    return s;
}

static inline void simd_scale_axpy_f32(float *y, float c, float w, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] * c + w * x[i];
}

static inline void simd_scale_axpy_f16(float *y, float c, float w, const uint16_t *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] * c + w * simd_f16_to_f32(x[i]);
}

#endif

#ifndef SIMD_ROWS_MAX
#define SIMD_ROWS_MAX 8
#define SIMD_Q8_BLOCK 32
#define SIMD_Q8_BYTES 34
static inline float simd_q8_scale(const uint8_t *blk)
{
    uint16_t h;
    memcpy(&h, blk, sizeof(h));
    return simd_f16_to_f32(h);
}

static inline void simd_dot_q8_rows(const float *x, size_t ldx, const uint8_t *w, size_t n,
                                    size_t rows, float *out)
{
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *b = w;
        float t = 0.0f;
        for (size_t i = 0; i < n; i += SIMD_Q8_BLOCK, b += SIMD_Q8_BYTES) {
            float d = simd_q8_scale(b);
            for (size_t k = 0; k < SIMD_Q8_BLOCK; k++)
                t += x[r * ldx + i + k] * (d * (float)(int8_t)b[2 + k]);
        }
        out[r] = t;
    }
}

static inline void simd_dot_half_rows(const float *x, size_t ldx, const uint16_t *w, size_t n,
                                      size_t rows, bool bf16, float *out)
{
    for (size_t r = 0; r < rows; r++) {
        if (!bf16) {
            out[r] = simd_dot_f16(x + r * ldx, w, n);
            continue;
        }
        float t = 0.0f;
        for (size_t k = 0; k < n; k++)
            t += x[r * ldx + k] * simd_bf16_to_f32(w[k]);
        out[r] = t;
    }
}
#endif

/* dst[i] = half-precision src[i] as f32 (binary16, or bfloat16 when bf16); exact. */
static inline void simd_half_to_f32(float *dst, const uint16_t *src, size_t n, bool bf16)
{
    size_t i = 0;
#if defined(__AVX512F__)
    if (bf16)
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, simd_load16_half(src + i, true));
    else
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, simd_load16_half(src + i, false));
#endif
    for (; i < n; i++)
        dst[i] = bf16 ? simd_bf16_to_f32(src[i]) : simd_f16_to_f32(src[i]);
}

/* dst[i] = Q8_0 weights src (n / SIMD_Q8_BLOCK blocks) as f32; exact. */
static inline void simd_q8_to_f32(float *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i += SIMD_Q8_BLOCK, src += SIMD_Q8_BYTES) {
        float d = simd_q8_scale(src);
        for (size_t k = 0; k < SIMD_Q8_BLOCK; k++)
            dst[i + k] = d * (float)(int8_t)src[2 + k];
    }
}

/* Sum of squares, used by RMSNorm (portable: the compiler vectorises it). */
static inline float simd_sumsq(const float *x, size_t n)
{
    return simd_dot_f32(x, x, n);
}

#endif

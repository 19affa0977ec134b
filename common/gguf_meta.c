/* gguf_meta.c — metadata getters and tensor lookup on an opened file (contract: gguf.h).
 * Lookups are linear scans: files hold tens of keys and hundreds of tensors, and they run
 * at load time only. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/gguf.h"
#include "common/gguf_impl.h"
#include "common/log.h"

const struct gguf_kv *gguf_kv_find(const struct gguf_file *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

static int kv_lookup(const struct gguf_file *g, const char *key, const struct gguf_kv **kv)
{
    *kv = gguf_kv_find(g, key);
    return *kv ? 0 : -ENOENT;
}

static int type_err(const struct gguf_file *g, const struct gguf_kv *kv, const char *want,
                    char *err)
{
    gguf_seterr(err, g->path, "metadata '%s' has type %s, expected %s", kv->key, gguf_vtype_name(kv->type),
           want);
    return KVD_EMODEL;
}

/* Reads any integer-typed value as a signed 128-bit-safe pair (neg flag + magnitude). */
static bool kv_int(const struct gguf_kv *kv, bool *neg, uint64_t *mag)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; } v;
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case GGUF_VT_U8: case GGUF_VT_BOOL: memcpy(&v.u8, kv->val, 1); *mag = v.u8; return true;
    case GGUF_VT_U16: memcpy(&v.u16, kv->val, 2); *mag = v.u16; return true;
    case GGUF_VT_U32: memcpy(&v.u32, kv->val, 4); *mag = v.u32; return true;
    case GGUF_VT_U64: memcpy(&v.u64, kv->val, 8); *mag = v.u64; return true;
    case GGUF_VT_I8: memcpy(&v.i8, kv->val, 1); s = v.i8; break;
    case GGUF_VT_I16: memcpy(&v.i16, kv->val, 2); s = v.i16; break;
    case GGUF_VT_I32: memcpy(&v.i32, kv->val, 4); s = v.i32; break;
    case GGUF_VT_I64: memcpy(&v.i64, kv->val, 8); s = v.i64; break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)(-(s + 1)) + 1 : (uint64_t)s;
    return true;
}

int gguf_get_u64(const struct gguf_file *g, const char *key, uint64_t *out, char *err)
{
    const struct gguf_kv *kv;
    bool neg;
    uint64_t mag;
    if (kv_lookup(g, key, &kv))
        return -ENOENT;
    if (!kv_int(kv, &neg, &mag))
        return type_err(g, kv, "an integer", err);
    if (neg) {
        gguf_seterr(err, g->path, "metadata '%s' is negative", key);
        return KVD_EMODEL;
    }
    *out = mag;
    return 0;
}

int gguf_get_u32(const struct gguf_file *g, const char *key, uint32_t *out, char *err)
{
    uint64_t v;
    int rc = gguf_get_u64(g, key, &v, err);
    if (rc)
        return rc;
    if (v > UINT32_MAX) {
        gguf_seterr(err, g->path, "metadata '%s' = %llu does not fit in 32 bits", key,
               (unsigned long long)v);
        return KVD_EMODEL;
    }
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_i32(const struct gguf_file *g, const char *key, int32_t *out, char *err)
{
    const struct gguf_kv *kv;
    bool neg;
    uint64_t mag;
    if (kv_lookup(g, key, &kv))
        return -ENOENT;
    if (!kv_int(kv, &neg, &mag))
        return type_err(g, kv, "an integer", err);
    if ((!neg && mag > INT32_MAX) || (neg && mag > (uint64_t)INT32_MAX + 1)) {
        gguf_seterr(err, g->path, "metadata '%s' does not fit in a signed 32-bit integer", key);
        return KVD_EMODEL;
    }
    *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return 0;
}

int gguf_get_f32(const struct gguf_file *g, const char *key, float *out, char *err)
{
    const struct gguf_kv *kv;
    if (kv_lookup(g, key, &kv))
        return -ENOENT;
    if (kv->type == GGUF_VT_F32) {
        memcpy(out, kv->val, 4);
    } else if (kv->type == GGUF_VT_F64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
    } else {
        return type_err(g, kv, "f32", err);
    }
    return 0;
}

int gguf_get_bool(const struct gguf_file *g, const char *key, bool *out, char *err)
{
    const struct gguf_kv *kv;
    bool neg;
    uint64_t mag;
    if (kv_lookup(g, key, &kv))
        return -ENOENT;
    if (!kv_int(kv, &neg, &mag))
        return type_err(g, kv, "bool", err);
    *out = mag != 0;
    return 0;
}

int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out, char *err)
{
    const struct gguf_kv *kv;
    if (kv_lookup(g, key, &kv))
        return -ENOENT;
    if (kv->type != GGUF_VT_STRING)
        return type_err(g, kv, "string", err);
    *out = kv->str;
    return 0;
}

int gguf_get_arr(const struct gguf_file *g, const char *key, uint32_t elem_type,
                 struct gguf_arr *out, char *err)
{
    const struct gguf_kv *kv;
    if (kv_lookup(g, key, &kv))
        return -ENOENT;
    if (kv->type != GGUF_VT_ARRAY || kv->arr.type != elem_type) {
        gguf_seterr(err, g->path, "metadata '%s' has type %s%s%s, expected array of %s", key,
               gguf_vtype_name(kv->type), kv->type == GGUF_VT_ARRAY ? " of " : "",
               kv->type == GGUF_VT_ARRAY ? gguf_vtype_name(kv->arr.type) : "",
               gguf_vtype_name(elem_type));
        return KVD_EMODEL;
    }
    *out = kv->arr;
    return 0;
}

struct gguf_str gguf_arr_str(const struct gguf_arr *a, uint64_t i)
{
    KVD_BUG_ON(a->type != GGUF_VT_STRING || i >= a->n);
    const uint8_t *p = (const uint8_t *)a->data + a->str_off[i];
    struct gguf_str s;
    memcpy(&s.len, p, 8);
    s.p = (const char *)p + 8;
    return s;
}

int32_t gguf_arr_i32(const struct gguf_arr *a, uint64_t i)
{
    KVD_BUG_ON((a->type != GGUF_VT_I32 && a->type != GGUF_VT_U32) || i >= a->n);
    int32_t v;
    memcpy(&v, (const uint8_t *)a->data + 4 * i, 4);
    return v;
}

float gguf_arr_f32(const struct gguf_arr *a, uint64_t i)
{
    KVD_BUG_ON(a->type != GGUF_VT_F32 || i >= a->n);
    float v;
    memcpy(&v, (const uint8_t *)a->data + 4 * i, 4);
    return v;
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && memcmp(s.p, c, n) == 0;
}

/* ---- tensors ---- */

const struct gguf_tensor *gguf_tensor_find(const struct gguf_file *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

static void fmt_shape(char *buf, size_t cap, uint32_t n_dims, const uint64_t *ne)
{
    size_t k = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < n_dims && k < cap; d++) {
        int w = snprintf(buf + k, cap - k, "%s%llu", d ? ", " : "{", (unsigned long long)ne[d]);
        if (w < 0)
            return;
        k += (size_t)w;
    }
    if (k < cap)
        snprintf(buf + k, cap - k, "}");
}

int gguf_tensor_get_checked(const struct gguf_file *g, const char *name, uint32_t n_dims,
                            const uint64_t *ne, const struct gguf_tensor **out,
                            char err[GGUF_ERR_LEN])
{
    const struct gguf_tensor *t = gguf_tensor_find(g, name);
    if (!t) {
        gguf_seterr(err, g->path, "tensor '%s' is missing", name);
        return -ENOENT;
    }
    bool same = t->n_dims == n_dims;
    for (uint32_t d = 0; same && d < n_dims; d++)
        same = t->ne[d] == ne[d];
    if (!same) {
        char want[96], got[96];
        fmt_shape(want, sizeof(want), n_dims, ne);
        fmt_shape(got, sizeof(got), t->n_dims, t->ne);
        gguf_seterr(err, g->path, "tensor '%s' has shape %s, expected %s", name, got, want);
        return KVD_EMODEL;
    }
    if (!gguf_dtype_is_supported(t->type)) {
        gguf_seterr(err, g->path, "tensor '%s' has type %s, which kvd does not support "
                             "(F32, F16, BF16, Q8_0)",
               name, gguf_dtype_name(t->type));
        return KVD_EMODEL;
    }
    *out = t;
    return 0;
}

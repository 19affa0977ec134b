/* gguf_write.c — GGUF v3 writer (contract: gguf_write.h). */
#include "common/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WRITER_PAD_MAX GGUF_DEFAULT_ALIGNMENT /* zero bytes written between sections */

void gguf_writer_init(struct gguf_writer *w)
{
    memset(w, 0, sizeof(*w));
}

void gguf_writer_release(struct gguf_writer *w)
{
    for (uint64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->kv);
    memset(w, 0, sizeof(*w));
}

static void put(struct gguf_writer *w, const void *p, size_t n)
{
    if (w->err)
        return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n)
            cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) {
            w->err = -ENOMEM;
            return;
        }
        w->kv = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}

static void put_u32(struct gguf_writer *w, uint32_t v)
{
    put(w, &v, 4);
}

static void put_u64(struct gguf_writer *w, uint64_t v)
{
    put(w, &v, 8);
}

static void put_str(struct gguf_writer *w, const char *s, uint64_t len)
{
    put_u64(w, len);
    put(w, s, len);
}

static void key(struct gguf_writer *w, const char *k, uint32_t vtype)
{
    put_str(w, k, strlen(k));
    put_u32(w, vtype);
    w->n_kv++;
}

void gguf_writer_raw(struct gguf_writer *w, const char *k, uint32_t vtype, const void *val,
                     size_t len)
{
    key(w, k, vtype);
    put(w, val, len);
}

void gguf_writer_u32(struct gguf_writer *w, const char *k, uint32_t v)
{
    gguf_writer_raw(w, k, GGUF_VT_U32, &v, 4);
}

void gguf_writer_i32(struct gguf_writer *w, const char *k, int32_t v)
{
    gguf_writer_raw(w, k, GGUF_VT_I32, &v, 4);
}

void gguf_writer_f32(struct gguf_writer *w, const char *k, float v)
{
    gguf_writer_raw(w, k, GGUF_VT_F32, &v, 4);
}

void gguf_writer_bool(struct gguf_writer *w, const char *k, bool v)
{
    uint8_t b = v;
    gguf_writer_raw(w, k, GGUF_VT_BOOL, &b, 1);
}

void gguf_writer_str(struct gguf_writer *w, const char *k, const char *s)
{
    key(w, k, GGUF_VT_STRING);
    put_str(w, s, strlen(s));
}

void gguf_writer_arr_str(struct gguf_writer *w, const char *k, const char *const *strs,
                         const uint64_t *lens, uint64_t n)
{
    key(w, k, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
}

void gguf_writer_arr_f32(struct gguf_writer *w, const char *k, const float *v, uint64_t n)
{
    key(w, k, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_F32);
    put_u64(w, n);
    put(w, v, n * 4);
}

void gguf_writer_arr_i32(struct gguf_writer *w, const char *k, const int32_t *v, uint64_t n)
{
    key(w, k, GGUF_VT_ARRAY);
    put_u32(w, GGUF_VT_I32);
    put_u64(w, n);
    put(w, v, n * 4);
}

void gguf_writer_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, gguf_fill_cb fill, void *ctx)
{
    struct gguf_wtensor t = {.type = type, .n_dims = n_dims, .fill = fill, .ctx = ctx};
    uint64_t n = 1;

    if (w->err)
        return;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || strlen(name) > GGUF_MAX_NAME_LEN) {
        w->err = -EINVAL;
        return;
    }
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        n *= t.ne[d];
    t.nbytes = gguf_row_bytes(type, t.ne[0]) * n;
    if (t.nbytes == 0) {
        w->err = -EINVAL;
        return;
    }
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        struct gguf_wtensor *nt = realloc(w->t, cap * sizeof(*nt));
        if (!nt) {
            w->err = -ENOMEM;
            return;
        }
        w->t = nt;
        w->cap_t = cap;
    }
    t.name = strdup(name);
    if (!t.name) {
        w->err = -ENOMEM;
        return;
    }
    w->t[w->n_t++] = t;
}

static uint64_t align_up(uint64_t x)
{
    return (x + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT;
}

static int wr(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -EIO;
}

static int pad(FILE *f, uint64_t from)
{
    static const uint8_t zeros[WRITER_PAD_MAX];
    return wr(f, zeros, align_up(from) - from);
}

int gguf_writer_write(struct gguf_writer *w, FILE *f)
{
    uint32_t hdr32[2] = {GGUF_MAGIC, GGUF_VERSION};
    uint64_t pos = 0, off = 0;
    int rc;

    if (w->err)
        return w->err;
    if ((rc = wr(f, hdr32, 8)) || (rc = wr(f, &w->n_t, 8)) || (rc = wr(f, &w->n_kv, 8)) ||
        (rc = wr(f, w->kv, w->kv_len)))
        return rc;
    pos = 24 + w->kv_len;
    for (uint64_t i = 0; i < w->n_t; i++) {
        struct gguf_wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        t->offset = off;
        off = align_up(off + t->nbytes);
        if ((rc = wr(f, &len, 8)) || (rc = wr(f, t->name, len)) || (rc = wr(f, &t->n_dims, 4)) ||
            (rc = wr(f, t->ne, 8 * t->n_dims)) || (rc = wr(f, &t->type, 4)) ||
            (rc = wr(f, &t->offset, 8)))
            return rc;
        pos += 8 + len + 4 + 8 * t->n_dims + 4 + 8;
    }
    if ((rc = pad(f, pos)))
        return rc;
    for (uint64_t i = 0; i < w->n_t; i++) {
        struct gguf_wtensor *t = &w->t[i];
        void *buf = calloc(1, t->nbytes);
        if (!buf)
            return -ENOMEM;
        rc = t->fill ? t->fill(t->ctx, t->name, buf, t->nbytes) : 0;
        if (!rc)
            rc = wr(f, buf, t->nbytes);
        free(buf);
        if (!rc && i + 1 < w->n_t)
            rc = pad(f, t->nbytes);
        if (rc)
            return rc;
    }
    return fflush(f) ? -EIO : 0;
}

int gguf_writer_write_path(struct gguf_writer *w, const char *path)
{
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    int rc;
    if (!tmp)
        return -ENOMEM;
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wbe");
    if (!f) {
        rc = -errno;
        goto out_free;
    }
    rc = gguf_writer_write(w, f);
    if (fclose(f) && !rc)
        rc = -EIO;
    if (!rc && rename(tmp, path) < 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
out_free:
    free(tmp);
    return rc;
}

int gguf_writer_write_mem(struct gguf_writer *w, uint8_t **buf, size_t *len)
{
    char *p = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&p, &n);
    if (!f)
        return -errno;
    int rc = gguf_writer_write(w, f);
    fclose(f);
    if (rc) {
        free(p);
        return rc;
    }
    *buf = (uint8_t *)p;
    *len = n;
    return 0;
}

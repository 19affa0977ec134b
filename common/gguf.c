/* gguf.c — GGUF parsing and validation, metadata and tensor lookup (contract: gguf.h).
 *
 * The file is walked twice: the first walk validates everything and counts what the
 * second needs (bytes of key/name copies, string-array elements); the second fills the
 * tables. Every read goes through the cursor, which refuses to step past the end, and
 * every size computation is overflow-checked, so no input can read outside the buffer.
 */
#include "common/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"

/* Smallest encodings, used to bound counts by the file size before allocating. */
#define GGUF_MIN_KV_BYTES 13     /* u64 key len + 1 key byte + u32 type (+ >= 0 value) */
#define GGUF_MIN_TENSOR_BYTES 33 /* u64 len + 1 byte + u32 n_dims + u64 ne + u32 + u64 */
#define GGUF_HEADER_BYTES 24     /* magic, version, n_tensors, n_kv */

static void seterr(char *err, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, const char *name, const char *fmt, ...)
{
    if (!err)
        return;
    int k = snprintf(err, GGUF_ERR_LEN, "'%s': ", name);
    if (k < 0 || k >= GGUF_ERR_LEN)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, (size_t)(GGUF_ERR_LEN - k), fmt, ap);
    va_end(ap);
}

struct cursor {
    const uint8_t *buf;
    uint64_t size;
    uint64_t off;
    const char *name; /* file name for messages */
    char *err;
};

static int cur_need(struct cursor *c, uint64_t n, const char *what)
{
    if (n > c->size - c->off) {
        seterr(c->err, c->name,
               "truncated: %s needs %llu bytes at offset %llu but the file is %llu bytes",
               what, (unsigned long long)n, (unsigned long long)c->off,
               (unsigned long long)c->size);
        return KVD_EMODEL;
    }
    return 0;
}

static int cur_bytes(struct cursor *c, uint64_t n, const uint8_t **p, const char *what)
{
    int rc = cur_need(c, n, what);
    if (rc)
        return rc;
    *p = c->buf + c->off;
    c->off += n;
    return 0;
}

static int cur_u32(struct cursor *c, uint32_t *v, const char *what)
{
    const uint8_t *p;
    int rc = cur_bytes(c, 4, &p, what);
    if (!rc)
        memcpy(v, p, 4);
    return rc;
}

static int cur_u64(struct cursor *c, uint64_t *v, const char *what)
{
    const uint8_t *p;
    int rc = cur_bytes(c, 8, &p, what);
    if (!rc)
        memcpy(v, p, 8);
    return rc;
}

/* A GGUF string: u64 length then bytes. max bounds the length. */
static int cur_str(struct cursor *c, struct gguf_str *s, uint64_t max, const char *what)
{
    uint64_t len;
    const uint8_t *p;
    int rc = cur_u64(c, &len, what);
    if (rc)
        return rc;
    if (len > max) {
        seterr(c->err, c->name, "%s at offset %llu has length %llu, over the limit %llu", what,
               (unsigned long long)(c->off - 8), (unsigned long long)len,
               (unsigned long long)max);
        return KVD_EMODEL;
    }
    if ((rc = cur_bytes(c, len, &p, what)))
        return rc;
    s->p = (const char *)p;
    s->len = len;
    return 0;
}

static uint64_t vtype_size(uint32_t t)
{
    switch (t) {
    case GGUF_VT_U8: case GGUF_VT_I8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_U16: case GGUF_VT_I16: return 2;
    case GGUF_VT_U32: case GGUF_VT_I32: case GGUF_VT_F32: return 4;
    case GGUF_VT_U64: case GGUF_VT_I64: case GGUF_VT_F64: return 8;
    default: return 0; /* string, array, unknown */
    }
}

static const char *vtype_name(uint32_t t)
{
    static const char *const names[GGUF_VT_COUNT_] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
        "u64", "i64", "f64"};
    return t < GGUF_VT_COUNT_ ? names[t] : "unknown";
}

struct walk {
    struct cursor c;
    struct gguf_file *g;  /* tables to fill (second walk) or NULL (first walk) */
    uint64_t names_bytes; /* keys + tensor names incl. NULs */
    uint64_t n_str_elems; /* elements of all string arrays */
    uint32_t alignment;
};

static int walk_name(struct walk *w, struct gguf_str s, const char *what, const char **out)
{
    if (memchr(s.p, '\0', s.len)) {
        seterr(w->c.err, w->c.name, "%s at offset %llu contains a NUL byte", what,
               (unsigned long long)(w->c.off - s.len));
        return KVD_EMODEL;
    }
    if (w->g) {
        char *dst = w->g->names_ + w->names_bytes;
        memcpy(dst, s.p, s.len);
        dst[s.len] = '\0';
        *out = dst;
    }
    w->names_bytes += s.len + 1;
    return 0;
}

static int walk_kv(struct walk *w, uint64_t i)
{
    struct cursor *c = &w->c;
    struct gguf_kv kv = {0};
    struct gguf_str key;
    uint32_t type;
    int rc;

    if ((rc = cur_str(c, &key, GGUF_MAX_KEY_LEN, "metadata key")))
        return rc;
    if (key.len == 0) {
        seterr(c->err, c->name, "metadata key %llu is empty", (unsigned long long)i);
        return KVD_EMODEL;
    }
    if ((rc = walk_name(w, key, "metadata key", &kv.key)))
        return rc;
    if ((rc = cur_u32(c, &type, "metadata value type")))
        return rc;
    kv.type = type;
    if (type == GGUF_VT_STRING) {
        if ((rc = cur_str(c, &kv.str, GGUF_MAX_STR_LEN, "metadata string")))
            return rc;
    } else if (type == GGUF_VT_ARRAY) {
        uint32_t et;
        uint64_t n;
        if ((rc = cur_u32(c, &et, "array element type")) || (rc = cur_u64(c, &n, "array length")))
            return rc;
        if (n > GGUF_MAX_ARRAY_LEN) {
            seterr(c->err, c->name, "array '%.*s' has %llu elements, over the limit %u",
                   (int)key.len, key.p, (unsigned long long)n, GGUF_MAX_ARRAY_LEN);
            return KVD_EMODEL;
        }
        kv.arr.type = et;
        kv.arr.n = n;
        kv.arr.data = c->buf + c->off;
        if (et == GGUF_VT_STRING) {
            uint64_t *offs = w->g ? w->g->str_offs_ + w->n_str_elems : NULL;
            uint64_t base = c->off;
            /* each element needs at least its u64 length: bound n before looping */
            if ((rc = cur_need(c, n * 8, "string array")))
                return rc;
            for (uint64_t k = 0; k < n; k++) {
                struct gguf_str s;
                if (offs)
                    offs[k] = c->off - base;
                if ((rc = cur_str(c, &s, GGUF_MAX_STR_LEN, "array string")))
                    return rc;
            }
            kv.arr.str_off = offs;
            w->n_str_elems += n;
        } else {
            uint64_t es = vtype_size(et);
            if (es == 0) {
                seterr(c->err, c->name, "array '%.*s' has element type %u (%s), not supported",
                       (int)key.len, key.p, et, vtype_name(et));
                return KVD_EMODEL;
            }
            const uint8_t *p;
            if ((rc = cur_bytes(c, n * es, &p, "array data"))) /* n <= 2^24, no overflow */
                return rc;
        }
    } else {
        uint64_t es = vtype_size(type);
        const uint8_t *p;
        if (es == 0) {
            seterr(c->err, c->name, "metadata '%.*s' has unknown value type %u", (int)key.len,
                   key.p, type);
            return KVD_EMODEL;
        }
        if ((rc = cur_bytes(c, es, &p, "metadata value")))
            return rc;
        kv.val = p;
        if (key.len == 17 && memcmp(key.p, "general.alignment", 17) == 0) {
            uint32_t a;
            if (type != GGUF_VT_U32) {
                seterr(c->err, c->name, "general.alignment has type %s, expected u32",
                       vtype_name(type));
                return KVD_EMODEL;
            }
            memcpy(&a, p, 4);
            if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT) {
                seterr(c->err, c->name,
                       "general.alignment is %u, not a power of two in 1..%u", a,
                       GGUF_MAX_ALIGNMENT);
                return KVD_EMODEL;
            }
            w->alignment = a;
        }
    }
    if (w->g)
        w->g->kv[i] = kv;
    return 0;
}

static int walk_tensor(struct walk *w, uint64_t i)
{
    struct cursor *c = &w->c;
    struct gguf_tensor t = {0};
    struct gguf_str name;
    uint32_t n_dims;
    int rc;

    if ((rc = cur_str(c, &name, GGUF_MAX_NAME_LEN, "tensor name")))
        return rc;
    if (name.len == 0) {
        seterr(c->err, c->name, "tensor %llu has an empty name", (unsigned long long)i);
        return KVD_EMODEL;
    }
    if ((rc = walk_name(w, name, "tensor name", &t.name)))
        return rc;
    if ((rc = cur_u32(c, &n_dims, "tensor n_dims")))
        return rc;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        seterr(c->err, c->name, "tensor '%.*s' has %u dimensions (1..%d allowed)",
               (int)name.len, name.p, n_dims, GGUF_MAX_DIMS);
        return KVD_EMODEL;
    }
    t.n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++)
        if ((rc = cur_u64(c, &t.ne[d], "tensor dimension")))
            return rc;
    if ((rc = cur_u32(c, &t.type, "tensor type")) || (rc = cur_u64(c, &t.offset, "tensor offset")))
        return rc;
    if (w->g)
        w->g->tensors[i] = t;
    return 0;
}

/* Checks a tensor's type, shape, size and place once the data section is known. */
static int check_tensor(struct gguf_file *g, struct gguf_tensor *t, char *err)
{
    const char *nm = g->path;
    uint32_t be = gguf_dtype_block_elems(t->type);
    uint64_t n = 1;

    if (be == 0) {
        seterr(err, nm, "tensor '%s' has unknown type id %u", t->name, t->type);
        return KVD_EMODEL;
    }
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX) {
            seterr(err, nm, "tensor '%s' has dimension %u of size %llu", t->name, d,
                   (unsigned long long)t->ne[d]);
            return KVD_EMODEL;
        }
        if (__builtin_mul_overflow(n, t->ne[d], &n) || n > INT64_MAX) {
            seterr(err, nm, "tensor '%s' has too many elements (overflow)", t->name);
            return KVD_EMODEL;
        }
    }
    t->n_elems = n;
    if (t->ne[0] % be) {
        seterr(err, nm, "tensor '%s' of type %s has rows of %llu elements, not a multiple of %u",
               t->name, gguf_dtype_name(t->type), (unsigned long long)t->ne[0], be);
        return KVD_EMODEL;
    }
    uint64_t row = t->ne[0] / be * gguf_dtype_block_bytes(t->type);
    if (__builtin_mul_overflow(row, n / t->ne[0], &t->nbytes)) {
        seterr(err, nm, "tensor '%s' byte size overflows", t->name);
        return KVD_EMODEL;
    }
    if (t->offset % g->alignment) {
        seterr(err, nm, "tensor '%s' offset %llu is not a multiple of the alignment %u",
               t->name, (unsigned long long)t->offset, g->alignment);
        return KVD_EMODEL;
    }
    uint64_t avail = g->size - g->data_off;
    if (t->offset > avail || t->nbytes > avail - t->offset) {
        seterr(err, nm,
               "tensor '%s' (%llu bytes at data offset %llu) extends past the end of the file "
               "(%llu data bytes)",
               t->name, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
               (unsigned long long)avail);
        return KVD_EMODEL;
    }
    uint64_t abs = g->data_off + t->offset;
    uint32_t ealign = t->type == GGUF_DT_F32 ? 4 : gguf_dtype_block_bytes(t->type) % 2 ? 1 : 2;
    if (t->type == GGUF_DT_F64 || t->type == GGUF_DT_I64)
        ealign = 8;
    if (abs % ealign) {
        seterr(err, nm, "tensor '%s' data at file offset %llu is misaligned for %s", t->name,
               (unsigned long long)abs, gguf_dtype_name(t->type));
        return KVD_EMODEL;
    }
    t->data = g->map + abs;
    return 0;
}

static int cmp_tensor_off(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_cstr_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Duplicate keys or tensor names, and overlapping tensors. */
static int check_unique(struct gguf_file *g, char *err)
{
    uint64_t n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    const void **v = calloc(n ? n : 1, sizeof(*v));
    int rc = 0;
    if (!v) {
        seterr(err, g->path, "out of memory");
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        v[i] = g->kv[i].key;
    qsort(v, g->n_kv, sizeof(*v), cmp_cstr_ptr);
    for (uint64_t i = 1; i < g->n_kv && !rc; i++)
        if (!strcmp(v[i - 1], v[i])) {
            seterr(err, g->path, "metadata key '%s' appears twice", (const char *)v[i]);
            rc = KVD_EMODEL;
        }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++)
        v[i] = g->tensors[i].name;
    if (!rc)
        qsort(v, g->n_tensors, sizeof(*v), cmp_cstr_ptr);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++)
        if (!strcmp(v[i - 1], v[i])) {
            seterr(err, g->path, "tensor '%s' appears twice", (const char *)v[i]);
            rc = KVD_EMODEL;
        }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++)
        v[i] = &g->tensors[i];
    if (!rc)
        qsort(v, g->n_tensors, sizeof(*v), cmp_tensor_off);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++) {
        const struct gguf_tensor *a = v[i - 1], *b = v[i];
        if (a->offset + a->nbytes > b->offset) {
            seterr(err, g->path, "tensors '%s' and '%s' overlap", a->name, b->name);
            rc = KVD_EMODEL;
        }
    }
    free(v);
    return rc;
}

static int parse(struct gguf_file *g, char *err)
{
    struct walk w = {.c = {.buf = g->map, .size = g->size, .name = g->path, .err = err},
                     .alignment = GGUF_DEFAULT_ALIGNMENT};
    uint32_t magic;
    int rc;

    if (g->size < GGUF_HEADER_BYTES) {
        seterr(err, g->path, "file is %llu bytes, too short for a GGUF header",
               (unsigned long long)g->size);
        return KVD_EMODEL;
    }
    cur_u32(&w.c, &magic, "magic");
    if (magic != GGUF_MAGIC) {
        seterr(err, g->path, "not a GGUF file (magic %02x %02x %02x %02x)", g->map[0],
               g->map[1], g->map[2], g->map[3]);
        return KVD_EMODEL;
    }
    cur_u32(&w.c, &g->version, "version");
    if (g->version < GGUF_VERSION_MIN || g->version > GGUF_VERSION) {
        seterr(err, g->path, "GGUF version %u is not supported (%d..%d; big-endian files "
                             "are not supported)",
               g->version, GGUF_VERSION_MIN, GGUF_VERSION);
        return KVD_EMODEL;
    }
    cur_u64(&w.c, &g->n_tensors, "tensor count");
    cur_u64(&w.c, &g->n_kv, "metadata count");
    if (g->n_tensors > GGUF_MAX_TENSORS || g->n_tensors > g->size / GGUF_MIN_TENSOR_BYTES) {
        seterr(err, g->path, "tensor count %llu is impossible (limit %d, file %llu bytes)",
               (unsigned long long)g->n_tensors, GGUF_MAX_TENSORS, (unsigned long long)g->size);
        return KVD_EMODEL;
    }
    if (g->n_kv > GGUF_MAX_KV || g->n_kv > g->size / GGUF_MIN_KV_BYTES) {
        seterr(err, g->path, "metadata count %llu is impossible (limit %d, file %llu bytes)",
               (unsigned long long)g->n_kv, GGUF_MAX_KV, (unsigned long long)g->size);
        return KVD_EMODEL;
    }

    /* walk 1: validate and count */
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((rc = walk_kv(&w, i)))
            return rc;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = walk_tensor(&w, i)))
            return rc;

    /* walk 2: fill */
    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    g->names_ = malloc(w.names_bytes ? w.names_bytes : 1);
    g->str_offs_ = calloc(w.n_str_elems ? w.n_str_elems : 1, sizeof(*g->str_offs_));
    if (!g->kv || !g->tensors || !g->names_ || !g->str_offs_) {
        seterr(err, g->path, "out of memory");
        return -ENOMEM;
    }
    w.c.off = GGUF_HEADER_BYTES;
    w.g = g;
    w.names_bytes = w.n_str_elems = 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((rc = walk_kv(&w, i)))
            return rc;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = walk_tensor(&w, i)))
            return rc;

    g->alignment = w.alignment;
    g->data_off = (w.c.off + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_off > g->size) {
        if (g->n_tensors) {
            seterr(err, g->path, "file ends (%llu bytes) before its data section (offset %llu)",
                   (unsigned long long)g->size, (unsigned long long)g->data_off);
            return KVD_EMODEL;
        }
        g->data_off = g->size;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = check_tensor(g, &g->tensors[i], err)))
            return rc;
    return check_unique(g, err);
}

static void free_tables(struct gguf_file *g)
{
    free(g->kv);
    free(g->tensors);
    free(g->names_);
    free(g->str_offs_);
}

static int open_common(struct gguf_file *g, const void *buf, uint64_t size, const char *name,
                       bool mapped, char *err)
{
    struct gguf_file tmp = {0};
    snprintf(tmp.path, sizeof(tmp.path), "%s", name);
    tmp.map = buf;
    tmp.size = size;
    tmp.mapped_ = mapped;
    int rc = parse(&tmp, err);
    if (rc) {
        free_tables(&tmp);
        return rc;
    }
    *g = tmp;
    return 0;
}

int gguf_open_mem(struct gguf_file *g, const void *buf, uint64_t size, const char *name,
                  char err[GGUF_ERR_LEN])
{
    int rc = open_common(g, buf, size, name, false, err);
    if (rc)
        memset(g, 0, sizeof(*g));
    return rc;
}

int gguf_open(struct gguf_file *g, const char *path, char err[GGUF_ERR_LEN])
{
    struct stat st;
    void *map;
    int rc, fd = open(path, O_RDONLY | O_CLOEXEC);

    memset(g, 0, sizeof(*g));
    if (fd < 0) {
        rc = -errno;
        seterr(err, path, "cannot open: %s", strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        seterr(err, path, "cannot stat: %s", strerror(-rc));
        goto out_close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        seterr(err, path, "not a regular file");
        rc = KVD_EMODEL;
        goto out_close_fd;
    }
    if (st.st_size < GGUF_HEADER_BYTES) {
        seterr(err, path, "file is %lld bytes, too short for a GGUF header",
               (long long)st.st_size);
        rc = KVD_EMODEL;
        goto out_close_fd;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        seterr(err, path, "cannot mmap %lld bytes: %s", (long long)st.st_size, strerror(-rc));
        goto out_close_fd;
    }
    close(fd);
    rc = open_common(g, map, (uint64_t)st.st_size, path, true, err);
    if (rc) {
        munmap(map, (size_t)st.st_size);
        memset(g, 0, sizeof(*g));
    }
    return rc;

out_close_fd:
    close(fd);
    return rc;
}

void gguf_close(struct gguf_file *g)
{
    if (g->mapped_ && g->map)
        munmap((void *)g->map, g->size);
    free_tables(g);
    memset(g, 0, sizeof(*g));
}

/* ---- metadata ---- */

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
    seterr(err, g->path, "metadata '%s' has type %s, expected %s", kv->key, vtype_name(kv->type),
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
        seterr(err, g->path, "metadata '%s' is negative", key);
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
        seterr(err, g->path, "metadata '%s' = %llu does not fit in 32 bits", key,
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
        seterr(err, g->path, "metadata '%s' does not fit in a signed 32-bit integer", key);
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
        seterr(err, g->path, "metadata '%s' has type %s%s%s, expected array of %s", key,
               vtype_name(kv->type), kv->type == GGUF_VT_ARRAY ? " of " : "",
               kv->type == GGUF_VT_ARRAY ? vtype_name(kv->arr.type) : "",
               vtype_name(elem_type));
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
        seterr(err, g->path, "tensor '%s' is missing", name);
        return -ENOENT;
    }
    bool same = t->n_dims == n_dims;
    for (uint32_t d = 0; same && d < n_dims; d++)
        same = t->ne[d] == ne[d];
    if (!same) {
        char want[96], got[96];
        fmt_shape(want, sizeof(want), n_dims, ne);
        fmt_shape(got, sizeof(got), t->n_dims, t->ne);
        seterr(err, g->path, "tensor '%s' has shape %s, expected %s", name, got, want);
        return KVD_EMODEL;
    }
    if (!gguf_dtype_is_supported(t->type)) {
        seterr(err, g->path, "tensor '%s' has type %s, which kvd does not support "
                             "(F32, F16, BF16, Q8_0)",
               name, gguf_dtype_name(t->type));
        return KVD_EMODEL;
    }
    *out = t;
    return 0;
}

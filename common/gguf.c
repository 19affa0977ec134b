/* gguf.c — GGUF parsing and validation, open/close (contract: gguf.h; lookups: gguf_meta.c).
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
#include "common/gguf_impl.h"

/* Smallest encodings, used to bound counts by the file size before allocating. */
#define GGUF_MIN_KV_BYTES 13     /* u64 key len + 1 key byte + u32 type (+ >= 0 value) */
#define GGUF_MIN_TENSOR_BYTES 33 /* u64 len + 1 byte + u32 n_dims + u64 ne + u32 + u64 */
#define GGUF_HEADER_BYTES 24     /* magic, version, n_tensors, n_kv */

void gguf_seterr(char *err, const char *name, const char *fmt, ...)
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
        gguf_seterr(c->err, c->name,
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
        gguf_seterr(c->err, c->name, "%s at offset %llu has length %llu, over the limit %llu", what,
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

const char *gguf_vtype_name(uint32_t t)
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
        gguf_seterr(w->c.err, w->c.name, "%s at offset %llu contains a NUL byte", what,
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
        gguf_seterr(c->err, c->name, "metadata key %llu is empty", (unsigned long long)i);
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
            gguf_seterr(c->err, c->name, "array '%.*s' has %llu elements, over the limit %u",
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
                gguf_seterr(c->err, c->name, "array '%.*s' has element type %u (%s), not supported",
                       (int)key.len, key.p, et, gguf_vtype_name(et));
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
            gguf_seterr(c->err, c->name, "metadata '%.*s' has unknown value type %u", (int)key.len,
                   key.p, type);
            return KVD_EMODEL;
        }
        if ((rc = cur_bytes(c, es, &p, "metadata value")))
            return rc;
        kv.val = p;
        if (key.len == 17 && memcmp(key.p, "general.alignment", 17) == 0) {
            uint32_t a;
            if (type != GGUF_VT_U32) {
                gguf_seterr(c->err, c->name, "general.alignment has type %s, expected u32",
                       gguf_vtype_name(type));
                return KVD_EMODEL;
            }
            memcpy(&a, p, 4);
            if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT) {
                gguf_seterr(c->err, c->name,
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
        gguf_seterr(c->err, c->name, "tensor %llu has an empty name", (unsigned long long)i);
        return KVD_EMODEL;
    }
    if ((rc = walk_name(w, name, "tensor name", &t.name)))
        return rc;
    if ((rc = cur_u32(c, &n_dims, "tensor n_dims")))
        return rc;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        gguf_seterr(c->err, c->name, "tensor '%.*s' has %u dimensions (1..%d allowed)",
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
        gguf_seterr(err, nm, "tensor '%s' has unknown type id %u", t->name, t->type);
        return KVD_EMODEL;
    }
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] == 0 || t->ne[d] > INT64_MAX) {
            gguf_seterr(err, nm, "tensor '%s' has dimension %u of size %llu", t->name, d,
                   (unsigned long long)t->ne[d]);
            return KVD_EMODEL;
        }
        if (__builtin_mul_overflow(n, t->ne[d], &n) || n > INT64_MAX) {
            gguf_seterr(err, nm, "tensor '%s' has too many elements (overflow)", t->name);
            return KVD_EMODEL;
        }
    }
    t->n_elems = n;
    if (t->ne[0] % be) {
        gguf_seterr(err, nm, "tensor '%s' of type %s has rows of %llu elements, not a multiple of %u",
               t->name, gguf_dtype_name(t->type), (unsigned long long)t->ne[0], be);
        return KVD_EMODEL;
    }
    uint64_t row = t->ne[0] / be * gguf_dtype_block_bytes(t->type);
    if (__builtin_mul_overflow(row, n / t->ne[0], &t->nbytes)) {
        gguf_seterr(err, nm, "tensor '%s' byte size overflows", t->name);
        return KVD_EMODEL;
    }
    if (t->offset % g->alignment) {
        gguf_seterr(err, nm, "tensor '%s' offset %llu is not a multiple of the alignment %u",
               t->name, (unsigned long long)t->offset, g->alignment);
        return KVD_EMODEL;
    }
    uint64_t avail = g->size - g->data_off;
    if (t->offset > avail || t->nbytes > avail - t->offset) {
        gguf_seterr(err, nm,
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
        gguf_seterr(err, nm, "tensor '%s' data at file offset %llu is misaligned for %s", t->name,
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
        gguf_seterr(err, g->path, "out of memory");
        return -ENOMEM;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        v[i] = g->kv[i].key;
    qsort(v, g->n_kv, sizeof(*v), cmp_cstr_ptr);
    for (uint64_t i = 1; i < g->n_kv && !rc; i++)
        if (!strcmp(v[i - 1], v[i])) {
            gguf_seterr(err, g->path, "metadata key '%s' appears twice", (const char *)v[i]);
            rc = KVD_EMODEL;
        }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++)
        v[i] = g->tensors[i].name;
    if (!rc)
        qsort(v, g->n_tensors, sizeof(*v), cmp_cstr_ptr);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++)
        if (!strcmp(v[i - 1], v[i])) {
            gguf_seterr(err, g->path, "tensor '%s' appears twice", (const char *)v[i]);
            rc = KVD_EMODEL;
        }
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++)
        v[i] = &g->tensors[i];
    if (!rc)
        qsort(v, g->n_tensors, sizeof(*v), cmp_tensor_off);
    for (uint64_t i = 1; i < g->n_tensors && !rc; i++) {
        const struct gguf_tensor *a = v[i - 1], *b = v[i];
        if (a->offset + a->nbytes > b->offset) {
            gguf_seterr(err, g->path, "tensors '%s' and '%s' overlap", a->name, b->name);
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
        gguf_seterr(err, g->path, "file is %llu bytes, too short for a GGUF header",
               (unsigned long long)g->size);
        return KVD_EMODEL;
    }
    cur_u32(&w.c, &magic, "magic");
    if (magic != GGUF_MAGIC) {
        gguf_seterr(err, g->path, "not a GGUF file (magic %02x %02x %02x %02x)", g->map[0],
               g->map[1], g->map[2], g->map[3]);
        return KVD_EMODEL;
    }
    cur_u32(&w.c, &g->version, "version");
    if (g->version < GGUF_VERSION_MIN || g->version > GGUF_VERSION) {
        gguf_seterr(err, g->path, "GGUF version %u is not supported (%d..%d; big-endian files "
                             "are not supported)",
               g->version, GGUF_VERSION_MIN, GGUF_VERSION);
        return KVD_EMODEL;
    }
    cur_u64(&w.c, &g->n_tensors, "tensor count");
    cur_u64(&w.c, &g->n_kv, "metadata count");
    if (g->n_tensors > GGUF_MAX_TENSORS || g->n_tensors > g->size / GGUF_MIN_TENSOR_BYTES) {
        gguf_seterr(err, g->path, "tensor count %llu is impossible (limit %d, file %llu bytes)",
               (unsigned long long)g->n_tensors, GGUF_MAX_TENSORS, (unsigned long long)g->size);
        return KVD_EMODEL;
    }
    if (g->n_kv > GGUF_MAX_KV || g->n_kv > g->size / GGUF_MIN_KV_BYTES) {
        gguf_seterr(err, g->path, "metadata count %llu is impossible (limit %d, file %llu bytes)",
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
        gguf_seterr(err, g->path, "out of memory");
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
            gguf_seterr(err, g->path, "file ends (%llu bytes) before its data section (offset %llu)",
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
        gguf_seterr(err, path, "cannot open: %s", strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        gguf_seterr(err, path, "cannot stat: %s", strerror(-rc));
        goto out_close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        gguf_seterr(err, path, "not a regular file");
        rc = KVD_EMODEL;
        goto out_close_fd;
    }
    if (st.st_size < GGUF_HEADER_BYTES) {
        gguf_seterr(err, path, "file is %lld bytes, too short for a GGUF header",
               (long long)st.st_size);
        rc = KVD_EMODEL;
        goto out_close_fd;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        gguf_seterr(err, path, "cannot mmap %lld bytes: %s", (long long)st.st_size, strerror(-rc));
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

#include "proto/wire.h"

#include "common/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIRE_ZONE_CHUNK 4096 /* bytes; msgpack zone growth step */

int wire_fail(char err[WIRE_ERR_LEN], int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, WIRE_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

void wbuf_init(struct wbuf *w)
{
    msgpack_sbuffer_init(&w->sb);
    msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
}

void wbuf_release(struct wbuf *w)
{
    msgpack_sbuffer_destroy(&w->sb);
    wbuf_init(w);
}

static void pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

void wire_begin(struct wbuf *w, const char *type, uint32_t n_fields)
{
    msgpack_pack_map(&w->pk, n_fields + 2);
    pack_cstr(&w->pk, "v");
    msgpack_pack_uint32(&w->pk, KVD_PROTO_VERSION);
    pack_cstr(&w->pk, "t");
    pack_cstr(&w->pk, type);
}

void wire_key(struct wbuf *w, const char *key) { pack_cstr(&w->pk, key); }

void wire_put_u64(struct wbuf *w, const char *key, uint64_t v)
{
    wire_key(w, key);
    msgpack_pack_uint64(&w->pk, v);
}

void wire_put_i64(struct wbuf *w, const char *key, int64_t v)
{
    wire_key(w, key);
    msgpack_pack_int64(&w->pk, v);
}

void wire_put_f64(struct wbuf *w, const char *key, double v)
{
    wire_key(w, key);
    msgpack_pack_double(&w->pk, v);
}

void wire_put_bool(struct wbuf *w, const char *key, bool v)
{
    wire_key(w, key);
    if (v)
        msgpack_pack_true(&w->pk);
    else
        msgpack_pack_false(&w->pk);
}

void wire_put_str(struct wbuf *w, const char *key, const char *s)
{
    wire_key(w, key);
    if (s)
        pack_cstr(&w->pk, s);
    else
        msgpack_pack_nil(&w->pk);
}

void wire_put_strn(struct wbuf *w, const char *key, const char *s, size_t n)
{
    wire_key(w, key);
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, s, n);
}

void wire_put_u32s(struct wbuf *w, const char *key, const uint32_t *v, size_t n)
{
    wire_key(w, key);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_uint32(&w->pk, v[i]);
}

void wire_put_i32s(struct wbuf *w, const char *key, const int32_t *v, size_t n)
{
    wire_key(w, key);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++)
        msgpack_pack_int32(&w->pk, v[i]);
}

void wire_put_bin(struct wbuf *w, const char *key, const void *p, size_t n)
{
    wire_key(w, key);
    msgpack_pack_bin(&w->pk, n);
    msgpack_pack_bin_body(&w->pk, p, n);
}

void wire_error_reply(struct wbuf *w, int code, const char *msg)
{
    wire_begin(w, "err", 2);
    wire_put_str(w, "code", kvd_errname(code));
    wire_put_str(w, "msg", msg ? msg : kvd_strerror(code));
}

static bool key_eq(const msgpack_object *k, const char *key)
{
    size_t n = strlen(key);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, key, n) == 0;
}

const msgpack_object *wire_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (key_eq(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

static uint64_t be_n(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

int wire_precheck(const void *buf, size_t len, char err[WIRE_ERR_LEN])
{
    const uint8_t *p = buf, *end = p + len;
    if (!buf || len == 0)
        return wire_fail(err, KVD_EMSG, "empty message");
    uint64_t need = 1; /* objects still to read; each takes at least one byte */
    while (need && p < end) {
        uint8_t b = *p++;
        uint64_t skip = 0, add = 0;
        int lenb = 0; /* bytes of a length/count field that follows */
        bool is_count = false, is_map = false;
        need--;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
            ;
        else if (b >= 0x80 && b <= 0x8f)
            add = 2u * (b & 0x0f);
        else if (b >= 0x90 && b <= 0x9f)
            add = b & 0x0f;
        else if (b >= 0xa0 && b <= 0xbf)
            skip = b & 0x1f;
        else
            switch (b) {
            case 0xc4: case 0xd9: lenb = 1; break;             /* bin8, str8 */
            case 0xc5: case 0xda: lenb = 2; break;             /* bin16, str16 */
            case 0xc6: case 0xdb: lenb = 4; break;             /* bin32, str32 */
            case 0xc7: lenb = 1; skip = 1; break;              /* ext8: len, type */
            case 0xc8: lenb = 2; skip = 1; break;
            case 0xc9: lenb = 4; skip = 1; break;
            case 0xca: skip = 4; break;
            case 0xcb: skip = 8; break;
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xd4: skip = 2; break;                        /* fixext1..16: type + data */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xdc: lenb = 2; is_count = true; break;       /* array16 */
            case 0xdd: lenb = 4; is_count = true; break;
            case 0xde: lenb = 2; is_count = is_map = true; break; /* map16 */
            case 0xdf: lenb = 4; is_count = is_map = true; break;
            default:
                return wire_fail(err, KVD_EMSG, "malformed msgpack: byte 0x%02x at offset %zu", b,
                               (size_t)(p - 1 - (const uint8_t *)buf));
            }
        if (lenb) {
            if (end - p < lenb)
                return wire_fail(err, KVD_EMSG, "malformed msgpack: truncated length");
            uint64_t v = be_n(p, lenb);
            p += lenb;
            if (is_count)
                add = is_map ? 2 * v : v;
            else
                skip += v;
        }
        if (skip > (uint64_t)(end - p))
            return wire_fail(err, KVD_EMSG, "malformed msgpack: a value of %llu bytes runs past "
                                          "the end", (unsigned long long)skip);
        p += skip;
        need += add;
        if (need > (uint64_t)(end - p))
            return wire_fail(err, KVD_EMSG, "malformed msgpack: %llu elements declared, %zu bytes "
                                          "left", (unsigned long long)need, (size_t)(end - p));
    }
    if (need)
        return wire_fail(err, KVD_EMSG, "malformed msgpack: truncated");
    return 0;
}

int wmsg_parse(struct wmsg *m, const void *buf, size_t len, char err[WIRE_ERR_LEN])
{
    memset(m, 0, sizeof(*m));
    if (!buf || len == 0)
        return wire_fail(err, KVD_EMSG, "empty message");
    if (len > WIRE_MSG_MAX)
        return wire_fail(err, KVD_EMSG, "message of %zu bytes exceeds the %u byte limit", len,
                         WIRE_MSG_MAX);
    /* msgpack-c allocates for a container's declared count before reading it: a 5-byte
     * message could ask for gigabytes. Check every declared count against the bytes
     * left first. */
    int rc = wire_precheck(buf, len, err);
    if (rc)
        return rc;
    if (!msgpack_zone_init(&m->zone, WIRE_ZONE_CHUNK))
        return wire_fail(err, -ENOMEM, "out of memory");
    m->zone_live = true;
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack(buf, len, &off, &m->zone, &m->root);
    if (ur != MSGPACK_UNPACK_SUCCESS)
        return wire_fail(err, KVD_EMSG, ur == MSGPACK_UNPACK_EXTRA_BYTES
                                            ? "trailing bytes after the message"
                                            : "malformed msgpack");
    if (m->root.type != MSGPACK_OBJECT_MAP)
        return wire_fail(err, KVD_EMSG, "message is not a map");
    const msgpack_object *v = wire_get(&m->root, "v");
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return wire_fail(err, KVD_EMSG, "missing protocol version 'v'");
    if (v->via.u64 != KVD_PROTO_VERSION)
        return wire_fail(err, KVD_EPROTO, "protocol version %llu, expected %d",
                         (unsigned long long)v->via.u64, KVD_PROTO_VERSION);
    const msgpack_object *t = wire_get(&m->root, "t");
    if (!t || t->type != MSGPACK_OBJECT_STR || t->via.str.size == 0 || t->via.str.size > 64)
        return wire_fail(err, KVD_EMSG, "missing message type 't'");
    char *type = msgpack_zone_malloc(&m->zone, t->via.str.size + 1);
    if (!type)
        return wire_fail(err, -ENOMEM, "out of memory");
    memcpy(type, t->via.str.ptr, t->via.str.size);
    type[t->via.str.size] = '\0';
    m->type = type;
    return 0;
}

void wmsg_release(struct wmsg *m)
{
    if (m->zone_live)
        msgpack_zone_destroy(&m->zone);
    m->zone_live = false;
    m->type = NULL;
}

bool wmsg_is(const struct wmsg *m, const char *type)
{
    return m->type && strcmp(m->type, type) == 0;
}

int wmsg_error(const struct wmsg *m, const char **msg, size_t *msg_len)
{
    char code[32] = "";
    const msgpack_object *c = wire_get(&m->root, "code");
    if (c && c->type == MSGPACK_OBJECT_STR && c->via.str.size < sizeof(code))
        memcpy(code, c->via.str.ptr, c->via.str.size);
    const msgpack_object *s = wire_get(&m->root, "msg");
    if (msg) {
        bool ok = s && s->type == MSGPACK_OBJECT_STR;
        *msg = ok ? s->via.str.ptr : "";
        if (msg_len)
            *msg_len = ok ? s->via.str.size : 0;
    }
    return kvd_errcode(code);
}

int wire_check_keys(const msgpack_object *map, const char *const *allowed,
                    char err[WIRE_ERR_LEN])
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return wire_fail(err, KVD_EMSG, "expected a map");
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            return wire_fail(err, KVD_EMSG, "map key is not a string");
        bool ok = key_eq(k, "v") || key_eq(k, "t");
        for (const char *const *a = allowed; !ok && a && *a; a++)
            ok = key_eq(k, *a);
        if (!ok)
            return wire_fail(err, KVD_EMSG, "unknown field '%.*s'",
                             (int)(k->via.str.size > 40 ? 40 : k->via.str.size),
                             k->via.str.ptr);
        for (uint32_t j = 0; j < i; j++)
            if (map->via.map.ptr[j].key.type == MSGPACK_OBJECT_STR &&
                map->via.map.ptr[j].key.via.str.size == k->via.str.size &&
                memcmp(map->via.map.ptr[j].key.via.str.ptr, k->via.str.ptr,
                       k->via.str.size) == 0)
                return wire_fail(err, KVD_EMSG, "duplicate field '%.*s'",
                                 (int)(k->via.str.size > 40 ? 40 : k->via.str.size),
                                 k->via.str.ptr);
    }
    return 0;
}

/* Looks key up; 1 = found, 0 = absent and optional, <0 = absent and required. */
static int wire_lookup(const msgpack_object *map, const char *key, bool required,
                       const msgpack_object **o, char err[WIRE_ERR_LEN])
{
    *o = wire_get(map, key);
    if (*o && (*o)->type != MSGPACK_OBJECT_NIL)
        return 1;
    *o = NULL;
    return required ? wire_fail(err, KVD_EMSG, "missing field '%s'", key) : 0;
}

int wire_u64(const msgpack_object *map, const char *key, bool required, uint64_t def,
             uint64_t max, uint64_t *out, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    if (rc <= 0) {
        if (rc == 0)
            *out = def;
        return rc;
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return wire_fail(err, KVD_EMSG, "field '%s' must be an unsigned integer", key);
    if (o->via.u64 > max)
        return wire_fail(err, KVD_EMSG, "field '%s' = %llu exceeds the limit %llu", key,
                         (unsigned long long)o->via.u64, (unsigned long long)max);
    *out = o->via.u64;
    return 0;
}

int wire_u32(const msgpack_object *map, const char *key, bool required, uint32_t def,
             uint32_t max, uint32_t *out, char err[WIRE_ERR_LEN])
{
    uint64_t v;
    int rc = wire_u64(map, key, required, def, max, &v, err);
    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

int wire_i64(const msgpack_object *map, const char *key, bool required, int64_t def,
             int64_t min, int64_t max, int64_t *out, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    if (rc <= 0) {
        if (rc == 0)
            *out = def;
        return rc;
    }
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return wire_fail(err, KVD_EMSG, "field '%s' out of range", key);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return wire_fail(err, KVD_EMSG, "field '%s' must be an integer", key);
    }
    if (v < min || v > max)
        return wire_fail(err, KVD_EMSG, "field '%s' = %lld outside [%lld, %lld]", key,
                         (long long)v, (long long)min, (long long)max);
    *out = v;
    return 0;
}

int wire_f64(const msgpack_object *map, const char *key, bool required, double def,
             double min, double max, double *out, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    if (rc <= 0) {
        if (rc == 0)
            *out = def;
        return rc;
    }
    double v;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        v = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = (double)o->via.i64;
    else
        return wire_fail(err, KVD_EMSG, "field '%s' must be a number", key);
    if (!isfinite(v) || v < min || v > max)
        return wire_fail(err, KVD_EMSG, "field '%s' = %g outside [%g, %g]", key, v, min, max);
    *out = v;
    return 0;
}

int wire_bool(const msgpack_object *map, const char *key, bool required, bool def,
              bool *out, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    if (rc <= 0) {
        if (rc == 0)
            *out = def;
        return rc;
    }
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return wire_fail(err, KVD_EMSG, "field '%s' must be a boolean", key);
    *out = o->via.boolean;
    return 0;
}

int wire_str(const msgpack_object *map, const char *key, bool required, size_t max_len,
             const char **out, size_t *out_len, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    if (rc <= 0) {
        if (rc == 0) {
            *out = NULL;
            *out_len = 0;
        }
        return rc;
    }
    if (o->type != MSGPACK_OBJECT_STR)
        return wire_fail(err, KVD_EMSG, "field '%s' must be a string", key);
    if (o->via.str.size > max_len)
        return wire_fail(err, KVD_EMSG, "field '%s' is %u bytes, limit %zu", key,
                         o->via.str.size, max_len);
    *out = o->via.str.ptr;
    *out_len = o->via.str.size;
    return 0;
}

int wire_array(const msgpack_object *map, const char *key, bool required, size_t max_n,
               const msgpack_object **out, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    *out = NULL;
    if (rc <= 0)
        return rc;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return wire_fail(err, KVD_EMSG, "field '%s' must be an array", key);
    if (o->via.array.size > max_n)
        return wire_fail(err, KVD_EMSG, "field '%s' has %u entries, limit %zu", key,
                         o->via.array.size, max_n);
    *out = o;
    return 0;
}

int wire_map(const msgpack_object *map, const char *key, bool required,
             const msgpack_object **out, char err[WIRE_ERR_LEN])
{
    const msgpack_object *o;
    int rc = wire_lookup(map, key, required, &o, err);
    *out = NULL;
    if (rc <= 0)
        return rc;
    if (o->type != MSGPACK_OBJECT_MAP)
        return wire_fail(err, KVD_EMSG, "field '%s' must be a map", key);
    *out = o;
    return 0;
}

int wire_u32_array(const msgpack_object *map, const char *key, bool required, size_t max_n,
                   uint32_t max_value, uint32_t **out, size_t *n, char err[WIRE_ERR_LEN])
{
    const msgpack_object *a;
    *out = NULL;
    *n = 0;
    int rc = wire_array(map, key, required, max_n, &a, err);
    if (rc < 0 || !a || a->via.array.size == 0)
        return rc;
    uint32_t *v = calloc(a->via.array.size, sizeof(*v));
    if (!v)
        return wire_fail(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        const msgpack_object *e = &a->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER || e->via.u64 > max_value) {
            free(v);
            return wire_fail(err, KVD_EMSG, "field '%s'[%u] must be an integer in [0, %u]",
                             key, i, max_value);
        }
        v[i] = (uint32_t)e->via.u64;
    }
    *out = v;
    *n = a->via.array.size;
    return 0;
}

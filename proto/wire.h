/* wire.h — the msgpack envelope every kvd message uses, and strict field readers.
 *
 * Every message is one msgpack map. Two keys are always present:
 *   "v": protocol version (unsigned int, must equal KVD_PROTO_VERSION)
 *   "t": message type (string, e.g. "alloc", "step", "ok", "err")
 * Error replies are {"v", "t": "err", "code": kvd_errname(rc), "msg": text}.
 * Readers reject: a non-map root, a wrong version, a missing required field, a field of
 * the wrong type or outside its named limit, and any key a message does not define
 * (wire_check_keys). Each failure writes one line naming the field into err.
 *
 * Encoding: struct wbuf wraps msgpack's sbuffer + packer; pack through &w->pk with
 * msgpack's own calls or the wire_put_* helpers (key + value). Any thread; no shared state.
 */
#ifndef KVD_PROTO_WIRE_H
#define KVD_PROTO_WIRE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVD_PROTO_VERSION 1
#define WIRE_MSG_MAX (16u << 20)  /* bytes; largest message any socket accepts */
#define WIRE_ERR_LEN 160          /* bytes of the one-line decode error */

struct wbuf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

void wbuf_init(struct wbuf *w);
void wbuf_release(struct wbuf *w);           /* frees the buffer; w reusable after init */
/* Starts a message: a map of n_fields + 2 entries, with "v" and "t" already packed. */
void wire_begin(struct wbuf *w, const char *type, uint32_t n_fields);
void wire_key(struct wbuf *w, const char *key);
void wire_put_u64(struct wbuf *w, const char *key, uint64_t v);
void wire_put_i64(struct wbuf *w, const char *key, int64_t v);
void wire_put_f64(struct wbuf *w, const char *key, double v);
void wire_put_bool(struct wbuf *w, const char *key, bool v);
void wire_put_str(struct wbuf *w, const char *key, const char *s);   /* NULL packs nil */
void wire_put_strn(struct wbuf *w, const char *key, const char *s, size_t n);
void wire_put_u32s(struct wbuf *w, const char *key, const uint32_t *v, size_t n);
void wire_put_i32s(struct wbuf *w, const char *key, const int32_t *v, size_t n);
void wire_put_bin(struct wbuf *w, const char *key, const void *p, size_t n);
/* Writes a one-line message into err (may be NULL) and returns code: the one helper every
 * decoder uses to fail. */
int wire_fail(char err[WIRE_ERR_LEN], int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A complete error reply: {"v","t":"err","code","msg"}. */
void wire_error_reply(struct wbuf *w, int code, const char *msg);

/* A parsed message. The objects point into zone; valid until wmsg_release. */
struct wmsg {
    msgpack_zone zone;
    msgpack_object root;
    const char *type;      /* value of "t", NUL-terminated copy in zone */
    bool zone_live;
};

/* Parses buf; checks map root, "v" and "t". Returns 0, KVD_EMSG (malformed, too big,
 * no "t") or KVD_EPROTO (wrong "v"), with err filled. m must be released either way. */
int wmsg_parse(struct wmsg *m, const void *buf, size_t len, char err[WIRE_ERR_LEN]);
void wmsg_release(struct wmsg *m);
/* Walks raw msgpack without allocating: every declared length or element count must fit
 * in the bytes left (each element takes at least one byte), so no declared size can make
 * the unpacker allocate more than ~len elements. 0 or KVD_EMSG. wmsg_parse calls it. */
int wire_precheck(const void *buf, size_t len, char err[WIRE_ERR_LEN]);
bool wmsg_is(const struct wmsg *m, const char *type);
/* For an "err" reply: the code (kvd_errcode of "code") and msg pointer (may be ""). */
int wmsg_error(const struct wmsg *m, const char **msg, size_t *msg_len);

/* Field readers on any map object (the root, or a nested map). A missing optional
 * field leaves *out = def and returns 0. On error: KVD_EMSG and err names the field. */
const msgpack_object *wire_get(const msgpack_object *map, const char *key);
/* Fails on any key not in allowed (NULL-terminated); "v" and "t" are always allowed. */
int wire_check_keys(const msgpack_object *map, const char *const *allowed,
                    char err[WIRE_ERR_LEN]);
int wire_u64(const msgpack_object *map, const char *key, bool required, uint64_t def,
             uint64_t max, uint64_t *out, char err[WIRE_ERR_LEN]);
int wire_u32(const msgpack_object *map, const char *key, bool required, uint32_t def,
             uint32_t max, uint32_t *out, char err[WIRE_ERR_LEN]);
int wire_i64(const msgpack_object *map, const char *key, bool required, int64_t def,
             int64_t min, int64_t max, int64_t *out, char err[WIRE_ERR_LEN]);
int wire_f64(const msgpack_object *map, const char *key, bool required, double def,
             double min, double max, double *out, char err[WIRE_ERR_LEN]);
int wire_bool(const msgpack_object *map, const char *key, bool required, bool def,
              bool *out, char err[WIRE_ERR_LEN]);
/* String: pointer into the message (not NUL-terminated), length <= max_len. */
int wire_str(const msgpack_object *map, const char *key, bool required, size_t max_len,
             const char **out, size_t *out_len, char err[WIRE_ERR_LEN]);
/* Array of unsigned ints each <= max_value, at most max_n of them, copied into a
 * calloc'd array the caller frees (NULL when n == 0). */
int wire_u32_array(const msgpack_object *map, const char *key, bool required, size_t max_n,
                   uint32_t max_value, uint32_t **out, size_t *n, char err[WIRE_ERR_LEN]);
/* Nested map or array, type-checked; *out is NULL when optional and absent. */
int wire_map(const msgpack_object *map, const char *key, bool required,
             const msgpack_object **out, char err[WIRE_ERR_LEN]);
int wire_array(const msgpack_object *map, const char *key, bool required, size_t max_n,
               const msgpack_object **out, char err[WIRE_ERR_LEN]);

#endif

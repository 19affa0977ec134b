#include "proto/client_msg.h"

#include "common/err.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLIENT_FINISH_NAME_MAX 16 /* bytes of a finish_reason value */

static const char *const finish_names[CLIENT_FINISH_COUNT_] = {"stop", "length", "cancelled",
                                                               "error"};

const char *client_finish_name(enum client_finish f)
{
    return (unsigned)f < CLIENT_FINISH_COUNT_ ? finish_names[f] : "?";
}

int client_finish_parse(const char *s, size_t n, enum client_finish *out)
{
    for (int i = 0; i < CLIENT_FINISH_COUNT_; i++)
        if (strlen(finish_names[i]) == n && memcmp(finish_names[i], s, n) == 0) {
            *out = (enum client_finish)i;
            return 0;
        }
    return KVD_EMSG;
}

bool client_utf8_is_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned min;
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            c = (c << 6) | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* Copies a wire string into a fresh NUL-terminated buffer. */
static int dup_str(const char *p, size_t n, char **out)
{
    char *s = malloc(n + 1);
    if (!s)
        return -ENOMEM;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    *out = s;
    return 0;
}

/* Reads an optional/required UTF-8 string field into a fixed buffer of cap + 1 bytes. */
static int get_fixed_str(const msgpack_object *root, const char *key, bool required,
                         size_t cap, char *out, char err[WIRE_ERR_LEN])
{
    const char *p;
    size_t n;
    int rc = wire_str(root, key, required, cap, &p, &n, err);
    if (rc)
        return rc;
    if (p && !client_utf8_is_valid(p, n))
        return wire_fail(err, KVD_EMSG, "field '%s' is not valid UTF-8", key);
    if (p)
        memcpy(out, p, n);
    out[p ? n : 0] = '\0';
    return 0;
}

/* ---- handshake ---- */

int client_hello_encode(const struct client_hello *h, struct wbuf *w, char err[WIRE_ERR_LEN])
{
    size_t n = strnlen(h->name, CLIENT_NAME_MAX + 1);
    if (n > CLIENT_NAME_MAX || !client_utf8_is_valid(h->name, n))
        return wire_fail(err, KVD_EMSG, "client name too long or not UTF-8");
    wire_begin(w, "hello", 1);
    wire_put_strn(w, "name", h->name, n);
    return 0;
}

int client_hello_decode(const struct wmsg *m, struct client_hello *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"name", NULL};
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "hello"))
        return wire_fail(err, KVD_EMSG, "expected a 'hello' message");
    if ((rc = wire_check_keys(&m->root, keys, err)))
        return rc;
    return get_fixed_str(&m->root, "name", false, CLIENT_NAME_MAX, out->name, err);
}

int client_welcome_encode(const struct client_welcome *x, struct wbuf *w,
                          char err[WIRE_ERR_LEN])
{
    size_t na = strnlen(x->addr, CLIENT_ADDR_MAX + 1);
    size_t nm = strnlen(x->model, CLIENT_MODEL_NAME_MAX + 1);
    if (na == 0 || na > CLIENT_ADDR_MAX || nm > CLIENT_MODEL_NAME_MAX ||
        !client_utf8_is_valid(x->model, nm) || !client_utf8_is_valid(x->addr, na))
        return wire_fail(err, KVD_EMSG, "welcome addr or model name invalid");
    if (x->max_model_len == 0 || x->max_model_len > CLIENT_MAX_PROMPT_TOKENS ||
        x->vocab_size == 0 || x->vocab_size > CLIENT_TOKEN_ID_MAX || x->block_size == 0)
        return wire_fail(err, KVD_EMSG, "welcome max_model_len, vocab_size or block_size out of range");
    wire_begin(w, "welcome", 6);
    wire_put_u64(w, "session", x->session);
    wire_put_strn(w, "addr", x->addr, na);
    wire_put_u64(w, "max_model_len", x->max_model_len);
    wire_put_strn(w, "model", x->model, nm);
    wire_put_u64(w, "vocab_size", x->vocab_size);
    wire_put_u64(w, "block_size", x->block_size);
    return 0;
}

int client_welcome_decode(const struct wmsg *m, struct client_welcome *out,
                          char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"session", "addr", "max_model_len", "model",
                                       "vocab_size", "block_size", NULL};
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "welcome"))
        return wire_fail(err, KVD_EMSG, "expected a 'welcome' message");
    const msgpack_object *r = &m->root;
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_u64(r, "session", true, 0, UINT64_MAX, &out->session, err)) ||
        (rc = get_fixed_str(r, "addr", true, CLIENT_ADDR_MAX, out->addr, err)) ||
        (rc = wire_u32(r, "max_model_len", true, 0, CLIENT_MAX_PROMPT_TOKENS,
                       &out->max_model_len, err)) ||
        (rc = get_fixed_str(r, "model", true, CLIENT_MODEL_NAME_MAX, out->model, err)) ||
        (rc = wire_u32(r, "vocab_size", true, 0, CLIENT_TOKEN_ID_MAX, &out->vocab_size,
                       err)) ||
        (rc = wire_u32(r, "block_size", true, 0, UINT32_MAX, &out->block_size, err)))
        return rc;
    if (out->addr[0] == '\0' || out->max_model_len == 0 || out->vocab_size == 0 ||
        out->block_size == 0)
        return wire_fail(err, KVD_EMSG, "welcome field is zero or empty");
    return 0;
}

/* ---- generate ---- */

void client_generate_init(struct client_generate *g)
{
    memset(g, 0, sizeof(*g));
    g->max_tokens = 16;
    g->temperature = 1.0;
    g->top_p = 1.0;
    g->repetition_penalty = 1.0;
    g->stream = true;
}

void client_generate_release(struct client_generate *g)
{
    free(g->prompt);
    free(g->tokens);
    for (uint32_t i = 0; i < CLIENT_MAX_STOP; i++)
        free(g->stop[i]);
    free(g->stop_token_ids);
    free(g->cache_salt);
    client_generate_init(g);
}

/* Every check decode makes on the values, shared by encode. */
static int generate_check(const struct client_generate *g, char err[WIRE_ERR_LEN])
{
    if (!g->prompt == !g->tokens)
        return wire_fail(err, KVD_EMSG, "exactly one of 'prompt' or 'tokens' is required");
    if (g->prompt && (g->prompt_len == 0 || g->prompt_len > CLIENT_MAX_PROMPT_BYTES ||
                      !client_utf8_is_valid(g->prompt, g->prompt_len)))
        return wire_fail(err, KVD_EMSG, "field 'prompt' must be 1..%u bytes of UTF-8 without NUL",
                       CLIENT_MAX_PROMPT_BYTES);
    if (g->tokens && (g->n_tokens == 0 || g->n_tokens > CLIENT_MAX_PROMPT_TOKENS))
        return wire_fail(err, KVD_EMSG, "field 'tokens' must hold 1..%u ids", CLIENT_MAX_PROMPT_TOKENS);
    for (size_t i = 0; g->tokens && i < g->n_tokens; i++)
        if (g->tokens[i] > CLIENT_TOKEN_ID_MAX)
            return wire_fail(err, KVD_EMSG, "field 'tokens' has an id out of range");
    if (g->max_tokens == 0 || g->max_tokens > CLIENT_MAX_NEW_TOKENS)
        return wire_fail(err, KVD_EMSG, "field 'max_tokens' must be 1..%u", CLIENT_MAX_NEW_TOKENS);
    if (!(g->temperature >= 0 && g->temperature <= CLIENT_TEMPERATURE_MAX))
        return wire_fail(err, KVD_EMSG, "field 'temperature' must be in [0, %g]", CLIENT_TEMPERATURE_MAX);
    if (g->top_k > CLIENT_TOP_K_MAX)
        return wire_fail(err, KVD_EMSG, "field 'top_k' exceeds %u", CLIENT_TOP_K_MAX);
    if (!(g->top_p > 0 && g->top_p <= 1))
        return wire_fail(err, KVD_EMSG, "field 'top_p' must be in (0, 1]");
    if (!(g->min_p >= 0 && g->min_p <= 1))
        return wire_fail(err, KVD_EMSG, "field 'min_p' must be in [0, 1]");
    if (!(g->repetition_penalty > 0 && g->repetition_penalty <= CLIENT_PENALTY_MAX))
        return wire_fail(err, KVD_EMSG, "field 'repetition_penalty' must be in (0, %g]",
                       CLIENT_PENALTY_MAX);
    if (!(fabs(g->frequency_penalty) <= CLIENT_PENALTY_MAX) ||
        !(fabs(g->presence_penalty) <= CLIENT_PENALTY_MAX))
        return wire_fail(err, KVD_EMSG, "frequency/presence penalty must be within +-%g",
                       CLIENT_PENALTY_MAX);
    if (g->n_stop > CLIENT_MAX_STOP)
        return wire_fail(err, KVD_EMSG, "field 'stop' has more than %d strings", CLIENT_MAX_STOP);
    for (uint32_t i = 0; i < g->n_stop; i++) {
        size_t n = g->stop[i] ? strnlen(g->stop[i], CLIENT_STOP_MAX_BYTES + 1) : 0;
        if (n == 0 || n > CLIENT_STOP_MAX_BYTES || !client_utf8_is_valid(g->stop[i], n))
            return wire_fail(err, KVD_EMSG, "stop string %u must be 1..%d bytes of UTF-8", i,
                           CLIENT_STOP_MAX_BYTES);
    }
    if (g->n_stop_token_ids > CLIENT_MAX_STOP_TOKEN_IDS ||
        (g->n_stop_token_ids && !g->stop_token_ids))
        return wire_fail(err, KVD_EMSG, "field 'stop_token_ids' has more than %d ids",
                       CLIENT_MAX_STOP_TOKEN_IDS);
    for (size_t i = 0; i < g->n_stop_token_ids; i++)
        if (g->stop_token_ids[i] > CLIENT_TOKEN_ID_MAX)
            return wire_fail(err, KVD_EMSG, "field 'stop_token_ids' has an id out of range");
    if (g->logprobs > CLIENT_MAX_LOGPROBS)
        return wire_fail(err, KVD_EMSG, "field 'logprobs' must be 0..%d", CLIENT_MAX_LOGPROBS);
    if (g->timeout_ms > CLIENT_TIMEOUT_MAX_MS)
        return wire_fail(err, KVD_EMSG, "field 'timeout_ms' exceeds %u", CLIENT_TIMEOUT_MAX_MS);
    if (g->cache_salt && (g->cache_salt_len == 0 || g->cache_salt_len > CLIENT_CACHE_SALT_MAX ||
                          !client_utf8_is_valid(g->cache_salt, g->cache_salt_len)))
        return wire_fail(err, KVD_EMSG, "field 'cache_salt' must be 1..%d bytes of UTF-8",
                       CLIENT_CACHE_SALT_MAX);
    return 0;
}

int client_generate_encode(const struct client_generate *g, struct wbuf *w,
                           char err[WIRE_ERR_LEN])
{
    int rc = generate_check(g, err);
    if (rc)
        return rc;
    /* 17 always: id, prompt|tokens, max_tokens, temperature, top_k, top_p, min_p, three
     * penalties, stop, stop_token_ids, ignore_eos, logprobs, prompt_logprobs, stream,
     * timeout_ms; plus seed and cache_salt when set. */
    uint32_t n = 17 + (g->has_seed ? 1 : 0) + (g->cache_salt ? 1 : 0);
    wire_begin(w, "generate", n);
    wire_put_u64(w, "id", g->id);
    if (g->prompt)
        wire_put_strn(w, "prompt", g->prompt, g->prompt_len);
    else
        wire_put_u32s(w, "tokens", g->tokens, g->n_tokens);
    wire_put_u64(w, "max_tokens", g->max_tokens);
    wire_put_f64(w, "temperature", g->temperature);
    wire_put_u64(w, "top_k", g->top_k);
    wire_put_f64(w, "top_p", g->top_p);
    wire_put_f64(w, "min_p", g->min_p);
    if (g->has_seed)
        wire_put_u64(w, "seed", g->seed);
    wire_put_f64(w, "repetition_penalty", g->repetition_penalty);
    wire_put_f64(w, "frequency_penalty", g->frequency_penalty);
    wire_put_f64(w, "presence_penalty", g->presence_penalty);
    wire_key(w, "stop");
    msgpack_pack_array(&w->pk, g->n_stop);
    for (uint32_t i = 0; i < g->n_stop; i++) {
        size_t sn = strlen(g->stop[i]);
        msgpack_pack_str(&w->pk, sn);
        msgpack_pack_str_body(&w->pk, g->stop[i], sn);
    }
    wire_put_u32s(w, "stop_token_ids", g->stop_token_ids, g->n_stop_token_ids);
    wire_put_bool(w, "ignore_eos", g->ignore_eos);
    wire_put_u64(w, "logprobs", g->logprobs);
    wire_put_bool(w, "prompt_logprobs", g->prompt_logprobs);
    wire_put_bool(w, "stream", g->stream);
    wire_put_u64(w, "timeout_ms", g->timeout_ms);
    if (g->cache_salt)
        wire_put_strn(w, "cache_salt", g->cache_salt, g->cache_salt_len);
    return 0;
}

int client_generate_decode(const struct wmsg *m, struct client_generate *out,
                           char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {
        "id", "prompt", "tokens", "max_tokens", "temperature", "top_k", "top_p", "min_p",
        "seed", "repetition_penalty", "frequency_penalty", "presence_penalty", "stop",
        "stop_token_ids", "ignore_eos", "logprobs", "prompt_logprobs", "stream",
        "timeout_ms", "cache_salt", NULL};
    const msgpack_object *r = &m->root, *arr;
    const char *p;
    size_t n;
    int rc;
    client_generate_init(out);
    if (!wmsg_is(m, "generate"))
        return wire_fail(err, KVD_EMSG, "expected a 'generate' message");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_u64(r, "id", true, 0, UINT64_MAX, &out->id, err)))
        return rc;
    if ((rc = wire_str(r, "prompt", false, CLIENT_MAX_PROMPT_BYTES, &p, &n, err)))
        return rc;
    if (p && (rc = dup_str(p, n, &out->prompt)))
        return rc;
    out->prompt_len = n;
    if ((rc = wire_u32_array(r, "tokens", false, CLIENT_MAX_PROMPT_TOKENS, CLIENT_TOKEN_ID_MAX,
                             &out->tokens, &out->n_tokens, err)))
        return rc;
    const msgpack_object *to = wire_get(r, "tokens");
    if (to && to->type != MSGPACK_OBJECT_NIL && !out->tokens)
        return wire_fail(err, KVD_EMSG, "field 'tokens' must hold 1..%u ids", CLIENT_MAX_PROMPT_TOKENS);
    uint64_t seed;
    if ((rc = wire_u32(r, "max_tokens", false, 16, UINT32_MAX, &out->max_tokens, err)) ||
        (rc = wire_f64(r, "temperature", false, 1.0, 0, CLIENT_TEMPERATURE_MAX,
                       &out->temperature, err)) ||
        (rc = wire_u32(r, "top_k", false, 0, CLIENT_TOP_K_MAX, &out->top_k, err)) ||
        (rc = wire_f64(r, "top_p", false, 1.0, 0, 1, &out->top_p, err)) ||
        (rc = wire_f64(r, "min_p", false, 0, 0, 1, &out->min_p, err)) ||
        (rc = wire_u64(r, "seed", false, 0, UINT64_MAX, &seed, err)) ||
        (rc = wire_f64(r, "repetition_penalty", false, 1.0, 0, CLIENT_PENALTY_MAX,
                       &out->repetition_penalty, err)) ||
        (rc = wire_f64(r, "frequency_penalty", false, 0, -CLIENT_PENALTY_MAX,
                       CLIENT_PENALTY_MAX, &out->frequency_penalty, err)) ||
        (rc = wire_f64(r, "presence_penalty", false, 0, -CLIENT_PENALTY_MAX,
                       CLIENT_PENALTY_MAX, &out->presence_penalty, err)))
        return rc;
    const msgpack_object *so = wire_get(r, "seed");
    out->has_seed = so && so->type != MSGPACK_OBJECT_NIL;
    out->seed = seed;
    if ((rc = wire_array(r, "stop", false, CLIENT_MAX_STOP, &arr, err)))
        return rc;
    for (uint32_t i = 0; arr && i < arr->via.array.size; i++) {
        const msgpack_object *s = &arr->via.array.ptr[i];
        if (s->type != MSGPACK_OBJECT_STR)
            return wire_fail(err, KVD_EMSG, "field 'stop' must hold strings");
        if ((rc = dup_str(s->via.str.ptr, s->via.str.size, &out->stop[i])))
            return rc;
        out->n_stop = i + 1;
        if (s->via.str.size > CLIENT_STOP_MAX_BYTES)
            return wire_fail(err, KVD_EMSG, "stop string %u exceeds %d bytes", i, CLIENT_STOP_MAX_BYTES);
    }
    if ((rc = wire_u32_array(r, "stop_token_ids", false, CLIENT_MAX_STOP_TOKEN_IDS,
                             CLIENT_TOKEN_ID_MAX, &out->stop_token_ids, &out->n_stop_token_ids,
                             err)) ||
        (rc = wire_bool(r, "ignore_eos", false, false, &out->ignore_eos, err)) ||
        (rc = wire_u32(r, "logprobs", false, 0, CLIENT_MAX_LOGPROBS, &out->logprobs, err)) ||
        (rc = wire_bool(r, "prompt_logprobs", false, false, &out->prompt_logprobs, err)) ||
        (rc = wire_bool(r, "stream", false, true, &out->stream, err)) ||
        (rc = wire_u32(r, "timeout_ms", false, 0, CLIENT_TIMEOUT_MAX_MS, &out->timeout_ms,
                       err)))
        return rc;
    if ((rc = wire_str(r, "cache_salt", false, CLIENT_CACHE_SALT_MAX, &p, &n, err)))
        return rc;
    if (p && (rc = dup_str(p, n, &out->cache_salt)))
        return rc;
    out->cache_salt_len = n;
    return generate_check(out, err);
}

int client_cancel_encode(const struct client_cancel *c, struct wbuf *w)
{
    wire_begin(w, "cancel", 1);
    wire_put_u64(w, "id", c->id);
    return 0;
}

int client_cancel_decode(const struct wmsg *m, struct client_cancel *out,
                         char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"id", NULL};
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "cancel"))
        return wire_fail(err, KVD_EMSG, "expected a 'cancel' message");
    if ((rc = wire_check_keys(&m->root, keys, err)))
        return rc;
    return wire_u64(&m->root, "id", true, 0, UINT64_MAX, &out->id, err);
}

static bool is_simple_type(const char *type)
{
    return strcmp(type, "ping") == 0 || strcmp(type, "pong") == 0 || strcmp(type, "bye") == 0;
}

int client_simple_encode(const char *type, struct wbuf *w)
{
    if (!is_simple_type(type))
        return KVD_EMSG;
    wire_begin(w, type, 0);
    return 0;
}

int client_simple_decode(const struct wmsg *m, const char *type, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {NULL};
    if (!is_simple_type(type) || !wmsg_is(m, type))
        return wire_fail(err, KVD_EMSG, "expected a '%s' message", type);
    return wire_check_keys(&m->root, keys, err);
}

/* ---- logprob entries ---- */

static void pack_lp_value(struct wbuf *w, double lp)
{
    msgpack_pack_double(&w->pk, lp);
}

static void pack_logprob(struct wbuf *w, const struct client_logprob *e)
{
    if (!e->present) {
        msgpack_pack_nil(&w->pk);
        return;
    }
    msgpack_pack_array(&w->pk, 3);
    msgpack_pack_uint32(&w->pk, e->token);
    pack_lp_value(w, e->logprob);
    msgpack_pack_array(&w->pk, e->n_top);
    for (uint32_t i = 0; i < e->n_top; i++) {
        msgpack_pack_array(&w->pk, 2);
        msgpack_pack_uint32(&w->pk, e->top[i].token);
        pack_lp_value(w, e->top[i].logprob);
    }
}

static bool lp_is_valid(double v)
{
    return !isnan(v) && v != INFINITY;
}

static int check_logprob(const struct client_logprob *e, char err[WIRE_ERR_LEN])
{
    if (!e->present)
        return 0;
    if (e->token > CLIENT_TOKEN_ID_MAX || !lp_is_valid(e->logprob) ||
        e->n_top > CLIENT_MAX_LOGPROBS)
        return wire_fail(err, KVD_EMSG, "logprob entry out of range");
    for (uint32_t i = 0; i < e->n_top; i++)
        if (e->top[i].token > CLIENT_TOKEN_ID_MAX || !lp_is_valid(e->top[i].logprob))
            return wire_fail(err, KVD_EMSG, "logprob top entry out of range");
    return 0;
}

static int read_lp_number(const msgpack_object *o, double *out)
{
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        *out = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *out = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = (double)o->via.i64;
    else
        return KVD_EMSG;
    return lp_is_valid(*out) ? 0 : KVD_EMSG;
}

static int read_token(const msgpack_object *o, uint32_t *out)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > CLIENT_TOKEN_ID_MAX)
        return KVD_EMSG;
    *out = (uint32_t)o->via.u64;
    return 0;
}

static int decode_logprob(const msgpack_object *o, bool allow_nil, struct client_logprob *e)
{
    memset(e, 0, sizeof(*e));
    if (o->type == MSGPACK_OBJECT_NIL)
        return allow_nil ? 0 : KVD_EMSG;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
        return KVD_EMSG;
    const msgpack_object *a = o->via.array.ptr;
    if (read_token(&a[0], &e->token) || read_lp_number(&a[1], &e->logprob) ||
        a[2].type != MSGPACK_OBJECT_ARRAY || a[2].via.array.size > CLIENT_MAX_LOGPROBS)
        return KVD_EMSG;
    for (uint32_t i = 0; i < a[2].via.array.size; i++) {
        const msgpack_object *pr = &a[2].via.array.ptr[i];
        if (pr->type != MSGPACK_OBJECT_ARRAY || pr->via.array.size != 2 ||
            read_token(&pr->via.array.ptr[0], &e->top[i].token) ||
            read_lp_number(&pr->via.array.ptr[1], &e->top[i].logprob))
            return KVD_EMSG;
    }
    e->n_top = a[2].via.array.size;
    e->present = true;
    return 0;
}

/* Decodes an optional array of logprob entries (first may be nil when first_nil). */
static int decode_logprobs(const msgpack_object *r, const char *key, size_t max_n,
                           bool first_nil, struct client_logprob **out, size_t *n_out,
                           char err[WIRE_ERR_LEN])
{
    const msgpack_object *arr;
    int rc = wire_array(r, key, false, max_n, &arr, err);
    *out = NULL;
    *n_out = 0;
    if (rc || !arr || arr->via.array.size == 0)
        return rc;
    struct client_logprob *v = calloc(arr->via.array.size, sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (uint32_t i = 0; i < arr->via.array.size; i++)
        if (decode_logprob(&arr->via.array.ptr[i], first_nil && i == 0, &v[i])) {
            free(v);
            return wire_fail(err, KVD_EMSG, "field '%s' entry %u is malformed", key, i);
        }
    if (first_nil && v[0].present) {
        free(v);
        return wire_fail(err, KVD_EMSG, "field '%s' entry 0 must be nil", key);
    }
    *out = v;
    *n_out = arr->via.array.size;
    return 0;
}

static void pack_logprobs(struct wbuf *w, const char *key, const struct client_logprob *v,
                          size_t n)
{
    wire_key(w, key);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++)
        pack_logprob(w, &v[i]);
}

/* ---- tokens ---- */

void client_tokens_init(struct client_tokens *t) { memset(t, 0, sizeof(*t)); }

void client_tokens_release(struct client_tokens *t)
{
    free(t->tokens);
    free(t->text);
    free(t->logprobs);
    client_tokens_init(t);
}

static int tokens_check(const struct client_tokens *t, char err[WIRE_ERR_LEN])
{
    if (t->n_tokens == 0 || t->n_tokens > CLIENT_EVENT_MAX_TOKENS || !t->tokens)
        return wire_fail(err, KVD_EMSG, "field 'tokens' must hold 1..%u ids", CLIENT_EVENT_MAX_TOKENS);
    for (size_t i = 0; i < t->n_tokens; i++)
        if (t->tokens[i] > CLIENT_TOKEN_ID_MAX)
            return wire_fail(err, KVD_EMSG, "field 'tokens' has an id out of range");
    if (t->text_len > CLIENT_TEXT_MAX_BYTES || (t->text_len && !t->text) ||
        !client_utf8_is_valid(t->text, t->text_len))
        return wire_fail(err, KVD_EMSG, "field 'text' must be UTF-8 of at most %u bytes",
                       CLIENT_TEXT_MAX_BYTES);
    if (t->n_logprobs && (t->n_logprobs != t->n_tokens || !t->logprobs))
        return wire_fail(err, KVD_EMSG, "field 'logprobs' must have one entry per token");
    for (size_t i = 0; i < t->n_logprobs; i++)
        if (!t->logprobs[i].present || check_logprob(&t->logprobs[i], err))
            return wire_fail(err, KVD_EMSG, "field 'logprobs' entry %zu is invalid", i);
    return 0;
}

int client_tokens_encode(const struct client_tokens *t, struct wbuf *w, char err[WIRE_ERR_LEN])
{
    int rc = tokens_check(t, err);
    if (rc)
        return rc;
    wire_begin(w, "tokens", 3 + (t->n_logprobs ? 1 : 0));
    wire_put_u64(w, "id", t->id);
    wire_put_u32s(w, "tokens", t->tokens, t->n_tokens);
    wire_put_strn(w, "text", t->text ? t->text : "", t->text_len);
    if (t->n_logprobs)
        pack_logprobs(w, "logprobs", t->logprobs, t->n_logprobs);
    return 0;
}

int client_tokens_decode(const struct wmsg *m, struct client_tokens *out,
                         char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"id", "tokens", "text", "logprobs", NULL};
    const msgpack_object *r = &m->root;
    const char *p;
    size_t n;
    int rc;
    client_tokens_init(out);
    if (!wmsg_is(m, "tokens"))
        return wire_fail(err, KVD_EMSG, "expected a 'tokens' message");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_u64(r, "id", true, 0, UINT64_MAX, &out->id, err)) ||
        (rc = wire_u32_array(r, "tokens", true, CLIENT_EVENT_MAX_TOKENS, CLIENT_TOKEN_ID_MAX,
                             &out->tokens, &out->n_tokens, err)) ||
        (rc = wire_str(r, "text", true, CLIENT_TEXT_MAX_BYTES, &p, &n, err)))
        return rc;
    if ((rc = dup_str(p, n, &out->text)))
        return rc;
    out->text_len = n;
    if ((rc = decode_logprobs(r, "logprobs", CLIENT_EVENT_MAX_TOKENS, false, &out->logprobs,
                              &out->n_logprobs, err)))
        return rc;
    return tokens_check(out, err);
}

/* ---- done ---- */

void client_done_init(struct client_done *d) { memset(d, 0, sizeof(*d)); }

void client_done_release(struct client_done *d)
{
    free(d->tokens);
    free(d->text);
    free(d->logprobs);
    free(d->prompt_logprobs);
    client_done_init(d);
}

static int done_check(const struct client_done *d, char err[WIRE_ERR_LEN])
{
    if ((unsigned)d->finish >= CLIENT_FINISH_COUNT_)
        return wire_fail(err, KVD_EMSG, "field 'finish_reason' invalid");
    bool ok = d->finish == CLIENT_FINISH_STOP || d->finish == CLIENT_FINISH_LENGTH;
    if (ok != (d->code == 0))
        return wire_fail(err, KVD_EMSG, "field 'code' must be present exactly for cancelled/error");
    if (!client_utf8_is_valid(d->msg, strnlen(d->msg, sizeof(d->msg))))
        return wire_fail(err, KVD_EMSG, "field 'msg' is not UTF-8");
    if (d->cached_prompt_tokens > d->prompt_tokens ||
        d->prompt_tokens > CLIENT_MAX_PROMPT_TOKENS ||
        d->completion_tokens > CLIENT_MAX_NEW_TOKENS)
        return wire_fail(err, KVD_EMSG, "token counts out of range");
    if (d->n_tokens > CLIENT_MAX_NEW_TOKENS || (d->n_tokens && !d->tokens))
        return wire_fail(err, KVD_EMSG, "field 'tokens' too long");
    for (size_t i = 0; i < d->n_tokens; i++)
        if (d->tokens[i] > CLIENT_TOKEN_ID_MAX)
            return wire_fail(err, KVD_EMSG, "field 'tokens' has an id out of range");
    if (d->text_len > CLIENT_TEXT_MAX_BYTES || (d->text_len && !d->text) ||
        !client_utf8_is_valid(d->text, d->text_len))
        return wire_fail(err, KVD_EMSG, "field 'text' must be UTF-8 of at most %u bytes",
                       CLIENT_TEXT_MAX_BYTES);
    if (d->n_logprobs && (d->n_logprobs != d->n_tokens || !d->logprobs))
        return wire_fail(err, KVD_EMSG, "field 'logprobs' must have one entry per token");
    for (size_t i = 0; i < d->n_logprobs; i++)
        if (!d->logprobs[i].present || check_logprob(&d->logprobs[i], err))
            return wire_fail(err, KVD_EMSG, "field 'logprobs' entry %zu is invalid", i);
    if (d->n_prompt_logprobs > CLIENT_MAX_PROMPT_TOKENS ||
        (d->n_prompt_logprobs && (!d->prompt_logprobs || d->prompt_logprobs[0].present)))
        return wire_fail(err, KVD_EMSG, "field 'prompt_logprobs' must start with nil");
    for (size_t i = 1; i < d->n_prompt_logprobs; i++)
        if (!d->prompt_logprobs[i].present || check_logprob(&d->prompt_logprobs[i], err))
            return wire_fail(err, KVD_EMSG, "field 'prompt_logprobs' entry %zu is invalid", i);
    return 0;
}

int client_done_encode(const struct client_done *d, struct wbuf *w, char err[WIRE_ERR_LEN])
{
    int rc = done_check(d, err);
    if (rc)
        return rc;
    bool has_code = d->code != 0, has_msg = d->msg[0] != '\0';
    uint32_t n = 5 + has_code + has_msg + (d->tokens ? 1 : 0) + (d->text ? 1 : 0) +
                 (d->n_logprobs ? 1 : 0) + (d->n_prompt_logprobs ? 1 : 0);
    wire_begin(w, "done", n);
    wire_put_u64(w, "id", d->id);
    wire_put_str(w, "finish_reason", client_finish_name(d->finish));
    if (has_code)
        wire_put_str(w, "code", kvd_errname(d->code));
    if (has_msg)
        wire_put_str(w, "msg", d->msg);
    wire_put_u64(w, "prompt_tokens", d->prompt_tokens);
    wire_put_u64(w, "cached_prompt_tokens", d->cached_prompt_tokens);
    wire_put_u64(w, "completion_tokens", d->completion_tokens);
    if (d->tokens)
        wire_put_u32s(w, "tokens", d->tokens, d->n_tokens);
    if (d->text)
        wire_put_strn(w, "text", d->text, d->text_len);
    if (d->n_logprobs)
        pack_logprobs(w, "logprobs", d->logprobs, d->n_logprobs);
    if (d->n_prompt_logprobs)
        pack_logprobs(w, "prompt_logprobs", d->prompt_logprobs, d->n_prompt_logprobs);
    return 0;
}

/* Maps a stable error name to a code: kvd's own names, then common errno names. */
static int code_from_name(const char *name)
{
    static const int errnos[] = {ENOENT,  ENOMEM,  ENOSPC,       EINVAL, EACCES, EPERM,
                                 EAGAIN,  ETIMEDOUT, ECONNREFUSED, EEXIST, EIO,    ENOTSUP,
                                 EPROTO,  EMSGSIZE, EBADF,        EPIPE,  ECONNRESET, E2BIG,
                                 ERANGE,  EBUSY};
    for (int c = KVD_EMISMATCH; c < KVD_ERR_LAST_; c++)
        if (strcmp(kvd_errname(c), name) == 0)
            return c;
    for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
        if (strcmp(kvd_errname(-errnos[i]), name) == 0)
            return -errnos[i];
    return KVD_EINTERNAL;
}

int client_done_decode(const struct wmsg *m, struct client_done *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"id", "finish_reason", "code", "msg", "prompt_tokens",
                                       "cached_prompt_tokens", "completion_tokens", "tokens",
                                       "text", "logprobs", "prompt_logprobs", NULL};
    const msgpack_object *r = &m->root;
    const char *p;
    size_t n;
    int rc;
    char code[32];
    client_done_init(out);
    if (!wmsg_is(m, "done"))
        return wire_fail(err, KVD_EMSG, "expected a 'done' message");
    if ((rc = wire_check_keys(r, keys, err)) ||
        (rc = wire_u64(r, "id", true, 0, UINT64_MAX, &out->id, err)) ||
        (rc = wire_str(r, "finish_reason", true, CLIENT_FINISH_NAME_MAX, &p, &n, err)))
        return rc;
    if (client_finish_parse(p, n, &out->finish))
        return wire_fail(err, KVD_EMSG, "field 'finish_reason' has an unknown value");
    if ((rc = get_fixed_str(r, "code", false, sizeof(code) - 1, code, err)) ||
        (rc = get_fixed_str(r, "msg", false, CLIENT_ERR_MSG_MAX, out->msg, err)))
        return rc;
    out->code = code[0] ? code_from_name(code) : 0;
    if ((rc = wire_u32(r, "prompt_tokens", true, 0, CLIENT_MAX_PROMPT_TOKENS,
                       &out->prompt_tokens, err)) ||
        (rc = wire_u32(r, "cached_prompt_tokens", true, 0, CLIENT_MAX_PROMPT_TOKENS,
                       &out->cached_prompt_tokens, err)) ||
        (rc = wire_u32(r, "completion_tokens", true, 0, CLIENT_MAX_NEW_TOKENS,
                       &out->completion_tokens, err)) ||
        (rc = wire_u32_array(r, "tokens", false, CLIENT_MAX_NEW_TOKENS, CLIENT_TOKEN_ID_MAX,
                             &out->tokens, &out->n_tokens, err)) ||
        (rc = wire_str(r, "text", false, CLIENT_TEXT_MAX_BYTES, &p, &n, err)))
        return rc;
    if (p && (rc = dup_str(p, n, &out->text)))
        return rc;
    out->text_len = n;
    if ((rc = decode_logprobs(r, "logprobs", CLIENT_MAX_NEW_TOKENS, false, &out->logprobs,
                              &out->n_logprobs, err)) ||
        (rc = decode_logprobs(r, "prompt_logprobs", CLIENT_MAX_PROMPT_TOKENS, true,
                              &out->prompt_logprobs, &out->n_prompt_logprobs, err)))
        return rc;
    return done_check(out, err);
}

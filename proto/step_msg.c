#include "proto/step_msg.h"

#include "common/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void step_sampling_default(struct step_sampling *sp)
{
    memset(sp, 0, sizeof(*sp));
    sp->top_p = 1.0f;
    sp->repetition_penalty = 1.0f;
}

/* ---- hello ---- */

void step_hello_encode(struct wbuf *w, const struct step_hello *h)
{
    wire_begin(w, "hello", 4);
    wire_put_u64(w, "index", h->index);
    wire_put_u64(w, "pid", h->pid);
    wire_put_u64(w, "model_fp", h->model_fp);
    wire_put_u64(w, "vocab", h->vocab);
}

int step_hello_decode(const struct wmsg *m, struct step_hello *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"index", "pid", "model_fp", "vocab", NULL};
    struct step_hello h;
    int rc;
    if (!wmsg_is(m, "hello")) {
        snprintf(err, WIRE_ERR_LEN, "expected message 'hello', got '%s'",
                 m->type ? m->type : "");
        return KVD_EMSG;
    }
    if ((rc = wire_check_keys(&m->root, keys, err)) < 0 ||
        (rc = wire_u32(&m->root, "index", true, 0, STEP_WORKER_INDEX_MAX, &h.index, err)) < 0 ||
        (rc = wire_u32(&m->root, "pid", true, 0, UINT32_MAX, &h.pid, err)) < 0 ||
        (rc = wire_u64(&m->root, "model_fp", true, 0, UINT64_MAX, &h.model_fp, err)) < 0 ||
        (rc = wire_u32(&m->root, "vocab", true, 0, STEP_MAX_TOKEN_ID, &h.vocab, err)) < 0)
        return rc;
    *out = h;
    return 0;
}

/* ---- step ---- */

static void put_f(struct wbuf *w, const char *key, float v) { wire_put_f64(w, key, v); }

static void step_seq_encode(struct wbuf *w, const struct step_seq *q)
{
    uint32_t n = 7 + (q->sample ? 8 : 0) + (q->n_penalty_tokens ? 1 : 0) +
                 (q->has_next_token ? 1 : 0);
    msgpack_pack_map(&w->pk, n);
    wire_put_u64(w, "seq_id", q->seq_id);
    wire_put_u32s(w, "tokens", q->tokens, q->n_tokens);
    wire_put_u64(w, "pos0", q->pos0);
    wire_put_u32s(w, "blocks", q->blocks, q->n_blocks);
    wire_put_bool(w, "sample", q->sample);
    wire_put_u64(w, "logprobs", q->logprobs);
    wire_put_bool(w, "prompt_logprobs", q->prompt_logprobs);
    if (q->sample) {
        put_f(w, "temperature", q->sp.temperature);
        wire_put_u64(w, "top_k", q->sp.top_k);
        put_f(w, "top_p", q->sp.top_p);
        put_f(w, "min_p", q->sp.min_p);
        wire_put_u64(w, "seed", q->sp.seed);
        put_f(w, "repetition_penalty", q->sp.repetition_penalty);
        put_f(w, "frequency_penalty", q->sp.frequency_penalty);
        put_f(w, "presence_penalty", q->sp.presence_penalty);
    }
    if (q->n_penalty_tokens)
        wire_put_u32s(w, "penalty_tokens", q->penalty_tokens, q->n_penalty_tokens);
    if (q->has_next_token)
        wire_put_u64(w, "next_token", q->next_token);
}

void step_msg_encode(struct wbuf *w, const struct step_msg *s)
{
    wire_begin(w, "step", 2);
    wire_put_u64(w, "step_id", s->step_id);
    wire_key(w, "seqs");
    msgpack_pack_array(&w->pk, s->n_seqs);
    for (uint32_t i = 0; i < s->n_seqs; i++)
        step_seq_encode(w, &s->seqs[i]);
}

static void step_seq_release(struct step_seq *q)
{
    free(q->tokens);
    free(q->blocks);
    free(q->penalty_tokens);
    memset(q, 0, sizeof(*q));
}

void step_msg_release(struct step_msg *s)
{
    for (uint32_t i = 0; s->seqs && i < s->n_seqs; i++)
        step_seq_release(&s->seqs[i]);
    free(s->seqs);
    memset(s, 0, sizeof(*s));
}

static int get_f(const msgpack_object *o, const char *key, double def, double min, double max,
                 float *out, char err[WIRE_ERR_LEN])
{
    double v;
    int rc = wire_f64(o, key, false, def, min, max, &v, err);
    if (rc == 0)
        *out = (float)v;
    return rc;
}

static int step_seq_decode(const msgpack_object *o, struct step_seq *q, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {
        "seq_id", "tokens", "pos0", "blocks", "sample", "logprobs", "prompt_logprobs",
        "temperature", "top_k", "top_p", "min_p", "seed",
        "repetition_penalty", "frequency_penalty", "presence_penalty", "penalty_tokens",
        "next_token", NULL};
    size_t n;
    int rc;
    memset(q, 0, sizeof(*q));
    step_sampling_default(&q->sp);
    if ((rc = wire_check_keys(o, keys, err)) < 0 ||
        (rc = wire_u64(o, "seq_id", true, 0, UINT64_MAX, &q->seq_id, err)) < 0)
        return rc;
    if ((rc = wire_u32_array(o, "tokens", true, STEP_MAX_TOKENS, STEP_MAX_TOKEN_ID,
                             &q->tokens, &n, err)) < 0)
        return rc;
    q->n_tokens = (uint32_t)n;
    if ((rc = wire_u32_array(o, "blocks", true, STEP_MAX_BLOCKS, STEP_MAX_PAGE_ID, &q->blocks,
                             &n, err)) < 0)
        return rc;
    q->n_blocks = (uint32_t)n;
    if ((rc = wire_u32(o, "pos0", true, 0, STEP_MAX_POS - 1, &q->pos0, err)) < 0 ||
        (rc = wire_bool(o, "sample", true, false, &q->sample, err)) < 0 ||
        (rc = wire_u32(o, "logprobs", false, 0, STEP_MAX_LOGPROBS, &q->logprobs, err)) < 0 ||
        (rc = wire_bool(o, "prompt_logprobs", false, false, &q->prompt_logprobs, err)) < 0 ||
        (rc = get_f(o, "temperature", 0.0, 0.0, STEP_MAX_TEMPERATURE, &q->sp.temperature,
                    err)) < 0 ||
        (rc = wire_u32(o, "top_k", false, 0, STEP_MAX_TOP_K, &q->sp.top_k, err)) < 0 ||
        (rc = get_f(o, "top_p", 1.0, 0.0, 1.0, &q->sp.top_p, err)) < 0 ||
        (rc = get_f(o, "min_p", 0.0, 0.0, 1.0, &q->sp.min_p, err)) < 0 ||
        (rc = wire_u64(o, "seed", false, 0, UINT64_MAX, &q->sp.seed, err)) < 0 ||
        (rc = get_f(o, "repetition_penalty", 1.0, 0.0, STEP_MAX_REP_PENALTY,
                    &q->sp.repetition_penalty, err)) < 0 ||
        (rc = get_f(o, "frequency_penalty", 0.0, -STEP_MAX_FREQ_PENALTY,
                    STEP_MAX_FREQ_PENALTY, &q->sp.frequency_penalty, err)) < 0 ||
        (rc = get_f(o, "presence_penalty", 0.0, -STEP_MAX_FREQ_PENALTY,
                    STEP_MAX_FREQ_PENALTY, &q->sp.presence_penalty, err)) < 0)
        return rc;
    if ((rc = wire_u32_array(o, "penalty_tokens", false, STEP_MAX_PENALTY_TOKENS,
                             STEP_MAX_TOKEN_ID, &q->penalty_tokens, &n, err)) < 0)
        return rc;
    q->n_penalty_tokens = (uint32_t)n;
    if (wire_get(o, "next_token")) {
        if ((rc = wire_u32(o, "next_token", true, 0, STEP_MAX_TOKEN_ID, &q->next_token, err)) <
            0)
            return rc;
        q->has_next_token = true;
    }
    if (q->n_tokens == 0)
        return snprintf(err, WIRE_ERR_LEN, "field 'tokens' is empty"), KVD_EMSG;
    if (q->n_blocks == 0)
        return snprintf(err, WIRE_ERR_LEN, "field 'blocks' is empty"), KVD_EMSG;
    if ((uint64_t)q->pos0 + q->n_tokens > STEP_MAX_POS)
        return snprintf(err, WIRE_ERR_LEN, "pos0 + tokens exceeds the limit %u", STEP_MAX_POS),
               KVD_EMSG;
    if (q->sp.repetition_penalty <= 0.0f)
        return snprintf(err, WIRE_ERR_LEN, "field 'repetition_penalty' must be > 0"), KVD_EMSG;
    if (q->sp.top_p <= 0.0f)
        return snprintf(err, WIRE_ERR_LEN, "field 'top_p' must be > 0"), KVD_EMSG;
    return 0;
}

int step_msg_decode(const struct wmsg *m, struct step_msg *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"step_id", "seqs", NULL};
    const msgpack_object *a;
    struct step_msg s = {0};
    uint64_t total = 0;
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "step")) {
        snprintf(err, WIRE_ERR_LEN, "expected message 'step', got '%s'",
                 m->type ? m->type : "");
        return KVD_EMSG;
    }
    if ((rc = wire_check_keys(&m->root, keys, err)) < 0 ||
        (rc = wire_u64(&m->root, "step_id", true, 0, UINT64_MAX, &s.step_id, err)) < 0 ||
        (rc = wire_array(&m->root, "seqs", true, STEP_MAX_SEQS, &a, err)) < 0)
        return rc;
    if (a->via.array.size == 0) {
        snprintf(err, WIRE_ERR_LEN, "field 'seqs' is empty");
        return KVD_EMSG;
    }
    s.seqs = calloc(a->via.array.size, sizeof(*s.seqs));
    if (!s.seqs) {
        snprintf(err, WIRE_ERR_LEN, "out of memory");
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        s.n_seqs = i + 1;
        char sub[WIRE_ERR_LEN];
        if ((rc = step_seq_decode(&a->via.array.ptr[i], &s.seqs[i], sub)) < 0) {
            snprintf(err, WIRE_ERR_LEN, "seqs[%u]: %.140s", i, sub);
            goto out_release;
        }
        total += s.seqs[i].n_tokens;
    }
    if (total > STEP_MAX_TOKENS) {
        snprintf(err, WIRE_ERR_LEN, "step has %llu new tokens, limit %u",
                 (unsigned long long)total, STEP_MAX_TOKENS);
        rc = KVD_EMSG;
        goto out_release;
    }
    *out = s;
    return 0;
out_release:
    step_msg_release(&s);
    return rc;
}

/* ---- result ---- */

static void put_lps(struct wbuf *w, const char *key, const struct step_lp *v, uint32_t n)
{
    wire_key(w, key);
    msgpack_pack_array(&w->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        msgpack_pack_array(&w->pk, 2);
        msgpack_pack_uint32(&w->pk, v[i].token);
        msgpack_pack_float(&w->pk, v[i].logprob);
    }
}

void step_result_encode(struct wbuf *w, const struct step_result *r)
{
    wire_begin(w, "result", 2);
    wire_put_u64(w, "step_id", r->step_id);
    wire_key(w, "seqs");
    msgpack_pack_array(&w->pk, r->n_seqs);
    for (uint32_t i = 0; i < r->n_seqs; i++) {
        const struct step_seq_result *q = &r->seqs[i];
        uint32_t n = 1 + (q->has_token ? 3 : 0) + (q->prompt ? 1 : 0);
        msgpack_pack_map(&w->pk, n);
        wire_put_u64(w, "seq_id", q->seq_id);
        if (q->has_token) {
            wire_put_u64(w, "token", q->token);
            wire_put_f64(w, "logprob", q->logprob);
            put_lps(w, "top", q->top, q->n_top);
        }
        if (q->prompt)
            put_lps(w, "prompt", q->prompt, q->n_prompt);
    }
}

void step_result_release(struct step_result *r)
{
    for (uint32_t i = 0; r->seqs && i < r->n_seqs; i++)
        free(r->seqs[i].prompt);
    free(r->seqs);
    memset(r, 0, sizeof(*r));
}

/* Reads [[id, lp]...] into v (at most max entries). */
static int get_lps(const msgpack_object *o, const char *key, size_t max, struct step_lp *v,
                   uint32_t *n, char err[WIRE_ERR_LEN])
{
    const msgpack_object *a;
    int rc = wire_array(o, key, true, max, &a, err);
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        const msgpack_object *e = &a->via.array.ptr[i];
        const msgpack_object *x, *y;
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2)
            goto out_bad;
        x = &e->via.array.ptr[0];
        y = &e->via.array.ptr[1];
        if (x->type != MSGPACK_OBJECT_POSITIVE_INTEGER || x->via.u64 > STEP_MAX_TOKEN_ID ||
            (y->type != MSGPACK_OBJECT_FLOAT32 && y->type != MSGPACK_OBJECT_FLOAT64))
            goto out_bad;
        v[i].token = (uint32_t)x->via.u64;
        v[i].logprob = (float)y->via.f64;
        continue;
    out_bad:
        snprintf(err, WIRE_ERR_LEN, "field '%s'[%u] must be [token id, logprob]", key, i);
        return KVD_EMSG;
    }
    *n = a->via.array.size;
    return 0;
}

static int step_seq_result_decode(const msgpack_object *o, struct step_seq_result *q,
                                  char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"seq_id", "token", "logprob", "top", "prompt", NULL};
    double lp;
    int rc;
    memset(q, 0, sizeof(*q));
    if ((rc = wire_check_keys(o, keys, err)) < 0 ||
        (rc = wire_u64(o, "seq_id", true, 0, UINT64_MAX, &q->seq_id, err)) < 0)
        return rc;
    if (wire_get(o, "token")) {
        q->has_token = true;
        if ((rc = wire_u32(o, "token", true, 0, STEP_MAX_TOKEN_ID, &q->token, err)) < 0 ||
            (rc = wire_f64(o, "logprob", true, 0, STEP_LOGPROB_MIN, 0.0, &lp, err)) < 0 ||
            (rc = get_lps(o, "top", STEP_MAX_LOGPROBS, q->top, &q->n_top, err)) < 0)
            return rc;
        q->logprob = (float)lp;
    }
    if (wire_get(o, "prompt")) {
        const msgpack_object *a;
        if ((rc = wire_array(o, "prompt", true, STEP_MAX_TOKENS, &a, err)) < 0)
            return rc;
        q->prompt = calloc(a->via.array.size + 1, sizeof(*q->prompt));
        if (!q->prompt) {
            snprintf(err, WIRE_ERR_LEN, "out of memory");
            return -ENOMEM;
        }
        if ((rc = get_lps(o, "prompt", STEP_MAX_TOKENS, q->prompt, &q->n_prompt, err)) < 0)
            return rc;
    }
    return 0;
}

int step_result_decode(const struct wmsg *m, struct step_result *out, char err[WIRE_ERR_LEN])
{
    static const char *const keys[] = {"step_id", "seqs", NULL};
    const msgpack_object *a;
    struct step_result r = {0};
    int rc;
    memset(out, 0, sizeof(*out));
    if (!wmsg_is(m, "result")) {
        snprintf(err, WIRE_ERR_LEN, "expected message 'result', got '%s'",
                 m->type ? m->type : "");
        return KVD_EMSG;
    }
    if ((rc = wire_check_keys(&m->root, keys, err)) < 0 ||
        (rc = wire_u64(&m->root, "step_id", true, 0, UINT64_MAX, &r.step_id, err)) < 0 ||
        (rc = wire_array(&m->root, "seqs", true, STEP_MAX_SEQS, &a, err)) < 0)
        return rc;
    if (a->via.array.size) {
        r.seqs = calloc(a->via.array.size, sizeof(*r.seqs));
        if (!r.seqs) {
            snprintf(err, WIRE_ERR_LEN, "out of memory");
            return -ENOMEM;
        }
    }
    for (uint32_t i = 0; i < a->via.array.size; i++) {
        r.n_seqs = i + 1;
        char sub[WIRE_ERR_LEN];
        if ((rc = step_seq_result_decode(&a->via.array.ptr[i], &r.seqs[i], sub)) < 0) {
            snprintf(err, WIRE_ERR_LEN, "seqs[%u]: %.140s", i, sub);
            step_result_release(&r);
            return rc;
        }
    }
    *out = r;
    return 0;
}

/* ---- err ---- */

void step_err_encode(struct wbuf *w, uint64_t step_id, int code, const char *msg)
{
    size_t n = msg ? strnlen(msg, STEP_ERR_MSG_MAX) : 0;
    wire_begin(w, "err", 3);
    wire_put_u64(w, "step_id", step_id);
    wire_put_str(w, "code", kvd_errname(code));
    wire_put_strn(w, "msg", msg ? msg : "", n);
}

uint64_t step_err_step_id(const struct wmsg *m)
{
    const msgpack_object *o = wire_get(&m->root, "step_id");
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

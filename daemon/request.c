/* request.c — one generate request: validation, tokenization, events, finish. */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void send_done_error(struct kvd *d, struct kvd_session *s, uint64_t id, int code,
                            const char *msg, uint32_t prompt_tokens)
{
    struct client_done done;
    client_done_init(&done);
    done.id = id;
    done.finish = code == KVD_ECANCELLED ? CLIENT_FINISH_CANCELLED : CLIENT_FINISH_ERROR;
    done.code = code;
    snprintf(done.msg, sizeof(done.msg), "%s", msg ? msg : kvd_strerror(code));
    done.prompt_tokens = prompt_tokens;
    struct wbuf w;
    wbuf_init(&w);
    char err[WIRE_ERR_LEN];
    if (client_done_encode(&done, &w, err) == 0)
        session_send(s, &w);
    else
        log_err("cannot encode done for request %llu: %s", (unsigned long long)id, err);
    wbuf_release(&w);
    d->ctr.requests_failed++;
}

struct kvd_req *req_find(struct kvd_session *s, uint64_t id)
{
    for (struct kvd_req *r = s->reqs; r; r = r->s_next)
        if (r->id == id)
            return r;
    return NULL;
}

static void req_free(struct kvd_req *r)
{
    detok_release(&r->dt);
    free(r->seq.tokens);
    free(r->seq.blocks);
    free(r->hashes);
    free(r->lps);
    free(r->plps);
    free(r);
}

/* Fills r's prompt from g (text tokenized with BOS, or ids checked against the vocab). */
static int req_tokenize(struct kvd *d, struct kvd_req *r, const struct client_generate *g,
                        uint32_t cap_total, char *msg, size_t msg_cap)
{
    const struct tok *tk = &d->model.tok;
    if (g->tokens) {
        if (g->n_tokens + 1 > d->cfg.max_model_len) {
            r->n_prompt = (uint32_t)g->n_tokens; /* reported in the done */
            snprintf(msg, msg_cap, "prompt of %zu tokens leaves no room under max-model-len %u",
                     g->n_tokens, d->cfg.max_model_len);
            return KVD_ETOOLONG;
        }
        for (size_t i = 0; i < g->n_tokens; i++)
            if (g->tokens[i] >= tk->n_vocab) {
                snprintf(msg, msg_cap, "token id %u at %zu is outside the vocabulary (%u)",
                         g->tokens[i], i, tk->n_vocab);
                return KVD_EMSG;
            }
        memcpy(r->seq.tokens, g->tokens, g->n_tokens * sizeof(uint32_t));
        r->n_prompt = (uint32_t)g->n_tokens;
        return 0;
    }
    size_t n = 0;
    int rc = tok_encode(tk, g->prompt ? g->prompt : "", g->prompt_len, tk->add_bos,
                        (int32_t *)r->seq.tokens, cap_total, &n);
    if (rc == -ENOSPC || rc == -E2BIG || (rc == 0 && n + 1 > d->cfg.max_model_len)) {
        r->n_prompt = (uint32_t)n; /* exact: cap_total holds any prompt (see req_start) */
        snprintf(msg, msg_cap, "prompt of %zu tokens leaves no room under max-model-len %u", n,
                 d->cfg.max_model_len);
        return KVD_ETOOLONG;
    }
    if (rc < 0) {
        snprintf(msg, msg_cap, "cannot tokenize the prompt: %s", kvd_strerror(rc));
        return rc == -ENOMEM ? rc : KVD_EMSG;
    }
    if (n == 0) {
        snprintf(msg, msg_cap, "empty prompt");
        return KVD_EMSG;
    }
    r->n_prompt = (uint32_t)n;
    return 0;
}

int req_start(struct kvd *d, struct kvd_session *s, struct client_generate *g)
{
    char msg[CLIENT_ERR_MSG_MAX] = "";
    int rc;
    if (d->shutting_down) {
        send_done_error(d, s, g->id, KVD_ESHUTDOWN, "kvd is shutting down", 0);
        return KVD_ESHUTDOWN;
    }
    if (req_find(s, g->id)) {
        send_done_error(d, s, g->id, KVD_EMSG, "duplicate request id in this session", 0);
        return KVD_EMSG;
    }
    struct kvd_req *r = calloc(1, sizeof(*r));
    uint32_t max_len = d->cfg.max_model_len;
    if (!r) {
        send_done_error(d, s, g->id, -ENOMEM, "out of memory", 0);
        return -ENOMEM;
    }
    r->id = g->id;
    r->worker = -1;
    /* Tokenizing needs room for the whole prompt to tell "too long" apart and report
     * the real length: a text prompt gives at most one token per byte, plus BOS and the
     * leading-space piece. */
    uint32_t tok_cap = max_len > g->n_tokens ? max_len : (uint32_t)g->n_tokens;
    if (!g->tokens && g->prompt_len + 2 > tok_cap)
        tok_cap = (uint32_t)g->prompt_len + 2;
    r->seq.tokens = calloc((size_t)tok_cap + 1, sizeof(uint32_t));
    r->seq.blocks = calloc(d->sched.max_pages, sizeof(uint32_t));
    r->hashes = calloc(d->sched.max_pages, sizeof(*r->hashes));
    if (!r->seq.tokens || !r->seq.blocks || !r->hashes) {
        rc = -ENOMEM;
        snprintf(msg, sizeof(msg), "out of memory");
        goto out_free;
    }
    if ((rc = req_tokenize(d, r, g, tok_cap, msg, sizeof(msg))) < 0)
        goto out_free;
    r->seq.n_tokens = r->n_prompt;
    r->max_tokens = g->max_tokens < max_len ? g->max_tokens : max_len;
    uint64_t total = (uint64_t)r->n_prompt + g->max_tokens;
    r->seq.max_total = total < max_len ? (uint32_t)total : max_len;
    r->seq.id = ++d->next_seq_id;
    r->seq.owner = r;
    if ((rc = detok_init(&r->dt, &d->model.tok, (const char *const *)g->stop, g->n_stop)) < 0) {
        rc = KVD_EMSG;
        snprintf(msg, sizeof(msg), "bad stop strings");
        goto out_free;
    }
    step_sampling_default(&r->sp);
    r->sp.temperature = (float)g->temperature;
    r->sp.top_k = g->top_k;
    r->sp.top_p = (float)g->top_p;
    r->sp.min_p = (float)g->min_p;
    r->sp.seed = g->has_seed ? g->seed : (uv_hrtime() ^ (r->seq.id * 0x9e3779b97f4a7c15ull));
    r->sp.repetition_penalty = (float)g->repetition_penalty;
    r->sp.frequency_penalty = (float)g->frequency_penalty;
    r->sp.presence_penalty = (float)g->presence_penalty;
    r->n_stop_ids = (uint32_t)g->n_stop_token_ids;
    if (r->n_stop_ids)
        memcpy(r->stop_ids, g->stop_token_ids, r->n_stop_ids * sizeof(uint32_t));
    r->ignore_eos = g->ignore_eos;
    r->stream = g->stream;
    r->logprobs = g->logprobs;
    r->want_prompt_lp = g->prompt_logprobs;
    /* Prompt logprobs need every prompt token computed: no prefix hits for them. */
    r->use_prefix = d->cfg.prefix_cache && !r->want_prompt_lp;
    if (r->logprobs && !(r->lps = calloc(r->max_tokens, sizeof(*r->lps))))
        rc = -ENOMEM;
    if (r->want_prompt_lp && !(r->plps = calloc(r->n_prompt, sizeof(*r->plps))))
        rc = -ENOMEM;
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "out of memory");
        goto out_free;
    }
    if ((rc = blockhash_id_init(&r->hid, d->model.fp, d->cfg.kv_dtype, d->cfg.block_size,
                                g->cache_salt, g->cache_salt ? g->cache_salt_len : 0)) < 0) {
        rc = KVD_EMSG;
        snprintf(msg, sizeof(msg), "bad cache_salt");
        goto out_free;
    }
    r->deadline_ms = g->timeout_ms ? kvd_now_ms(d) + g->timeout_ms : 0;
    r->t_arrival_ms = kvd_now_ms(d);
    if ((rc = sched_submit(&d->sched, &r->seq)) < 0) {
        if (rc == KVD_ETOOLONG)
            snprintf(msg, sizeof(msg),
                     "prompt of %u tokens cannot fit: max-model-len %u, pool %u pages of %u "
                     "tokens",
                     r->n_prompt, max_len, d->sched.lim.total_pages, d->cfg.block_size);
        else if (rc == KVD_EOVERLOAD)
            snprintf(msg, sizeof(msg), "queue full (%u waiting, --max-queue)", d->sched.n_queued);
        goto out_free;
    }
    r->sess = s;
    r->s_next = s->reqs;
    if (s->reqs)
        s->reqs->s_prev = r;
    s->reqs = r;
    r->a_next = d->reqs;
    if (d->reqs)
        d->reqs->a_prev = r;
    d->reqs = r;
    d->n_reqs++;
    log_debug("request %llu of session %llu: seq %llu, %u prompt tokens, max_total %u",
              (unsigned long long)r->id, (unsigned long long)s->id, (unsigned long long)r->seq.id,
              r->n_prompt, r->seq.max_total);
    engine_kick(d);
    return 0;
out_free:
    send_done_error(d, s, g->id, rc, msg[0] ? msg : NULL, r->n_prompt);
    req_free(r);
    return rc;
}

static void lp_from_result(struct client_logprob *lp, uint32_t token, float logprob,
                           const struct step_lp *top, uint32_t n_top)
{
    lp->present = true;
    lp->token = token;
    lp->logprob = logprob;
    lp->n_top = n_top > CLIENT_MAX_LOGPROBS ? CLIENT_MAX_LOGPROBS : n_top;
    for (uint32_t i = 0; i < lp->n_top; i++) {
        lp->top[i].token = top[i].token;
        lp->top[i].logprob = top[i].logprob;
    }
}

void req_on_prompt_lp(struct kvd_req *r, uint32_t pos0, const struct step_seq_result *res)
{
    if (!r->plps)
        return;
    /* Entry i scores the token at position pos0 + 1 + i. */
    for (uint32_t i = 0; i < res->n_prompt; i++) {
        uint32_t pos = pos0 + 1 + i;
        if (pos >= r->n_prompt)
            break;
        lp_from_result(&r->plps[pos], res->prompt[i].token, res->prompt[i].logprob, NULL, 0);
    }
}

static bool is_stop_id(const struct kvd_req *r, uint32_t t)
{
    for (uint32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == t)
            return true;
    return false;
}

bool req_on_token(struct kvd *d, struct kvd_req *r, const struct step_seq_result *res,
                  bool has_token)
{
    if (!has_token)
        return false;
    uint32_t n_gen = r->seq.n_tokens - r->n_prompt;
    uint32_t t = r->seq.tokens[r->seq.n_tokens - 1];
    d->ctr.output_tokens++;
    if (r->lps && n_gen >= 1 && n_gen <= r->max_tokens)
        lp_from_result(&r->lps[n_gen - 1], t, res->logprob, res->top, res->n_top);
    bool eog = !r->ignore_eos && tok_is_eog(&d->model.tok, (int32_t)t);
    if (!eog && detok_push(&r->dt, (int32_t)t) < 0)
        log_warn("cannot detokenize token %u of request %llu", t, (unsigned long long)r->id);
    if (eog || is_stop_id(r, t) || r->dt.stopped) {
        r->end_code = REQ_END_STOP;
        return true;
    }
    if (n_gen >= r->max_tokens || r->seq.n_tokens >= r->seq.max_total) {
        r->end_code = REQ_END_LENGTH;
        return true;
    }
    return false;
}

void req_stream(struct kvd *d, struct kvd_req *r, bool final)
{
    (void)d;
    if (!r->stream || !r->sess)
        return;
    uint32_t n_gen = r->seq.n_tokens - r->n_prompt;
    const char *text;
    size_t text_len;
    while (r->sent_tokens < n_gen || final) {
        detok_take(&r->dt, final, &text, &text_len);
        uint32_t n = n_gen - r->sent_tokens;
        if (n > CLIENT_EVENT_MAX_TOKENS)
            n = CLIENT_EVENT_MAX_TOKENS;
        if (n == 0 && text_len == 0)
            return;
        if (n == 0) {
            log_debug("request %llu: %zu bytes of held text dropped at the end (stop string)",
                      (unsigned long long)r->id, text_len);
            return; /* "tokens" needs >= 1 id; held bytes were a stop-string prefix */
        }
        struct client_tokens ev;
        client_tokens_init(&ev);
        ev.id = r->id;
        ev.tokens = r->seq.tokens + r->n_prompt + r->sent_tokens;
        ev.n_tokens = n;
        char *tcopy = malloc(text_len + 1);
        if (!tcopy)
            return;
        memcpy(tcopy, text, text_len);
        tcopy[text_len] = '\0';
        ev.text = tcopy;
        ev.text_len = text_len;
        if (r->lps) {
            ev.logprobs = r->lps + r->sent_tokens;
            ev.n_logprobs = n;
        }
        struct wbuf w;
        wbuf_init(&w);
        char err[WIRE_ERR_LEN];
        if (client_tokens_encode(&ev, &w, err) == 0)
            session_send(r->sess, &w);
        else
            log_err("cannot encode tokens for request %llu: %s", (unsigned long long)r->id, err);
        wbuf_release(&w);
        free(tcopy);
        r->sent_tokens += n;
        final = false;
    }
}

static void req_free_pages_cb(struct bcli *b, int status, const struct wmsg *m, void *arg)
{
    (void)b;
    uint64_t seq = (uint64_t)(uintptr_t)arg, n;
    char err[WIRE_ERR_LEN] = "";
    if (status == 0)
        status = broker_rep_free_decode(m, &n, err);
    if (status < 0 && status != KVD_ESHUTDOWN)
        log_warn("cannot release pages of seq %llu: %s %s", (unsigned long long)seq,
                 kvd_errname(status), err);
}

void kvd_release_seq_pages(struct kvd *d, struct sched_seq *q)
{
    struct wbuf w;
    wbuf_init(&w);
    broker_req_free_encode(&w, d->bc.lease, q->id);
    if (bcli_call(&d->bc, &w, req_free_pages_cb, (void *)(uintptr_t)q->id) < 0)
        wbuf_release(&w);
    q->n_pages = 0;
}

/* Sends r's "done" to its session (if any) and unlinks r from it: r->sess = NULL. */
static void req_done_send(struct kvd *d, struct kvd_req *r, int code, const char *msg)
{
    if (r->sess) {
        if (code > 0)
            req_stream(d, r, true);
        struct client_done done;
        client_done_init(&done);
        done.id = r->id;
        done.finish = code == REQ_END_STOP     ? CLIENT_FINISH_STOP
                      : code == REQ_END_LENGTH ? CLIENT_FINISH_LENGTH
                      : code == KVD_ECANCELLED ? CLIENT_FINISH_CANCELLED
                                               : CLIENT_FINISH_ERROR;
        done.code = code > 0 ? 0 : code;
        if (code < 0)
            snprintf(done.msg, sizeof(done.msg), "%s", msg ? msg : kvd_strerror(code));
        done.prompt_tokens = r->n_prompt;
        done.cached_prompt_tokens = r->cached_prompt;
        done.completion_tokens = r->seq.n_tokens - r->n_prompt;
        char *text = NULL;
        if (!r->stream) {
            const char *t;
            size_t tl;
            detok_take(&r->dt, true, &t, &tl);
            text = malloc(tl + 1);
            if (text) {
                memcpy(text, t, tl);
                text[tl] = '\0';
                done.text = text;
                done.text_len = tl;
            }
            done.tokens = r->seq.tokens + r->n_prompt;
            done.n_tokens = done.completion_tokens;
            if (r->lps) {
                done.logprobs = r->lps;
                done.n_logprobs = done.completion_tokens;
            }
        }
        if (r->plps) {
            done.prompt_logprobs = r->plps;
            done.n_prompt_logprobs = r->n_prompt;
        }
        struct wbuf w;
        wbuf_init(&w);
        char err[WIRE_ERR_LEN];
        if (client_done_encode(&done, &w, err) == 0) {
            session_send(r->sess, &w);
        } else {
            /* Never leave the client without its "done". */
            log_err("cannot encode done for request %llu: %s", (unsigned long long)r->id, err);
            struct client_done bare;
            client_done_init(&bare);
            bare.id = r->id;
            bare.finish = CLIENT_FINISH_ERROR;
            bare.code = KVD_EINTERNAL;
            snprintf(bare.msg, sizeof(bare.msg), "cannot encode the reply: %s", err);
            wbuf_release(&w);
            wbuf_init(&w);
            if (client_done_encode(&bare, &w, err) == 0)
                session_send(r->sess, &w);
        }
        wbuf_release(&w);
        free(text);
        /* unlink from the session */
        if (r->s_prev)
            r->s_prev->s_next = r->s_next;
        else
            r->sess->reqs = r->s_next;
        if (r->s_next)
            r->s_next->s_prev = r->s_prev;
        r->s_prev = r->s_next = NULL;
        r->sess = NULL;
    }
}

void req_end_early(struct kvd *d, struct kvd_req *r, int code, const char *msg)
{
    KVD_BUG_ON(code >= 0);
    if (!r->end_code || r->end_code > 0)
        r->end_code = code;
    req_done_send(d, r, code, msg);
}

void req_finish(struct kvd *d, struct kvd_req *r, int code, const char *msg)
{
    KVD_BUG_ON(r->in_step);
    if (r->seq.state != SCHED_DONE)
        sched_finish(&d->sched, &r->seq);
    if (r->holds_pages) {
        kvd_release_seq_pages(d, &r->seq);
        r->holds_pages = false;
    }
    req_done_send(d, r, code, msg);
    if (code > 0)
        d->ctr.requests_finished++;
    else
        d->ctr.requests_failed++;
    log_debug("request %llu (seq %llu) ended: %s, %u+%u tokens, %u cached",
              (unsigned long long)r->id, (unsigned long long)r->seq.id,
              code == REQ_END_STOP     ? "stop"
              : code == REQ_END_LENGTH ? "length"
                                       : kvd_errname(code),
              r->n_prompt, r->seq.n_tokens - r->n_prompt, r->cached_prompt);
    if (r->a_prev)
        r->a_prev->a_next = r->a_next;
    else
        d->reqs = r->a_next;
    if (r->a_next)
        r->a_next->a_prev = r->a_prev;
    d->n_reqs--;
    req_free(r);
    kvd_maybe_finish_shutdown(d);
}

#include "worker/exec.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int exec_init(struct exec *e, const struct model *m, struct tpool *tp, const struct kv_view *kv,
              uint32_t max_tokens)
{
    int rc;
    memset(e, 0, sizeof(*e));
    e->m = m;
    e->kv = *kv;
    if ((rc = fwd_init(&e->fwd, m, tp, max_tokens)) < 0)
        return rc;
    if ((rc = sampler_init(&e->smp, m->vocab)) < 0)
        goto out_nomem;
    e->logit_tile = max_tokens < EXEC_LOGIT_ROWS ? max_tokens : EXEC_LOGIT_ROWS;
    e->logits = calloc((size_t)EXEC_LOGIT_ROWS * m->vocab, sizeof(float));
    e->logit_rows = calloc(EXEC_LOGIT_ROWS, sizeof(uint32_t));
    e->logit_tok = calloc(EXEC_LOGIT_ROWS, sizeof(uint32_t));
    e->logit_seq = calloc(EXEC_LOGIT_ROWS, sizeof(uint32_t));
    e->all = calloc(STEP_MAX_SEQS, sizeof(*e->all));
    e->sub = calloc(STEP_MAX_SEQS, sizeof(*e->sub));
    e->sub_seq = calloc(STEP_MAX_SEQS, sizeof(uint32_t));
    e->sub_tok0 = calloc(STEP_MAX_SEQS, sizeof(uint32_t));
    e->res = calloc(STEP_MAX_SEQS, sizeof(*e->res));
    e->prompt_lp = calloc(STEP_MAX_TOKENS, sizeof(*e->prompt_lp));
    if (!e->logits || !e->logit_rows || !e->logit_tok || !e->logit_seq || !e->all || !e->sub ||
        !e->sub_seq || !e->sub_tok0 || !e->res || !e->prompt_lp)
        goto out_nomem;
    return 0;
out_nomem:
    log_err("cannot set up the step executor: out of memory (vocab %u)", m->vocab);
    exec_release(e);
    return -ENOMEM;
}

void exec_release(struct exec *e)
{
    fwd_release(&e->fwd);
    sampler_release(&e->smp);
    free(e->logits);
    free(e->logit_rows);
    free(e->logit_tok);
    free(e->logit_seq);
    free(e->all);
    free(e->sub);
    free(e->sub_seq);
    free(e->sub_tok0);
    free(e->res);
    free(e->prompt_lp);
    memset(e, 0, sizeof(*e));
}

static int exec_validate(struct exec *e, const struct step_msg *s, char why[EXEC_WHY_LEN])
{
    for (uint32_t i = 0; i < s->n_seqs; i++) {
        const struct step_seq *q = &s->seqs[i];
        e->all[i] = (struct fwd_seq){q->tokens, q->n_tokens, q->pos0, q->blocks, q->n_blocks};
        if (q->has_next_token && q->next_token >= e->m->vocab) {
            snprintf(why, EXEC_WHY_LEN, "seq %llu: next_token %u, vocab has %u",
                     (unsigned long long)q->seq_id, q->next_token, e->m->vocab);
            return KVD_EMSG;
        }
    }
    /* messages name the sequence by its index in the step ("seq 3: ...") */
    return fwd_check_seqs(e->m, &e->kv, e->all, s->n_seqs, why, EXEC_WHY_LEN);
}

/* Does token index t of step seq q need logits? Which token do they score? */
static bool exec_needs_logits(const struct step_seq *q, uint32_t t)
{
    if (t + 1 < q->n_tokens)
        return q->prompt_logprobs;
    return q->sample || (q->prompt_logprobs && q->has_next_token);
}

/* Consumes the logits tile: prompt logprobs and samples. */
static void exec_use_logits(struct exec *e, const struct step_msg *s, uint32_t n)
{
    const uint32_t V = e->m->vocab;
    fwd_logits(&e->fwd, e->logit_rows, n, e->logits);
    for (uint32_t i = 0; i < n; i++) {
        const struct step_seq *q = &s->seqs[e->logit_seq[i]];
        struct step_seq_result *r = &e->res[e->logit_seq[i]];
        float *lg = e->logits + (size_t)i * V;
        uint32_t t = e->logit_tok[i];
        bool last = t + 1 == q->n_tokens;
        if (q->prompt_logprobs && (!last || q->has_next_token)) {
            uint32_t next = last ? q->next_token : q->tokens[t + 1];
            double lse = sampler_logsumexp(lg, V);
            r->prompt[r->n_prompt++] = (struct step_lp){next, sampler_logprob(lg[next], lse)};
        }
        if (last && q->sample)
            sampler_sample(&e->smp, lg, &q->sp, q->penalty_tokens, q->n_penalty_tokens,
                           (uint64_t)q->pos0 + q->n_tokens, q->logprobs, r);
    }
}

int exec_step(struct exec *e, const struct step_msg *s, struct step_result *out,
              char why[EXEC_WHY_LEN])
{
    int rc = exec_validate(e, s, why);
    if (rc < 0)
        return rc;
    /* result slots; prompt arrays carved from prompt_lp */
    size_t lp_used = 0;
    for (uint32_t i = 0; i < s->n_seqs; i++) {
        const struct step_seq *q = &s->seqs[i];
        memset(&e->res[i], 0, sizeof(e->res[i]));
        e->res[i].seq_id = q->seq_id;
        if (q->prompt_logprobs) {
            e->res[i].prompt = e->prompt_lp + lp_used;
            lp_used += q->n_tokens; /* n_tokens - 1 + (next_token ? 1 : 0) entries */
        }
    }
    /* sub-batches: walk (seq, token) in order, cut every max_tokens rows */
    uint32_t seq = 0, tok = 0;
    while (seq < s->n_seqs) {
        uint32_t n_sub = 0, rows = 0;
        while (seq < s->n_seqs && rows < e->fwd.max_tokens) {
            const struct step_seq *q = &s->seqs[seq];
            uint32_t take = q->n_tokens - tok;
            if (take > e->fwd.max_tokens - rows)
                take = e->fwd.max_tokens - rows;
            e->sub[n_sub] = (struct fwd_seq){q->tokens + tok, take, q->pos0 + tok, q->blocks,
                                             q->n_blocks};
            e->sub_seq[n_sub] = seq;
            e->sub_tok0[n_sub] = tok;
            n_sub++;
            rows += take;
            tok += take;
            if (tok == q->n_tokens) {
                seq++;
                tok = 0;
            }
        }
        fwd_run(&e->fwd, &e->kv, e->sub, n_sub);
        uint32_t n_lg = 0, row = 0;
        for (uint32_t j = 0; j < n_sub; j++) {
            const struct step_seq *q = &s->seqs[e->sub_seq[j]];
            for (uint32_t t = 0; t < e->sub[j].n_tokens; t++, row++) {
                uint32_t tq = e->sub_tok0[j] + t;
                if (!exec_needs_logits(q, tq))
                    continue;
                e->logit_rows[n_lg] = row;
                e->logit_tok[n_lg] = tq;
                e->logit_seq[n_lg] = e->sub_seq[j];
                if (++n_lg == e->logit_tile) {
                    exec_use_logits(e, s, n_lg);
                    n_lg = 0;
                }
            }
        }
        if (n_lg)
            exec_use_logits(e, s, n_lg);
    }
    out->step_id = s->step_id;
    out->n_seqs = s->n_seqs;
    out->seqs = e->res;
    return 0;
}

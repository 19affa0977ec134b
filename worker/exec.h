/* exec.h — executes one decoded "step" message against the KV pool: validate, run the
 * forward pass in sub-batches, sample, fill the "result".
 *
 * A step may carry more tokens than the forward scratch holds (max_tokens): sequences
 * are packed into sub-batches of at most max_tokens rows, a long prefill chunk being
 * split across sub-batches in order (its K/V from one sub-batch is in the pages before
 * the next reads it), so any valid step runs. Logits are computed only for rows that
 * need them (the last token of a sampled sequence, every token of a prompt_logprobs
 * sequence), EXEC_LOGIT_ROWS at a time.
 * Stateless between steps (DESIGN.md principle 1): nothing about a sequence survives
 * exec_step except what it wrote into the pages.
 * All buffers are allocated by exec_init; exec_step allocates nothing. One thread.
 */
#ifndef KVD_WORKER_EXEC_H
#define KVD_WORKER_EXEC_H

#include "proto/step_msg.h"
#include "worker/forward.h"
#include "worker/sampler.h"

#include <stddef.h>
#include <stdint.h>

#define EXEC_LOGIT_ROWS 64 /* logit rows computed per sgemm (x vocab floats of scratch) */
#define EXEC_WHY_LEN 256   /* bytes of a step error message */

struct exec {
    const struct model *m;
    struct kv_view kv;
    struct fwd fwd;
    struct sampler smp;
    uint32_t logit_tile;            /* min(EXEC_LOGIT_ROWS, max_tokens) rows per sgemm */
    float *logits;                  /* (EXEC_LOGIT_ROWS, vocab) */
    uint32_t *logit_rows;           /* (EXEC_LOGIT_ROWS,) fwd rows of the current tile */
    uint32_t *logit_tok;            /* (EXEC_LOGIT_ROWS,) token index within its seq */
    uint32_t *logit_seq;            /* (EXEC_LOGIT_ROWS,) step seq index */
    struct fwd_seq *all;            /* (STEP_MAX_SEQS,) whole-step view of the seqs */
    struct fwd_seq *sub;            /* (STEP_MAX_SEQS,) one sub-batch */
    uint32_t *sub_seq;              /* (STEP_MAX_SEQS,) step seq index of sub[i] */
    uint32_t *sub_tok0;             /* (STEP_MAX_SEQS,) first token of sub[i] within its seq */
    struct step_seq_result *res;    /* (STEP_MAX_SEQS,) */
    struct step_lp *prompt_lp;      /* (STEP_MAX_TOKENS,) storage for result prompt arrays */
};

/* Allocates everything for model m, pool view kv and max_tokens rows per forward run.
 * 0, -EINVAL or -ENOMEM (logged; e zeroed). m, tp outlive e. */
int exec_init(struct exec *e, const struct model *m, struct tpool *tp, const struct kv_view *kv,
              uint32_t max_tokens);
void exec_release(struct exec *e);   /* safe on a zeroed exec */

/* Runs step s. On success fills out (its seqs and prompt arrays point into e: valid
 * until the next exec_step; do NOT step_result_release it) and returns 0. On a step
 * that does not fit the pool or the model (page id, position, token id out of range)
 * returns KVD_EMSG with why filled, before any page is written. */
int exec_step(struct exec *e, const struct step_msg *s, struct step_result *out,
              char why[EXEC_WHY_LEN]);

#endif

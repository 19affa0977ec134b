/* sampler.h — turns one row of logits into a token, and logits into log-probabilities.
 *
 * Order of operations for a sampled token (the contract of proto/step_msg.h):
 *   1. penalties on the raw logits, for ids in the penalty history: repetition
 *      (logit > 0: / r, else * r), frequency (- count * f), presence (- p if count > 0);
 *   2. logprobs: log-softmax of the logits AFTER penalties, BEFORE temperature and any
 *      truncation (the model's distribution; perplexity does not depend on sampling);
 *      the chosen token's value and the n_top best alternatives (ties: lower id first);
 *   3. temperature 0: greedy argmax (ties: lowest id). Otherwise logits / temperature,
 *      then top_k (keep the k best), top_p (smallest prefix of the sorted distribution
 *      whose mass reaches p; at least one token), min_p (drop tokens whose probability
 *      is below min_p x the best one's), renormalise, and draw with u in [0, 1) where
 *      u = sampler_uniform(seed, position) — a pure function, so a re-run step gives
 *      the same token. `position` is the position the sampled token will occupy.
 * Scratch (vocab-sized arrays) is allocated once by sampler_init; sampling never
 * allocates, logs or fails. One thread per sampler.
 */
#ifndef KVD_WORKER_SAMPLER_H
#define KVD_WORKER_SAMPLER_H

#include "proto/step_msg.h"

#include <stdint.h>

struct sampler_cand {
    uint32_t id;
    float logit;
};

struct sampler {
    uint32_t vocab;
    struct sampler_cand *cand; /* (vocab,) candidates during truncation */
    uint32_t *counts;          /* (vocab,) penalty counts; all zero between calls */
    uint32_t *touched;         /* (vocab,) ids whose count is non-zero */
};

int sampler_init(struct sampler *s, uint32_t vocab);   /* 0 or -ENOMEM (s zeroed) */
void sampler_release(struct sampler *s);              /* safe on a zeroed sampler */

/* splitmix64 of (seed, position) mapped to [0, 1) with 53 bits. */
double sampler_uniform(uint64_t seed, uint64_t position);

/* log(sum(exp(logits))) over vocab entries, max-shifted for stability. */
double sampler_logsumexp(const float *logits, uint32_t vocab);

/* logit - lse as a float in [SAMPLER_LOGPROB_FLOOR, 0]; NaN and -inf map to the floor,
 * so results always encode (the wire refuses non-finite numbers). */
#define SAMPLER_LOGPROB_FLOOR (-1e30f)
float sampler_logprob(float logit, double lse);

/* Applies step 1 to logits in place. Ids >= vocab in hist are ignored. */
void sampler_penalize(struct sampler *s, float *logits, const struct step_sampling *sp,
                      const uint32_t *hist, uint32_t n_hist);

/* The n_top (<= STEP_MAX_LOGPROBS) best ids of logits with their logprobs given lse. */
uint32_t sampler_top(const float *logits, uint32_t vocab, double lse, uint32_t n_top,
                     struct step_lp *top);

/* Steps 1-3 on logits (modified in place). Fills out->token, logprob, n_top, top and
 * has_token; leaves seq_id and prompt alone. */
void sampler_sample(struct sampler *s, float *logits, const struct step_sampling *sp,
                    const uint32_t *hist, uint32_t n_hist, uint64_t position, uint32_t n_top,
                    struct step_seq_result *out);

#endif

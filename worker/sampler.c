#include "worker/sampler.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


int sampler_init(struct sampler *s, uint32_t vocab)
{
    memset(s, 0, sizeof(*s));
    s->vocab = vocab;
    s->cand = calloc(vocab, sizeof(*s->cand));
    s->counts = calloc(vocab, sizeof(*s->counts));
    s->touched = calloc(vocab, sizeof(*s->touched));
    if (!s->cand || !s->counts || !s->touched) {
        sampler_release(s);
        return -ENOMEM;
    }
    return 0;
}

void sampler_release(struct sampler *s)
{
    free(s->cand);
    free(s->counts);
    free(s->touched);
    memset(s, 0, sizeof(*s));
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double sampler_uniform(uint64_t seed, uint64_t position)
{
    uint64_t r = splitmix64(splitmix64(seed) ^ position);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0); /* / 2^53 */
}

double sampler_logsumexp(const float *logits, uint32_t vocab)
{
    float mx = -INFINITY;
    for (uint32_t i = 0; i < vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (uint32_t i = 0; i < vocab; i++)
        sum += exp((double)logits[i] - mx);
    return mx + log(sum);
}

float sampler_logprob(float logit, double lse)
{
    double v = (double)logit - lse;
    /* NaN (garbage K/V in a page) too: the wire carries finite numbers only */
    return !(v >= SAMPLER_LOGPROB_FLOOR) ? SAMPLER_LOGPROB_FLOOR : v > 0.0 ? 0.0f : (float)v;
}

void sampler_penalize(struct sampler *s, float *logits, const struct step_sampling *sp,
                      const uint32_t *hist, uint32_t n_hist)
{
    if (sp->repetition_penalty == 1.0f && sp->frequency_penalty == 0.0f &&
        sp->presence_penalty == 0.0f)
        return;
    uint32_t n_touched = 0;
    for (uint32_t i = 0; i < n_hist; i++) {
        uint32_t id = hist[i];
        if (id >= s->vocab)
            continue;
        if (s->counts[id]++ == 0)
            s->touched[n_touched++] = id;
    }
    for (uint32_t i = 0; i < n_touched; i++) {
        uint32_t id = s->touched[i];
        float l = logits[id];
        l = l > 0.0f ? l / sp->repetition_penalty : l * sp->repetition_penalty;
        l -= (float)s->counts[id] * sp->frequency_penalty + sp->presence_penalty;
        logits[id] = l;
        s->counts[id] = 0;
    }
}

/* better(a, b): a ranks before b (higher logit, then lower id) */
static int cand_cmp(const void *pa, const void *pb)
{
    const struct sampler_cand *a = pa, *b = pb;
    if (a->logit != b->logit)
        return a->logit > b->logit ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

uint32_t sampler_top(const float *logits, uint32_t vocab, double lse, uint32_t n_top,
                     struct step_lp *top)
{
    struct sampler_cand best[STEP_MAX_LOGPROBS];
    uint32_t n = 0;
    if (n_top > STEP_MAX_LOGPROBS)
        n_top = STEP_MAX_LOGPROBS;
    if (n_top > vocab)
        n_top = vocab;
    for (uint32_t i = 0; i < vocab && n_top; i++) {
        float l = logits[i];
        if (n == n_top && !(l > best[n - 1].logit))
            continue; /* not better than the worst kept (equal: lower id already kept) */
        uint32_t j = n < n_top ? n++ : n - 1;
        while (j > 0 && l > best[j - 1].logit) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = (struct sampler_cand){i, l};
    }
    for (uint32_t i = 0; i < n; i++)
        top[i] = (struct step_lp){best[i].id, sampler_logprob(best[i].logit, lse)};
    return n;
}

static uint32_t argmax(const float *logits, uint32_t vocab)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Scales by 1/temperature, truncates and draws. */
static uint32_t sampler_draw(struct sampler *s, const float *logits, float inv_t,
                             const struct step_sampling *sp, double u)
{
    struct sampler_cand *c = s->cand;
    uint32_t n = s->vocab;
    bool need_sort = (sp->top_k > 0 && sp->top_k < n) || sp->top_p < 1.0f;
    for (uint32_t i = 0; i < n; i++)
        c[i] = (struct sampler_cand){i, logits[i] * inv_t};
    if (need_sort)
        qsort(c, n, sizeof(*c), cand_cmp);
    if (sp->top_k > 0 && sp->top_k < n)
        n = sp->top_k;
    float mx = -INFINITY;
    for (uint32_t i = 0; i < n; i++)
        mx = c[i].logit > mx ? c[i].logit : mx;
    double total = 0.0;
    for (uint32_t i = 0; i < n; i++)
        total += exp((double)c[i].logit - mx);
    if (sp->top_p < 1.0f) { /* c is sorted: keep the smallest prefix reaching top_p */
        double acc = 0.0;
        uint32_t keep = 0;
        while (keep < n) {
            acc += exp((double)c[keep].logit - mx) / total;
            keep++;
            if (acc >= sp->top_p)
                break;
        }
        n = keep;
    }
    double min_w = sp->min_p > 0.0f ? (double)sp->min_p : 0.0; /* relative to the best (w = 1) */
    double kept = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double w = exp((double)c[i].logit - mx);
        kept += w >= min_w ? w : 0.0;
    }
    double target = u * kept, acc = 0.0;
    uint32_t last = 0;
    for (uint32_t i = 0; i < n; i++) {
        double w = exp((double)c[i].logit - mx);
        if (w < min_w)
            continue;
        acc += w;
        last = c[i].id;
        if (acc > target)
            return c[i].id;
    }
    return last; /* rounding: u * kept reached the total */
}

void sampler_sample(struct sampler *s, float *logits, const struct step_sampling *sp,
                    const uint32_t *hist, uint32_t n_hist, uint64_t position, uint32_t n_top,
                    struct step_seq_result *out)
{
    sampler_penalize(s, logits, sp, hist, n_hist);
    double lse = sampler_logsumexp(logits, s->vocab);
    out->n_top = sampler_top(logits, s->vocab, lse, n_top, out->top);
    uint32_t tok;
    if (sp->temperature <= 0.0f) {
        tok = argmax(logits, s->vocab);
    } else {
        /* temperature scales the candidates' copy; logits stay as reported */
        tok = sampler_draw(s, logits, 1.0f / sp->temperature, sp,
                           sampler_uniform(sp->seed, position));
    }
    out->has_token = true;
    out->token = tok;
    out->logprob = sampler_logprob(logits[tok], lse);
}

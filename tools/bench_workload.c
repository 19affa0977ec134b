/* bench_workload.c — synthetic workloads, trace loading, ideal hit ratio, percentiles.
 * Contract and distributions in bench_workload.h. */
#include "tools/bench_workload.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define AZURE_SCALE_DEFAULT 16.0      /* 2,048-token mean context -> 128 */
#define AZURE_OUT_SCALE_DEFAULT 4.0   /* 27.9-token mean output -> 7 */
#define MOONCAKE_SCALE_DEFAULT 64.0   /* 512-token hash block -> 8 tokens */
#define MOONCAKE_OUT_SCALE_DEFAULT 8.0 /* 149-token mean output -> 19 */
#define SHARED_SUFFIX_MIN 16
#define SHARED_SUFFIX_MAX 64
#define SHARED_OUT_MIN 16
#define SHARED_OUT_MAX 48

static int wl_fail(char err[BENCH_ERR_LEN], int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int wl_fail(char err[BENCH_ERR_LEN], int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, BENCH_ERR_LEN, fmt, ap);
    va_end(ap);
    return code;
}

/* splitmix64: small, good enough for workload generation, reproducible. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) /* (0, 1) */
{
    return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
}

static uint32_t rng_range(uint64_t *s, uint32_t lo, uint32_t hi) /* [lo, hi] */
{
    return lo + (uint32_t)(rng_next(s) % ((uint64_t)hi - lo + 1));
}

static double rng_lognormal(uint64_t *s, double median, double sigma)
{
    double z = sqrt(-2.0 * log(rng_unit(s))) * cos(2 * M_PI * rng_unit(s));
    return median * exp(sigma * z);
}

static uint32_t token_for(uint64_t *s, uint32_t vocab)
{
    return rng_range(s, BENCH_FIRST_TOKEN_ID, vocab - 1);
}

static const char *const kind_names[BENCH_KIND_COUNT_] = {"chat", "shared-prefix", "long"};

const char *bench_kind_name(enum bench_kind k)
{
    return (unsigned)k < BENCH_KIND_COUNT_ ? kind_names[k] : "?";
}

int bench_kind_parse(const char *s, enum bench_kind *out)
{
    for (int i = 0; i < BENCH_KIND_COUNT_; i++)
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (enum bench_kind)i;
            return 0;
        }
    return -EINVAL;
}

void bench_workload_release(struct bench_workload *w)
{
    for (size_t i = 0; w->reqs && i < w->n; i++)
        free(w->reqs[i].tokens);
    free(w->reqs);
    memset(w, 0, sizeof(*w));
    w->trace_ideal_hit_ratio = -1;
}

static uint32_t clampu(double v, uint32_t lo, uint32_t hi)
{
    if (!(v >= lo))
        return lo;
    if (v > hi)
        return hi;
    return (uint32_t)llround(v);
}

int bench_synthetic(enum bench_kind kind, const struct bench_model *m,
                    const struct bench_opts *o, struct bench_workload *w, char err[BENCH_ERR_LEN])
{
    uint32_t L = m->max_model_len;
    uint64_t rng = o->seed ? o->seed : 1;
    memset(w, 0, sizeof(*w));
    w->trace_ideal_hit_ratio = -1;
    w->scale = w->out_scale = 1;
    if (L < 128 || m->vocab_size <= BENCH_FIRST_TOKEN_ID + 1)
        return wl_fail(err, -EINVAL, "server max_model_len %u or vocab %u too small", L,
                       m->vocab_size);
    if (o->n_requests == 0 || o->n_requests > BENCH_MAX_REQUESTS)
        return wl_fail(err, -EINVAL, "request count must be 1..%d", BENCH_MAX_REQUESTS);
    uint32_t plen = o->prefix_len ? o->prefix_len : L / 2;
    if (kind == BENCH_SHARED_PREFIX && plen + SHARED_SUFFIX_MAX + SHARED_OUT_MAX > L)
        return wl_fail(err, -EINVAL, "prefix of %u tokens leaves no room in max_model_len %u",
                       plen, L);
    uint32_t *prefixes = NULL;
    if (kind == BENCH_SHARED_PREFIX) {
        prefixes = calloc((size_t)BENCH_SHARED_PREFIXES * plen, sizeof(*prefixes));
        if (!prefixes)
            return wl_fail(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < (size_t)BENCH_SHARED_PREFIXES * plen; i++)
            prefixes[i] = token_for(&rng, m->vocab_size);
    }
    w->reqs = calloc(o->n_requests, sizeof(*w->reqs));
    if (!w->reqs) {
        free(prefixes);
        return wl_fail(err, -ENOMEM, "out of memory");
    }
    w->n = o->n_requests;
    for (size_t i = 0; i < w->n; i++) {
        struct bench_req *r = &w->reqs[i];
        uint32_t np, nout, shared = 0, which = 0;
        switch (kind) {
        case BENCH_CHAT:
            nout = clampu(rng_lognormal(&rng, BENCH_CHAT_OUTPUT_MEDIAN, 0.7), 4, L / 2);
            np = clampu(rng_lognormal(&rng, BENCH_CHAT_PROMPT_MEDIAN, 0.8), 4, L - nout);
            break;
        case BENCH_SHARED_PREFIX:
            which = rng_range(&rng, 0, BENCH_SHARED_PREFIXES - 1);
            shared = plen;
            np = plen + rng_range(&rng, SHARED_SUFFIX_MIN, SHARED_SUFFIX_MAX);
            nout = rng_range(&rng, SHARED_OUT_MIN, SHARED_OUT_MAX);
            break;
        default:
            np = rng_range(&rng, L / 2, L * 3 / 4);
            nout = rng_range(&rng, L / 10, L / 5);
            break;
        }
        r->tokens = calloc(np, sizeof(*r->tokens));
        if (!r->tokens) {
            free(prefixes);
            bench_workload_release(w);
            return wl_fail(err, -ENOMEM, "out of memory");
        }
        if (shared)
            memcpy(r->tokens, prefixes + (size_t)which * plen, plen * sizeof(*r->tokens));
        for (uint32_t t = shared; t < np; t++)
            r->tokens[t] = token_for(&rng, m->vocab_size);
        r->n_tokens = np;
        r->max_tokens = nout;
    }
    free(prefixes);
    if (kind == BENCH_SHARED_PREFIX)
        snprintf(w->desc, sizeof(w->desc),
                 "synthetic shared-prefix: %d prefixes x %u tokens + %d..%d suffix, out %d..%d",
                 BENCH_SHARED_PREFIXES, plen, SHARED_SUFFIX_MIN, SHARED_SUFFIX_MAX,
                 SHARED_OUT_MIN, SHARED_OUT_MAX);
    else if (kind == BENCH_CHAT)
        snprintf(w->desc, sizeof(w->desc),
                 "synthetic chat: prompt lognormal(median %.0f, s 0.8), out lognormal(median "
                 "%.0f, s 0.7)",
                 BENCH_CHAT_PROMPT_MEDIAN, BENCH_CHAT_OUTPUT_MEDIAN);
    else
        snprintf(w->desc, sizeof(w->desc),
                 "synthetic long: prompt U[%u, %u], out U[%u, %u]", L / 2, L * 3 / 4, L / 10,
                 L / 5);
    return 0;
}

void bench_poisson_arrivals(struct bench_workload *w, double rate, uint64_t seed)
{
    uint64_t rng = seed ? seed : 1;
    double t = 0;
    for (size_t i = 0; i < w->n; i++) {
        w->reqs[i].arrival_s = t;
        t += -log(rng_unit(&rng)) / rate;
    }
    w->timed = true;
}

/* ---- traces ---- */

int bench_parse_azure_time(const char *s, double *out)
{
    struct tm tm = {0};
    double sec;
    int n = 0;
    if (sscanf(s, "%d-%d-%d %d:%d:%lf%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &sec, &n) != 6 ||
        tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || !(sec >= 0 && sec < 61))
        return -EINVAL;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = 0;
    *out = (double)timegm(&tm) + sec;
    return 0;
}

/* One parsed trace record before scaling. */
struct trace_rec {
    double t_s;
    uint64_t input_len, output_len;
    uint64_t *hash_ids;
    size_t n_hash;
};

/* Minimal parser for one flat Mooncake JSON object: numbers and arrays of numbers. */
static int parse_mooncake_line(const char *s, struct trace_rec *r, char *what, size_t wcap)
{
    bool seen_t = false, seen_in = false, seen_out = false, seen_h = false;
    const char *p = s;
    memset(r, 0, sizeof(*r));
#define SKIPWS() while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++
    SKIPWS();
    if (*p++ != '{')
        return snprintf(what, wcap, "expected '{'"), -EINVAL;
    for (;;) {
        SKIPWS();
        if (*p == '}')
            break;
        if (*p++ != '"')
            return snprintf(what, wcap, "expected a key"), -EINVAL;
        const char *k = p;
        while (*p && *p != '"')
            p++;
        if (!*p)
            return snprintf(what, wcap, "unterminated key"), -EINVAL;
        size_t kl = (size_t)(p - k);
        p++;
        SKIPWS();
        if (*p++ != ':')
            return snprintf(what, wcap, "expected ':'"), -EINVAL;
        SKIPWS();
        if (kl == 8 && memcmp(k, "hash_ids", 8) == 0) {
            if (*p++ != '[')
                return snprintf(what, wcap, "hash_ids must be an array"), -EINVAL;
            size_t cap = 0;
            for (;;) {
                SKIPWS();
                if (*p == ']') {
                    p++;
                    break;
                }
                char *end;
                errno = 0;
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p || errno || *p == '-')
                    return snprintf(what, wcap, "bad hash id"), -EINVAL;
                p = end;
                if (r->n_hash == BENCH_MAX_HASH_IDS)
                    return snprintf(what, wcap, "more than %d hash ids", BENCH_MAX_HASH_IDS),
                           -EINVAL;
                if (r->n_hash == cap) {
                    cap = cap ? cap * 2 : 64;
                    uint64_t *nh = realloc(r->hash_ids, cap * sizeof(*nh));
                    if (!nh)
                        return -ENOMEM;
                    r->hash_ids = nh;
                }
                r->hash_ids[r->n_hash++] = v;
                SKIPWS();
                if (*p == ',')
                    p++;
                else if (*p != ']')
                    return snprintf(what, wcap, "expected ',' or ']' in hash_ids"), -EINVAL;
            }
            seen_h = true;
        } else {
            char *end;
            errno = 0;
            double v = strtod(p, &end);
            if (end == p || errno || !(v >= 0) || !isfinite(v))
                return snprintf(what, wcap, "field '%.*s' must be a non-negative number",
                                (int)(kl > 32 ? 32 : kl), k),
                       -EINVAL;
            p = end;
            if (kl == 9 && memcmp(k, "timestamp", 9) == 0)
                r->t_s = v / 1000.0, seen_t = true;
            else if (kl == 12 && memcmp(k, "input_length", 12) == 0)
                r->input_len = (uint64_t)v, seen_in = true;
            else if (kl == 13 && memcmp(k, "output_length", 13) == 0)
                r->output_len = (uint64_t)v, seen_out = true;
        }
        SKIPWS();
        if (*p == ',')
            p++;
        else if (*p != '}')
            return snprintf(what, wcap, "expected ',' or '}'"), -EINVAL;
    }
#undef SKIPWS
    if (!seen_t || !seen_in || !seen_out || !seen_h)
        return snprintf(what, wcap, "needs timestamp, input_length, output_length, hash_ids"),
               -EINVAL;
    if (r->input_len == 0 ||
        r->n_hash != (r->input_len + BENCH_MOONCAKE_BLOCK - 1) / BENCH_MOONCAKE_BLOCK)
        return snprintf(what, wcap, "len(hash_ids) != ceil(input_length / %d)",
                        BENCH_MOONCAKE_BLOCK),
               -EINVAL;
    return 0;
}

static int parse_azure_line(const char *s, struct trace_rec *r, char *what, size_t wcap)
{
    char ts[64];
    unsigned long long in, out;
    int n = 0;
    memset(r, 0, sizeof(*r));
    if (sscanf(s, "%63[^,],%llu,%llu%n", ts, &in, &out, &n) != 3 ||
        (s[n] && s[n] != '\n' && s[n] != '\r'))
        return snprintf(what, wcap, "expected TIMESTAMP,ContextTokens,GeneratedTokens"), -EINVAL;
    if (bench_parse_azure_time(ts, &r->t_s))
        return snprintf(what, wcap, "bad timestamp '%s'", ts), -EINVAL;
    if (in == 0)
        return snprintf(what, wcap, "ContextTokens is 0"), -EINVAL;
    r->input_len = in;
    r->output_len = out;
    return 0;
}

/* Token j of the scaled block named by hash id h: a pure function of (h, j). */
static uint32_t block_token(uint64_t h, uint32_t j, uint32_t vocab)
{
    uint64_t s = h * 0x100000001b3ULL + j;
    return BENCH_FIRST_TOKEN_ID + (uint32_t)(rng_next(&s) % (vocab - BENCH_FIRST_TOKEN_ID));
}

/* Builds one scaled request from a record. */
static int build_req(const struct trace_rec *t, bool mooncake, const struct bench_model *m,
                     double scale, double out_scale, uint64_t *rng, struct bench_req *r,
                     bool *truncated)
{
    uint32_t L = m->max_model_len;
    uint32_t nout = clampu((double)t->output_len / out_scale, 1, L / 2);
    uint32_t np = clampu((double)t->input_len / scale, 1, UINT32_MAX);
    *truncated = np > L - nout;
    if (*truncated)
        np = L - nout;
    r->tokens = calloc(np, sizeof(*r->tokens));
    if (!r->tokens)
        return -ENOMEM;
    if (mooncake) {
        uint32_t bl = (uint32_t)llround(BENCH_MOONCAKE_BLOCK / scale);
        if (bl == 0)
            bl = 1;
        for (uint32_t i = 0; i < np; i++) {
            size_t b = i / bl;
            uint64_t h = b < t->n_hash ? t->hash_ids[b] : UINT64_MAX - b;
            r->tokens[i] = block_token(h, i % bl, m->vocab_size);
        }
    } else {
        for (uint32_t i = 0; i < np; i++)
            r->tokens[i] = token_for(rng, m->vocab_size);
    }
    r->n_tokens = np;
    r->max_tokens = nout;
    return 0;
}

/* The original trace's unbounded-cache token hit ratio (512-token blocks, unscaled). */
static double mooncake_ideal(const struct trace_rec *recs, size_t n)
{
    size_t cap = 1024, used = 0;
    for (size_t i = 0; i < n; i++)
        cap += recs[i].n_hash * 2;
    uint64_t *set = calloc(cap, sizeof(*set)); /* open addressing; key+1 (0 = empty) */
    if (!set)
        return -1;
    double hit = 0, tot = 0;
    for (size_t i = 0; i < n; i++) {
        const struct trace_rec *t = &recs[i];
        for (size_t b = 0; b < t->n_hash; b++) {
            uint64_t len = t->input_len - b * BENCH_MOONCAKE_BLOCK;
            if (len > BENCH_MOONCAKE_BLOCK)
                len = BENCH_MOONCAKE_BLOCK;
            tot += (double)len;
            uint64_t key = t->hash_ids[b] + 1, h = (key * 0x9e3779b97f4a7c15ULL) % cap;
            while (set[h] && set[h] != key)
                h = (h + 1) % cap;
            if (set[h] == key) {
                hit += (double)len;
            } else if (used + 1 < cap) {
                set[h] = key;
                used++;
            }
        }
    }
    free(set);
    return tot > 0 ? hit / tot : 0;
}

int bench_trace_load(const char *path, const struct bench_model *m, const struct bench_opts *o,
                     struct bench_workload *w, char err[BENCH_ERR_LEN])
{
    FILE *f = fopen(path, "r");
    char *line = NULL, what[120];
    size_t cap = 0, n_recs = 0, cap_recs = 0, lineno = 0;
    struct trace_rec *recs = NULL;
    bool mooncake = false;
    int rc = 0;
    memset(w, 0, sizeof(*w));
    w->trace_ideal_hit_ratio = -1;
    if (!f)
        return wl_fail(err, -errno, "cannot open trace '%s': %s", path, strerror(errno));
    if (m->max_model_len < 16 || m->vocab_size <= BENCH_FIRST_TOKEN_ID + 1) {
        fclose(f);
        return wl_fail(err, -EINVAL, "server max_model_len or vocab too small");
    }
    ssize_t len;
    size_t limit = o->n_requests ? o->n_requests : BENCH_MAX_REQUESTS;
    while (n_recs < limit && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len > BENCH_TRACE_LINE_MAX) {
            rc = wl_fail(err, -EINVAL, "%s:%zu: line longer than %u bytes", path, lineno,
                         BENCH_TRACE_LINE_MAX);
            goto out;
        }
        if (lineno == 1) {
            const char *p = line + strspn(line, " \t");
            mooncake = *p == '{';
            if (!mooncake) {
                if (strncmp(line, "TIMESTAMP,ContextTokens,GeneratedTokens", 39) != 0) {
                    rc = wl_fail(err, -EINVAL,
                                 "%s: unknown trace format (neither Mooncake JSONL nor Azure "
                                 "CSV header)",
                                 path);
                    goto out;
                }
                continue;
            }
        }
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue;
        if (n_recs == cap_recs) {
            cap_recs = cap_recs ? cap_recs * 2 : 1024;
            struct trace_rec *nr = realloc(recs, cap_recs * sizeof(*nr));
            if (!nr) {
                rc = wl_fail(err, -ENOMEM, "out of memory");
                goto out;
            }
            recs = nr;
        }
        what[0] = '\0';
        rc = mooncake ? parse_mooncake_line(line, &recs[n_recs], what, sizeof(what))
                      : parse_azure_line(line, &recs[n_recs], what, sizeof(what));
        if (rc) {
            free(recs[n_recs].hash_ids);
            rc = wl_fail(err, rc, "%s:%zu: %s", path, lineno, what);
            goto out;
        }
        n_recs++;
    }
    if (n_recs == 0) {
        rc = wl_fail(err, -EINVAL, "%s: no requests", path);
        goto out;
    }
    w->scale = o->scale > 0 ? o->scale : mooncake ? MOONCAKE_SCALE_DEFAULT : AZURE_SCALE_DEFAULT;
    w->out_scale = o->out_scale > 0       ? o->out_scale
                   : mooncake             ? MOONCAKE_OUT_SCALE_DEFAULT
                                          : AZURE_OUT_SCALE_DEFAULT;
    double ts = o->time_scale > 0 ? o->time_scale : 1;
    if (!(w->reqs = calloc(n_recs, sizeof(*w->reqs)))) {
        rc = wl_fail(err, -ENOMEM, "out of memory");
        goto out;
    }
    uint64_t rng = o->seed ? o->seed : 1;
    double t0 = recs[0].t_s;
    for (size_t i = 0; i < n_recs; i++) {
        bool tr;
        if ((rc = build_req(&recs[i], mooncake, m, w->scale, w->out_scale, &rng, &w->reqs[i],
                            &tr))) {
            w->n = i;
            bench_workload_release(w);
            rc = wl_fail(err, rc, "out of memory");
            goto out;
        }
        double rel = recs[i].t_s - t0;
        w->reqs[i].arrival_s = (rel > 0 ? rel : 0) / ts;
        w->n_truncated += tr;
    }
    w->n = n_recs;
    w->timed = true;
    if (mooncake)
        w->trace_ideal_hit_ratio = mooncake_ideal(recs, n_recs);
    snprintf(w->desc, sizeof(w->desc), "%s trace %s: %zu requests, prompt /%.0f, output /%.0f%s",
             mooncake ? "Mooncake" : "Azure", strrchr(path, '/') ? strrchr(path, '/') + 1 : path,
             n_recs, w->scale, w->out_scale, ts != 1 ? ", time compressed" : "");
out:
    for (size_t i = 0; i < n_recs; i++)
        free(recs[i].hash_ids);
    free(recs);
    free(line);
    fclose(f);
    return rc;
}

/* ---- ideal hit ratio at the server's block granularity ---- */

struct hset {
    XXH128_hash_t *keys;     /* (0, 0) = empty */
    size_t cap, used;
};

static bool hset_has_or_add(struct hset *s, XXH128_hash_t k, bool add)
{
    if (k.low64 == 0 && k.high64 == 0)
        k.low64 = 1;
    size_t h = (size_t)(k.low64 % s->cap);
    while (s->keys[h].low64 || s->keys[h].high64) {
        if (s->keys[h].low64 == k.low64 && s->keys[h].high64 == k.high64)
            return true;
        h = (h + 1) % s->cap;
    }
    if (add && s->used + 1 < s->cap) {
        s->keys[h] = k;
        s->used++;
    }
    return false;
}

double bench_ideal_hit_ratio(const struct bench_workload *w, uint32_t block_size)
{
    struct hset s = {0};
    double hit = 0, tot = 0;
    if (block_size == 0)
        return 0;
    for (size_t i = 0; i < w->n; i++)
        s.cap += w->reqs[i].n_tokens / block_size;
    s.cap = s.cap * 2 + 16;
    /* scratch: the previous block's hash, then this block's token ids */
    size_t blk_bytes = (size_t)block_size * sizeof(uint32_t);
    unsigned char *buf = malloc(sizeof(XXH128_hash_t) + blk_bytes);
    if (!(s.keys = calloc(s.cap, sizeof(*s.keys))) || !buf) {
        free(s.keys);
        free(buf);
        return -1;
    }
    for (size_t i = 0; i < w->n; i++) {
        const struct bench_req *r = &w->reqs[i];
        uint32_t full = r->n_tokens / block_size;
        /* kvd computes at least the last prompt token */
        uint32_t max_hit_blocks = (r->n_tokens - 1) / block_size;
        XXH128_hash_t prev = {0, 0};
        bool chain = true;
        tot += r->n_tokens;
        for (uint32_t b = 0; b < full; b++) {
            memcpy(buf, &prev, sizeof(prev));
            memcpy(buf + sizeof(prev), r->tokens + (size_t)b * block_size, blk_bytes);
            XXH128_hash_t h = XXH3_128bits(buf, sizeof(prev) + blk_bytes);
            bool seen = hset_has_or_add(&s, h, true);
            if (chain && seen && b < max_hit_blocks)
                hit += block_size;
            else
                chain = false;
            prev = h;
        }
    }
    free(buf);
    free(s.keys);
    return tot > 0 ? hit / tot : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof(*v), cmp_double);
    if (q <= 0)
        return v[0];
    if (q >= 100)
        return v[n - 1];
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    double frac = pos - (double)lo;
    return lo + 1 < n ? v[lo] + (v[lo + 1] - v[lo]) * frac : v[lo];
}

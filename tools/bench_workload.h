/* bench_workload.h — what kvd-bench sends: request lists from synthetic distributions or
 * real traces, arrival times, the ideal prefix-hit ratio, and percentiles.
 *
 * Every prompt is a list of token ids (lengths are exact); ids are drawn from
 * [BENCH_FIRST_TOKEN_ID, vocab_size) so no prompt contains BOS/EOS/UNK. All randomness
 * comes from opts->seed: the same options give the same workload.
 *
 * Synthetic workloads (L = max_model_len of the server):
 *   chat          prompt ~ lognormal(median BENCH_CHAT_PROMPT_MEDIAN, sigma 0.8), output ~
 *                 lognormal(median BENCH_CHAT_OUTPUT_MEDIAN, sigma 0.7): the long-tailed shape
 *                 of ShareGPT conversations, scaled down ~2x for a small-context model.
 *   shared-prefix BENCH_SHARED_PREFIXES common prefixes of opts->prefix_len tokens (default
 *                 L/2), each request picks one uniformly and appends a distinct suffix of
 *                 uniform [16, 64] tokens; output uniform [16, 48].
 *   long          prompt uniform [0.5 L, 0.75 L], output uniform [0.1 L, 0.2 L].
 * All lengths are clipped so prompt + output <= L.
 *
 * Traces (format detected from the first line):
 *   Azure CSV   "TIMESTAMP,ContextTokens,GeneratedTokens"; no prefix information, so each
 *               prompt is fresh random tokens. Lengths divided by opts->scale (default 16)
 *               and opts->out_scale (default 4).
 *   Mooncake    JSONL {"timestamp" ms, "input_length", "output_length", "hash_ids": [...]},
 *               hash ids naming 512-token blocks. Each hash id becomes a fixed block of
 *               512/scale token ids (a pure function of the id), so equal ids give equal
 *               token blocks and the sharing structure survives scaling; a request's last
 *               block is the leading part of its block. Defaults: scale 64 (8 tokens per
 *               hash block), out_scale 8.
 * Arrival times keep the trace's pattern (relative to its first request, divided by
 * opts->time_scale). A scaled prompt that still does not fit L - output is cut to its
 * leading blocks (counted in n_truncated). Single-threaded; no shared state.
 */
#ifndef KVD_TOOLS_BENCH_WORKLOAD_H
#define KVD_TOOLS_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_FIRST_TOKEN_ID 3          /* ids 0..2 are unk/bos/eos in llama vocabularies */
#define BENCH_MAX_REQUESTS 1000000      /* requests in one workload */
#define BENCH_TRACE_LINE_MAX (1u << 20) /* bytes of one trace line */
#define BENCH_MAX_HASH_IDS 65536        /* hash ids in one Mooncake request */
#define BENCH_MOONCAKE_BLOCK 512        /* tokens per Mooncake hash block */
#define BENCH_SHARED_PREFIXES 4         /* distinct prefixes of --synthetic shared-prefix */
#define BENCH_CHAT_PROMPT_MEDIAN 80.0   /* tokens */
#define BENCH_CHAT_OUTPUT_MEDIAN 64.0   /* tokens */
#define BENCH_ERR_LEN 200

enum bench_kind { BENCH_CHAT = 0, BENCH_SHARED_PREFIX, BENCH_LONG, BENCH_KIND_COUNT_ };

/* What the server told us (kvd_client_info). */
struct bench_model {
    uint32_t max_model_len;
    uint32_t vocab_size;
    uint32_t block_size;
};

struct bench_opts {
    uint64_t seed;
    size_t n_requests;       /* synthetic: how many; trace: first N (0 = all) */
    double scale;            /* trace prompt length divisor (0 = format default) */
    double out_scale;        /* trace output length divisor (0 = format default) */
    double time_scale;       /* trace arrival speed-up (0 = 1) */
    uint32_t prefix_len;     /* shared-prefix: prefix tokens (0 = L/2) */
};

struct bench_req {
    double arrival_s;        /* seconds from the start (timed workloads) */
    uint32_t *tokens;        /* prompt token ids */
    uint32_t n_tokens;
    uint32_t max_tokens;     /* output length (sent with ignore_eos) */
};

struct bench_workload {
    struct bench_req *reqs;
    size_t n;
    bool timed;                  /* arrival_s set (trace or Poisson) */
    size_t n_truncated;          /* prompts cut to fit max_model_len */
    double scale, out_scale;     /* factors used (traces), 1 for synthetic */
    double trace_ideal_hit_ratio; /* Mooncake: unbounded-cache token hit ratio of the
                                   * original trace (unscaled, 512-token blocks); -1 if none */
    char desc[160];              /* one line: what this workload is */
};

const char *bench_kind_name(enum bench_kind k);
int bench_kind_parse(const char *s, enum bench_kind *out);   /* 0 or -EINVAL */

/* Builds a synthetic workload. 0, or -EINVAL / -ENOMEM with err filled and *w empty. */
int bench_synthetic(enum bench_kind kind, const struct bench_model *m,
                    const struct bench_opts *o, struct bench_workload *w, char err[BENCH_ERR_LEN]);
/* Loads a trace file (either format). Same return convention; err names the line. */
int bench_trace_load(const char *path, const struct bench_model *m, const struct bench_opts *o,
                     struct bench_workload *w, char err[BENCH_ERR_LEN]);
void bench_workload_release(struct bench_workload *w);

/* Replaces arrival times with a Poisson process of rate req/s (exponential gaps). */
void bench_poisson_arrivals(struct bench_workload *w, double rate, uint64_t seed);

/* The fraction of prompt tokens an unbounded prefix cache could serve, at block_size
 * granularity with chained block hashes, in request order; as kvd, the last prompt token
 * is always computed. 0 for an empty workload. */
double bench_ideal_hit_ratio(const struct bench_workload *w, uint32_t block_size);

/* q-th percentile (q in [0, 100]) of v[0..n), linear interpolation between closest ranks
 * (numpy's default). Sorts v in place. NaN when n == 0. */
double bench_percentile(double *v, size_t n, double q);

/* Parses one Azure timestamp "YYYY-MM-DD HH:MM:SS.fffffff" into seconds since the epoch. */
int bench_parse_azure_time(const char *s, double *out);

#endif

/* bench_run.h — kvd-bench's measurement loop: drives one kvd through libkvd-client and
 * samples its pool through admin.sock.
 *
 * Closed loop (concurrency > 0): keep that many requests in flight, ignoring arrival
 * times. Open loop (concurrency == 0): submit each request at its arrival_s (trace
 * timestamps or Poisson). duration_s > 0 stops issuing new requests after that many
 * seconds; requests in flight then get BENCH_DRAIN_MS to finish before they are
 * cancelled. Every request is sent as token ids with ignore_eos, greedy, stream on.
 * TTFT = first TOKENS event - submit; TPOT = (DONE - first token) / (tokens - 1).
 * Single-threaded (the SDK's ping thread aside).
 */
#ifndef KVD_TOOLS_BENCH_RUN_H
#define KVD_TOOLS_BENCH_RUN_H

#include "kvd_client.h"
#include "proto/admin_msg.h"
#include "tools/bench_workload.h"

#include <stdbool.h>
#include <stdio.h>

#define BENCH_DRAIN_MS 60000        /* wait for in-flight requests after --duration */
#define BENCH_SAMPLE_MS_DEFAULT 250 /* pool sampling period */

struct bench_cfg {
    const char *runtime_dir;
    int timeout_ms;              /* connect / admin call timeout */
    unsigned concurrency;        /* > 0: closed loop */
    double duration_s;           /* 0: until all requests are done */
    int sample_ms;               /* pool sampling period */
    bool progress;               /* progress bar on stderr */
};

/* One request's outcome. */
struct bench_rec {
    double t_submit, t_first, t_done;   /* seconds since the run started; < 0 = never */
    uint32_t n_out;                     /* tokens received */
    uint32_t prompt_tokens, cached_prompt_tokens;
    int code;                           /* 0 ok (stop/length), else the DONE's code */
    bool done;
};

/* One pool sample. */
struct bench_sample {
    double t;                           /* seconds since start */
    struct admin_pool pool;
};

struct bench_result {
    struct bench_rec *recs;             /* one per workload request (unsubmitted: t_submit < 0) */
    size_t n;
    struct bench_sample *samples;       /* [0] before the first submit, last after the last DONE */
    size_t n_samples;
    double t_end;                       /* last DONE */
    bool have_pool;                     /* admin.sock answered */
    unsigned peak_inflight;             /* client-side maximum */
    char first_error[256];              /* first failed request's reason, or "" */
};

/* Runs the workload. 0 (the run happened; individual requests may have failed), or a
 * negative code when kvd could not be reached or went away (err filled). *res is
 * filled either way and must be released. */
int bench_run(const struct bench_cfg *cfg, struct kvd_client *c, const struct bench_workload *w,
              struct bench_result *res, char *err, size_t err_len);
void bench_result_release(struct bench_result *res);

#endif

/* bench_report.h — kvd-bench's numbers from a run: summary, table, JSON, timeline.
 *
 * Server-side numbers come from the pool samples (admin.sock): kv_waste_ratio is the
 * mean waste_ratio over samples where some page was in use; preemptions, prefix hit
 * ratio and prefill tokens are the change of kvd's counters between the first sample
 * (taken before the first request is submitted) and the last (after the last DONE), so
 * they cover the whole run (and any other traffic during it). prefix_hit_ratio
 * is computed from the requests' own DONE events (cached / prompt tokens). When kvd could
 * not be sampled those fields are NaN (JSON null).
 */
#ifndef KVD_TOOLS_BENCH_REPORT_H
#define KVD_TOOLS_BENCH_REPORT_H

#include "tools/bench_run.h"

struct bench_pcts {
    double p50, p90, p99;
};

struct bench_summary {
    const char *label;              /* --label, or "" */
    const char *workload;           /* workload description */
    char alloc[ADMIN_NAME_MAX + 1]; /* kvd's --alloc, "" when not sampled */
    bool prefix_cache;
    size_t requests_ok, requests_failed, requests_unsent;
    uint64_t output_tokens;         /* tokens received */
    uint64_t prompt_tokens, cached_prompt_tokens; /* as reported in DONE events */
    double duration_s;              /* first submit .. last DONE */
    double output_tok_per_s;
    double requests_per_s;
    struct bench_pcts ttft_ms, tpot_ms, e2e_ms;
    double kv_waste_ratio;          /* mean over samples with pages in use */
    double mean_used_frac, peak_used_frac; /* pages in use / total */
    unsigned peak_running;          /* max of sampled requests_running (else client-side) */
    unsigned peak_inflight;         /* client-side maximum in flight */
    double preemptions;
    double prefix_hit_ratio;        /* cached_prompt_tokens / prompt_tokens of this run's
                                     * requests: the same measure as ideal_hit_ratio */
    double server_hit_ratio;        /* kvd's hit / looked-up token counters over the run
                                     * (looked up = tokens of full blocks) */
    double prefill_tokens_computed; /* kvd's prefill counter over the run */
    double ideal_hit_ratio;         /* unbounded cache on this (scaled) workload */
    double trace_ideal_hit_ratio;   /* unbounded cache on the original trace, NaN if none */
    size_t n_truncated;             /* trace prompts cut to fit max_model_len */
    const char *first_error;
};

/* Fills s from a run. Returns 0 or -ENOMEM. */
int bench_summarize(const struct bench_result *res, const struct bench_workload *w,
                    uint32_t block_size, struct bench_summary *s);
void bench_print_table(FILE *f, const struct bench_summary *s);
void bench_print_json(FILE *f, const struct bench_summary *s);
/* TSV over time: t_s used_frac cached_frac free_frac waste running queued out_tok_s
 * preemptions. 0 or -errno. */
int bench_write_timeline(const char *path, const struct bench_result *res);

#endif

/* bench_report.c — summary statistics and output formats of kvd-bench. */
#include "tools/bench_report.h"

#include "tools/kvctl_json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int pcts_of(double *v, size_t n, struct bench_pcts *out)
{
    out->p50 = bench_percentile(v, n, 50);
    out->p90 = bench_percentile(v, n, 90);
    out->p99 = bench_percentile(v, n, 99);
    return 0;
}

int bench_summarize(const struct bench_result *res, const struct bench_workload *w,
                    uint32_t block_size, struct bench_summary *s)
{
    double *ttft = calloc(res->n + 1, sizeof(double));
    double *tpot = calloc(res->n + 1, sizeof(double));
    double *e2e = calloc(res->n + 1, sizeof(double));
    size_t n_ttft = 0, n_tpot = 0, n_e2e = 0;
    double t_start = -1;
    if (!ttft || !tpot || !e2e) {
        free(ttft);
        free(tpot);
        free(e2e);
        return -ENOMEM;
    }
    memset(s, 0, sizeof(*s));
    s->workload = w->desc;
    s->n_truncated = w->n_truncated;
    s->first_error = res->first_error;
    for (size_t i = 0; i < res->n; i++) {
        const struct bench_rec *r = &res->recs[i];
        if (r->t_submit < 0 || !r->done) {
            s->requests_unsent += r->t_submit < 0;
            s->requests_failed += r->t_submit >= 0; /* submitted but never finished */
            continue;
        }
        if (t_start < 0 || r->t_submit < t_start)
            t_start = r->t_submit;
        s->output_tokens += r->n_out;
        s->prompt_tokens += r->prompt_tokens;
        s->cached_prompt_tokens += r->cached_prompt_tokens;
        if (r->code) {
            s->requests_failed++;
            continue;
        }
        s->requests_ok++;
        if (r->t_first >= 0) {
            ttft[n_ttft++] = (r->t_first - r->t_submit) * 1000;
            if (r->n_out > 1)
                tpot[n_tpot++] = (r->t_done - r->t_first) * 1000 / (r->n_out - 1);
        }
        e2e[n_e2e++] = (r->t_done - r->t_submit) * 1000;
    }
    s->duration_s = t_start >= 0 ? res->t_end - t_start : 0;
    s->output_tok_per_s = s->duration_s > 0 ? (double)s->output_tokens / s->duration_s : 0;
    s->requests_per_s = s->duration_s > 0 ? (double)s->requests_ok / s->duration_s : 0;
    pcts_of(ttft, n_ttft, &s->ttft_ms);
    pcts_of(tpot, n_tpot, &s->tpot_ms);
    pcts_of(e2e, n_e2e, &s->e2e_ms);
    free(ttft);
    free(tpot);
    free(e2e);

    s->peak_inflight = res->peak_inflight;
    s->peak_running = res->peak_inflight;
    s->kv_waste_ratio = s->mean_used_frac = s->peak_used_frac = NAN;
    s->preemptions = s->server_hit_ratio = s->prefill_tokens_computed = NAN;
    s->prefix_hit_ratio = s->prompt_tokens ? (double)s->cached_prompt_tokens / (double)s->prompt_tokens
                                           : 0;
    if (res->n_samples >= 1) {
        const struct admin_pool *a = &res->samples[0].pool;
        const struct admin_pool *b = &res->samples[res->n_samples - 1].pool;
        double waste = 0, used = 0, peak = 0;
        size_t n_waste = 0;
        unsigned peak_run = 0;
        for (size_t i = 0; i < res->n_samples; i++) {
            const struct admin_pool *p = &res->samples[i].pool;
            double u = p->pages_total ? (double)p->pages_used / (double)p->pages_total : 0;
            used += u;
            if (u > peak)
                peak = u;
            if (p->pages_used) {
                waste += p->waste_ratio;
                n_waste++;
            }
            if (p->requests_running > peak_run)
                peak_run = p->requests_running;
        }
        s->kv_waste_ratio = n_waste ? waste / (double)n_waste : 0;
        s->mean_used_frac = used / (double)res->n_samples;
        s->peak_used_frac = peak;
        s->peak_running = peak_run;
        s->preemptions = (double)(b->preemptions - a->preemptions);
        uint64_t dq = b->prefix_query_tokens - a->prefix_query_tokens;
        s->server_hit_ratio = dq ? (double)(b->prefix_hit_tokens - a->prefix_hit_tokens) / (double)dq
                                 : 0;
        s->prefill_tokens_computed = (double)(b->prefill_tokens_total - a->prefill_tokens_total);
        snprintf(s->alloc, sizeof(s->alloc), "%s", b->alloc);
        s->prefix_cache = b->prefix_cache;
    }
    s->ideal_hit_ratio = bench_ideal_hit_ratio(w, block_size);
    s->trace_ideal_hit_ratio = w->trace_ideal_hit_ratio >= 0 ? w->trace_ideal_hit_ratio : NAN;
    return 0;
}

static void row(FILE *f, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row(FILE *f, const char *name, const char *fmt, ...)
{
    va_list ap;
    fprintf(f, "  %-24s ", name);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
}

static void row_pct(FILE *f, const char *name, double v)
{
    if (isnan(v))
        row(f, name, "%12s", "n/a");
    else
        row(f, name, "%12.1f %%", 100 * v);
}

void bench_print_table(FILE *f, const struct bench_summary *s)
{
    fprintf(f, "kvd-bench%s%s: %s\n", s->label && *s->label ? " " : "", s->label ? s->label : "",
            s->workload);
    if (s->alloc[0])
        fprintf(f, "  kvd: alloc %s, prefix cache %s\n", s->alloc, s->prefix_cache ? "on" : "off");
    row(f, "requests ok / failed", "%12zu / %zu%s", s->requests_ok, s->requests_failed,
        s->requests_unsent ? " (some not sent: --duration)" : "");
    row(f, "duration", "%12.2f s", s->duration_s);
    row(f, "output tokens", "%12llu", (unsigned long long)s->output_tokens);
    row(f, "output throughput", "%12.1f tok/s", s->output_tok_per_s);
    row(f, "request throughput", "%12.2f req/s", s->requests_per_s);
    row(f, "TTFT p50 / p90 / p99", "%12.1f / %.1f / %.1f ms", s->ttft_ms.p50, s->ttft_ms.p90,
        s->ttft_ms.p99);
    row(f, "TPOT p50 / p90 / p99", "%12.2f / %.2f / %.2f ms", s->tpot_ms.p50, s->tpot_ms.p90,
        s->tpot_ms.p99);
    row(f, "latency p50 / p99", "%12.1f / %.1f ms", s->e2e_ms.p50, s->e2e_ms.p99);
    row_pct(f, "KV waste (mean)", s->kv_waste_ratio);
    row_pct(f, "pages in use (mean)", s->mean_used_frac);
    row_pct(f, "pages in use (peak)", s->peak_used_frac);
    row(f, "peak running", "%12u   (client in flight: %u)", s->peak_running, s->peak_inflight);
    if (isnan(s->preemptions))
        row(f, "preemptions", "%12s", "n/a");
    else
        row(f, "preemptions", "%12.0f", s->preemptions);
    row_pct(f, "prefix hit ratio", s->prefix_hit_ratio);
    row_pct(f, "  kvd: hits / looked up", s->server_hit_ratio);
    row_pct(f, "ideal hit ratio", s->ideal_hit_ratio);
    if (!isnan(s->trace_ideal_hit_ratio))
        row_pct(f, "trace ideal (unscaled)", s->trace_ideal_hit_ratio);
    if (!isnan(s->prefill_tokens_computed))
        row(f, "prefill tokens computed", "%12.0f of %llu prompt tokens",
            s->prefill_tokens_computed, (unsigned long long)s->prompt_tokens);
    if (s->n_truncated)
        row(f, "prompts truncated", "%12zu   (to fit max_model_len)", s->n_truncated);
    if (s->first_error && s->first_error[0])
        row(f, "first error", "%s", s->first_error);
}

static void json_pcts(struct json *j, const char *key, const struct bench_pcts *p)
{
    json_obj_begin(j, key);
    json_f64(j, "p50", p->p50);
    json_f64(j, "p90", p->p90);
    json_f64(j, "p99", p->p99);
    json_obj_end(j);
}

void bench_print_json(FILE *f, const struct bench_summary *s)
{
    struct json j;
    json_init(&j, f);
    json_obj_begin(&j, NULL);
    json_str(&j, "label", s->label ? s->label : "");
    json_str(&j, "workload", s->workload);
    json_str(&j, "alloc", s->alloc);
    json_bool(&j, "prefix_cache", s->prefix_cache);
    json_u64(&j, "requests_ok", s->requests_ok);
    json_u64(&j, "requests_failed", s->requests_failed);
    json_u64(&j, "requests_unsent", s->requests_unsent);
    json_u64(&j, "output_tokens", s->output_tokens);
    json_u64(&j, "prompt_tokens", s->prompt_tokens);
    json_u64(&j, "cached_prompt_tokens", s->cached_prompt_tokens);
    json_f64(&j, "duration_s", s->duration_s);
    json_f64(&j, "output_tok_per_s", s->output_tok_per_s);
    json_f64(&j, "requests_per_s", s->requests_per_s);
    json_pcts(&j, "ttft_ms", &s->ttft_ms);
    json_pcts(&j, "tpot_ms", &s->tpot_ms);
    json_pcts(&j, "latency_ms", &s->e2e_ms);
    json_f64(&j, "kv_waste_ratio", s->kv_waste_ratio);
    json_f64(&j, "mean_pages_used_frac", s->mean_used_frac);
    json_f64(&j, "peak_pages_used_frac", s->peak_used_frac);
    json_u64(&j, "peak_running", s->peak_running);
    json_u64(&j, "peak_inflight", s->peak_inflight);
    json_f64(&j, "preemptions", s->preemptions);
    json_f64(&j, "prefix_hit_ratio", s->prefix_hit_ratio);
    json_f64(&j, "server_prefix_hit_ratio", s->server_hit_ratio);
    json_f64(&j, "ideal_hit_ratio", s->ideal_hit_ratio);
    json_f64(&j, "trace_ideal_hit_ratio", s->trace_ideal_hit_ratio);
    json_f64(&j, "prefill_tokens_computed", s->prefill_tokens_computed);
    json_u64(&j, "prompts_truncated", s->n_truncated);
    json_str(&j, "first_error", s->first_error ? s->first_error : "");
    json_obj_end(&j);
    json_end(&j);
}

int bench_write_timeline(const char *path, const struct bench_result *res)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "# t_s\tused_frac\tcached_frac\tfree_frac\twaste\trunning\tqueued\tout_tok_s\t"
               "preemptions\n");
    for (size_t i = 0; i < res->n_samples; i++) {
        const struct bench_sample *x = &res->samples[i];
        const struct admin_pool *p = &x->pool;
        double tot = p->pages_total ? (double)p->pages_total : 1;
        double rate = 0;
        if (i > 0 && x->t > res->samples[i - 1].t)
            rate = (double)(p->output_tokens_total - res->samples[i - 1].pool.output_tokens_total) /
                   (x->t - res->samples[i - 1].t);
        fprintf(f, "%.3f\t%.4f\t%.4f\t%.4f\t%.4f\t%u\t%u\t%.1f\t%llu\n", x->t,
                (double)p->pages_used / tot, (double)p->pages_cached / tot,
                (double)p->pages_free / tot, p->waste_ratio, p->requests_running,
                p->requests_queued, rate, (unsigned long long)p->preemptions);
    }
    int rc = ferror(f) ? -EIO : 0;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

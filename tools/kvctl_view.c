/* kvctl_view.c — kvctl pool, seqs, workers, prefix, evict: one admin call each, printed
 * as aligned text or one JSON object (field names = admin_msg.h names). */
#include "tools/kvctl.h"

#include "common/err.h"
#include "tools/kvctl_admin.h"
#include "tools/kvctl_json.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

void kvctl_error(const char *fmt, ...)
{
    va_list ap;
    fputs("kvctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int kvctl_exit_for(int rc)
{
    switch (rc) {
    case -ENOENT:
    case -ECONNREFUSED:
    case -ETIMEDOUT:
    case -EAGAIN:
    case -ECONNRESET:
    case KVD_EPEER:
    case KVD_ESHUTDOWN:
        return KVCTL_EX_UNAVAILABLE;
    default:
        return KVCTL_EX_FAIL;
    }
}

double kvctl_hit_ratio(const struct admin_pool *p)
{
    return p->prefix_query_tokens ? (double)p->prefix_hit_tokens / p->prefix_query_tokens : 0;
}

/* Commands without flags of their own. */
static int no_args(int argc, char **argv)
{
    if (argc > 1) {
        kvctl_error("%s: unexpected argument '%s'", argv[0], argv[1]);
        return KVCTL_EX_USAGE;
    }
    return 0;
}

/* Opens admin.sock, sends r, returns the parsed reply. Prints the error itself. */
static int call(const struct kvctl *k, enum admin_req r, struct admin_reply *rep)
{
    struct admin_conn c;
    char err[WIRE_ERR_LEN] = "";
    int rc = admin_conn_open(&c, k->runtime_dir, k->timeout_ms, err);
    if (rc == 0) {
        rc = admin_conn_call(&c, r, rep, err);
        admin_conn_close(&c);
    }
    if (rc)
        kvctl_error("%s", err[0] ? err : kvd_strerror(rc));
    return rc;
}

static int decode_failed(const char *what, const char *err)
{
    kvctl_error("bad '%s' reply from kvd: %s", what, err);
    return KVCTL_EX_FAIL;
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0; }

static void human_bytes(char *out, size_t cap, uint64_t b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void kvctl_print_pool(FILE *f, const struct admin_pool *p)
{
    char pb[32], sb[32];
    human_bytes(pb, sizeof(pb), p->page_bytes);
    human_bytes(sb, sizeof(sb), p->pool_bytes);
    fprintf(f, "%-18s %12llu   %s, %s pages of %u tokens (%s each), alloc %s\n", "pages total",
            (unsigned long long)p->pages_total, sb, p->kv_dtype, p->block_size, pb, p->alloc);
    fprintf(f, "%-18s %12llu   %5.1f %%  (of which shared: %llu)\n", "pages in use",
            (unsigned long long)p->pages_used, pct(p->pages_used, p->pages_total),
            (unsigned long long)p->pages_shared);
    fprintf(f, "%-18s %12llu   %5.1f %%  (evictable)\n", "pages cached",
            (unsigned long long)p->pages_cached, pct(p->pages_cached, p->pages_total));
    fprintf(f, "%-18s %12llu   %5.1f %%\n", "pages free", (unsigned long long)p->pages_free,
            pct(p->pages_free, p->pages_total));
    fprintf(f, "%-18s %12llu\n", "tokens stored", (unsigned long long)p->tokens_stored);
    fprintf(f, "%-18s %12.1f %%  (of bytes held by sequences)\n", "waste",
            100.0 * p->waste_ratio);
    fprintf(f, "%-18s %12s   hit %llu of %llu query tokens (%.1f %%)\n", "prefix cache",
            p->prefix_cache ? "on" : "off", (unsigned long long)p->prefix_hit_tokens,
            (unsigned long long)p->prefix_query_tokens, 100.0 * kvctl_hit_ratio(p));
    fprintf(f, "%-18s %12llu\n", "preemptions", (unsigned long long)p->preemptions);
    fprintf(f, "%-18s %12u   queued %u, finished %llu, failed %llu\n", "requests running",
            p->requests_running, p->requests_queued, (unsigned long long)p->requests_finished,
            (unsigned long long)p->requests_failed);
    fprintf(f, "%-18s %12llu   prompt %llu (prefill computed %llu), steps %llu\n",
            "tokens generated", (unsigned long long)p->output_tokens_total,
            (unsigned long long)p->prompt_tokens_total,
            (unsigned long long)p->prefill_tokens_total, (unsigned long long)p->steps_total);
    fprintf(f, "%-18s %12u   uptime %.1f s\n", "max model len", p->max_model_len,
            (double)p->uptime_ms / 1000.0);
}

static void json_pool(struct json *j, const struct admin_pool *p)
{
    json_u64(j, "pages_total", p->pages_total);
    json_u64(j, "pages_free", p->pages_free);
    json_u64(j, "pages_used", p->pages_used);
    json_u64(j, "pages_cached", p->pages_cached);
    json_u64(j, "pages_shared", p->pages_shared);
    json_u64(j, "page_bytes", p->page_bytes);
    json_u64(j, "pool_bytes", p->pool_bytes);
    json_u64(j, "block_size", p->block_size);
    json_str(j, "kv_dtype", p->kv_dtype);
    json_str(j, "alloc", p->alloc);
    json_bool(j, "prefix_cache", p->prefix_cache);
    json_u64(j, "max_model_len", p->max_model_len);
    json_u64(j, "tokens_stored", p->tokens_stored);
    json_f64(j, "waste_ratio", p->waste_ratio);
    json_u64(j, "prefix_query_tokens", p->prefix_query_tokens);
    json_u64(j, "prefix_hit_tokens", p->prefix_hit_tokens);
    json_f64(j, "prefix_hit_ratio", kvctl_hit_ratio(p));
    json_u64(j, "preemptions", p->preemptions);
    json_u64(j, "requests_running", p->requests_running);
    json_u64(j, "requests_queued", p->requests_queued);
    json_u64(j, "requests_finished", p->requests_finished);
    json_u64(j, "requests_failed", p->requests_failed);
    json_u64(j, "prompt_tokens_total", p->prompt_tokens_total);
    json_u64(j, "prefill_tokens_total", p->prefill_tokens_total);
    json_u64(j, "output_tokens_total", p->output_tokens_total);
    json_u64(j, "steps_total", p->steps_total);
    json_u64(j, "uptime_ms", p->uptime_ms);
}

int kvctl_cmd_pool(const struct kvctl *k, int argc, char **argv)
{
    struct admin_reply rep;
    struct admin_pool p;
    char err[WIRE_ERR_LEN] = "";
    int rc = no_args(argc, argv);
    if (rc)
        return rc;
    if ((rc = call(k, ADMIN_REQ_POOL, &rep)))
        return kvctl_exit_for(rc);
    rc = admin_pool_decode(&rep.m, &p, err);
    admin_reply_release(&rep);
    if (rc)
        return decode_failed("pool", err);
    if (k->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_pool(&j, &p);
        json_obj_end(&j);
        json_end(&j);
    } else {
        kvctl_print_pool(stdout, &p);
    }
    return 0;
}

int kvctl_cmd_seqs(const struct kvctl *k, int argc, char **argv)
{
    struct admin_reply rep;
    struct admin_seqs s;
    char err[WIRE_ERR_LEN] = "";
    int rc = no_args(argc, argv);
    if (rc)
        return rc;
    if ((rc = call(k, ADMIN_REQ_SEQS, &rep)))
        return kvctl_exit_for(rc);
    rc = admin_seqs_decode(&rep.m, &s, err);
    admin_reply_release(&rep);
    if (rc) {
        admin_seqs_release(&s);
        return decode_failed("seqs", err);
    }
    if (k->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_u64(&j, "n_total", s.n_total);
        json_arr_begin(&j, "seqs");
        for (size_t i = 0; i < s.n; i++) {
            const struct admin_seq *q = &s.seqs[i];
            json_obj_begin(&j, NULL);
            json_u64(&j, "id", q->id);
            json_str(&j, "state", admin_seq_state_name(q->state));
            json_u64(&j, "tokens", q->tokens);
            json_u64(&j, "pages", q->pages);
            json_u64(&j, "shared_pages", q->shared_pages);
            json_i64(&j, "worker", q->worker);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_obj_end(&j);
        json_end(&j);
    } else {
        printf("%10s  %-9s  %8s  %6s  %6s  %6s\n", "ID", "STATE", "TOKENS", "PAGES", "SHARED",
               "WORKER");
        for (size_t i = 0; i < s.n; i++) {
            const struct admin_seq *q = &s.seqs[i];
            char wk[16] = "-";
            if (q->worker >= 0)
                snprintf(wk, sizeof(wk), "%d", q->worker);
            printf("%10llu  %-9s  %8u  %6u  %6u  %6s\n", (unsigned long long)q->id,
                   admin_seq_state_name(q->state), q->tokens, q->pages, q->shared_pages, wk);
        }
        printf("%llu live sequence%s", (unsigned long long)s.n_total, s.n_total == 1 ? "" : "s");
        if (s.n_total > s.n)
            printf(" (%zu shown)", s.n);
        printf("\n");
    }
    admin_seqs_release(&s);
    return 0;
}

int kvctl_cmd_workers(const struct kvctl *k, int argc, char **argv)
{
    struct admin_reply rep;
    struct admin_workers s;
    char err[WIRE_ERR_LEN] = "";
    int rc = no_args(argc, argv);
    if (rc)
        return rc;
    if ((rc = call(k, ADMIN_REQ_WORKERS, &rep)))
        return kvctl_exit_for(rc);
    rc = admin_workers_decode(&rep.m, &s, err);
    admin_reply_release(&rep);
    if (rc) {
        admin_workers_release(&s);
        return decode_failed("workers", err);
    }
    if (k->json) {
        struct json j;
        json_init(&j, stdout);
        json_arr_begin(&j, NULL);
        for (size_t i = 0; i < s.n; i++) {
            const struct admin_worker *w = &s.workers[i];
            json_obj_begin(&j, NULL);
            json_u64(&j, "index", w->index);
            json_i64(&j, "pid", w->pid);
            json_str(&j, "state", admin_worker_state_name(w->state));
            json_u64(&j, "steps", w->steps);
            json_u64(&j, "restarts", w->restarts);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_end(&j);
    } else {
        printf("%6s  %8s  %-10s  %12s  %8s\n", "WORKER", "PID", "STATE", "STEPS", "RESTARTS");
        for (size_t i = 0; i < s.n; i++) {
            const struct admin_worker *w = &s.workers[i];
            printf("%6u  %8d  %-10s  %12llu  %8u\n", w->index, w->pid,
                   admin_worker_state_name(w->state), (unsigned long long)w->steps, w->restarts);
        }
    }
    admin_workers_release(&s);
    return 0;
}

int kvctl_cmd_prefix(const struct kvctl *k, int argc, char **argv)
{
    struct admin_reply rep;
    struct admin_prefix p;
    char err[WIRE_ERR_LEN] = "";
    int rc = no_args(argc, argv);
    if (rc)
        return rc;
    if ((rc = call(k, ADMIN_REQ_PREFIX, &rep)))
        return kvctl_exit_for(rc);
    rc = admin_prefix_decode(&rep.m, &p, err);
    admin_reply_release(&rep);
    if (rc)
        return decode_failed("prefix", err);
    double ratio = p.query_tokens ? (double)p.hit_tokens / (double)p.query_tokens : 0;
    if (k->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_bool(&j, "enabled", p.enabled);
        json_u64(&j, "entries", p.entries);
        json_u64(&j, "cached_pages", p.cached_pages);
        json_u64(&j, "hit_tokens", p.hit_tokens);
        json_u64(&j, "query_tokens", p.query_tokens);
        json_f64(&j, "hit_ratio", ratio);
        json_u64(&j, "evictions", p.evictions);
        json_arr_begin(&j, "top");
        for (uint32_t i = 0; i < p.n_top; i++) {
            json_obj_begin(&j, NULL);
            json_u64(&j, "tokens", p.top[i].tokens);
            json_u64(&j, "pages", p.top[i].pages);
            json_u64(&j, "seqs", p.top[i].seqs);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_obj_end(&j);
        json_end(&j);
        return 0;
    }
    printf("%-14s %12s\n", "prefix cache", p.enabled ? "on" : "off");
    printf("%-14s %12llu   (of which cached, evictable: %llu)\n", "entries",
           (unsigned long long)p.entries, (unsigned long long)p.cached_pages);
    printf("%-14s %12llu\n", "query tokens", (unsigned long long)p.query_tokens);
    printf("%-14s %12llu   %.1f %%\n", "hit tokens", (unsigned long long)p.hit_tokens,
           100.0 * ratio);
    printf("%-14s %12llu\n", "evictions", (unsigned long long)p.evictions);
    if (p.n_top) {
        printf("\nlargest shared prefixes:\n%8s  %6s  %6s\n", "TOKENS", "PAGES", "SEQS");
        for (uint32_t i = 0; i < p.n_top; i++)
            printf("%8u  %6u  %6u\n", p.top[i].tokens, p.top[i].pages, p.top[i].seqs);
    }
    return 0;
}

int kvctl_cmd_evict(const struct kvctl *k, int argc, char **argv)
{
    struct admin_reply rep;
    struct admin_evict e;
    char err[WIRE_ERR_LEN] = "";
    if (argc != 2 || strcmp(argv[1], "--cached") != 0) {
        kvctl_error("evict: only 'evict --cached' is supported (pages in use are never "
                    "evicted)");
        return KVCTL_EX_USAGE;
    }
    int rc = call(k, ADMIN_REQ_EVICT, &rep);
    if (rc)
        return kvctl_exit_for(rc);
    rc = admin_evict_decode(&rep.m, &e, err);
    admin_reply_release(&rep);
    if (rc)
        return decode_failed("evict", err);
    if (k->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_u64(&j, "evicted", e.evicted);
        json_obj_end(&j);
        json_end(&j);
    } else {
        printf("evicted %llu cached page%s\n", (unsigned long long)e.evicted,
               e.evicted == 1 ? "" : "s");
    }
    return 0;
}

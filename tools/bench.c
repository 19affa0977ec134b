/* bench.c — kvd-bench: load generator and measurement for a running kvd.
 * Flags in usage(); the loop is bench_run.c, the numbers bench_report.c. */
#include "common/err.h"
#include "common/log.h"
#include "kvd_client.h"
#include "tools/bench_report.h"
#include "tools/bench_run.h"
#include "tools/bench_workload.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_EX_USAGE 64
#define BENCH_EX_UNAVAILABLE 69
#define BENCH_REQUESTS_DEFAULT 200      /* synthetic workloads */
#define BENCH_CONCURRENCY_DEFAULT 8     /* closed loop when neither --rate nor a trace */
#define BENCH_TIMEOUT_MS_DEFAULT 3000
#define BENCH_TIMEOUT_MS_MAX 600000     /* --timeout-ms bound (10 min) */
#define BENCH_CONCURRENCY_MAX 100000u   /* --concurrency bound */
#define BENCH_RATE_MIN 1e-3             /* --rate and --time-scale lower bound */
#define BENCH_RATE_MAX 1e6              /* --rate bound (requests/s) */
#define BENCH_SCALE_MAX 1e6             /* --duration, --prefix-len, --*-scale bound */
#define BENCH_DURATION_MIN_S 0.1        /* --duration lower bound */
#define BENCH_SAMPLE_MS_MIN 10          /* --sample-ms bounds */
#define BENCH_SAMPLE_MS_MAX 60000

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvd-bench [--runtime-dir DIR] (--synthetic chat|shared-prefix|long | --trace FILE)\n"
            "                 [--concurrency N | --rate R] [--requests N] [--duration S]\n"
            "                 [--seed S] [--prefix-len T] [--trace-scale F] [--trace-out-scale F]\n"
            "                 [--time-scale F] [--sample-ms MS] [--timeline FILE] [--label L]\n"
            "                 [--json] [--no-progress] [--timeout-ms MS] [--log-level L]\n"
            "\n"
            "Drives a running kvd through libkvd-client; prompts are token ids, outputs use\n"
            "ignore_eos so lengths are exact; greedy sampling; streaming on.\n"
            "  --concurrency N  closed loop: N requests in flight (default %d for synthetic)\n"
            "  --rate R         open loop: Poisson arrivals, R requests/s\n"
            "                   (a trace without either replays its own timestamps)\n"
            "  --requests N     synthetic: how many (default %d); trace: first N\n"
            "  --duration S     stop issuing after S seconds\n"
            "  --synthetic      chat: lognormal prompt (median 80) / output (median 64)\n"
            "                   shared-prefix: %d prefixes of --prefix-len tokens (default\n"
            "                   max_model_len/2) + 16..64 distinct tokens, output 16..48\n"
            "                   long: prompt 50..75 %%, output 10..20 %% of max_model_len\n"
            "  --trace FILE     Azure CSV (prompt /16, output /4 by default) or Mooncake JSONL\n"
            "                   (prompt /64: a 512-token hash block becomes 8 tokens; output /8)\n"
            "  --time-scale F   replay trace arrivals F times faster\n"
            "  --timeline FILE  pool samples over time (TSV) for plotting\n"
            "  --json           one JSON object instead of the table\n"
            "exit: 0 ran (see requests_failed), 1 no request succeeded, 64 usage,\n"
            "      69 kvd unreachable or lost\n",
            BENCH_CONCURRENCY_DEFAULT, BENCH_REQUESTS_DEFAULT, BENCH_SHARED_PREFIXES);
}

enum bench_opt { O_DIR = 1, O_SYN, O_TRACE, O_CONC, O_RATE, O_REQ, O_DUR, O_SEED, O_PLEN,
                 O_TSC, O_TOSC, O_TIME, O_SMS, O_TL, O_LABEL, O_JSON, O_NOPROG, O_TMO, O_LOG,
                 O_HELP };

/* What a flag accepts, for the bad-value message (the bounds main() checks); into buf. */
static const char *bench_expect(int opt, char *buf, size_t len)
{
    switch (opt) {
    case O_SYN: snprintf(buf, len, "chat|shared-prefix|long"); break;
    case O_CONC: snprintf(buf, len, "an integer 1..%u", BENCH_CONCURRENCY_MAX); break;
    case O_RATE: snprintf(buf, len, "requests/s %g..%g", BENCH_RATE_MIN, BENCH_RATE_MAX); break;
    case O_REQ: snprintf(buf, len, "an integer 1..%u", (unsigned)BENCH_MAX_REQUESTS); break;
    case O_DUR: snprintf(buf, len, "seconds %g..%g", BENCH_DURATION_MIN_S, BENCH_SCALE_MAX); break;
    case O_SEED: snprintf(buf, len, "an integer 0..1e18"); break;
    case O_PLEN: snprintf(buf, len, "tokens 1..%g", BENCH_SCALE_MAX); break;
    case O_TSC:
    case O_TOSC: snprintf(buf, len, "a divisor 1..%g", BENCH_SCALE_MAX); break;
    case O_TIME: snprintf(buf, len, "a factor %g..%g", BENCH_RATE_MIN, BENCH_SCALE_MAX); break;
    case O_SMS: snprintf(buf, len, "milliseconds %d..%d", BENCH_SAMPLE_MS_MIN, BENCH_SAMPLE_MS_MAX); break;
    case O_TMO: snprintf(buf, len, "milliseconds 1..%d", BENCH_TIMEOUT_MS_MAX); break;
    case O_LOG: snprintf(buf, len, "error|warn|info|debug"); break;
    default: snprintf(buf, len, "see --help"); break;
    }
    return buf;
}

static bool num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"runtime-dir", required_argument, 0, O_DIR}, {"synthetic", required_argument, 0, O_SYN},
        {"trace", required_argument, 0, O_TRACE},     {"concurrency", required_argument, 0, O_CONC},
        {"rate", required_argument, 0, O_RATE},       {"requests", required_argument, 0, O_REQ},
        {"duration", required_argument, 0, O_DUR},    {"seed", required_argument, 0, O_SEED},
        {"prefix-len", required_argument, 0, O_PLEN}, {"trace-scale", required_argument, 0, O_TSC},
        {"trace-out-scale", required_argument, 0, O_TOSC},
        {"time-scale", required_argument, 0, O_TIME}, {"sample-ms", required_argument, 0, O_SMS},
        {"timeline", required_argument, 0, O_TL},     {"label", required_argument, 0, O_LABEL},
        {"json", no_argument, 0, O_JSON},             {"no-progress", no_argument, 0, O_NOPROG},
        {"timeout-ms", required_argument, 0, O_TMO},  {"log-level", required_argument, 0, O_LOG},
        {"help", no_argument, 0, O_HELP},             {0, 0, 0, 0}};
    struct bench_cfg cfg = {.timeout_ms = BENCH_TIMEOUT_MS_DEFAULT,
                            .sample_ms = BENCH_SAMPLE_MS_DEFAULT, .progress = true};
    struct bench_opts bo = {.seed = 1};
    enum bench_kind kind = BENCH_CHAT;
    const char *trace = NULL, *timeline = NULL, *label = "";
    bool synthetic = false, json = false;
    double rate = 0, v;
    enum log_level lvl = LOG_LEVEL_WARN;
    int opt, li = -1;
    opterr = 0;
    while ((li = -1, opt = getopt_long(argc, argv, "", opts, &li)) != -1) {
        switch (opt) {
        case O_DIR: cfg.runtime_dir = optarg; break;
        case O_SYN:
            if (bench_kind_parse(optarg, &kind)) goto bad;
            synthetic = true;
            break;
        case O_TRACE: trace = optarg; break;
        case O_CONC:
            if (!num(optarg, 1, BENCH_CONCURRENCY_MAX, &v)) goto bad;
            cfg.concurrency = (unsigned)v;
            break;
        case O_RATE:
            if (!num(optarg, BENCH_RATE_MIN, BENCH_RATE_MAX, &rate)) goto bad;
            break;
        case O_REQ:
            if (!num(optarg, 1, BENCH_MAX_REQUESTS, &v)) goto bad;
            bo.n_requests = (size_t)v;
            break;
        case O_DUR:
            if (!num(optarg, BENCH_DURATION_MIN_S, BENCH_SCALE_MAX, &cfg.duration_s)) goto bad;
            break;
        case O_SEED:
            if (!num(optarg, 0, 1e18, &v)) goto bad;
            bo.seed = (uint64_t)v;
            break;
        case O_PLEN:
            if (!num(optarg, 1, BENCH_SCALE_MAX, &v)) goto bad;
            bo.prefix_len = (uint32_t)v;
            break;
        case O_TSC:
            if (!num(optarg, 1, BENCH_SCALE_MAX, &bo.scale)) goto bad;
            break;
        case O_TOSC:
            if (!num(optarg, 1, BENCH_SCALE_MAX, &bo.out_scale)) goto bad;
            break;
        case O_TIME:
            if (!num(optarg, BENCH_RATE_MIN, BENCH_SCALE_MAX, &bo.time_scale)) goto bad;
            break;
        case O_SMS:
            if (!num(optarg, BENCH_SAMPLE_MS_MIN, BENCH_SAMPLE_MS_MAX, &v)) goto bad;
            cfg.sample_ms = (int)v;
            break;
        case O_TL: timeline = optarg; break;
        case O_LABEL: label = optarg; break;
        case O_JSON: json = true; break;
        case O_NOPROG: cfg.progress = false; break;
        case O_TMO:
            if (!num(optarg, 1, BENCH_TIMEOUT_MS_MAX, &v)) goto bad;
            cfg.timeout_ms = (int)v;
            break;
        case O_LOG:
            if (log_level_parse(optarg, &lvl)) goto bad;
            break;
        case O_HELP: usage(stdout); return 0;
        default:
            fprintf(stderr, "kvd-bench: unknown option or missing value '%s' (see --help)\n",
                    argv[optind - 1]);
            return BENCH_EX_USAGE;
        }
    }
    log_setup("kvd-bench", lvl);
    if (optind < argc || synthetic == (trace != NULL)) {
        fprintf(stderr, "kvd-bench: give exactly one of --synthetic KIND or --trace FILE\n");
        return BENCH_EX_USAGE;
    }
    if (cfg.concurrency && rate > 0) {
        fprintf(stderr, "kvd-bench: --concurrency and --rate exclude each other\n");
        return BENCH_EX_USAGE;
    }
    if (synthetic && !bo.n_requests)
        bo.n_requests = BENCH_REQUESTS_DEFAULT;
    if (synthetic && !cfg.concurrency && rate <= 0)
        cfg.concurrency = BENCH_CONCURRENCY_DEFAULT;

    struct kvd_client *c;
    int rc = kvd_connect(cfg.runtime_dir, cfg.timeout_ms, &c);
    if (rc) {
        fprintf(stderr, "kvd-bench: cannot connect to kvd: %s%s\n", kvd_strerror(rc),
                rc == -ENOENT || rc == -ECONNREFUSED ? " (is kvd running?)" : "");
        return BENCH_EX_UNAVAILABLE;
    }
    const struct kvd_info *info = kvd_client_info(c);
    struct bench_model m = {.max_model_len = info->max_model_len,
                            .vocab_size = info->vocab_size, .block_size = info->block_size};
    struct bench_workload w;
    char err[BENCH_ERR_LEN] = "";
    rc = synthetic ? bench_synthetic(kind, &m, &bo, &w, err) : bench_trace_load(trace, &m, &bo, &w, err);
    if (rc) {
        fprintf(stderr, "kvd-bench: %s\n", err);
        kvd_close(c);
        return rc == -EINVAL || rc == -ENOENT ? BENCH_EX_USAGE : 1;
    }
    if (rate > 0)
        bench_poisson_arrivals(&w, rate, bo.seed);

    struct bench_result res;
    char rerr[256] = "";
    int ex = 0;
    rc = bench_run(&cfg, c, &w, &res, rerr, sizeof(rerr));
    kvd_close(c);
    if (rc) {
        fprintf(stderr, "kvd-bench: %s\n", rerr);
        ex = BENCH_EX_UNAVAILABLE;
    }
    struct bench_summary s;
    if (bench_summarize(&res, &w, m.block_size, &s) == 0) {
        s.label = label;
        if (json)
            bench_print_json(stdout, &s);
        else
            bench_print_table(stdout, &s);
        if (!ex && s.requests_ok == 0)
            ex = 1;
    }
    if (timeline && (rc = bench_write_timeline(timeline, &res))) {
        fprintf(stderr, "kvd-bench: cannot write timeline '%s': %s\n", timeline, kvd_strerror(rc));
        ex = ex ? ex : 1;
    }
    bench_result_release(&res);
    bench_workload_release(&w);
    return ex;
bad:;
    char expect[80];
    fprintf(stderr, "kvd-bench: bad value '%s' for --%s (expected %s)\n", optarg,
            li >= 0 ? opts[li].name : "?", bench_expect(opt, expect, sizeof(expect)));
    return BENCH_EX_USAGE;
}

/* kvctl_gen.c — kvctl generate: one request through libkvd-client.
 *
 * Plain output: the generated text (as it streams with --stream), then a one-line
 * summary on stderr. --json: one object {text, tokens, finish_reason, prompt_tokens,
 * cached_prompt_tokens, logprobs, prompt_logprobs (when asked)}; code and msg are added
 * when the request ended with cancelled or error. Exit 0 on stop/length. */
#include "tools/kvctl.h"

#include "kvd_client.h"
#include "tools/kvctl_json.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define KVCTL_GEN_WAIT_MS 600000   /* longest kvctl generate waits for a DONE (10 min) */
#define GEN_MAX_TOKENS_MAX 1000000000u /* --max-tokens bound (kvd caps at max_model_len) */
#define GEN_TEMPERATURE_MAX 100.0      /* --temperature bound */
#define GEN_TOP_K_MAX 1000000u         /* --top-k bound (above any vocabulary we load) */
#define GEN_TIMEOUT_MS_MAX 86400000u   /* --timeout-ms bound (one day) */


/* Growing copies of what the stream delivered (for --json with --stream). */
struct gen_acc {
    uint32_t *tokens;
    size_t n_tokens, cap_tokens;
    struct kvd_logprob *lps;
    size_t n_lps, cap_lps;
    char *text;
    size_t text_len, cap_text;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

static int acc_add(struct gen_acc *a, const struct kvd_event *ev)
{
    if (grow((void **)&a->tokens, &a->cap_tokens, a->n_tokens + ev->n_tokens, sizeof(uint32_t)) ||
        grow((void **)&a->lps, &a->cap_lps, a->n_lps + ev->n_logprobs, sizeof(*a->lps)) ||
        grow((void **)&a->text, &a->cap_text, a->text_len + ev->text_len + 1, 1))
        return -ENOMEM;
    if (ev->n_tokens)
        memcpy(a->tokens + a->n_tokens, ev->tokens, ev->n_tokens * sizeof(uint32_t));
    a->n_tokens += ev->n_tokens;
    if (ev->n_logprobs)
        memcpy(a->lps + a->n_lps, ev->logprobs, ev->n_logprobs * sizeof(*a->lps));
    a->n_lps += ev->n_logprobs;
    if (ev->text_len)
        memcpy(a->text + a->text_len, ev->text, ev->text_len);
    a->text_len += ev->text_len;
    a->text[a->text_len] = '\0';
    return 0;
}

static void json_logprob(struct json *j, const struct kvd_logprob *e)
{
    if (!e->present) {
        json_null(j, NULL);
        return;
    }
    json_obj_begin(j, NULL);
    json_u64(j, "token", e->token);
    json_f64(j, "logprob", e->logprob);
    json_arr_begin(j, "top");
    for (uint32_t i = 0; i < e->n_top; i++) {
        json_obj_begin(j, NULL);
        json_u64(j, "token", e->top[i].token);
        json_f64(j, "logprob", e->top[i].logprob);
        json_obj_end(j);
    }
    json_arr_end(j);
    json_obj_end(j);
}

static const char *finish_name(enum kvd_finish f)
{
    static const char *const n[] = {"stop", "length", "cancelled", "error"};
    return (unsigned)f < 4 ? n[f] : "?";
}

/* Parses "1,2,3" into a calloc'd array. */
static int parse_tokens(const char *s, uint32_t **out, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    uint32_t *v = calloc(cap, sizeof(*v));
    if (!v)
        return -ENOMEM;
    size_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long x = strtoul(p, &end, 10);
        if (end == p || errno || x > UINT32_MAX || (*end && *end != ',')) {
            free(v);
            return -EINVAL;
        }
        v[k++] = (uint32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(v);
        return -EINVAL;
    }
    *out = v;
    *n = k;
    return 0;
}

/* The defaults printed are read from KVD_PARAMS_INIT, so they cannot drift from the SDK. */
static void usage_gen(FILE *f)
{
    const struct kvd_params d = KVD_PARAMS_INIT;
    fprintf(f,
            "usage: kvctl generate (--prompt TEXT | --tokens ID,ID,...) [flags]\n"
            "One request through libkvd-client; prints the text (stderr: a summary line).\n"
            "  --prompt TEXT        UTF-8 text, tokenized by kvd (BOS added)\n"
            "  --tokens ID,...      or token ids, used as given\n"
            "  --max-tokens N       tokens to generate, 1..%u (default %u)\n"
            "  --temperature T      0..%g; 0 = greedy (default %.1f: sampling, as vLLM;\n"
            "                       pass --temperature 0 for reproducible output)\n"
            "  --top-k K            0..%u; 0 = off (default %u)\n"
            "  --top-p P            0..1 (default %.1f = off)\n"
            "  --seed S             0..2^64-1 (default: kvd picks one)\n"
            "  --stop STR           stop string, up to %d times (default none)\n"
            "  --logprobs K         0..%d top alternatives per token (default 0)\n"
            "  --prompt-logprobs    logprobs of the prompt tokens too (default off)\n"
            "  --ignore-eos         generate exactly --max-tokens (default off)\n"
            "  --stream             print text as it comes (default: at the end)\n"
            "  --cache-salt S       share cached prefixes only within S (default none)\n"
            "  --timeout-ms MS      request deadline, 0..%u; kvd ends it with ETIMEDOUT\n"
            "                       (default 0 = none); also caps the connect wait\n"
            "  --json               one JSON object {text, tokens, finish_reason, ...}\n"
            "  --runtime-dir DIR    where kvd's sockets are (global flag, see kvctl --help)\n"
            "  --log-level L        error|warn|info|debug (default warn)\n"
            "  --help               this text\n"
            "Without --timeout-ms, kvctl waits up to %d s for the request to end.\n"
            "exit: 0 stop/length, 1 cancelled/error, 64 usage, 69 kvd unreachable\n",
            GEN_MAX_TOKENS_MAX, d.max_tokens, GEN_TEMPERATURE_MAX, d.temperature, GEN_TOP_K_MAX,
            d.top_k, d.top_p, KVD_MAX_STOP,
            KVD_MAX_LOGPROBS, GEN_TIMEOUT_MS_MAX, KVCTL_GEN_WAIT_MS / 1000);
}

enum gen_opt { O_PROMPT = 1, O_TOKENS, O_MAXTOK, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_STOP, O_LP,
               O_PLP, O_IGN, O_STREAM, O_SALT, O_TMO, O_HELP };

/* What a flag accepts, for the bad-value message; writes it to buf. */
static const char *gen_expect(int opt, char *buf, size_t len)
{
    switch (opt) {
    case O_MAXTOK: snprintf(buf, len, "an integer 1..%u", GEN_MAX_TOKENS_MAX); break;
    case O_TEMP: snprintf(buf, len, "a number 0..%g; 0 = greedy", GEN_TEMPERATURE_MAX); break;
    case O_TOPK: snprintf(buf, len, "an integer 0..%u; 0 = off", GEN_TOP_K_MAX); break;
    case O_TOPP: snprintf(buf, len, "a number 0..1"); break;
    case O_SEED: snprintf(buf, len, "an integer 0..%llu", (unsigned long long)UINT64_MAX); break;
    case O_LP: snprintf(buf, len, "an integer 0..%d", KVD_MAX_LOGPROBS); break;
    case O_TMO: snprintf(buf, len, "milliseconds 0..%u; 0 = none", GEN_TIMEOUT_MS_MAX); break;
    default: snprintf(buf, len, "see kvctl generate --help"); break;
    }
    return buf;
}

static bool parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

int kvctl_cmd_generate(const struct kvctl *k, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, 0, O_PROMPT},   {"tokens", required_argument, 0, O_TOKENS},
        {"max-tokens", required_argument, 0, O_MAXTOK}, {"temperature", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK},      {"top-p", required_argument, 0, O_TOPP},
        {"seed", required_argument, 0, O_SEED},       {"stop", required_argument, 0, O_STOP},
        {"logprobs", required_argument, 0, O_LP},     {"prompt-logprobs", no_argument, 0, O_PLP},
        {"ignore-eos", no_argument, 0, O_IGN},        {"stream", no_argument, 0, O_STREAM},
        {"cache-salt", required_argument, 0, O_SALT}, {"timeout-ms", required_argument, 0, O_TMO},
        {"help", no_argument, 0, O_HELP},             {0, 0, 0, 0}};
    struct kvd_params p = KVD_PARAMS_INIT;
    const char *stops[KVD_MAX_STOP];
    uint32_t *toks = NULL;
    double v;
    int opt, rc, ex = 0;
    p.stream = false;
    p.stop = stops;
    optind = 1;
    opterr = 0;
    int li = -1;
    while ((li = -1, opt = getopt_long(argc, argv, "h", opts, &li)) != -1) {
        switch (opt) {
        case O_PROMPT: p.prompt = optarg; break;
        case O_TOKENS:
            free(toks);
            if (parse_tokens(optarg, &toks, &p.n_tokens)) {
                kvctl_error("generate: bad value '%s' for --tokens (expected ids 0..%u like 1,2,3)",
                            optarg, UINT32_MAX);
                return KVCTL_EX_USAGE;
            }
            p.tokens = toks;
            break;
        case O_MAXTOK:
            if (!parse_num(optarg, 1, GEN_MAX_TOKENS_MAX, &v)) goto bad_value;
            p.max_tokens = (uint32_t)v;
            break;
        case O_TEMP:
            if (!parse_num(optarg, 0, GEN_TEMPERATURE_MAX, &v)) goto bad_value;
            p.temperature = v;
            break;
        case O_TOPK:
            if (!parse_num(optarg, 0, GEN_TOP_K_MAX, &v)) goto bad_value;
            p.top_k = (uint32_t)v;
            break;
        case O_TOPP:
            if (!parse_num(optarg, 0, 1, &v)) goto bad_value;
            p.top_p = v;
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            p.seed = strtoull(optarg, &end, 10);
            if (*end || end == optarg || errno) goto bad_value;
            p.has_seed = true;
            break;
        }
        case O_STOP:
            if (p.n_stop >= KVD_MAX_STOP) {
                kvctl_error("generate: at most %d --stop strings", KVD_MAX_STOP);
                free(toks);
                return KVCTL_EX_USAGE;
            }
            stops[p.n_stop++] = optarg;
            break;
        case O_LP:
            if (!parse_num(optarg, 0, KVD_MAX_LOGPROBS, &v)) goto bad_value;
            p.logprobs = (uint32_t)v;
            break;
        case O_PLP: p.prompt_logprobs = true; break;
        case O_IGN: p.ignore_eos = true; break;
        case O_STREAM: p.stream = true; break;
        case O_SALT: p.cache_salt = optarg; break;
        case O_TMO:
            if (!parse_num(optarg, 0, GEN_TIMEOUT_MS_MAX, &v)) goto bad_value;
            p.timeout_ms = (uint32_t)v;
            break;
        case 'h':
        case O_HELP:
            usage_gen(stdout);
            free(toks);
            return 0;
        default:
            kvctl_error("generate: unknown option or missing value '%s' (see kvctl generate "
                        "--help)",
                        argv[optind - 1]);
            free(toks);
            return KVCTL_EX_USAGE;
        }
    }
    if (optind < argc || !p.prompt == !p.tokens) {
        kvctl_error("generate: give exactly one of --prompt or --tokens");
        usage_gen(stderr);
        free(toks);
        return KVCTL_EX_USAGE;
    }

    struct kvd_client *c;
    int conn_ms = k->timeout_ms;
    if (p.timeout_ms && p.timeout_ms < (uint32_t)conn_ms)
        conn_ms = (int)p.timeout_ms; /* the request's deadline bounds the whole call */
    if ((rc = kvd_connect(k->runtime_dir, conn_ms, &c))) {
        kvctl_error("cannot connect to kvd%s%s: %s%s", k->runtime_dir ? " in " : "",
                    k->runtime_dir ? k->runtime_dir : "", kvd_strerror(rc),
                    rc == -ENOENT || rc == -ECONNREFUSED ? " (is kvd running?)" : "");
        free(toks);
        return kvctl_exit_for(rc);
    }
    struct gen_acc acc = {0};
    struct kvd_event ev;
    uint64_t id;
    bool done = false;
    rc = kvd_submit(c, &p, &id);
    while (rc == 0 && !done) {
        rc = kvd_next_event(c, &ev, KVCTL_GEN_WAIT_MS);
        if (rc)
            break;
        if (ev.id != id)
            continue;
        if (ev.type == KVD_EVENT_TOKENS || ev.n_tokens || ev.text_len) {
            if (acc_add(&acc, &ev)) {
                rc = -ENOMEM;
                break;
            }
            if (!k->json && ev.text_len) {
                fwrite(ev.text, 1, ev.text_len, stdout);
                fflush(stdout);
            }
        }
        done = ev.type == KVD_EVENT_DONE;
    }
    if (rc) {
        kvctl_error("generate failed: %s%s%s", kvd_strerror(rc),
                    kvd_client_last_error(c)[0] ? ": " : "", kvd_client_last_error(c));
        ex = kvctl_exit_for(rc);
        goto out;
    }
    bool ok = ev.finish == KVD_FINISH_STOP || ev.finish == KVD_FINISH_LENGTH;
    if (k->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_strn(&j, "text", acc.text ? acc.text : "", acc.text_len);
        json_arr_begin(&j, "tokens");
        for (size_t i = 0; i < acc.n_tokens; i++)
            json_u64(&j, NULL, acc.tokens[i]);
        json_arr_end(&j);
        json_str(&j, "finish_reason", finish_name(ev.finish));
        if (!ok) {
            json_str(&j, "code", kvd_errname(ev.code));
            json_str(&j, "msg", ev.msg);
        }
        json_u64(&j, "prompt_tokens", ev.prompt_tokens);
        json_u64(&j, "cached_prompt_tokens", ev.cached_prompt_tokens);
        json_arr_begin(&j, "logprobs");
        for (size_t i = 0; i < acc.n_lps; i++)
            json_logprob(&j, &acc.lps[i]);
        json_arr_end(&j);
        if (p.prompt_logprobs) {
            json_arr_begin(&j, "prompt_logprobs");
            for (size_t i = 0; i < ev.n_prompt_logprobs; i++)
                json_logprob(&j, &ev.prompt_logprobs[i]);
            json_arr_end(&j);
        }
        json_obj_end(&j);
        json_end(&j);
    } else {
        printf("\n");
        fprintf(stderr, "[%s: %u prompt tokens (%u cached), %u generated]\n",
                finish_name(ev.finish), ev.prompt_tokens, ev.cached_prompt_tokens,
                ev.completion_tokens);
    }
    if (!ok) {
        kvctl_error("request ended with %s: %s (%s)", finish_name(ev.finish),
                    ev.msg[0] ? ev.msg : kvd_strerror(ev.code), kvd_errname(ev.code));
        ex = KVCTL_EX_FAIL;
    }
out:
    kvd_close(c);
    free(acc.tokens);
    free(acc.lps);
    free(acc.text);
    free(toks);
    return ex;
bad_value:;
    char expect[64];
    kvctl_error("generate: bad value '%s' for --%s (expected %s)", optarg,
                li >= 0 ? opts[li].name : "?", gen_expect(opt, expect, sizeof(expect)));
    free(toks);
    return KVCTL_EX_USAGE;
}

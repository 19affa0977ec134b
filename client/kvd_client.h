/* kvd_client.h — libkvd-client, the C SDK for kvd (link -lkvd-client).
 *
 * Connect to a running kvd, submit generate requests (prompt text or token ids), read
 * their token streams as events, cancel them, close.
 *
 *   struct kvd_client *c;
 *   if (kvd_connect(NULL, 2000, &c) == 0) {             NULL: default runtime dir
 *       struct kvd_params p = KVD_PARAMS_INIT;
 *       p.prompt = "Once upon a time";
 *       uint64_t id;
 *       kvd_submit(c, &p, &id);
 *       struct kvd_event ev;
 *       while (kvd_next_event(c, &ev, 5000) == 0) {     every call has a timeout
 *           if (ev.type == KVD_EVENT_TOKENS) fwrite(ev.text, 1, ev.text_len, stdout);
 *           if (ev.type == KVD_EVENT_DONE) break;
 *       }
 *       kvd_close(c);
 *   }
 *
 * Errors: every int result is 0 or a negative code: -errno, or one of kvd's codes from
 * kvd_err.h (KVD_ETOOLONG, KVD_EOVERLOAD, KVD_ESHUTDOWN, KVD_EPEER, ...).
 * kvd_strerror(code) gives a message and kvd_errname(code) a stable name.
 *
 * Never blocks forever: kvd_connect, kvd_submit, kvd_cancel and kvd_close are bounded
 * by the connect timeout; kvd_next_event and kvd_generate take their own timeout.
 * A kvd that stops answering is detected within KVD_CLIENT_DEAD_MS: the SDK then
 * returns KVD_EPEER from every call.
 *
 * Liveness: while connected, a small internal thread (one per kvd_client) sends a ping
 * every KVD_CLIENT_PING_MS so kvd keeps the session even when the application is busy
 * elsewhere; it touches nothing but the socket and stops in kvd_close.
 *
 * Threads: a kvd_client is used by one application thread at a time (calls on the same
 * handle must not overlap); different handles are independent. Callbacks run on the
 * calling thread, inside kvd_generate.
 */
#ifndef KVD_CLIENT_H
#define KVD_CLIENT_H

#include "kvd_err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVD_MAX_LOGPROBS 20        /* top alternatives per token */
#define KVD_MAX_STOP 8             /* stop strings per request */
#define KVD_CLIENT_PING_MS 1000    /* ping period of the internal thread */
#define KVD_CLIENT_DEAD_MS 5000    /* silence after which kvd is considered gone */
#define KVD_MODEL_NAME_MAX 128     /* bytes of kvd_info.model */

struct kvd_client;                 /* opaque */

/* What kvd told us at connect time. */
struct kvd_info {
    uint64_t session;              /* session id */
    uint32_t max_model_len;        /* prompt + output tokens per request */
    uint32_t vocab_size;           /* token ids are < vocab_size */
    uint32_t block_size;           /* tokens per KV page */
    char model[KVD_MODEL_NAME_MAX + 1];
};

/* Generate parameters. Start from KVD_PARAMS_INIT (or kvd_params_init) and set what you
 * need. Exactly one of prompt / tokens. Pointers are only read during kvd_submit. */
struct kvd_params {
    const char *prompt;            /* UTF-8 text, tokenized by kvd (BOS added) */
    const uint32_t *tokens;        /* or token ids, used as given */
    size_t n_tokens;
    uint32_t max_tokens;           /* default 16 */
    double temperature;            /* 0 = greedy; default 1.0 */
    uint32_t top_k;                /* 0 = off */
    double top_p;                  /* default 1.0 */
    double min_p;                  /* default 0 */
    bool has_seed;                 /* false: kvd picks a seed */
    uint64_t seed;
    double repetition_penalty;     /* 1.0 = off */
    double frequency_penalty;      /* 0 = off */
    double presence_penalty;       /* 0 = off */
    const char *const *stop;       /* n_stop stop strings (<= KVD_MAX_STOP) */
    size_t n_stop;
    const uint32_t *stop_token_ids;
    size_t n_stop_token_ids;
    bool ignore_eos;               /* generate exactly max_tokens (benchmarks) */
    uint32_t logprobs;             /* 0..KVD_MAX_LOGPROBS top alternatives per token */
    bool prompt_logprobs;          /* logprobs of the prompt tokens, in the DONE event */
    bool stream;                   /* TOKENS events as tokens come; default true */
    uint32_t timeout_ms;           /* 0 = none; else kvd ends it with KVD_ETIMEDOUT */
    const char *cache_salt;        /* NULL, or a tenant key: prefixes shared only within it */
};

#define KVD_PARAMS_INIT                                                                    \
    {                                                                                      \
        .max_tokens = 16, .temperature = 1.0, .top_p = 1.0, .repetition_penalty = 1.0,     \
        .stream = true                                                                     \
    }

enum kvd_event_type { KVD_EVENT_TOKENS = 1, KVD_EVENT_DONE = 2 };
enum kvd_finish { KVD_FINISH_STOP = 0, KVD_FINISH_LENGTH, KVD_FINISH_CANCELLED, KVD_FINISH_ERROR };

struct kvd_top {
    uint32_t token;
    double logprob;
};

struct kvd_logprob {
    bool present;                  /* false only for the first prompt token */
    uint32_t token;
    double logprob;                /* may be -INFINITY */
    uint32_t n_top;
    struct kvd_top top[KVD_MAX_LOGPROBS]; /* most likely first */
};

/* One event. Pointers stay valid until the next kvd_next_event / kvd_generate /
 * kvd_close on the same handle. */
struct kvd_event {
    enum kvd_event_type type;
    uint64_t id;                   /* the request it belongs to */
    const uint32_t *tokens;        /* TOKENS: new ids; DONE: all ids for stream=false */
    size_t n_tokens;
    const char *text;              /* NUL-terminated UTF-8 (delta, or whole text) */
    size_t text_len;
    const struct kvd_logprob *logprobs; /* one per token when logprobs > 0, else NULL */
    size_t n_logprobs;
    /* DONE only: */
    enum kvd_finish finish;
    int code;                      /* 0 for STOP/LENGTH, else why (KVD_ETOOLONG, ...) */
    const char *msg;               /* "" or a human-readable reason */
    uint32_t prompt_tokens;
    uint32_t cached_prompt_tokens; /* served from the prefix cache */
    uint32_t completion_tokens;
    const struct kvd_logprob *prompt_logprobs; /* when asked; [0] not present */
    size_t n_prompt_logprobs;
};

/* Called by kvd_generate for each event of its request. Return 0 to continue, non-zero
 * to cancel the request (kvd_generate then returns KVD_ECANCELLED after the DONE). */
typedef int (*kvd_event_cb)(const struct kvd_event *ev, void *arg);

void kvd_params_init(struct kvd_params *p);        /* same values as KVD_PARAMS_INIT */

/* Connects to kvd in runtime_dir (NULL: $KVD_RUNTIME_DIR, $XDG_RUNTIME_DIR/kvd, or
 * /tmp/kvd-$UID). Fails fast when nothing listens: -ENOENT (no socket) or
 * -ECONNREFUSED (stale socket); -ETIMEDOUT when kvd does not answer within timeout_ms;
 * KVD_ESHUTDOWN / KVD_EOVERLOAD when kvd refuses the session. *out is set only on 0. */
int kvd_connect(const char *runtime_dir, int timeout_ms, struct kvd_client **out);
const struct kvd_info *kvd_client_info(const struct kvd_client *c);
/* Sends "bye" (kvd cancels what is still open), stops the ping thread, frees c. */
void kvd_close(struct kvd_client *c);

/* Submits a request; *id (written on 0) names it in events. KVD_EMSG for parameters
 * kvd would reject (nothing sent); KVD_EPEER when kvd is gone. */
int kvd_submit(struct kvd_client *c, const struct kvd_params *p, uint64_t *id);
/* Asks kvd to cancel id; its DONE (finish CANCELLED, or how it ended first) follows. */
int kvd_cancel(struct kvd_client *c, uint64_t id);

/* Waits up to timeout_ms (0: just poll) for the next event of any request.
 * 0 and *ev filled; -EAGAIN when none came in time; KVD_EPEER when kvd is gone;
 * KVD_ESHUTDOWN when kvd ended the session. */
int kvd_next_event(struct kvd_client *c, struct kvd_event *ev, int timeout_ms);

/* Submit + wait for this request's DONE, calling cb (may be NULL) for each of its
 * events (other requests' events are kept for kvd_next_event). Returns 0 when it
 * ended with STOP or LENGTH, else the DONE's code (KVD_ECANCELLED, KVD_ETOOLONG, ...);
 * KVD_ETIMEDOUT when timeout_ms passed first (the request is then cancelled). *done_out
 * (may be NULL) receives the DONE event, valid as described for struct kvd_event. */
int kvd_generate(struct kvd_client *c, const struct kvd_params *p, kvd_event_cb cb,
                 void *arg, int timeout_ms, struct kvd_event *done_out);

/* The detail of the last failure on c (decode error, kvd's message), or "". */
const char *kvd_client_last_error(const struct kvd_client *c);

#ifdef __cplusplus
}
#endif
#endif

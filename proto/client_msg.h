/* client_msg.h — the client protocol on kvd.sock and the per-session PAIR socket.
 *
 * Transport (contract §5, DESIGN.md "Sockets"):
 *   1. kvd binds NN_REP at ipc://DIR/kvd.sock. A client connects NN_REQ and sends
 *      "hello" {name}. kvd creates a session, binds an NN_PAIR at
 *      ipc://DIR/s-<session>.sock (CLIENT_SESSION_SOCK_FMT) BEFORE it replies
 *      "welcome" {session, addr, max_model_len, model, vocab_size, block_size}, or
 *      an "err" reply (wire.h) with code ESHUTDOWN / EOVERLOAD (too many sessions).
 *   2. The client connects NN_PAIR to addr; everything else of the session flows there.
 *      client -> kvd: "generate", "cancel", "ping", "bye"
 *      kvd -> client: "tokens", "done", "pong", "bye", "err"
 *   3. The client sends "ping" every CLIENT_PING_INTERVAL_MS; kvd answers "pong" to
 *      each. kvd ends a session that sent nothing for KVD_SESSION_TIMEOUT_MS and
 *      cancels its requests (pages released). A client that hears nothing (no pong,
 *      no event) for KVD_SESSION_TIMEOUT_MS treats kvd as dead (KVD_EPEER).
 *   4. "bye" from the client ends the session at once (its requests are cancelled,
 *      no "done" is sent for them). kvd sends "bye" before it closes a session on its
 *      own (shutdown, timeout) after having sent a "done" for every open request.
 *
 * Requests. "generate" {id, prompt | tokens, params...}: id is chosen by the client,
 * unique among the session's open requests (a duplicate gets a "done" with
 * finish "error", code EMSG). Exactly one of prompt (UTF-8 text, tokenized by kvd,
 * BOS added) or tokens (token ids, used as given) is present. Every other field is
 * optional with the default of client_generate_init(). kvd answers every generate
 * with exactly one "done" {id, ...}; when stream is true, zero or more "tokens"
 * {id, ...} events come first, in order, each with the token ids generated since the
 * previous event, the text they complete (UTF-8-complete: bytes of a partial UTF-8
 * character are held back until the character completes) and, when logprobs > 0,
 * one logprob entry per token. When stream is false no "tokens" event is sent and
 * "done" carries the whole tokens / text / logprobs. prompt_logprobs (when asked)
 * always travel in "done", one entry per prompt token, the first one nil.
 * "cancel" {id}: the request ends with finish "cancelled" (code ECANCELLED); an
 * unknown or already finished id is ignored (the client still gets one "done").
 * A message kvd cannot decode at all (no usable id) is answered with an "err"
 * reply (wire.h) on the PAIR.
 *
 * Finish reasons: "stop" (EOS, a stop string or a stop token id; code absent),
 * "length" (max_tokens or max-model-len reached; code absent), "cancelled" (code
 * ECANCELLED), "error" (code = kvd_errname(): EMSG invalid request, ETOOLONG prompt
 * longer than max-model-len or than the whole pool can hold, EOVERLOAD queue full,
 * ESHUTDOWN shutting down, ETIMEDOUT request timeout_ms passed, EINTERNAL, ...).
 *
 * Logprob entry on the wire: nil (no value, e.g. the first prompt token) or the array
 * [token (uint), logprob (float, may be -inf), top] where top is an array of at most
 * CLIENT_MAX_LOGPROBS pairs [token, logprob], most likely first.
 *
 * Ownership: *_encode packs into a caller-initialised wbuf and changes nothing else;
 * encode validates the same limits as decode and returns KVD_EMSG (err filled) on a
 * struct that decode would reject, leaving w untouched in that case. *_decode takes a
 * parsed wmsg (wire.h) whose type matches, checks every field, type, limit and that
 * no unknown key is present, and fills *out with copies (out owns them; free with the
 * matching *_release, also after a failed decode). Any thread; no shared state.
 */
#ifndef KVD_PROTO_CLIENT_MSG_H
#define KVD_PROTO_CLIENT_MSG_H

#include "proto/wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLIENT_PING_INTERVAL_MS 1000   /* client sends "ping" this often while connected */
#define KVD_SESSION_TIMEOUT_MS 5000    /* silence after which either side drops the session */
#define CLIENT_SESSION_SOCK_FMT "s-%llu.sock" /* PAIR socket of session N in the runtime dir */

#define CLIENT_NAME_MAX 64             /* bytes of the client name in "hello" */
#define CLIENT_MODEL_NAME_MAX 128      /* bytes of the model name in "welcome" */
#define CLIENT_ADDR_MAX 256            /* bytes of the session address (ipc://...) */
#define CLIENT_MAX_PROMPT_BYTES (1u << 20)   /* 1 MiB of prompt text */
#define CLIENT_MAX_PROMPT_TOKENS 131072u     /* token ids in one prompt (also max-model-len cap) */
#define CLIENT_MAX_NEW_TOKENS 131072u        /* max_tokens upper bound */
#define CLIENT_TOKEN_ID_MAX 0x7fffffffu      /* ids above are invalid; kvd checks the vocab */
#define CLIENT_MAX_STOP 8                    /* stop strings per request */
#define CLIENT_STOP_MAX_BYTES 128            /* bytes of one stop string */
#define CLIENT_MAX_STOP_TOKEN_IDS 64         /* stop token ids per request */
#define CLIENT_MAX_LOGPROBS 20               /* top alternatives per token (as vLLM/OpenAI) */
#define CLIENT_CACHE_SALT_MAX 256            /* bytes of cache_salt */
#define CLIENT_TIMEOUT_MAX_MS 86400000u      /* 1 day: request timeout_ms upper bound */
#define CLIENT_EVENT_MAX_TOKENS 4096u        /* token ids in one "tokens" event */
#define CLIENT_TEXT_MAX_BYTES (4u << 20)     /* text in one "tokens" / "done" */
#define CLIENT_ERR_MSG_MAX 512               /* bytes of the "msg" of a done/err */
#define CLIENT_TOP_K_MAX 1000000u            /* top_k upper bound (0 = disabled) */
#define CLIENT_TEMPERATURE_MAX 100.0         /* temperature upper bound (0 = greedy) */
#define CLIENT_PENALTY_MAX 100.0             /* |penalty| bound for all three penalties */

/* ---- handshake on kvd.sock (REQ/REP) ---- */

/* "hello" {name: str <= CLIENT_NAME_MAX} */
struct client_hello {
    char name[CLIENT_NAME_MAX + 1];      /* free-form client name for logs; may be "" */
};

/* "welcome" {session, addr, max_model_len, model, vocab_size, block_size} */
struct client_welcome {
    uint64_t session;                    /* session id; the PAIR is s-<session>.sock */
    char addr[CLIENT_ADDR_MAX + 1];      /* ipc:// address of the session PAIR */
    uint32_t max_model_len;              /* tokens: prompt + output limit per sequence */
    char model[CLIENT_MODEL_NAME_MAX + 1]; /* model name (GGUF general.name or file stem) */
    uint32_t vocab_size;                 /* token ids are < vocab_size */
    uint32_t block_size;                 /* tokens per KV page (prefix-sharing unit) */
};

/* ---- session PAIR: client -> kvd ---- */

/* "generate": one request. Field names on the wire equal the member names. */
struct client_generate {
    uint64_t id;                  /* client-chosen, unique among open requests */
    char *prompt;                 /* UTF-8 text (NUL-terminated copy) or NULL */
    size_t prompt_len;            /* bytes, <= CLIENT_MAX_PROMPT_BYTES */
    uint32_t *tokens;             /* token ids or NULL; exactly one of prompt/tokens */
    size_t n_tokens;              /* 1..CLIENT_MAX_PROMPT_TOKENS when tokens != NULL */
    uint32_t max_tokens;          /* 1..CLIENT_MAX_NEW_TOKENS; default 16 */
    double temperature;           /* 0 = greedy; default 1.0; <= CLIENT_TEMPERATURE_MAX */
    uint32_t top_k;               /* 0 = off (default) */
    double top_p;                 /* (0, 1]; default 1.0 */
    double min_p;                 /* [0, 1]; default 0 */
    bool has_seed;                /* false: kvd picks a seed; wire: "seed" absent */
    uint64_t seed;                /* sampling seed when has_seed */
    double repetition_penalty;    /* (0, CLIENT_PENALTY_MAX]; default 1.0 (off) */
    double frequency_penalty;     /* [-CLIENT_PENALTY_MAX, CLIENT_PENALTY_MAX]; default 0 */
    double presence_penalty;      /* same range; default 0 */
    uint32_t n_stop;              /* stop strings, <= CLIENT_MAX_STOP */
    char *stop[CLIENT_MAX_STOP];  /* each NUL-terminated, 1..CLIENT_STOP_MAX_BYTES bytes */
    uint32_t *stop_token_ids;     /* NULL when none */
    size_t n_stop_token_ids;      /* <= CLIENT_MAX_STOP_TOKEN_IDS */
    bool ignore_eos;              /* keep generating past EOS (benchmarks); default false */
    uint32_t logprobs;            /* K top alternatives per generated token, 0..20; 0 = none */
    bool prompt_logprobs;         /* also return prompt logprobs (with the same K) */
    bool stream;                  /* send "tokens" events; default true */
    uint32_t timeout_ms;          /* 0 = none; else the request ends with ETIMEDOUT */
    char *cache_salt;             /* NULL or 1..CLIENT_CACHE_SALT_MAX bytes, NUL-terminated */
    size_t cache_salt_len;
};

/* "cancel" {id} */
struct client_cancel {
    uint64_t id;
};

/* ---- session PAIR: kvd -> client ---- */

struct client_top {
    uint32_t token;
    double logprob;
};

/* One logprob entry. present == false encodes as nil (first prompt token). */
struct client_logprob {
    bool present;
    uint32_t token;                        /* the token this entry is about */
    double logprob;                        /* its log-probability (<= 0, may be -inf) */
    uint32_t n_top;                        /* <= CLIENT_MAX_LOGPROBS */
    struct client_top top[CLIENT_MAX_LOGPROBS]; /* most likely first */
};

/* "tokens" {id, tokens, text, logprobs?} — a stream event. */
struct client_tokens {
    uint64_t id;
    uint32_t *tokens;                   /* 1..CLIENT_EVENT_MAX_TOKENS ids */
    size_t n_tokens;
    char *text;                         /* NUL-terminated UTF-8 delta, may be "" */
    size_t text_len;
    struct client_logprob *logprobs;    /* NULL, or n_tokens entries (all present) */
    size_t n_logprobs;
};

enum client_finish {
    CLIENT_FINISH_STOP = 0,   /* "stop" */
    CLIENT_FINISH_LENGTH,     /* "length" */
    CLIENT_FINISH_CANCELLED,  /* "cancelled" */
    CLIENT_FINISH_ERROR,      /* "error" */
    CLIENT_FINISH_COUNT_
};

/* "done" {id, finish_reason, code?, msg?, prompt_tokens, cached_prompt_tokens,
 *         completion_tokens, tokens?, text?, logprobs?, prompt_logprobs?} */
struct client_done {
    uint64_t id;
    enum client_finish finish;
    int code;                           /* 0 for stop/length, else a kvd/errno code */
    char msg[CLIENT_ERR_MSG_MAX + 1];   /* human-readable reason; "" when none */
    uint32_t prompt_tokens;             /* prompt length in tokens (after tokenizing) */
    uint32_t cached_prompt_tokens;      /* of which served from the prefix cache */
    uint32_t completion_tokens;         /* tokens generated */
    uint32_t *tokens;                   /* non-stream: all generated ids; else NULL */
    size_t n_tokens;                    /* <= CLIENT_MAX_NEW_TOKENS */
    char *text;                         /* non-stream: whole text; else NULL */
    size_t text_len;
    struct client_logprob *logprobs;    /* non-stream with logprobs: n_tokens entries */
    size_t n_logprobs;
    struct client_logprob *prompt_logprobs; /* when asked: one per prompt token, [0] absent */
    size_t n_prompt_logprobs;           /* <= CLIENT_MAX_PROMPT_TOKENS */
};

/* ---- names ---- */
const char *client_finish_name(enum client_finish f);   /* "stop", ...; "?" if invalid */
int client_finish_parse(const char *s, size_t n, enum client_finish *out); /* 0 / KVD_EMSG */
/* True when s[0..n) is valid UTF-8 without NUL bytes. */
bool client_utf8_is_valid(const char *s, size_t n);

/* ---- handshake ---- */
int client_hello_encode(const struct client_hello *h, struct wbuf *w, char err[WIRE_ERR_LEN]);
int client_hello_decode(const struct wmsg *m, struct client_hello *out, char err[WIRE_ERR_LEN]);
int client_welcome_encode(const struct client_welcome *x, struct wbuf *w,
                          char err[WIRE_ERR_LEN]);
int client_welcome_decode(const struct wmsg *m, struct client_welcome *out,
                          char err[WIRE_ERR_LEN]);

/* ---- generate ---- */
/* Sets every field to its default (no prompt, no tokens, id 0). */
void client_generate_init(struct client_generate *g);
/* Frees what decode allocated and re-inits g. Safe on an init'ed or half-decoded g. */
void client_generate_release(struct client_generate *g);
int client_generate_encode(const struct client_generate *g, struct wbuf *w,
                           char err[WIRE_ERR_LEN]);
int client_generate_decode(const struct wmsg *m, struct client_generate *out,
                           char err[WIRE_ERR_LEN]);

int client_cancel_encode(const struct client_cancel *c, struct wbuf *w);
int client_cancel_decode(const struct wmsg *m, struct client_cancel *out,
                         char err[WIRE_ERR_LEN]);

/* "ping", "pong", "bye": no fields. type must be one of those three. */
int client_simple_encode(const char *type, struct wbuf *w);
int client_simple_decode(const struct wmsg *m, const char *type, char err[WIRE_ERR_LEN]);

/* ---- events ---- */
void client_tokens_init(struct client_tokens *t);
void client_tokens_release(struct client_tokens *t);
int client_tokens_encode(const struct client_tokens *t, struct wbuf *w, char err[WIRE_ERR_LEN]);
int client_tokens_decode(const struct wmsg *m, struct client_tokens *out,
                         char err[WIRE_ERR_LEN]);

void client_done_init(struct client_done *d);
void client_done_release(struct client_done *d);
int client_done_encode(const struct client_done *d, struct wbuf *w, char err[WIRE_ERR_LEN]);
int client_done_decode(const struct wmsg *m, struct client_done *out, char err[WIRE_ERR_LEN]);

#endif

/* step_msg.h — kvd <-> kvd-worker messages over ipc://DIR/worker-N.sock (NN_PAIR).
 *
 * kvd binds one NN_PAIR per worker; the worker connects and sends "hello" once. Then kvd
 * sends "step" messages and the worker answers each with exactly one "result" or "err",
 * in order (one step in flight per worker is the normal use; replies carry step_id).
 *
 *   hello  {index, pid, model_fp, vocab}                      worker -> kvd
 *   step   {step_id, seqs: [seq...]}                          kvd -> worker
 *     seq  {seq_id, tokens: [u32], pos0, blocks: [u32], sample, temperature, top_k,
 *           top_p, min_p, seed, repetition_penalty, frequency_penalty,
 *           presence_penalty, penalty_tokens: [u32], logprobs, prompt_logprobs,
 *           next_token}
 *   result {step_id, seqs: [{seq_id, token?, logprob?, top?: [[id, lp]...],
 *           prompt?: [[id, lp]...]}]}                         worker -> kvd
 *   err    {step_id, code, msg}                               worker -> kvd
 *
 * Semantics of one step sequence:
 *   - tokens are the NEW token ids at positions pos0 .. pos0 + n_tokens - 1; their K/V
 *     are written into the pages before attention reads them. Positions < pos0 must
 *     already be in the pages (the worker trusts kvd for that; it keeps no state).
 *   - blocks is the sequence's WHOLE block table: blocks[i] holds positions
 *     [i * block_size, (i + 1) * block_size). The worker requires
 *     pos0 + n_tokens <= n_blocks * block_size and every page id < num_pages.
 *   - sample: sample one token from the logits after the last new token.
 *     temperature 0 means greedy (argmax; ties -> lowest id). top_k 0, top_p 1,
 *     min_p 0, repetition_penalty 1, frequency/presence 0 mean "off".
 *   - penalties apply to the ids in penalty_tokens (kvd sends the history it wants
 *     penalised, only when a penalty is set): repetition divides positive logits and
 *     multiplies negative ones (CTRL / HF convention), frequency subtracts
 *     count * penalty, presence subtracts penalty once (OpenAI convention).
 *   - randomness: the uniform draw is a pure function of (seed, position of the
 *     sampled token), so re-running a step gives the same token.
 *   - logprob definitions: log-softmax of the logits AFTER penalties and BEFORE
 *     temperature / truncation, i.e. the model's distribution (so perplexity does not
 *     depend on sampling settings). "logprob" is the chosen token's, "top" the
 *     `logprobs` (0..STEP_MAX_LOGPROBS) most likely ids, best first.
 *   - prompt_logprobs: "prompt" holds, for each new token i >= 1, [tokens[i], lp] scored
 *     from the logits after tokens[i - 1]; if next_token is present (the first token
 *     of the next prefill chunk) one more entry scores it from the last new token. So
 *     a prompt split over chunks yields one entry per prompt token after the first.
 *     Penalties do not apply to prompt logprobs.
 *
 * Ownership: the *_decode functions fill caller-provided structs with arrays they
 * calloc; the matching *_release frees them (safe on a zeroed or failed struct). The
 * *_encode functions only read; arrays in an encoded struct stay the caller's.
 * Decoders check every field's type and named limit and reject unknown keys; on error
 * they return KVD_EMSG with err naming the field, and leave *out released.
 * Any thread; no shared state.
 */
#ifndef KVD_PROTO_STEP_MSG_H
#define KVD_PROTO_STEP_MSG_H

#include "proto/wire.h"

#include <stdbool.h>
#include <stdint.h>

#define STEP_MAX_SEQS 256              /* sequences in one step */
#define STEP_MAX_TOKENS 8192           /* new tokens in one step, all sequences together */
#define STEP_MAX_BLOCKS 8192           /* block-table entries per sequence (131k at 16) */
#define STEP_MAX_POS (1u << 24)        /* positions are below this (pos0 + n_tokens) */
#define STEP_MAX_TOKEN_ID 0x7fffffffu  /* wire bound; the worker checks < vocab */
#define STEP_MAX_PAGE_ID 0x7fffffffu   /* wire bound; the worker checks < num_pages */
#define STEP_MAX_PENALTY_TOKENS 65536  /* history ids sent for penalties, per sequence */
#define STEP_MAX_LOGPROBS 20           /* top alternatives per sampled token */
#define STEP_MAX_TOP_K (1u << 20)      /* top_k above the vocab size means "off" */
#define STEP_MAX_TEMPERATURE 100.0     /* sampling temperature upper bound */
#define STEP_MAX_REP_PENALTY 100.0     /* repetition_penalty in (0, 100] */
#define STEP_MAX_FREQ_PENALTY 100.0    /* frequency/presence in [-100, 100] */
#define STEP_ERR_MSG_MAX 512           /* bytes of an "err" msg */
#define STEP_WORKER_INDEX_MAX 1023     /* worker indices 0..1023 */
#define STEP_LOGPROB_MIN (-3.0e38)     /* lowest logprob on the wire (a zero probability) */

struct step_hello {
    uint32_t index;     /* worker index N (worker-N.sock) */
    uint32_t pid;       /* worker process id */
    uint64_t model_fp;  /* gguf_model_fingerprint() of the loaded model */
    uint32_t vocab;     /* vocabulary size: token ids must be below it */
};

struct step_sampling {
    float temperature;        /* 0 = greedy */
    uint32_t top_k;           /* 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    uint64_t seed;            /* RNG seed; draw = f(seed, position) */
    float repetition_penalty; /* (0, 100]; 1 = off */
    float frequency_penalty;  /* [-100, 100]; 0 = off */
    float presence_penalty;   /* [-100, 100]; 0 = off */
};

struct step_seq {
    uint64_t seq_id;               /* kvd's id, echoed in the result */
    uint32_t n_tokens;             /* >= 1 */
    uint32_t *tokens;              /* (n_tokens,) new token ids */
    uint32_t pos0;                 /* position of tokens[0] */
    uint32_t n_blocks;             /* >= 1 */
    uint32_t *blocks;              /* (n_blocks,) page ids, the whole block table */
    bool sample;                   /* sample after the last new token */
    struct step_sampling sp;       /* used when sample */
    uint32_t n_penalty_tokens;
    uint32_t *penalty_tokens;      /* (n_penalty_tokens,) history ids for penalties */
    uint32_t logprobs;             /* top alternatives wanted, 0..STEP_MAX_LOGPROBS */
    bool prompt_logprobs;          /* fill result "prompt" */
    bool has_next_token;           /* next_token present (prompt_logprobs only) */
    uint32_t next_token;           /* first token of the next prefill chunk */
};

struct step_msg {
    uint64_t step_id;
    uint32_t n_seqs;        /* 1..STEP_MAX_SEQS */
    struct step_seq *seqs;  /* (n_seqs,) */
};

struct step_lp {
    uint32_t token;
    float logprob;  /* natural log */
};

struct step_seq_result {
    uint64_t seq_id;
    bool has_token;                        /* true iff the seq had sample = true */
    uint32_t token;                        /* sampled token */
    float logprob;                         /* its log-probability (see definition) */
    uint32_t n_top;                        /* 0..STEP_MAX_LOGPROBS */
    struct step_lp top[STEP_MAX_LOGPROBS]; /* (n_top,) best first */
    uint32_t n_prompt;
    struct step_lp *prompt;                /* (n_prompt,) prompt logprobs, or NULL */
};

struct step_result {
    uint64_t step_id;
    uint32_t n_seqs;
    struct step_seq_result *seqs;  /* (n_seqs,) same order as the step's seqs */
};

/* Sets the "off" defaults: temperature 0 (greedy), top_p 1, repetition_penalty 1. */
void step_sampling_default(struct step_sampling *sp);

void step_hello_encode(struct wbuf *w, const struct step_hello *h);
int step_hello_decode(const struct wmsg *m, struct step_hello *out, char err[WIRE_ERR_LEN]);

void step_msg_encode(struct wbuf *w, const struct step_msg *s);
int step_msg_decode(const struct wmsg *m, struct step_msg *out, char err[WIRE_ERR_LEN]);
void step_msg_release(struct step_msg *s);   /* frees decoded arrays; zeroes s */

void step_result_encode(struct wbuf *w, const struct step_result *r);
int step_result_decode(const struct wmsg *m, struct step_result *out,
                       char err[WIRE_ERR_LEN]);
void step_result_release(struct step_result *r);

/* {"v","t":"err","step_id","code": kvd_errname(code),"msg"}; msg cut at STEP_ERR_MSG_MAX.
 * Read it back with wmsg_error() and step_err_step_id(). */
void step_err_encode(struct wbuf *w, uint64_t step_id, int code, const char *msg);
uint64_t step_err_step_id(const struct wmsg *m);   /* 0 when absent */

#endif

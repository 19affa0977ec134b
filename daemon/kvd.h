/* kvd.h — the daemon's root context and the pieces its modules share.
 *
 * One struct kvd per process, created by main() and passed to every module (no globals
 * beyond main's signal handles). Modules:
 *   config.c   settings              sched.c     batching/admission/preemption (pure)
 *   blockhash.c prefix block hashes  detok.c     streamed text + stop strings (pure)
 *   nnuv.c     nanomsg in libuv      bcli.c      async broker client
 *   prefixhint.c believed prefix index (cache-aware admission order only)
 *   model.c    tokenizer + model facts (GGUF)
 *   request.c  one generate request: validation, tokens/done events, finish
 *   engine.c   the step cycle: plan -> broker pages -> worker steps -> results
 *   workers.c  worker processes: spawn, hello, steps, death, restart with back-off
 *   children.c spawning kvd-broker, its readiness, its death (-> kvd_broker_lost)
 *   client_ep.c kvd.sock + sessions;  admin_ep.c admin.sock
 *   main.c     start-up, signals, shutdown, sd_notify
 * Everything runs on the loop thread.
 */
#ifndef KVD_DAEMON_KVD_H
#define KVD_DAEMON_KVD_H

#include "common/blockhash.h"
#include "common/gguf.h"
#include "common/tok.h"
#include "daemon/bcli.h"
#include "daemon/config.h"
#include "daemon/detok.h"
#include "daemon/nnuv.h"
#include "daemon/prefixhint.h"
#include "daemon/sched.h"
#include "proto/broker_msg.h"
#include "proto/client_msg.h"
#include "proto/step_msg.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define KVD_SESSIONS_MAX 1024             /* concurrent client sessions */
#define KVD_SWEEP_INTERVAL_MS 100         /* timeouts / cancellations are checked this often */
#define KVD_ENGINE_RETRY_MS 20            /* retry when the queue waits for pages */
#define KVD_WORKER_BACKOFF_MIN_MS 100     /* first restart delay of a crashed worker */
#define KVD_WORKER_BACKOFF_MAX_MS 5000    /* cap on a crashing worker's restart delay */
#define KVD_WORKER_STABLE_MS 10000        /* alive this long: back-off resets */
#define KVD_BROKER_READY_TIMEOUT_MS 30000 /* spawned broker must say "ready" by then */
#define KVD_STOP_TIMEOUT_MS 5000          /* children get SIGTERM, then SIGKILL after this */
#define KVD_BROKER_BACKOFF_MIN_MS 200     /* first restart delay of a dead spawned broker */
#define KVD_BROKER_BACKOFF_MAX_MS 5000    /* cap on that delay */
#define KVD_BROKER_RESTARTS_MAX 20        /* then kvd gives up and stops (exit 1) */
#define KVD_WORKER_EXIT_CONFIG 78         /* worker refused model/pool/options: no restart */

struct kvd;
struct kvd_session;
struct broker_spawn_ctx;

/* ---- the model, as kvd needs it (model.c) ---- */
struct kvd_model {
    char path[CONFIG_PATH_MAX];
    char name[CLIENT_MODEL_NAME_MAX + 1];
    struct gguf_file gguf;
    struct gguf_llama_hparams hp;
    struct tok tok;
    uint64_t fp; /* gguf_model_fingerprint */
    bool open;
};
int model_open(struct kvd_model *m, const char *path);
void model_close(struct kvd_model *m);
/* Resolves the bundled model next to the binary: <bin>/../../models/stories260K.gguf
 * (build tree) or <bin>/../share/kvd/models/stories260K.gguf (installed). */
int model_default_path(char *out, size_t cap);

/* ---- one generate request (request.c) ---- */
struct kvd_req {
    struct kvd_req *s_prev, *s_next; /* the session's list */
    struct kvd_req *a_prev, *a_next; /* kvd's list of live requests */
    struct kvd_session *sess;        /* NULL once the session is gone */
    uint64_t id;                     /* client's id */
    struct sched_seq seq;            /* the sequence (tokens, block table) */
    uint32_t n_prompt;               /* prompt tokens */
    uint32_t cached_prompt;          /* prompt tokens served from the prefix cache at the
                                        first admission (reported to the client) */
    uint32_t max_tokens;             /* completion tokens allowed */
    struct step_sampling sp;
    uint32_t stop_ids[CLIENT_MAX_STOP_TOKEN_IDS];
    uint32_t n_stop_ids;
    bool ignore_eos, stream, want_prompt_lp, use_prefix;
    uint32_t logprobs;        /* K */
    uint64_t deadline_ms;     /* uv_now deadline; 0 = none */
    struct blockhash_id hid;  /* prefix-cache identity (model, dtype, salt) */
    struct blockhash *hashes; /* per full block, capacity sched max_pages */
    uint32_t n_hashes;        /* valid leading entries of hashes */
    struct detok dt;
    struct client_logprob *lps;  /* per generated token (when logprobs > 0) */
    struct client_logprob *plps; /* per prompt token (when prompt_logprobs) */
    uint32_t sent_tokens;        /* generated tokens already in "tokens" events */
    int end_code;                /* pending end: 0 none; KVD_ECANCELLED, ... */
    bool in_step;                /* part of the step in flight */
    bool holds_pages;            /* the broker may hold pages for seq.id */
    int32_t worker;              /* worker running it, -1 */
    uint64_t t_arrival_ms;       /* when kvd accepted it (loop time) */
};

/* ---- workers (workers.c) ---- */
enum kw_state { KW_STARTING = 0, KW_IDLE, KW_BUSY, KW_RESTARTING, KW_STOPPED };

struct kvd_worker {
    struct kvd *d;
    uint32_t index;
    enum kw_state state;
    uv_process_t proc;
    bool proc_live; /* proc handle initialised, not yet closed */
    pid_t pid;
    struct nnuv nn; /* PAIR bound at worker-N.sock */
    bool nn_open;
    uv_timer_t timer; /* restart back-off, step timeout */
    uint32_t backoff_ms;
    uint64_t started_ms;
    uint64_t steps, restarts;
    int32_t slot;     /* engine's step slot it runs, -1 */
    uint64_t step_id; /* step in flight */
};

/* ---- sessions (client_ep.c) ---- */
struct kvd_session {
    struct kvd_session *prev, *next;
    struct kvd *d;
    uint64_t id;
    char name[CLIENT_NAME_MAX + 1];
    struct nnuv nn;       /* PAIR s-<id>.sock */
    char path[PATHS_MAX]; /* socket file, removed at close */
    uint64_t last_seen_ms;
    struct kvd_req *reqs; /* open requests */
    bool closing;
};

/* ---- the step in flight (engine.c) ---- */
struct engine_slot {
    uint32_t n_entries;
    uint32_t *entry_idx; /* indices into sched plan entries */
    int32_t worker;      /* -1: waiting for an idle worker */
    uint64_t step_id;
    bool done;
};

enum engine_state { ENG_IDLE = 0, ENG_PREPARING, ENG_STEPPING, ENG_WAITING };

struct kvd_counters {
    uint64_t requests_finished, requests_failed;
    uint64_t prompt_tokens, prefill_tokens, output_tokens, steps;
    uint64_t prefix_query_tokens, prefix_hit_tokens;
};

struct kvd {
    uv_loop_t *loop;
    struct kvd_config cfg;
    char rundir[PATHS_MAX];
    char bin_dir[CONFIG_PATH_MAX];
    struct kvd_model model;
    struct kv_geom geom;
    uint64_t t_start_ms;
    /* broker */
    struct bcli bc;
    bool bc_open;
    uv_process_t broker_proc;
    bool broker_spawned, broker_live;
    struct broker_spawn_ctx *broker_ready_ctx; /* while waiting for "ready" */
    uv_timer_t broker_timer;                   /* restart back-off of a dead spawned broker */
    uint32_t broker_backoff_ms;
    uint32_t broker_restarts;
    bool bc_closing;            /* bcli closing after the broker died */
    struct broker_stats bstats; /* latest stats (admin "pool" answers from it) */
    bool bstats_valid;
    bool reattaching;            /* lease lost: attach again before the next cycle */
    bool lease_reset;            /* new lease: every held page is gone, recompute */
    char broker_addr[PATHS_MAX]; /* ipc:// address of broker.sock */
    char broker_dir[PATHS_MAX];  /* runtime dir of the broker (broker.fd lives there) */
    /* workers */
    struct kvd_worker *workers;
    uint32_t n_workers;
    /* scheduling */
    struct sched sched;
    enum engine_state eng;
    uv_timer_t eng_timer;
    struct engine_slot slots[SCHED_WORKERS_MAX];
    uint32_t n_slots, slots_pending;
    uint32_t prep_cursor; /* next plan entry to prepare */
    int prep_phase;       /* 0: prefix lookup pending, 1: alloc pending */
    bool plan_had_work;   /* the last plan produced entries */
    uint64_t next_step_id;
    uint64_t next_seq_id;
    struct kvd_req *reqs; /* every live request */
    uint32_t n_reqs;
    struct kvd_counters ctr;
    struct prefixhint hints; /* believed prefix index, for cache-aware admission */
    /* endpoints */
    struct nnuv client_ep, admin_ep;
    bool client_open, admin_open;
    struct kvd_session *sessions;
    uint32_t n_sessions;
    uint64_t next_session;
    bool admin_waiting; /* an async admin reply is pending */
    uv_timer_t sweep_timer;
    /* lifecycle */
    bool shutting_down, stopped;
    const char *shutdown_msg; /* static text ending requests at shutdown; NULL: default */
    uint64_t shutdown_deadline_ms;
    uv_signal_t sig_term, sig_int;
    int exit_code;
    bool notify;         /* NOTIFY_SOCKET set */
    uv_timer_t wd_timer; /* sd_notify WATCHDOG=1 */
};

/* request.c */
/* Builds and submits a request from a decoded generate. On error sends "done" with the
 * code (the request never exists) and returns it. */
int req_start(struct kvd *d, struct kvd_session *s, struct client_generate *g);
/* Sends new tokens of a streaming request (no-op when nothing new or not streaming). */
void req_stream(struct kvd *d, struct kvd_req *r, bool final);
/* Applies one step result for r's entry: logprobs, detok, stop conditions. Returns true
 * when the request reached stop/length (then r->end_code holds 1 = stop, 2 = length). */
bool req_on_token(struct kvd *d, struct kvd_req *r, const struct step_seq_result *res,
                  bool has_token);
void req_on_prompt_lp(struct kvd_req *r, uint32_t pos0, const struct step_seq_result *res);
/* Ends r: sends "done" (if the session lives), releases pages, frees r. code: 1 stop,
 * 2 length, else a negative kvd code (finish error/cancelled). */
void req_finish(struct kvd *d, struct kvd_req *r, int code, const char *msg);
/* Tells the client now that r ended (code < 0: cancelled, timeout, shutdown) while r is
 * still part of a step in flight: sends "done", detaches r from its session and sets
 * r->end_code; r itself (pages, sched state) is ended by req_finish once the step is
 * over or abandoned, and its late result is discarded. */
void req_end_early(struct kvd *d, struct kvd_req *r, int code, const char *msg);
struct kvd_req *req_find(struct kvd_session *s, uint64_t id);
/* Asks the broker to drop every page ref of q (fire and forget); q->n_pages = 0. */
void kvd_release_seq_pages(struct kvd *d, struct sched_seq *q);
#define REQ_END_STOP 1
#define REQ_END_LENGTH 2

/* engine.c */
int engine_init(struct kvd *d); /* after sched_init; 0 or -ENOMEM */
/* Sweep timer: ends cancelled / timed-out / shut-down requests. Idle engine: finished
 * at once. Step in flight: requests outside the step are finished, those inside are
 * told at once (req_end_early); a slot no worker has taken whose requests all ended is
 * dropped, and once the shutdown grace is over the whole step is abandoned (its late
 * results are discarded), so a step never holds kvd past --grace-ms. */
void engine_sweep_if_idle(struct kvd *d);
void engine_kick(struct kvd *d);                              /* work may be available */
void engine_worker_idle(struct kvd *d);                       /* a worker became idle */
void engine_worker_lost(struct kvd *d, struct kvd_worker *w); /* its step must re-run */
void engine_on_result(struct kvd *d, struct kvd_worker *w, const struct wmsg *m);
bool engine_is_idle(const struct kvd *d);
void engine_close(struct kvd *d);

/* workers.c */
int workers_start(struct kvd *d);
int worker_send_step(struct kvd *d, struct kvd_worker *w, struct wbuf *step, uint64_t step_id);
void workers_stop(struct kvd *d);
/* SIGTERM to every live worker: they restart (back-off) and attach the pool anew. */
void workers_recycle(struct kvd *d);
bool workers_all_stopped(const struct kvd *d);
uint32_t workers_idle(const struct kvd *d);

/* children.c */
int broker_spawn(struct kvd *d, void (*ready_cb)(struct kvd *d, int status));
void broker_stop(struct kvd *d);
bool broker_is_running(const struct kvd *d); /* alive or starting */

/* client_ep.c */
int client_ep_open(struct kvd *d);
void client_ep_close(struct kvd *d);
void session_send(struct kvd_session *s, struct wbuf *w);
void sessions_sweep(struct kvd *d);
void sessions_close_all(struct kvd *d);

/* admin_ep.c */
int admin_ep_open(struct kvd *d);
void admin_ep_close(struct kvd *d);

/* main.c helpers shared */
uint64_t kvd_now_ms(const struct kvd *d);
/* Stops accepting, gives in-flight requests cfg.grace_ms (0 with now = true), then
 * stops workers and the spawned broker; the loop ends when every handle closed. */
void kvd_begin_shutdown(struct kvd *d, bool now);
/* Called whenever something that blocks the end of a shutdown went away. */
void kvd_maybe_finish_shutdown(struct kvd *d);
/* The spawned broker died: restart it (back-off), re-attach, recycle the workers,
 * recompute every running sequence. */
void kvd_broker_lost(struct kvd *d);

#endif

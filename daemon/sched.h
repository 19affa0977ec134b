/* sched.h — the scheduler's pure logic: continuous batching over a page budget.
 *
 * Invariants (sched_check verifies them):
 *  - every submitted, unfinished sequence is on exactly one list: the waiting queue
 *    (QUEUED or PREEMPTED, FCFS; preempted ones go back to its front) or the running
 *    list (RUNNING, ordered by admission: head = oldest, tail = newest);
 *  - running count <= max_running; queue length <= max_queue;
 *  - n_computed <= n_tokens, and n_computed <= n_pages * block_size;
 *  - a waiting sequence holds no pages and has n_computed == 0.
 *
 * One planning round (the daemon's step cycle):
 *  1. sched_plan(avail) with avail = pages the broker can still hand out (free + cached).
 *     Running sequences get work oldest first within --max-batch-tokens (decode = 1
 *     token, prefill = a chunk of the prompt: chunked prefill). When one needs a page and
 *     the budget has none, the NEWEST running sequence is preempted (recompute: its pages
 *     are released, it goes back to the queue front, counted and logged); if that is the
 *     sequence itself and it runs alone, it cannot ever fit: it is put on plan->failed.
 *     Then, if nothing was preempted, queued sequences are admitted FCFS (or
 *     cache-aware, see SCHED_REORDER_WINDOW) while
 *     max_running, the token budget and the pages of their whole prompt (paged) or of
 *     max-model-len (naive) allow.
 *  2. The caller releases the pages of plan->preempted (they already hold n_pages 0),
 *     finishes plan->failed with an error, looks up prefix hits for admitted entries
 *     (sched_entry_hit), allocates pages up to entry->need_pages, and on an allocation
 *     failure calls sched_preempt and drops that entry (entry->seq = NULL).
 *  3. sched_assign splits the entries among idle workers; the caller sends them.
 *  4. For each entry's result, sched_entry_done; the caller then decides whether the
 *     sequence finished (stop / length) and calls sched_finish.
 * No I/O, no allocation after sched_init; loop thread only (or any single thread).
 */
#ifndef KVD_DAEMON_SCHED_H
#define KVD_DAEMON_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#define SCHED_WORKERS_MAX 64 /* worker slots one step can be split among */
/* Cache-aware admission (issue 6): among the first SCHED_REORDER_WINDOW waiting
 * sequences, the one expecting the longest cached prefix goes first, but only while
 * the queue is at most SCHED_REORDER_QUEUE_MAX long (else plain FCFS), never ahead of
 * a preempted sequence, and a sequence is overtaken at most SCHED_OVERTAKE_MAX times. */
#define SCHED_REORDER_WINDOW 8
#define SCHED_REORDER_QUEUE_MAX 64
#define SCHED_OVERTAKE_MAX 8

enum sched_state {
    SCHED_NEW = 0,   /* not yet submitted */
    SCHED_QUEUED,    /* waiting for admission */
    SCHED_PREEMPTED, /* waiting again after a preemption (will recompute) */
    SCHED_RUNNING,   /* admitted: holds pages, gets steps */
    SCHED_DONE,      /* finished; on no list */
};

struct sched_seq {
    /* Set by the owner before sched_submit. */
    uint64_t id;
    uint32_t *tokens;   /* prompt then generated ids; capacity max_total */
    uint32_t n_tokens;  /* ids known */
    uint32_t max_total; /* prompt + max_tokens, <= max_model_len */
    uint32_t *blocks;   /* page ids of the block table; capacity sched max_pages */
    void *owner;        /* the caller's request */
    /* Owned by the scheduler; read-only for others except where stated. */
    enum sched_state state;
    uint32_t n_computed;  /* tokens whose K/V is in the pool */
    uint32_t n_pages;     /* entries of blocks[] in use (the caller appends) */
    uint32_t n_cached;    /* tokens taken from the prefix cache at the last admission */
    uint32_t n_committed; /* full blocks registered in the prefix index (caller) */
    uint32_t preemptions; /* times this sequence was preempted */
    uint32_t prefix_hint; /* leading blocks the owner expects cached (ordering only) */
    uint32_t overtaken;   /* times a later sequence was admitted before it */
    uint64_t order;       /* admission counter: larger = newer */
    struct sched_seq *prev, *next;
};

struct sched_limits {
    uint32_t max_batch_tokens; /* tokens computed per step */
    uint32_t max_running;      /* running sequences */
    uint32_t max_queue;        /* waiting sequences */
    uint32_t max_model_len;    /* tokens per sequence */
    uint32_t block_size;       /* tokens per page */
    uint32_t total_pages;      /* pages of the whole pool */
    bool naive;                /* reserve max-model-len pages at admission */
    bool cache_aware;          /* reorder admission by prefix_hint (see above) */
};

/* One sequence's share of a step. */
struct sched_entry {
    struct sched_seq *seq; /* NULL: dropped by the caller */
    uint32_t pos0;         /* position of the first token to compute */
    uint32_t n;            /* tokens to compute: tokens[pos0 .. pos0 + n) */
    uint32_t need_pages;   /* block-table length needed before the step runs */
    bool sample;           /* pos0 + n == n_tokens: sample a token after the last one */
    bool admitted;         /* admitted this round: prefix lookup pending */
    uint32_t worker;       /* slot 0 .. n_workers-1 after sched_assign */
};

struct sched_plan {
    struct sched_entry *entries; /* capacity max_running */
    uint32_t n_entries;
    struct sched_seq **preempted; /* capacity max_running: release their pages */
    uint32_t n_preempted;
    struct sched_seq **failed; /* capacity max_running: cannot fit even alone */
    uint32_t n_failed;
    uint32_t n_tokens; /* sum of entries' n */
};

struct sched {
    struct sched_limits lim;
    struct sched_seq *q_head, *q_tail; /* waiting queue */
    struct sched_seq *r_head, *r_tail; /* running, oldest first */
    uint32_t n_queued;
    uint32_t n_running;
    uint64_t order_next;
    uint64_t preemptions;   /* total, for kvctl pool */
    uint32_t max_pages;     /* block-table capacity per sequence */
    struct sched_plan plan; /* storage reused each round */
};

/* Pages needed for n tokens. */
static inline uint32_t sched_pages_for(const struct sched *s, uint32_t n)
{
    return (n + s->lim.block_size - 1) / s->lim.block_size;
}

/* 0, or -EINVAL (a zero limit) / -ENOMEM; s untouched on failure. */
int sched_init(struct sched *s, const struct sched_limits *lim);
void sched_release(struct sched *s);

/* Queues seq (tokens/n_tokens/max_total/blocks set, n_tokens >= 1). Returns 0,
 * KVD_ETOOLONG (prompt + 1 token exceeds max-model-len, or the pages it needs exceed the
 * whole pool: refused now, never queued forever) or KVD_EOVERLOAD (queue full). */
int sched_submit(struct sched *s, struct sched_seq *seq);

/* Plans one step (see the header comment). avail: pages obtainable now. The plan lives
 * in s->plan until the next sched_plan. */
struct sched_plan *sched_plan(struct sched *s, uint32_t avail);

/* Prefix hit for an admitted entry: hit_blocks leading pages are already in the seq's
 * block table (n_pages = hit_blocks). Moves pos0 past them and shrinks n. hit_blocks
 * must leave at least one token to compute (KVD_BUG_ON otherwise). */
void sched_entry_hit(struct sched *s, struct sched_entry *e, uint32_t hit_blocks);

/* Splits the plan's live entries among n_workers (>= 1) slots, balancing tokens.
 * Returns the number of slots that got work. */
uint32_t sched_assign(struct sched *s, uint32_t n_workers);

/* The entry ran: n_computed advances; when sampled, token is appended (has_token).
 * Returns 0, or -ENOSPC when the sequence is already at max_total (token dropped). */
int sched_entry_done(struct sched *s, struct sched_entry *e, bool has_token, uint32_t token);

/* Forces a preemption of a running seq (e.g. the broker refused its pages): back to the
 * queue front, n_computed 0, n_pages 0 (the caller releases its pages). Counted. */
void sched_preempt(struct sched *s, struct sched_seq *seq);

/* Removes seq from whatever list holds it; state DONE. Caller releases its pages. */
void sched_finish(struct sched *s, struct sched_seq *seq);

/* Verifies the invariants above; 0 or -EINVAL (logs which). */
int sched_check(const struct sched *s);

#endif

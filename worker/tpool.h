/* tpool.h — the worker's compute threads: a fixed pool that runs parallel-for jobs.
 *
 * tpool_run(p, fn, ctx, n) calls fn(ctx, i) once for every i in [0, n), spread over the
 * pool's threads plus the calling thread, and returns when all calls have returned.
 * Tasks are handed out one index at a time (atomic counter), so uneven tasks balance.
 * fn must not fail, allocate or log (it runs in the hot path) and must not call
 * tpool_run. One caller thread at a time per pool (the worker's step loop).
 */
#ifndef KVD_WORKER_TPOOL_H
#define KVD_WORKER_TPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define TPOOL_THREADS_MAX 256 /* compute threads, caller included */

typedef void (*tpool_task_cb)(void *ctx, uint32_t task);

struct tpool {
    uint32_t n_threads;         /* total, the caller included (>= 1) */
    pthread_t *threads;         /* (n_threads - 1,) helper threads */
    pthread_mutex_t mu;
    pthread_cond_t cv_start;    /* helpers wait here for a new job */
    pthread_cond_t cv_done;     /* the caller waits here for helpers to finish */
    uint64_t gen;               /* job generation, bumped per tpool_run */
    uint32_t busy;              /* helpers still inside the current job */
    bool stop;                  /* set by tpool_release */
    tpool_task_cb fn;           /* current job */
    void *ctx;
    uint32_t n_tasks;
    atomic_uint next;           /* next task index to hand out */
};

/* Starts n_threads - 1 helpers (n_threads in 1..TPOOL_THREADS_MAX). 0, -EINVAL or -errno
 * (nothing started). */
int tpool_init(struct tpool *p, uint32_t n_threads);
void tpool_run(struct tpool *p, tpool_task_cb fn, void *ctx, uint32_t n_tasks);
/* Joins the helpers; p reusable after tpool_init. Safe on a zeroed pool. */
void tpool_release(struct tpool *p);

#endif

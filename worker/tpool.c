#include "worker/tpool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void tpool_drain(struct tpool *p)
{
    for (;;) {
        uint32_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks)
            return;
        p->fn(p->ctx, i);
    }
}

static void *tpool_main(void *arg)
{
    struct tpool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->cv_start, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        tpool_drain(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int tpool_init(struct tpool *p, uint32_t n_threads)
{
    memset(p, 0, sizeof(*p));
    if (n_threads == 0 || n_threads > TPOOL_THREADS_MAX)
        return -EINVAL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->n_threads = 1;
    if (n_threads > 1) {
        p->threads = calloc(n_threads - 1, sizeof(*p->threads));
        if (!p->threads) {
            tpool_release(p);
            return -ENOMEM;
        }
    }
    for (uint32_t i = 0; i + 1 < n_threads; i++) {
        int rc = pthread_create(&p->threads[i], NULL, tpool_main, p);
        if (rc != 0) {
            tpool_release(p);
            return -rc;
        }
        p->n_threads++;
    }
    return 0;
}

void tpool_run(struct tpool *p, tpool_task_cb fn, void *ctx, uint32_t n_tasks)
{
    if (p->n_threads <= 1 || n_tasks <= 1) {
        for (uint32_t i = 0; i < n_tasks; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->busy = p->n_threads - 1;
    p->gen++;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    tpool_drain(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void tpool_release(struct tpool *p)
{
    if (p->n_threads == 0)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i + 1 < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    memset(p, 0, sizeof(*p));
}

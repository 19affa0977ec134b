/* detok.c — incremental detokenization with stop strings (see detok.h). */
#include "daemon/detok.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DETOK_INITIAL_CAP 256 /* bytes; grows by doubling */

int detok_init(struct detok *d, const struct tok *tok, const char *const *stop, uint32_t n_stop)
{
    if (n_stop > DETOK_STOP_MAX)
        return -EINVAL;
    for (uint32_t i = 0; i < n_stop; i++) {
        size_t n = strlen(stop[i]);
        if (n == 0 || n > DETOK_STOP_BYTES_MAX)
            return -EINVAL;
    }
    memset(d, 0, sizeof(*d));
    d->tok = tok;
    d->n_stop = n_stop;
    for (uint32_t i = 0; i < n_stop; i++) {
        d->stop_len[i] = strlen(stop[i]);
        memcpy(d->stop[i], stop[i], d->stop_len[i] + 1);
    }
    return 0;
}

void detok_release(struct detok *d)
{
    free(d->text);
    memset(d, 0, sizeof(*d));
}

static int detok_reserve(struct detok *d, size_t more)
{
    if (d->len + more <= d->cap)
        return 0;
    size_t cap = d->cap ? d->cap : DETOK_INITIAL_CAP;
    while (cap < d->len + more)
        cap *= 2;
    char *t = realloc(d->text, cap);
    if (!t)
        return -ENOMEM;
    d->text = t;
    d->cap = cap;
    return 0;
}

int detok_push(struct detok *d, int32_t id)
{
    if (d->stopped)
        return 0;
    const char *p;
    size_t n;
    if (tok_piece(d->tok, id, &p, &n) < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    if (detok_reserve(d, n) < 0)
        return -ENOMEM;
    size_t old = d->len;
    memcpy(d->text + d->len, p, n);
    d->len += n;
    /* A stop string can only complete inside the new bytes: search from where one
     * ending in them could start. Earliest match wins. */
    size_t best = SIZE_MAX;
    for (uint32_t i = 0; i < d->n_stop; i++) {
        size_t sl = d->stop_len[i];
        size_t from = old + 1 > sl ? old + 1 - sl : 0;
        if (from < d->emitted)
            from = d->emitted;
        for (size_t at = from; at + sl <= d->len; at++)
            if (memcmp(d->text + at, d->stop[i], sl) == 0) {
                if (at < best)
                    best = at;
                break;
            }
    }
    if (best != SIZE_MAX) {
        d->len = best;
        d->stopped = true;
    }
    return 0;
}

/* Bytes at the end of text that are a proper prefix of some stop string. */
static size_t detok_held(const struct detok *d)
{
    size_t held = 0;
    for (uint32_t i = 0; i < d->n_stop; i++) {
        size_t sl = d->stop_len[i];
        for (size_t k = sl - 1; k > held; k--)
            if (k <= d->len - d->emitted && memcmp(d->text + d->len - k, d->stop[i], k) == 0) {
                held = k;
                break;
            }
    }
    return held;
}

void detok_take(struct detok *d, bool final, const char **out, size_t *n)
{
    size_t end = d->len;
    if (!final) {
        end -= detok_held(d);
        end = d->emitted + tok_utf8_complete_len(d->text + d->emitted, end - d->emitted);
    }
    *out = d->text ? d->text + d->emitted : "";
    *n = end - d->emitted;
    d->emitted = end;
}

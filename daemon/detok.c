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

/* The UTF-8 sequence at s[0..n): its length when complete and valid; 0 when s is a valid
 * but incomplete start (more bytes may complete it); -1 when invalid, *skip = bytes of
 * the maximal invalid subpart to replace by one U+FFFD (Unicode 3.9, as WHATWG). */
static int utf8_seq(const unsigned char *s, size_t n, size_t *skip)
{
    unsigned char b = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    *skip = 1;
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        len = 2;
    else if (b >= 0xE0 && b <= 0xEF)
        len = 3;
    else if (b >= 0xF0 && b <= 0xF4)
        len = 4;
    else
        return -1;
    if (b == 0xE0)
        lo = 0xA0;
    else if (b == 0xED)
        hi = 0x9F;
    else if (b == 0xF0)
        lo = 0x90;
    else if (b == 0xF4)
        hi = 0x8F;
    for (size_t i = 1; i < len; i++) {
        if (i >= n)
            return 0;
        if (s[i] < lo || s[i] > hi) {
            *skip = i;
            return -1;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return (int)len;
}

static const char detok_fffd[DETOK_FFFD_LEN] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Appends raw bytes to text as valid UTF-8: invalid sequences become U+FFFD, a trailing
 * incomplete sequence waits in d->pend. Space is reserved by the caller. */
static void detok_append_utf8(struct detok *d, const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t skip;
        int len = utf8_seq(s + i, n - i, &skip);
        if (len > 0) {
            memcpy(d->text + d->len, s + i, (size_t)len);
            d->len += (size_t)len;
            i += (size_t)len;
        } else if (len < 0) {
            memcpy(d->text + d->len, detok_fffd, DETOK_FFFD_LEN);
            d->len += DETOK_FFFD_LEN;
            i += skip;
        } else {
            d->n_pend = n - i; /* < 4: a 4-byte sequence misses at least one */
            memcpy(d->pend, s + i, d->n_pend);
            return;
        }
    }
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
    size_t raw_n = d->n_pend + n;
    unsigned char *raw = malloc(raw_n);
    if (!raw)
        return -ENOMEM;
    /* Worst case every byte becomes U+FFFD; plus one for a final flush of pend. */
    if (detok_reserve(d, raw_n * DETOK_FFFD_LEN + DETOK_FFFD_LEN) < 0) {
        free(raw);
        return -ENOMEM;
    }
    memcpy(raw, d->pend, d->n_pend);
    memcpy(raw + d->n_pend, p, n);
    d->n_pend = 0;
    size_t old = d->len;
    detok_append_utf8(d, raw, raw_n);
    free(raw);
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
        d->n_pend = 0;
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
    if (final && d->n_pend) {
        /* The stream ended inside a sequence: one U+FFFD for it (room reserved by push). */
        if (d->len + DETOK_FFFD_LEN <= d->cap) {
            memcpy(d->text + d->len, detok_fffd, DETOK_FFFD_LEN);
            d->len += DETOK_FFFD_LEN;
        }
        d->n_pend = 0;
    }
    size_t end = d->len;
    if (!final)
        end -= detok_held(d);
    *out = d->text ? d->text + d->emitted : "";
    *n = end - d->emitted;
    d->emitted = end;
}

/* detok.h — incremental detokenization of a generated stream, with stop strings.
 *
 * Invariants: text[0..len) is the generated text so far (pieces of every pushed token,
 * cut at a stop string once one matched), always valid UTF-8: an invalid sequence is
 * replaced by U+FFFD (one per maximal invalid subpart, as vLLM/HF/WHATWG), and trailing
 * bytes that may still become a valid character wait in pend[0..n_pend) until the next
 * token completes or breaks them, or the end (final take: one U+FFFD).
 * text[0..emitted) has been handed out; emitted never exceeds the point where a partly matched
 * stop string begins (that text may still vanish). After a stop string matched,
 * `stopped` is set and text ends right before it (the stop string is not part of the
 * output, as in vLLM/OpenAI). Memory: text grows with the output (capped by the
 * request's tokens). Loop thread only; no globals.
 */
#ifndef KVD_DAEMON_DETOK_H
#define KVD_DAEMON_DETOK_H

#include "common/tok.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DETOK_STOP_MAX 8         /* stop strings (== CLIENT_MAX_STOP) */
#define DETOK_STOP_BYTES_MAX 128 /* bytes of one stop string */
#define DETOK_FFFD_LEN 3         /* bytes of U+FFFD (the replacement character) in UTF-8 */
#define DETOK_PEND_MAX 3         /* bytes of an incomplete UTF-8 sequence (4-byte form - 1) */

struct detok {
    const struct tok *tok;
    char *text;
    size_t len, cap;
    size_t emitted;                     /* bytes already handed out */
    unsigned char pend[DETOK_PEND_MAX]; /* incomplete trailing UTF-8 sequence */
    size_t n_pend;
    bool stopped; /* a stop string matched */
    uint32_t n_stop;
    char stop[DETOK_STOP_MAX][DETOK_STOP_BYTES_MAX + 1];
    size_t stop_len[DETOK_STOP_MAX];
};

/* 0, or -EINVAL (too many / too long / empty stop strings). */
int detok_init(struct detok *d, const struct tok *tok, const char *const *stop, uint32_t n_stop);
void detok_release(struct detok *d);

/* Appends the piece of token id. Returns 0, -ENOMEM, or -EINVAL (id out of range).
 * When a stop string completes, d->stopped becomes true; later pushes are ignored. */
int detok_push(struct detok *d, int32_t id);

/* The text that may be handed out now: *out = text + emitted, *n bytes; marks it
 * emitted. With final = true (the request ended) everything left is released. */
void detok_take(struct detok *d, bool final, const char **out, size_t *n);

#endif

/* test_detok.c — streamed detokenization with stop strings, on the bundled model's real
 * tokenizer: deltas concatenate to the full decode, stop strings end the text (and are
 * not part of it, even when they span tokens), a possible stop-string prefix is held
 * back, and a partial UTF-8 character is never emitted. */
#include "daemon/detok.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct gguf_file g;
static struct tok tk;

static void setup(void)
{
    char path[1024], err[GGUF_ERR_LEN];
    const char *src = getenv("KVD_SOURCE_DIR");
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", src ? src : ".");
    ck_assert_int_eq(gguf_open(&g, path, err), 0);
    ck_assert_int_eq(tok_load(&tk, &g, err), 0);
}

static void teardown(void)
{
    tok_release(&tk);
    gguf_close(&g);
}

static size_t encode(const char *text, int32_t *ids, size_t cap)
{
    size_t n = 0;
    ck_assert_int_eq(tok_encode(&tk, text, strlen(text), false, ids, cap, &n), 0);
    return n;
}

/* Pushes ids one by one, concatenating what detok_take releases. */
static void stream(struct detok *d, const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    const char *t;
    size_t tl;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(detok_push(d, ids[i]), 0);
        detok_take(d, false, &t, &tl);
        ck_assert_uint_lt(len + tl, cap);
        memcpy(out + len, t, tl);
        len += tl;
    }
    detok_take(d, true, &t, &tl);
    memcpy(out + len, t, tl);
    len += tl;
    out[len] = '\0';
}

START_TEST(test_deltas_concatenate)
{
    int32_t ids[64];
    size_t n = encode("Once upon a time, there was a cat.", ids, 64);
    struct detok d;
    ck_assert_int_eq(detok_init(&d, &tk, NULL, 0), 0);
    char out[256];
    stream(&d, ids, n, out, sizeof(out));
    ck_assert_str_eq(out, " Once upon a time, there was a cat."); /* SPM prefix space */
    ck_assert(!d.stopped);
    detok_release(&d);
}
END_TEST

START_TEST(test_stop_string_spanning_tokens)
{
    int32_t ids[64];
    size_t n = encode("Once upon a time, there was a cat.", ids, 64);
    static const char *const stop[] = {"there w", "zzz"};
    struct detok d;
    ck_assert_int_eq(detok_init(&d, &tk, stop, 2), 0);
    char out[256];
    stream(&d, ids, n, out, sizeof(out));
    ck_assert(d.stopped);
    ck_assert_str_eq(out, " Once upon a time, ");
    detok_release(&d);
}
END_TEST

START_TEST(test_stop_prefix_held_back)
{
    int32_t ids[64];
    size_t n = encode("a cat", ids, 64);
    static const char *const stop[] = {"cat!"};
    struct detok d;
    ck_assert_int_eq(detok_init(&d, &tk, stop, 1), 0);
    const char *t;
    size_t tl, total = 0;
    for (size_t i = 0; i < n; i++) {
        detok_push(&d, ids[i]);
        detok_take(&d, false, &t, &tl);
        total += tl;
    }
    ck_assert_uint_eq(total, strlen(" a ")); /* "cat" may still become "cat!" */
    detok_take(&d, true, &t, &tl);           /* the request ended: release it */
    ck_assert_uint_eq(tl, 3);
    ck_assert_mem_eq(t, "cat", 3);
    detok_release(&d);
}
END_TEST

START_TEST(test_partial_utf8_held)
{
    /* "é" is not in the 512-token vocabulary: byte fallback gives one token per byte. */
    int32_t ids[16];
    size_t n = encode("é", ids, 16);
    ck_assert_uint_ge(n, 2);
    struct detok d;
    ck_assert_int_eq(detok_init(&d, &tk, NULL, 0), 0);
    const char *t;
    size_t tl, total = 0;
    char out[16];
    for (size_t i = 0; i < n; i++) {
        detok_push(&d, ids[i]);
        detok_take(&d, false, &t, &tl);
        memcpy(out + total, t, tl);
        total += tl;
        if (i + 1 < n)
            ck_assert_msg(total == 0 || (unsigned char)out[total - 1] < 0x80,
                          "partial UTF-8 emitted");
    }
    out[total] = '\0';
    ck_assert_str_eq(out, " é");
    detok_release(&d);
}
END_TEST

/* Id of the byte-fallback token <0xNN>. */
static int32_t byte_id(unsigned b)
{
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    for (int32_t id = 0; id < (int32_t)tk.n_vocab; id++) {
        const char *v = tok_vocab_str(&tk, id);
        if (v && strcmp(v, name) == 0)
            return id;
    }
    ck_abort_msg("no token %s", name);
    return -1;
}

/* Streams the bytes as byte tokens; returns every delta concatenated, each checked to
 * be valid UTF-8 on its own (the client protocol requires it per event). */
static void stream_bytes(const unsigned char *bytes, size_t n, char *out, size_t cap)
{
    struct detok d;
    ck_assert_int_eq(detok_init(&d, &tk, NULL, 0), 0);
    size_t total = 0;
    const char *t;
    size_t tl;
    for (size_t i = 0; i <= n; i++) {
        if (i < n)
            ck_assert_int_eq(detok_push(&d, byte_id(bytes[i])), 0);
        detok_take(&d, i == n, &t, &tl);
        ck_assert_msg(tok_utf8_complete_len(t, tl) == tl, "delta not UTF-8 complete");
        ck_assert_uint_lt(total + tl, cap);
        memcpy(out + total, t, tl);
        total += tl;
    }
    out[total] = '\0';
    detok_release(&d);
}

#define FFFD "\xEF\xBF\xBD"

START_TEST(test_invalid_utf8_replaced)
{
    char out[64];
    /* A lone continuation byte and a byte that never starts UTF-8. */
    static const unsigned char a[] = {'a', 0x80, 'b', 0xFF, 'c'};
    stream_bytes(a, sizeof(a), out, sizeof(out));
    ck_assert_str_eq(out, "a" FFFD "b" FFFD "c");
    /* A start byte broken by ASCII: the maximal subpart (E2 82) is one U+FFFD. */
    static const unsigned char b[] = {0xE2, 0x82, 'x'};
    stream_bytes(b, sizeof(b), out, sizeof(out));
    ck_assert_str_eq(out, FFFD "x");
    /* Overlong (C0 80) and surrogate (ED A0 80): not valid UTF-8. */
    static const unsigned char c[] = {0xC0, 0x80, 0xED, 0xA0, 0x80};
    stream_bytes(c, sizeof(c), out, sizeof(out));
    ck_assert_str_eq(out, FFFD FFFD FFFD FFFD FFFD);
}
END_TEST

START_TEST(test_incomplete_utf8_pending_then_completed)
{
    char out[64];
    /* "€" (E2 82 AC) one byte per token: held until complete, then whole. */
    static const unsigned char a[] = {'x', 0xE2, 0x82, 0xAC, 'y'};
    stream_bytes(a, sizeof(a), out, sizeof(out));
    ck_assert_str_eq(out, "x\xE2\x82\xAC"
                          "y");
    /* 4-byte "😀" (F0 9F 98 80). */
    static const unsigned char b[] = {0xF0, 0x9F, 0x98, 0x80};
    stream_bytes(b, sizeof(b), out, sizeof(out));
    ck_assert_str_eq(out, "\xF0\x9F\x98\x80");
}
END_TEST

START_TEST(test_incomplete_utf8_at_end)
{
    /* The stream ends inside a character: one U+FFFD at the end, nothing lost before. */
    char out[64];
    static const unsigned char a[] = {'o', 'k', 0xF0, 0x9F, 0x98};
    stream_bytes(a, sizeof(a), out, sizeof(out));
    ck_assert_str_eq(out, "ok" FFFD);
    /* Non-streamed: the final take alone. */
    struct detok d;
    const char *t;
    size_t tl;
    ck_assert_int_eq(detok_init(&d, &tk, NULL, 0), 0);
    ck_assert_int_eq(detok_push(&d, byte_id(0xE2)), 0);
    ck_assert_int_eq(detok_push(&d, byte_id(0x41)), 0);
    ck_assert_int_eq(detok_push(&d, byte_id(0xE2)), 0);
    detok_take(&d, true, &t, &tl);
    ck_assert_uint_eq(tl, 7);
    ck_assert_mem_eq(t, FFFD "A" FFFD, 7);
    detok_release(&d);
}
END_TEST

START_TEST(test_bad_init)
{
    struct detok d;
    static const char *const empty[] = {""};
    ck_assert_int_eq(detok_init(&d, &tk, empty, 1), -EINVAL);
    static const char *const many[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    ck_assert_int_eq(detok_init(&d, &tk, many, 9), -EINVAL);
    ck_assert_int_eq(detok_init(&d, &tk, NULL, 0), 0);
    ck_assert_int_eq(detok_push(&d, 1 << 30), -EINVAL);
    detok_release(&d);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("detok");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_deltas_concatenate);
    tcase_add_test(tc, test_stop_string_spanning_tokens);
    tcase_add_test(tc, test_stop_prefix_held_back);
    tcase_add_test(tc, test_partial_utf8_held);
    tcase_add_test(tc, test_invalid_utf8_replaced);
    tcase_add_test(tc, test_incomplete_utf8_pending_then_completed);
    tcase_add_test(tc, test_incomplete_utf8_at_end);
    tcase_add_test(tc, test_bad_init);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

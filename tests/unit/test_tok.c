/* test_tok.c — the tokenizer: SentencePiece BPE against the real stories260K vocabulary,
 * GPT-2 byte-level BPE and a synthetic byte vocabulary written by kvd-mkmodel, round trips
 * on varied text (multi-byte UTF-8, emoji, invalid bytes, whitespace runs, empty), the
 * -ENOSPC contract, special ids and load errors.
 *
 * The expected stories260K ids were computed independently with llama2.c's encode()
 * algorithm (global best-score pair merge, in Python over tok512.bin, the same vocabulary
 * in llama2.c's format), not with this code. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/gguf.h"
#include "common/gguf_write.h"
#include "common/tok.h"

static char g_tmp[256];
static struct gguf_file g_g;
static struct tok g_t;

static void tmp_setup(void)
{
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/kvd-test-tok-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static void tmp_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    ck_assert_int_eq(system(cmd), 0);
}

static void load_path(const char *path)
{
    char err[TOK_ERR_LEN];
    ck_assert_msg(gguf_open(&g_g, path, err) == 0, "%s", err);
    ck_assert_msg(tok_load(&g_t, &g_g, err) == 0, "%s", err);
    gguf_close(&g_g); /* the tokenizer copies what it needs */
}

static void load_stories(void)
{
    char path[512];
    const char *src = getenv("KVD_SOURCE_DIR");
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", src ? src : ".");
    load_path(path);
}

static void load_mkmodel(const char *args)
{
    const char *bin = getenv("KVD_BIN_DIR");
    char cmd[1024], path[300];
    snprintf(path, sizeof(path), "%s/v.gguf", g_tmp);
    snprintf(cmd, sizeof(cmd), "'%s/kvd-mkmodel' --log-level error --out '%s' --dim 32 "
                               "--layers 1 --heads 2 %s", bin ? bin : "bin", path, args);
    ck_assert_int_eq(system(cmd), 0);
    load_path(path);
}

static void unload(void)
{
    tok_release(&g_t);
}

static size_t enc(const char *s, size_t len, bool bos, int32_t *ids, size_t cap)
{
    size_t n = 0;
    ck_assert_int_eq(tok_encode(&g_t, s, len, bos, ids, cap, &n), 0);
    return n;
}

/* decode(encode(s)) == s, with and without BOS; and the SPM merge invariant: no two
 * adjacent output tokens concatenate to a vocabulary token (else BPE would have merged). */
static void roundtrip(const char *s, size_t len)
{
    static int32_t ids[1 << 19];
    static char out[1 << 19];
    size_t n, got;
    for (int bos = 0; bos <= 1; bos++) {
        n = enc(s, len, bos, ids, sizeof(ids) / sizeof(ids[0]));
        ck_assert_int_eq(tok_decode(&g_t, ids, n, TOK_DECODE_STRIP_PREFIX_SPACE, out,
                                    sizeof(out), &got), 0);
        if (got != len || memcmp(out, s, len) != 0)
            ck_abort_msg("round trip of '%.*s' gave '%.*s'", (int)len, s, (int)got, out);
    }
    if (g_t.kind != TOK_KIND_SPM)
        return;
    for (size_t i = 1; i < n; i++) { /* ids[0] is BOS (last pass ran with bos) */
        char cat[2 * TOK_MAX_PIECE_LEN + 1];
        const char *a = tok_vocab_str(&g_t, ids[i - 1]), *b = tok_vocab_str(&g_t, ids[i]);
        if (tok_type_of(&g_t, ids[i - 1]) != TOK_TYPE_NORMAL ||
            tok_type_of(&g_t, ids[i]) != TOK_TYPE_NORMAL)
            continue;
        snprintf(cat, sizeof(cat), "%s%s", a, b);
        for (uint32_t id = 0; id < tok_n_vocab(&g_t); id++)
            if (strcmp(tok_vocab_str(&g_t, (int32_t)id), cat) == 0) /* no ck_assert: hot */
                ck_abort_msg("'%s' + '%s' is token %u but was not merged", a, b, id);
    }
}

static const char *const VARIED[] = {
    "Once upon a time",
    "Hello, world!",
    "  two leading spaces",
    "trailing spaces   ",
    " ",
    "   ",
    "\t\ttabs\tand\nnew\nlines\n\n\r\n",
    "café naïve résumé über straße",
    "emoji 😀🎉👩‍👩‍👧 and 日本語のテキスト, 한국어, Ελληνικά, русский",
    "numbers 0 1 12 123 1234 3.14159 -7e10",
    "quotes \"double\" 'single' `back` «guillemets» „low“",
    "<s> </s> <unk> <0x41> look like specials but are text",
    "a",
    "mixed\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" "end",
};

START_TEST(test_stories_known_ids)
{
    static const struct {
        const char *text;
        int32_t ids[16];
        size_t n;
    } cases[] = {
        {"Once upon a time", {1, 403, 407, 261, 378}, 5},
        {"Lily and Ben went to the park.",
         {1, 317, 269, 368, 302, 263, 377, 267, 265, 282, 295, 433, 426}, 13},
        {"café 😀", {1, 280, 412, 431, 485, 410, 243, 162, 155, 131}, 10},
    };
    int32_t ids[64];
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = enc(cases[c].text, strlen(cases[c].text), true, ids, 64);
        ck_assert_uint_eq(n, cases[c].n);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(ids[i] == cases[c].ids[i], "'%s' id %zu: %d != %d", cases[c].text, i,
                          ids[i], cases[c].ids[i]);
    }
    ck_assert_str_eq(tok_vocab_str(&g_t, 403), "\xe2\x96\x81Once");
    const char *p;
    size_t l;
    ck_assert_int_eq(tok_piece(&g_t, 403, &p, &l), 0);
    ck_assert_uint_eq(l, 5);
    ck_assert_int_eq(memcmp(p, " Once", 5), 0);
    ck_assert_int_eq(tok_piece(&g_t, 13, &p, &l), 0); /* <0x0A> */
    ck_assert_uint_eq(l, 1);
    ck_assert_int_eq(p[0], '\n');
    ck_assert_int_eq(tok_piece(&g_t, 1, &p, &l), 0); /* <s> decodes to nothing */
    ck_assert_uint_eq(l, 0);
    ck_assert_int_eq(tok_piece(&g_t, 512, &p, &l), -EINVAL);
    ck_assert_int_eq(tok_piece(&g_t, -1, &p, &l), -EINVAL);
    ck_assert_ptr_null(tok_vocab_str(&g_t, 512));

    /* SentencePiece's one lossy case (documented in tok.h): a literal U+2581 in the text
     * is the space symbol, so it decodes as ' ' */
    char out[16];
    size_t n = enc("a\xe2\x96\x81" "b", 5, false, ids, 64), got;
    ck_assert_int_eq(tok_decode(&g_t, ids, n, TOK_DECODE_STRIP_PREFIX_SPACE, out, 16, &got), 0);
    ck_assert_uint_eq(got, 3);
    ck_assert_int_eq(memcmp(out, "a b", 3), 0);
}
END_TEST

START_TEST(test_stories_specials)
{
    ck_assert_int_eq(g_t.kind, TOK_KIND_SPM);
    ck_assert_uint_eq(tok_n_vocab(&g_t), 512);
    ck_assert_int_eq(g_t.bos, 1);
    ck_assert_int_eq(g_t.eos, 2);
    ck_assert_int_eq(g_t.unk, 0);
    ck_assert_int_eq(g_t.pad, -1); /* 0xFFFFFFFF in the file */
    ck_assert_int_eq(g_t.eot, -1);
    ck_assert(g_t.add_bos);
    ck_assert(g_t.add_space_prefix);
    ck_assert(tok_is_special(&g_t, 0));
    ck_assert(tok_is_special(&g_t, 1));
    ck_assert(tok_is_special(&g_t, 2));
    ck_assert(!tok_is_special(&g_t, 403));
    ck_assert(!tok_is_special(&g_t, 13));
    ck_assert(tok_is_eog(&g_t, 2));
    ck_assert(!tok_is_eog(&g_t, 1));
    ck_assert(!tok_is_eog(&g_t, 403));
    ck_assert(!tok_is_eog(&g_t, 9999));
    ck_assert_int_eq(tok_type_of(&g_t, 13), TOK_TYPE_BYTE);
    ck_assert_int_eq(tok_type_of(&g_t, 403), TOK_TYPE_NORMAL);
    ck_assert_int_eq(tok_type_of(&g_t, 600), TOK_TYPE_UNDEFINED);
}
END_TEST

START_TEST(test_stories_roundtrip_varied)
{
    for (size_t i = 0; i < sizeof(VARIED) / sizeof(VARIED[0]); i++)
        roundtrip(VARIED[i], strlen(VARIED[i]));
    roundtrip("", 0);
    /* random byte strings, including invalid UTF-8 and NUL bytes */
    uint64_t s = 12345;
    char buf[80];
    for (int k = 0; k < 300; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (s >> 33) % sizeof(buf);
        for (size_t i = 0; i < len; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint8_t r = (uint8_t)(s >> 40);
            buf[i] = (char)(r < 128 ? "the quick brown fox  \n"[r % 22] : r);
        }
        roundtrip(buf, len);
    }
}
END_TEST

START_TEST(test_stories_roundtrip_tinystories)
{
    const char *sh = getenv("KVD_SHARED_DIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/data/text/tinystories_valid_first1000.txt", sh ? sh : "..");
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "skipping: %s not found\n", path);
        return;
    }
    static char text[200001];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0'; /* strstr below */
    ck_assert_uint_gt(len, 100000);
    /* each story (split on the separator) round-trips; the compression is real BPE's */
    size_t total_ids = 0, total_bytes = 0, stories = 0;
    static int32_t ids[1 << 16];
    for (char *p = text, *end; (end = strstr(p, "<|endoftext|>")) != NULL;
         p = end + strlen("<|endoftext|>")) {
        while (*p == '\n')
            p++;
        size_t l = (size_t)(end - p);
        while (l && p[l - 1] == '\n')
            l--;
        size_t n = 0;
        ck_assert_int_eq(tok_encode(&g_t, p, l, false, ids, 1 << 16, &n), 0);
        total_ids += n;
        total_bytes += l;
        stories++;
        static char out[1 << 18];
        size_t got;
        ck_assert_int_eq(tok_decode(&g_t, ids, n, TOK_DECODE_STRIP_PREFIX_SPACE, out,
                                    sizeof(out), &got), 0);
        ck_assert(got == l && memcmp(out, p, l) == 0);
    }
    ck_assert_uint_gt(stories, 100);
    /* a 512-token BPE compresses English stories to well under 1 token per byte */
    ck_assert_msg(total_ids * 10 < total_bytes * 5, "%zu ids for %zu bytes", total_ids,
                  total_bytes);
}
END_TEST

START_TEST(test_enospc_and_empty)
{
    int32_t ids[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    size_t n = 0;
    const char *s = "Once upon a time";
    ck_assert_int_eq(tok_encode(&g_t, s, strlen(s), true, ids, 3, &n), -ENOSPC);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[2], 407);
    ck_assert_int_eq(ids[3], -7); /* nothing past cap */
    ck_assert_int_eq(tok_encode(&g_t, s, strlen(s), true, ids, 5, &n), 0);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(tok_encode(&g_t, s, strlen(s), true, NULL, 0, &n), -ENOSPC);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(tok_encode(&g_t, "", 0, true, ids, 8, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(tok_encode(&g_t, "", 0, false, ids, 8, &n), 0);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(tok_encode(&g_t, s, (size_t)TOK_MAX_TEXT_LEN + 1, false, ids, 8, &n),
                     -E2BIG);

    char out[8];
    size_t len;
    int32_t d[] = {1, 403, 407};
    ck_assert_int_eq(tok_decode(&g_t, d, 3, 0, out, sizeof(out), &len), -ENOSPC);
    ck_assert_uint_eq(len, 10); /* " Once upon" */
    ck_assert_int_eq(memcmp(out, " Once up", 8), 0);
    ck_assert_int_eq(tok_decode(&g_t, d, 3, TOK_DECODE_STRIP_PREFIX_SPACE, out, sizeof(out),
                                &len), -ENOSPC);
    ck_assert_uint_eq(len, 9);
    int32_t bad[] = {403, 9999};
    ck_assert_int_eq(tok_decode(&g_t, bad, 2, 0, out, sizeof(out), &len), -EINVAL);
}
END_TEST

START_TEST(test_parse_special)
{
    int32_t ids[32];
    size_t n;
    const char *s = "<s>Once upon</s><unk>";
    ck_assert_int_eq(tok_encode_ex(&g_t, s, strlen(s), TOK_ENCODE_PARSE_SPECIAL, ids, 32, &n), 0);
    /* <s> and </s> are CONTROL tokens; <unk> is UNKNOWN-typed, so it stays text; the text
     * after a special gets the space prefix again (as llama.cpp) */
    ck_assert_uint_ge(n, 5);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 403);
    ck_assert_int_eq(ids[2], 407);
    ck_assert_int_eq(ids[3], 2);
    char out[32];
    size_t len;
    ck_assert_int_eq(tok_decode(&g_t, ids + 4, n - 4, 0, out, sizeof(out), &len), 0);
    ck_assert_uint_eq(len, 6);
    ck_assert_int_eq(memcmp(out, " <unk>", 6), 0); /* text, with the prefix space */
    /* without the flag the same text is literal and round-trips */
    ck_assert_int_eq(tok_encode_ex(&g_t, s, strlen(s), TOK_ENCODE_BOS, ids, 32, &n), 0);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_ne(ids[1], 1);
    for (size_t i = 1; i < n; i++)
        ck_assert(!tok_is_special(&g_t, ids[i]));
    roundtrip(s, strlen(s));
    /* adjacent specials, special at the very end, BOS flag together with parsing */
    s = "</s></s>";
    ck_assert_int_eq(tok_encode_ex(&g_t, s, strlen(s),
                                   TOK_ENCODE_BOS | TOK_ENCODE_PARSE_SPECIAL, ids, 32, &n), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 2);
    ck_assert_int_eq(ids[2], 2);
}
END_TEST

START_TEST(test_utf8_complete_len)
{
    ck_assert_uint_eq(tok_utf8_complete_len("abc", 3), 3);
    ck_assert_uint_eq(tok_utf8_complete_len("", 0), 0);
    ck_assert_uint_eq(tok_utf8_complete_len("a\xc3", 2), 1);
    ck_assert_uint_eq(tok_utf8_complete_len("a\xc3\xa9", 3), 3);
    ck_assert_uint_eq(tok_utf8_complete_len("a\xf0\x9f\x98", 4), 1);
    ck_assert_uint_eq(tok_utf8_complete_len("a\xf0\x9f\x98\x80", 5), 5);
    ck_assert_uint_eq(tok_utf8_complete_len("\xe2\x96", 2), 0);
    ck_assert_uint_eq(tok_utf8_complete_len("a\x80", 2), 2);     /* stray continuation */
    ck_assert_uint_eq(tok_utf8_complete_len("a\xff", 2), 2);     /* invalid lead */
    ck_assert_uint_eq(tok_utf8_complete_len("\x80\x80\x80\x80\x80", 5), 5);
}
END_TEST

START_TEST(test_gpt2_vocab)
{
    load_mkmodel("--vocab-kind gpt2");
    ck_assert_int_eq(g_t.kind, TOK_KIND_BPE);
    ck_assert(!g_t.add_space_prefix);
    ck_assert_str_eq(tok_vocab_str(&g_t, g_t.bos), "<|begin_of_text|>");
    ck_assert(tok_is_eog(&g_t, g_t.eos));
    static const struct {
        const char *text;
        const char *pieces[12];
    } cases[] = {
        /* "Ġt"+"he" would need "Ġt" first: "The" has no space, so T + he */
        {"The cat was lit", {"T", "he", "Ġcat", "Ġwas", "Ġlit"}},
        {"the the", {"t", "he", "Ġthe"}},
        {"café", {"c", "a", "f", "Ã©"}},          /* é = C3 A9 -> the Ã© merge */
        {"ok 123", {"o", "k", "Ġ", "1", "2", "3"}}, /* " 123" is one pre-token */
        /* \s+(?!\S) backs off so the last whitespace stays for the next match: chunks
         * "a", "  \n", "\n", "b" — the Ċ Ċ merge cannot join across chunks */
        {"a  \n\nb", {"a", "ĠĠ", "Ċ", "Ċ", "b"}},
    };
    int32_t ids[32];
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = enc(cases[c].text, strlen(cases[c].text), false, ids, 32);
        char got[256] = "", want[256] = "";
        for (size_t i = 0; i < n; i++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "[%s]",
                     tok_vocab_str(&g_t, ids[i]));
        for (size_t i = 0; i < 12 && cases[c].pieces[i]; i++)
            snprintf(want + strlen(want), sizeof(want) - strlen(want), "[%s]", cases[c].pieces[i]);
        ck_assert_msg(!strcmp(got, want), "'%s': got %s want %s", cases[c].text, got, want);
    }
    const char *sp = "<|begin_of_text|>The cat<|end_of_text|>";
    size_t n = 0;
    ck_assert_int_eq(tok_encode_ex(&g_t, sp, strlen(sp), TOK_ENCODE_PARSE_SPECIAL, ids, 32, &n),
                     0);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(ids[0], g_t.bos);
    ck_assert_str_eq(tok_vocab_str(&g_t, ids[3]), "Ġcat");
    ck_assert_int_eq(ids[4], g_t.eos);
    for (size_t i = 0; i < sizeof(VARIED) / sizeof(VARIED[0]); i++)
        roundtrip(VARIED[i], strlen(VARIED[i]));
    roundtrip("", 0);
    roundtrip("\xff\xfe invalid \xc3 utf8 \xe2\x82", 21);
    roundtrip("\xe2\x96\x81 literal U+2581 is plain text here", 37);
    unload();
}
END_TEST

/* Long runs are one chunk for every pre-tokenizer (and one SPM symbol list): the
 * merge loops must be O(n log n), not O(n^2) — 256 KiB of one letter would not finish. */
static void long_runs(void)
{
    const size_t len = 256 << 10;
    char *s = malloc(len);
    memset(s, 'a', len);
    roundtrip(s, len);
    memset(s, ' ', len);
    roundtrip(s, len);
    for (size_t i = 0; i < len; i++)
        s[i] = "ab"[i % 2];
    roundtrip(s, len);
    free(s);
}

START_TEST(test_long_runs)
{
    load_stories();
    long_runs();
    unload();
    load_mkmodel("--vocab-kind gpt2");
    long_runs();
    unload();
}
END_TEST

START_TEST(test_bytes_vocab_and_padding)
{
    load_mkmodel("--vocab-kind bytes --vocab 400");
    ck_assert_uint_eq(tok_n_vocab(&g_t), 400);
    for (size_t i = 0; i < sizeof(VARIED) / sizeof(VARIED[0]); i++)
        roundtrip(VARIED[i], strlen(VARIED[i]));
    ck_assert_str_eq(tok_vocab_str(&g_t, 399), "<unused_399>");
    ck_assert(tok_is_special(&g_t, 399));
    const char *p;
    size_t l;
    ck_assert_int_eq(tok_piece(&g_t, 399, &p, &l), 0);
    ck_assert_uint_eq(l, 0);
    unload();

    load_mkmodel("--vocab 300"); /* stories vocab truncated: fewer merges, same text */
    ck_assert_uint_eq(tok_n_vocab(&g_t), 300);
    for (size_t i = 0; i < sizeof(VARIED) / sizeof(VARIED[0]); i++)
        roundtrip(VARIED[i], strlen(VARIED[i]));
    unload();
}
END_TEST

/* A GGUF with only tokenizer keys, for the load errors. */
static int load_custom(const char *model, uint32_t n, bool bytes, bool unk, uint32_t bos,
                       bool scores_short, size_t want_ids, char *err)
{
    struct gguf_writer w;
    uint8_t *buf;
    size_t len;
    char **toks = calloc(n, sizeof(*toks));
    float *sc = calloc(n, sizeof(*sc));
    for (uint32_t i = 0; i < n; i++) {
        toks[i] = malloc(16);
        if (bytes && i < 256)
            snprintf(toks[i], 16, "<0x%02X>", i);
        else
            snprintf(toks[i], 16, "t%u", i);
    }
    gguf_writer_init(&w);
    gguf_writer_str(&w, "tokenizer.ggml.model", model);
    gguf_writer_arr_str(&w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL, n);
    gguf_writer_arr_f32(&w, "tokenizer.ggml.scores", sc, scores_short ? n - 1 : n);
    gguf_writer_u32(&w, "tokenizer.ggml.bos_token_id", bos);
    if (unk)
        gguf_writer_u32(&w, "tokenizer.ggml.unknown_token_id", 0);
    ck_assert_int_eq(gguf_writer_write_mem(&w, &buf, &len), 0);
    gguf_writer_release(&w);
    struct gguf_file g;
    struct tok t;
    ck_assert_int_eq(gguf_open_mem(&g, buf, len, "tok.gguf", err), 0);
    int rc = tok_load(&t, &g, err);
    if (!rc) {
        int32_t ids[64];
        size_t m;
        ck_assert_int_eq(tok_encode(&t, "xyz", 3, true, ids, 64, &m), 0);
        ck_assert_uint_eq(m, want_ids);
        tok_release(&t);
    }
    tok_release(&t); /* safe twice */
    gguf_close(&g);
    free(buf);
    for (uint32_t i = 0; i < n; i++)
        free(toks[i]);
    free(toks);
    free(sc);
    return rc;
}

START_TEST(test_load_errors)
{
    char err[TOK_ERR_LEN];
    ck_assert_int_eq(load_custom("bert", 300, true, true, 1, false, 0, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "tokenizer 'bert' is not supported"));
    ck_assert_ptr_nonnull(strstr(err, "'tok.gguf'"));
    ck_assert_int_eq(load_custom("llama", 300, true, true, 1, true, 0, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "scores"));
    ck_assert_int_eq(load_custom("llama", 300, true, true, 300, false, 0, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "bos_token_id = 300"));
    ck_assert_int_eq(load_custom("llama", 300, false, false, 1, false, 0, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "byte tokens"));
    ck_assert_int_eq(load_custom("gpt2", 300, true, true, 1, false, 0, err), KVD_EMODEL);
    ck_assert_ptr_nonnull(strstr(err, "no token for byte"));
    /* no byte tokens but an unk: loads; BOS + one unk per character of "▁xyz" */
    ck_assert_msg(load_custom("llama", 300, false, true, 1, false, 1 + 4, err) == 0, "%s", err);
    /* byte tokens: BOS + "▁xyz" as 6 bytes (U+2581 is 3 of them) */
    ck_assert_msg(load_custom("llama", 300, true, true, 1, false, 1 + 6, err) == 0, "%s", err);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tok");
    TCase *st = tcase_create("stories260K");
    tcase_add_checked_fixture(st, load_stories, unload);
    tcase_set_timeout(st, 120);
    tcase_add_test(st, test_stories_known_ids);
    tcase_add_test(st, test_stories_specials);
    tcase_add_test(st, test_stories_roundtrip_varied);
    tcase_add_test(st, test_stories_roundtrip_tinystories);
    tcase_add_test(st, test_enospc_and_empty);
    tcase_add_test(st, test_parse_special);
    suite_add_tcase(s, st);
    TCase *mk = tcase_create("made");
    tcase_add_checked_fixture(mk, tmp_setup, tmp_teardown);
    tcase_set_timeout(mk, 120);
    tcase_add_test(mk, test_utf8_complete_len);
    tcase_add_test(mk, test_gpt2_vocab);
    tcase_add_test(mk, test_bytes_vocab_and_padding);
    tcase_add_test(mk, test_load_errors);
    tcase_add_test(mk, test_long_runs);
    suite_add_tcase(s, mk);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

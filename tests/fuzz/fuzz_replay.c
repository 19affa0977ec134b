/* fuzz_replay.c — runs a libFuzzer-style target without libFuzzer, deterministically:
 * every file of the given corpus directories/files as is, then --iterations mutations of
 * each (bit flips, interesting bytes and integers, truncation, chunk deletion and
 * duplication; positions biased to the first 8 KiB where headers live), from a fixed
 * --seed. Each input is copied into a buffer of exactly its size so ASan sees any
 * over-read. Exit 0 when every input returned (a crash fails the test). Generic: link it
 * with any target defining LLVMFuzzerTestOneInput. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REPLAY_MAX_INPUT (16u << 20) /* bytes of one corpus file */
#define REPLAY_MAX_FILES 256         /* corpus files */
#define REPLAY_HEAD_BYTES 8192       /* where most mutations land */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    uint8_t *buf;
    size_t len;
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int read_input(const char *path, struct input *in)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f)
        return -errno;
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size > REPLAY_MAX_INPUT) {
        fclose(f);
        return -EINVAL;
    }
    in->len = (size_t)st.st_size;
    in->buf = malloc(in->len ? in->len : 1);
    if (!in->buf || fread(in->buf, 1, in->len, f) != in->len) {
        fclose(f);
        free(in->buf);
        return -EIO;
    }
    fclose(f);
    return 0;
}

static void run_one(const uint8_t *p, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, p, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
}

static size_t pos(uint64_t *s, size_t len)
{
    size_t lim = len;
    if (rnd(s) % 4 != 0 && lim > REPLAY_HEAD_BYTES)
        lim = REPLAY_HEAD_BYTES;
    return lim ? (size_t)(rnd(s) % lim) : 0;
}

/* Mutates m (capacity cap) in place; returns the new length. */
static size_t mutate(uint64_t *s, uint8_t *m, size_t len, size_t cap)
{
    static const uint64_t ints[] = {0, 1, 2, 3, 4, 7, 8, 31, 32, 255, 256, 0x7f, 0x80, 0xffff,
                                    0x7fffffff, 0x80000000u, 0xffffffffu, 1ull << 32,
                                    1ull << 40, 0x7fffffffffffffffull, UINT64_MAX,
                                    UINT64_MAX - 31};
    int n = 1 + (int)(rnd(s) % 4);
    for (int k = 0; k < n && len; k++) {
        size_t p = pos(s, len);
        switch (rnd(s) % 7) {
        case 0:
            m[p] ^= (uint8_t)(1u << (rnd(s) % 8));
            break;
        case 1:
            m[p] = (uint8_t)ints[rnd(s) % (sizeof(ints) / sizeof(ints[0]))];
            break;
        case 2:
        case 3: {
            uint64_t v = ints[rnd(s) % (sizeof(ints) / sizeof(ints[0]))];
            size_t w = rnd(s) % 2 ? 8 : 4;
            if (p + w <= len)
                memcpy(m + p, &v, w);
            break;
        }
        case 4:
            len = p; /* truncate */
            break;
        case 5: { /* delete a chunk */
            size_t d = 1 + rnd(s) % 64;
            if (p + d > len)
                d = len - p;
            memmove(m + p, m + p + d, len - p - d);
            len -= d;
            break;
        }
        case 6: { /* duplicate a chunk */
            size_t d = 1 + rnd(s) % 64;
            if (p + d > len)
                d = len - p;
            if (len + d <= cap) {
                memmove(m + p + d, m + p, len - p);
                len += d;
            }
            break;
        }
        }
    }
    return len;
}

static int add_path(const char *path, struct input *ins, size_t *n)
{
    struct stat st;
    if (stat(path, &st))
        return -errno;
    if (!S_ISDIR(st.st_mode)) {
        if (*n >= REPLAY_MAX_FILES)
            return -E2BIG;
        return read_input(path, &ins[(*n)++]);
    }
    struct dirent **names;
    int k = scandir(path, &names, NULL, alphasort); /* sorted: deterministic order */
    if (k < 0)
        return -errno;
    int rc = 0;
    for (int i = 0; i < k; i++) {
        char p[4096];
        if (names[i]->d_name[0] != '.' && !rc) {
            snprintf(p, sizeof(p), "%s/%s", path, names[i]->d_name);
            rc = add_path(p, ins, n);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    static struct input ins[REPLAY_MAX_FILES];
    size_t n = 0;
    unsigned long iters = 1000;
    uint64_t seed = 0x6b7664667a7a; /* "kvdfzz" */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: %s [--iterations N] [--seed S] CORPUS_DIR_OR_FILE...\n", argv[0]);
            return 0;
        } else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
            iters = strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0) | 1;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "unknown option '%s'\n", argv[i]);
            return 64;
        } else if (add_path(argv[i], ins, &n)) {
            fprintf(stderr, "cannot read corpus '%s'\n", argv[i]);
            return 66;
        }
    }
    if (n == 0) {
        fprintf(stderr, "no corpus inputs\n");
        return 66;
    }
    unsigned long runs = 0;
    for (size_t f = 0; f < n; f++) {
        run_one(ins[f].buf, ins[f].len);
        runs++;
        size_t cap = ins[f].len + 4096;
        uint8_t *m = malloc(cap);
        uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * (f + 1));
        for (unsigned long it = 0; it < iters; it++) {
            memcpy(m, ins[f].buf, ins[f].len);
            size_t len = mutate(&s, m, ins[f].len, cap);
            run_one(m, len);
            runs++;
        }
        free(m);
        free(ins[f].buf);
    }
    printf("fuzz replay: %zu corpus files, %lu inputs, all returned\n", n, runs);
    return 0;
}

/* blockhash.c — chained XXH3_128 block hashes (see blockhash.h). */
#include "common/blockhash.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack, no malloc */
#include <xxhash.h>

#define BLOCKHASH_TAG "kvd-prefix-v1" /* domain separation; bump if the recipe changes */
#define BLOCKHASH_TOKENS_CHUNK 256    /* tokens converted to LE bytes per update */

static void le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void le64(uint8_t *p, uint64_t v)
{
    le32(p, (uint32_t)v);
    le32(p + 4, (uint32_t)(v >> 32));
}

static void to_canonical(XXH128_hash_t h, struct blockhash *out)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    _Static_assert(sizeof(c.digest) == BLOCKHASH_BYTES, "XXH3_128 is 16 bytes");
    memcpy(out->b, c.digest, BLOCKHASH_BYTES);
}

int blockhash_id_init(struct blockhash_id *id, uint64_t model_fp, uint32_t kv_dtype,
                      uint32_t block_size, const void *salt, size_t salt_len)
{
    if (block_size == 0 || salt_len > BLOCKHASH_SALT_MAX || (salt_len && !salt))
        return -EINVAL;
    uint8_t buf[sizeof(BLOCKHASH_TAG) + 8 + 4 + 4 + 1 + 4 + BLOCKHASH_SALT_MAX];
    size_t n = 0;
    memcpy(buf, BLOCKHASH_TAG, sizeof(BLOCKHASH_TAG));
    n += sizeof(BLOCKHASH_TAG);
    le64(buf + n, model_fp);
    n += 8;
    le32(buf + n, kv_dtype);
    n += 4;
    le32(buf + n, block_size);
    n += 4;
    buf[n++] = salt_len ? 1 : 0; /* "no salt" differs from every salt */
    le32(buf + n, (uint32_t)salt_len);
    n += 4;
    if (salt_len)
        memcpy(buf + n, salt, salt_len);
    n += salt_len;
    to_canonical(XXH3_128bits(buf, n), &id->digest);
    id->block_size = block_size;
    return 0;
}

void blockhash_next(const struct blockhash_id *id, const struct blockhash *parent,
                    const uint32_t *tokens, struct blockhash *out)
{
    XXH3_state_t st;
    uint8_t tb[BLOCKHASH_TOKENS_CHUNK * 4];
    static const uint8_t no_parent[BLOCKHASH_BYTES] = {0};
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, parent ? parent->b : no_parent, BLOCKHASH_BYTES);
    uint8_t has_parent = parent ? 1 : 0;
    XXH3_128bits_update(&st, &has_parent, 1);
    XXH3_128bits_update(&st, id->digest.b, BLOCKHASH_BYTES);
    for (uint32_t i = 0; i < id->block_size;) {
        uint32_t k = id->block_size - i;
        if (k > BLOCKHASH_TOKENS_CHUNK)
            k = BLOCKHASH_TOKENS_CHUNK;
        for (uint32_t j = 0; j < k; j++)
            le32(tb + 4 * j, tokens[i + j]);
        XXH3_128bits_update(&st, tb, (size_t)k * 4);
        i += k;
    }
    to_canonical(XXH3_128bits_digest(&st), out);
}

size_t blockhash_chain(const struct blockhash_id *id, const uint32_t *tokens, size_t n, size_t from,
                       const struct blockhash *parent, struct blockhash *out, size_t max_out)
{
    size_t full = n / id->block_size, k = 0;
    struct blockhash prev;
    const struct blockhash *p = from ? parent : NULL;
    for (size_t b = from; b < full && k < max_out; b++, k++) {
        blockhash_next(id, p, tokens + b * id->block_size, &out[k]);
        prev = out[k];
        p = &prev;
    }
    return k;
}

bool blockhash_eq(const struct blockhash *a, const struct blockhash *b)
{
    return memcmp(a->b, b->b, BLOCKHASH_BYTES) == 0;
}

void blockhash_hex(const struct blockhash *h, char out[2 * BLOCKHASH_BYTES + 1])
{
    for (int i = 0; i < BLOCKHASH_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", h->b[i]);
}

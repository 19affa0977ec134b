/* blockhash.h — the prefix-cache identity of a full KV block (issue 6).
 *
 * Block i's hash is XXH3_128 over (hash of block i-1, or the root for i = 0; the
 * identity digest; block i's token ids as little-endian u32). The identity digest is
 * XXH3_128 over (a domain tag, model fingerprint, kv dtype, block size, cache_salt), so
 * two blocks share a hash only when everything that determined their K/V values is
 * equal: same model, same page format, same salt, same tokens at the same positions
 * (positions follow from the chain). Hashes travel as 16 canonical (big-endian) bytes.
 * Pure functions; any thread.
 */
#ifndef KVD_COMMON_BLOCKHASH_H
#define KVD_COMMON_BLOCKHASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BLOCKHASH_BYTES 16
#define BLOCKHASH_SALT_MAX 256 /* bytes of cache_salt */

struct blockhash {
    uint8_t b[BLOCKHASH_BYTES];
};

struct blockhash_id {
    struct blockhash digest; /* identity digest (see above) */
    uint32_t block_size;     /* tokens per block */
};

/* Builds the identity. salt may be NULL/0 (no salt; distinct from any non-empty salt).
 * 0, or -EINVAL (block_size 0, salt longer than BLOCKHASH_SALT_MAX); id untouched then. */
int blockhash_id_init(struct blockhash_id *id, uint64_t model_fp, uint32_t kv_dtype,
                      uint32_t block_size, const void *salt, size_t salt_len);

/* Hash of one full block given its parent (NULL for block 0). tokens has block_size ids. */
void blockhash_next(const struct blockhash_id *id, const struct blockhash *parent,
                    const uint32_t *tokens, struct blockhash *out);

/* Hashes of the full blocks of tokens[0..n), starting at block `from` whose parent is
 * parent (NULL when from == 0). Writes at most max_out hashes; returns how many. */
size_t blockhash_chain(const struct blockhash_id *id, const uint32_t *tokens, size_t n, size_t from,
                       const struct blockhash *parent, struct blockhash *out, size_t max_out);

bool blockhash_eq(const struct blockhash *a, const struct blockhash *b);
/* 32 lowercase hex digits + NUL. */
void blockhash_hex(const struct blockhash *h, char out[2 * BLOCKHASH_BYTES + 1]);

#endif

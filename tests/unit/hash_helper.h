/* hash_helper.h — block hashes for broker tests, made with kvd's one recipe
 * (common/blockhash.h), as kvd itself makes them. */
#ifndef KVD_TESTS_HASH_HELPER_H
#define KVD_TESTS_HASH_HELPER_H

#include "common/blockhash.h"
#include "proto/broker_msg.h"

#include <check.h>
#include <string.h>

_Static_assert(sizeof(struct blockhash) == sizeof(struct broker_hash), "16-byte hashes");

/* Hash of one full block of block_size tokens chained on parent (NULL: first block). */
static inline struct broker_hash test_hash_block(uint64_t model_fp, uint32_t block_size,
                                                 const struct broker_hash *parent,
                                                 const uint32_t *tokens)
{
    struct blockhash_id id;
    struct blockhash p, out;
    struct broker_hash h;
    ck_assert_int_eq(blockhash_id_init(&id, model_fp, 0, block_size, NULL, 0), 0);
    if (parent)
        memcpy(p.b, parent->b, sizeof(p.b));
    blockhash_next(&id, parent ? &p : NULL, tokens, &out);
    memcpy(h.b, out.b, sizeof(h.b));
    return h;
}

#endif

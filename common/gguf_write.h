/* gguf_write.h — writes GGUF v3 files (kvd-mkmodel, tests, fuzz seeds).
 *
 * A writer collects metadata (encoded at once into a byte buffer) and tensor
 * declarations; gguf_writer_write() then emits header, metadata, tensor infos, padding
 * and the data, asking a fill callback for each tensor's bytes in file order, so a big
 * model is never held in memory more than one tensor at a time. Offsets are aligned to
 * GGUF_DEFAULT_ALIGNMENT. Not thread-safe; one writer per thread.
 * Errors: -ENOMEM, -EINVAL (bad type/shape, more than the reader's limits), -errno from
 * I/O, or what the fill callback returned; the writer stays usable for release only.
 */
#ifndef KVD_COMMON_GGUF_WRITE_H
#define KVD_COMMON_GGUF_WRITE_H

#include <stdint.h>
#include <stdio.h>

#include "common/gguf.h"

/* Fills dst (nbytes, the tensor's whole data) for the tensor named `name`. 0 or -errno. */
typedef int (*gguf_fill_cb)(void *ctx, const char *name, void *dst, uint64_t nbytes);

struct gguf_wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;
    gguf_fill_cb fill;
    void *ctx;
};

struct gguf_writer {
    uint8_t *kv;        /* encoded metadata */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    struct gguf_wtensor *t;
    uint64_t n_t, cap_t;
    int err;            /* first error of an add_* call, reported by write */
};

void gguf_writer_init(struct gguf_writer *w);
void gguf_writer_release(struct gguf_writer *w);

/* Metadata. Errors are sticky: the first failure is returned by gguf_writer_write(). */
void gguf_writer_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_bool(struct gguf_writer *w, const char *key, bool v);
void gguf_writer_str(struct gguf_writer *w, const char *key, const char *s);
/* Array of n strings; lens[i] bytes of strs[i] (lens NULL: strlen). */
void gguf_writer_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                         const uint64_t *lens, uint64_t n);
void gguf_writer_arr_f32(struct gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_writer_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Any value type, already encoded (tests use it for odd types). */
void gguf_writer_raw(struct gguf_writer *w, const char *key, uint32_t vtype, const void *val,
                     size_t len);

/* Declares a tensor; fill is called during write. */
void gguf_writer_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, gguf_fill_cb fill, void *ctx);

/* Writes the whole file to f. Returns 0 or the first error. */
int gguf_writer_write(struct gguf_writer *w, FILE *f);
/* Writes to path (created/truncated, then renamed into place: no half file is left). */
int gguf_writer_write_path(struct gguf_writer *w, const char *path);
/* Writes to a malloc'd buffer the caller frees. */
int gguf_writer_write_mem(struct gguf_writer *w, uint8_t **buf, size_t *len);

#endif

/* gguf_impl.h — private to the model-file modules (gguf*.c, tok*.c): shared helpers. */
#ifndef KVD_COMMON_GGUF_IMPL_H
#define KVD_COMMON_GGUF_IMPL_H

#include <stdint.h>

/* Writes "'name': <message>" into err (GGUF_ERR_LEN bytes); err may be NULL. */
void gguf_seterr(char *err, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "u32", "string", ... for a metadata value type; "unknown" otherwise. */
const char *gguf_vtype_name(uint32_t t);

#endif

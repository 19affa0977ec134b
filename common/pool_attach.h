/* pool_attach.h — the broker.fd hand-over: broker serves the pool, workers attach it.
 *
 * Protocol on broker.fd (AF_UNIX SOCK_STREAM, one connection per attach): the client
 * connects; the broker checks the peer uid (SO_PEERCRED), then sends ONE fdpass frame
 * (common/fdpass.h) and closes:
 *   u32 magic POOL_ATTACH_MAGIC, u32 POOL_ATTACH_VERSION, then the pool_desc fields in
 *   declaration order as little-endian u32/u64/i32 (geom: n_layers, n_kv_heads,
 *   head_dim, block_size, kv_dtype as u32; data_bytes, scale_bytes, page_bytes as u64),
 *   then u32 blob_len and blob_len bytes (cuda-ipc handles), with the pool's fds.
 * A peer of another uid gets the connection closed without a frame.
 * The worker then checks the descriptor against what it expects and maps the pool.
 */
#ifndef KVD_COMMON_POOL_ATTACH_H
#define KVD_COMMON_POOL_ATTACH_H

#include "common/mem.h"

#include <stddef.h>
#include <stdint.h>

#define POOL_ATTACH_MAGIC 0x5044564bu  /* "KVDP" little-endian */
#define POOL_ATTACH_VERSION 1          /* bump when the frame above changes */
#define POOL_DESC_WIRE_BYTES 104       /* serialized pool_desc size (checked by a test) */

/* Worker side: connects to fd_sock_path, receives the descriptor and fds, checks the
 * descriptor against expect (NULL: no check; fields left 0 are not checked, see
 * pool_desc_check) and maps the pool into out. Blocking, bounded by FDPASS_TIMEOUT_MS.
 * 0, or: -ENOENT/-ECONNREFUSED (no broker), KVD_EMISMATCH (logged with the field),
 * KVD_EMSG (bad frame), -ENOTSUP (cuda pool in a build without CUDA), -errno. On failure
 * out is zeroed and nothing stays open; every failure is logged except -ENOENT and
 * -ECONNREFUSED (debug only: callers retry those while the broker starts, and log the
 * last one). Release with mem_pool_release(). Any thread. */
int pool_attach(const char *fd_sock_path, const struct pool_desc *expect,
                struct mem_pool *out);

/* Broker side: sends mp's descriptor, fds and blob on an accepted connection after the
 * peer check. 0, -EPERM (other uid; nothing sent), -errno. Does not close conn. */
int pool_attach_serve(int conn, const struct mem_pool *mp);

/* Serialization of a descriptor (the part of the frame after magic and version).
 * encode: writes POOL_DESC_WIRE_BYTES into buf (cap >= that) and returns the count.
 * decode: 0, or KVD_EMSG when len is short or a value is out of range. */
size_t pool_desc_encode(const struct pool_desc *d, uint8_t *buf, size_t cap);
int pool_desc_decode(struct pool_desc *d, const uint8_t *buf, size_t len);

#endif

/* fdpass.h — file descriptors over an AF_UNIX stream socket (SCM_RIGHTS), peer checks.
 *
 * A frame is: u32 length (little-endian) + length bytes; the fds of a frame ride on its
 * first byte. Frames are at most FDPASS_FRAME_MAX bytes with at most FDPASS_FDS_MAX fds.
 * Received fds are close-on-exec (MSG_CMSG_CLOEXEC). Blocking sockets; any thread.
 */
#ifndef KVD_COMMON_FDPASS_H
#define KVD_COMMON_FDPASS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FDPASS_FRAME_MAX (64u << 10) /* bytes per frame: descriptor + 240 IPC handles fit */
#define FDPASS_FDS_MAX 250           /* fds per frame; the kernel's SCM_MAX_FD is 253 */
#define FDPASS_TIMEOUT_MS 5000       /* send/receive timeout set on the socket by both sides */

/* Sends one frame of len bytes with n_fds fds (dup'ed by the kernel; the caller keeps
 * its own). 0, or -errno / -EMSGSIZE. */
int fdpass_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds);
/* Receives one frame into buf (cap bytes) and up to max_fds fds. On success *len and
 * *n_fds are set and the caller owns the fds. On failure every fd received is closed:
 * -EMSGSIZE (frame or fd count over the limits), -EPIPE (peer closed early), -errno. */
int fdpass_recv(int sock, void *buf, size_t cap, size_t *len, int *fds, size_t max_fds,
                size_t *n_fds);
/* SO_PEERCRED: 0 when the peer's uid equals ours, -EPERM when
 * it differs (pid filled in both cases if non-NULL), -errno. */
int fdpass_peer_check(int sock, pid_t *pid);
/* Sets SO_RCVTIMEO and SO_SNDTIMEO to ms. 0 or -errno. */
int fdpass_set_timeout(int sock, unsigned ms);

#endif

#include "common/fdpass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define FDPASS_HDR 4 /* bytes of the little-endian frame length */

static int send_all(int sock, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = send(sock, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int fdpass_send(int sock, const void *buf, size_t len, const int *fds, size_t n_fds)
{
    if (len > FDPASS_FRAME_MAX || n_fds > FDPASS_FDS_MAX)
        return -EMSGSIZE;
    uint8_t hdr[FDPASS_HDR] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                               (uint8_t)(len >> 24)};
    union {
        char buf[CMSG_SPACE(sizeof(int) * FDPASS_FDS_MAX)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = hdr, .iov_len = sizeof(hdr)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
    }
    ssize_t k;
    do
        k = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return -errno;
    int rc = send_all(sock, hdr + k, sizeof(hdr) - (size_t)k);
    return rc ? rc : send_all(sock, buf, len);
}

static int recv_all(int sock, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = recv(sock, p, n, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            return -EPIPE;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int fdpass_recv(int sock, void *buf, size_t cap, size_t *len, int *fds, size_t max_fds,
                size_t *n_fds)
{
    uint8_t hdr[FDPASS_HDR];
    union {
        char buf[CMSG_SPACE(sizeof(int) * FDPASS_FDS_MAX)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = hdr, .iov_len = 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    size_t got_fds = 0;
    int got[FDPASS_FDS_MAX];
    ssize_t k;
    do
        k = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return -errno;
    if (k == 0)
        return -EPIPE;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < n && got_fds < FDPASS_FDS_MAX; i++)
                memcpy(&got[got_fds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
    int rc = 0;
    if (mh.msg_flags & MSG_CTRUNC)
        rc = -EMSGSIZE;
    if (!rc)
        rc = recv_all(sock, hdr + 1, sizeof(hdr) - 1);
    size_t flen = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 |
                  (size_t)hdr[3] << 24;
    if (!rc && (flen > cap || flen > FDPASS_FRAME_MAX || got_fds > max_fds))
        rc = -EMSGSIZE;
    if (!rc)
        rc = recv_all(sock, buf, flen);
    if (rc) {
        for (size_t i = 0; i < got_fds; i++)
            close(got[i]);
        return rc;
    }
    memcpy(fds, got, got_fds * sizeof(int));
    *n_fds = got_fds;
    *len = flen;
    return 0;
}

int fdpass_peer_check(int sock, pid_t *pid)
{
    struct ucred cr;
    socklen_t l = sizeof(cr);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
        return -errno;
    if (pid)
        *pid = cr.pid; /* also on refusal: the caller logs who was refused */
    return cr.uid == geteuid() ? 0 : -EPERM;
}

int fdpass_set_timeout(int sock, unsigned ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
        return -errno;
    return 0;
}

#include "tools/kvctl_admin.h"

#include "common/err.h"
#include "common/paths.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int probe_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int admin_conn_open(struct admin_conn *c, const char *runtime_dir, int timeout_ms,
                    char err[WIRE_ERR_LEN])
{
    char dir[PATHS_MAX], addr[PATHS_MAX];
    int rc, max = -1;
    c->sock = -1;
    c->timeout_ms = timeout_ms;
    if ((rc = paths_runtime_dir(dir, sizeof(dir), runtime_dir)) ||
        (rc = paths_join(c->path, sizeof(c->path), dir, PATHS_SOCK_ADMIN)) ||
        (rc = paths_ipc_addr(addr, sizeof(addr), dir, PATHS_SOCK_ADMIN))) {
        snprintf(err, WIRE_ERR_LEN, "runtime dir path too long");
        return rc;
    }
    if ((rc = probe_unix(c->path))) {
        snprintf(err, WIRE_ERR_LEN, "cannot reach kvd at '%.90s': %s%s", c->path,
                 kvd_strerror(rc),
                 rc == -ENOENT || rc == -ECONNREFUSED ? " (is kvd running?)" : "");
        return rc;
    }
    int s = nn_socket(AF_SP, NN_REQ);
    if (s < 0)
        return -nn_errno();
    if (nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &timeout_ms, sizeof(timeout_ms)) < 0 ||
        nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &timeout_ms, sizeof(timeout_ms)) < 0 ||
        nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof(max)) < 0 ||
        nn_connect(s, addr) < 0) {
        rc = -nn_errno();
        nn_close(s);
        snprintf(err, WIRE_ERR_LEN, "cannot connect to '%.100s': %s", addr, kvd_strerror(rc));
        return rc;
    }
    c->sock = s;
    return 0;
}

void admin_conn_close(struct admin_conn *c)
{
    if (c->sock >= 0)
        nn_close(c->sock);
    c->sock = -1;
}

void admin_reply_release(struct admin_reply *r)
{
    wmsg_release(&r->m);
    if (r->buf)
        nn_freemsg(r->buf);
    r->buf = NULL;
}

int admin_conn_call(struct admin_conn *c, enum admin_req r, struct admin_reply *out,
                    char err[WIRE_ERR_LEN])
{
    struct wbuf w;
    int rc;
    memset(out, 0, sizeof(*out));
    wbuf_init(&w);
    admin_request_encode(r, &w);
    int n = nn_send(c->sock, w.sb.data, w.sb.size, 0);
    wbuf_release(&w);
    if (n < 0) {
        rc = nn_errno() == EAGAIN ? -ETIMEDOUT : -nn_errno();
        snprintf(err, WIRE_ERR_LEN, "kvd at '%.80s' did not take the '%s' request: %s", c->path,
                 admin_req_name(r), kvd_strerror(rc));
        return rc;
    }
    n = nn_recv(c->sock, &out->buf, NN_MSG, 0);
    if (n < 0) {
        out->buf = NULL;
        rc = nn_errno() == EAGAIN ? -ETIMEDOUT : -nn_errno();
        snprintf(err, WIRE_ERR_LEN, "no reply from kvd at '%.80s' within %d ms: %s", c->path,
                 c->timeout_ms, kvd_strerror(rc));
        return rc;
    }
    if ((rc = wmsg_parse(&out->m, out->buf, (size_t)n, err))) {
        admin_reply_release(out);
        return rc;
    }
    if (wmsg_is(&out->m, "err")) {
        const char *msg;
        size_t ml;
        rc = wmsg_error(&out->m, &msg, &ml);
        snprintf(err, WIRE_ERR_LEN, "kvd refused '%s': %.*s (%s)", admin_req_name(r), (int)ml,
                 msg, kvd_errname(rc));
        admin_reply_release(out);
        return rc;
    }
    return 0;
}

int admin_conn_pool(struct admin_conn *c, struct admin_pool *out, char err[WIRE_ERR_LEN])
{
    struct admin_reply rep;
    int rc = admin_conn_call(c, ADMIN_REQ_POOL, &rep, err);
    if (rc)
        return rc;
    rc = admin_pool_decode(&rep.m, out, err);
    admin_reply_release(&rep);
    return rc;
}

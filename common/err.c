#include "common/err.h"

#include <errno.h>
#include <string.h>

static const struct {
    int code;
    const char *name;
    const char *msg;
} kvd_err_table[] = {
    {KVD_EMISMATCH, "EMISMATCH", "pool descriptor mismatch"},
    {KVD_EMSG, "EMSG", "malformed or invalid message"},
    {KVD_EPROTO, "EPROTO", "protocol version mismatch"},
    {KVD_EPEER, "EPEER", "peer died or stopped answering"},
    {KVD_ENOPAGES, "ENOPAGES", "no free KV pages"},
    {KVD_EMODEL, "EMODEL", "invalid or unsupported model file"},
    {KVD_ETOOLONG, "ETOOLONG", "prompt too long"},
    {KVD_EOVERLOAD, "EOVERLOAD", "server overloaded (queue full)"},
    {KVD_ESHUTDOWN, "ESHUTDOWN", "server shutting down"},
    {KVD_EINTERNAL, "EINTERNAL", "internal error"},
    {KVD_ETIMEDOUT, "ETIMEDOUT", "request timed out"},
    {KVD_ECANCELLED, "ECANCELLED", "request cancelled"},
    {KVD_ENOTFOUND, "ENOTFOUND", "not found"},
    {KVD_ECONFIG, "ECONFIG", "invalid configuration"},
    {KVD_EBUSY, "EBUSY", "resource in use"},
};

#define KVD_ERR_TABLE_LEN (sizeof(kvd_err_table) / sizeof(kvd_err_table[0]))
_Static_assert(KVD_ERR_TABLE_LEN == KVD_ERR_LAST_ - KVD_EMISMATCH, "err table covers every code");

static const char *errno_name(int e)
{
    switch (e) {
    case ENOENT: return "ENOENT";
    case ENOMEM: return "ENOMEM";
    case ENOSPC: return "ENOSPC";
    case EINVAL: return "EINVAL";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EAGAIN: return "EAGAIN";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EEXIST: return "EEXIST";
    case EIO: return "EIO";
    case ENOTSUP: return "ENOTSUP";
    case EPROTO: return "EPROTO";
    case EMSGSIZE: return "EMSGSIZE";
    case EBADF: return "EBADF";
    case EPIPE: return "EPIPE";
    case ECONNRESET: return "ECONNRESET";
    case E2BIG: return "E2BIG";
    case ERANGE: return "ERANGE";
    case EBUSY: return "EBUSY";
    default: return "ESYSTEM";
    }
}

const char *kvd_strerror(int code)
{
    if (code >= KVD_EMISMATCH && code < KVD_ERR_LAST_)
        return kvd_err_table[code - KVD_EMISMATCH].msg;
    if (code < 0 && code > -4096)
        return strerror(-code);
    return code == 0 ? "success" : "unknown error";
}

const char *kvd_errname(int code)
{
    if (code >= KVD_EMISMATCH && code < KVD_ERR_LAST_)
        return kvd_err_table[code - KVD_EMISMATCH].name;
    if (code < 0 && code > -4096)
        return errno_name(-code);
    return code == 0 ? "OK" : "EUNKNOWN";
}

int kvd_errcode(const char *name)
{
    for (size_t i = 0; i < KVD_ERR_TABLE_LEN; i++)
        if (strcmp(kvd_err_table[i].name, name) == 0)
            return kvd_err_table[i].code;
    return KVD_EINTERNAL;
}

/* err.h — kvd's one error convention.
 *
 * Every command returns int: 0 on success, a negative code on failure. System errors
 * are -errno; kvd's own codes live below the errno range (from -5000 down). Other
 * libraries' conventions (nanomsg's -1 + nn_errno, msgpack-c's enums) are converted
 * once, at the edge. Replies on the wire carry kvd_errname(code), which is stable.
 * Any thread.
 */
#ifndef KVD_COMMON_ERR_H
#define KVD_COMMON_ERR_H

enum kvd_err {
    KVD_EMISMATCH = -5000, /* pool descriptor differs from what the attacher expects */
    KVD_EMSG,              /* malformed or invalid message */
    KVD_EPROTO,            /* wrong protocol version */
    KVD_EPEER,             /* peer died or stopped answering */
    KVD_ENOPAGES,          /* pool has no free or evictable page */
    KVD_EMODEL,            /* model file invalid, truncated or unsupported */
    KVD_ETOOLONG,          /* prompt longer than max-model-len or the whole pool */
    KVD_EOVERLOAD,         /* queue full */
    KVD_ESHUTDOWN,         /* server is shutting down */
    KVD_EINTERNAL,         /* a bug on our side; logged */
    KVD_ETIMEDOUT,         /* request timed out */
    KVD_ECANCELLED,        /* request cancelled */
    KVD_ENOTFOUND,         /* no such sequence, lease, page or entry */
    KVD_ECONFIG,           /* bad configuration or flag */
    KVD_EBUSY,             /* resource in use (e.g. evicting pages still in use) */
    KVD_ERR_LAST_          /* keep last */
};

/* Human-readable message for any code (negative errno or enum kvd_err). Never NULL. */
const char *kvd_strerror(int code);
/* Stable identifier ("EMISMATCH", "ENOENT", ...) for wire replies and --json. Never NULL. */
const char *kvd_errname(int code);
/* Inverse of kvd_errname for kvd's own codes; returns KVD_EINTERNAL for unknown names. */
int kvd_errcode(const char *name);

#endif

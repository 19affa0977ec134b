/* model.c — what kvd needs of the model: tokenizer, shape, fingerprint, name. */
#include "daemon/kvd.h"

#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL_DEFAULT_FILE "stories260K.gguf"

int model_open(struct kvd_model *m, const char *path)
{
    char err[GGUF_ERR_LEN] = "";
    int rc;
    memset(m, 0, sizeof(*m));
    snprintf(m->path, sizeof(m->path), "%s", path);
    if ((rc = gguf_open(&m->gguf, path, err)) < 0) {
        log_err("cannot open model: %s", err); /* err names the file */
        return rc;
    }
    if ((rc = gguf_llama_hparams(&m->gguf, &m->hp, err)) < 0) {
        log_err("cannot use model '%s': %s", path, err);
        goto out_close;
    }
    /* The worker runs the same check and exits 78 on failure: refuse here, once, with
     * its message, rather than restart workers that can never load the model. */
    if ((rc = gguf_llama_validate(&m->gguf, &m->hp, err)) < 0) {
        log_err("cannot serve model: %s", err);
        goto out_close;
    }
    if ((rc = tok_load(&m->tok, &m->gguf, err)) < 0) {
        log_err("cannot load the tokenizer of '%s': %s", path, err);
        goto out_close;
    }
    m->fp = gguf_model_fingerprint(&m->gguf);
    struct gguf_str name;
    if (gguf_get_str(&m->gguf, "general.name", &name, NULL) == 0 && name.len > 0) {
        size_t n = name.len < CLIENT_MODEL_NAME_MAX ? name.len : CLIENT_MODEL_NAME_MAX;
        memcpy(m->name, name.p, n);
        m->name[n] = '\0';
    } else {
        char tmp[CONFIG_PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", path);
        char *b = basename(tmp), *dot = strrchr(b, '.');
        if (dot)
            *dot = '\0';
        snprintf(m->name, sizeof(m->name), "%s", b);
    }
    m->open = true;
    return 0;
out_close:
    gguf_close(&m->gguf);
    return rc;
}

void model_close(struct kvd_model *m)
{
    if (!m->open)
        return;
    tok_release(&m->tok);
    gguf_close(&m->gguf);
    m->open = false;
}

int model_default_path(char *out, size_t cap)
{
    char exe[CONFIG_PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = '\0';
    char *dir = dirname(exe); /* <build>/bin or <prefix>/bin */
    static const char *const rel[] = {
        "/../../models/" MODEL_DEFAULT_FILE,        /* build tree: <src>/build/bin */
        "/../share/kvd/models/" MODEL_DEFAULT_FILE, /* installed */
        "/../../../models/" MODEL_DEFAULT_FILE,     /* nested build dirs */
    };
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        char p[CONFIG_PATH_MAX];
        if (snprintf(p, sizeof(p), "%s%s", dir, rel[i]) >= (int)sizeof(p))
            continue;
        if (access(p, R_OK) == 0) {
            char *real = realpath(p, NULL);
            int w = snprintf(out, cap, "%s", real ? real : p);
            free(real);
            return w < (int)cap ? 0 : -ENAMETOOLONG;
        }
    }
    return -ENOENT;
}

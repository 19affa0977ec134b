#include "common/paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int paths_fmt(char *out, size_t cap, int n)
{
    if (n < 0 || (size_t)n >= cap) {
        if (cap)
            out[0] = '\0';
        return -ENAMETOOLONG;
    }
    return 0;
}

int paths_runtime_dir(char *out, size_t cap, const char *override)
{
    const char *env;
    if (override && *override)
        return paths_fmt(out, cap, snprintf(out, cap, "%s", override));
    if ((env = getenv("KVD_RUNTIME_DIR")) && *env)
        return paths_fmt(out, cap, snprintf(out, cap, "%s", env));
    if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
        return paths_fmt(out, cap, snprintf(out, cap, "%s/kvd", env));
    return paths_fmt(out, cap, snprintf(out, cap, "/tmp/kvd-%u", (unsigned)getuid()));
}

int paths_ensure_dir(const char *dir)
{
    char tmp[PATHS_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(tmp, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int paths_join(char *out, size_t cap, const char *dir, const char *name)
{
    int rc = paths_fmt(out, cap, snprintf(out, cap, "%s/%s", dir, name));
    if (rc == 0 && strlen(out) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return -ENAMETOOLONG;
    return rc;
}

int paths_ipc_addr(char *out, size_t cap, const char *dir, const char *name)
{
    char path[PATHS_MAX];
    int rc = paths_join(path, sizeof(path), dir, name);
    if (rc)
        return rc;
    return paths_fmt(out, cap, snprintf(out, cap, "ipc://%s", path));
}

#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Process-wide settings written once by main() via log_setup(). */
static const char *log_prog = "kvd";
static enum log_level log_current = LOG_LEVEL_INFO;

static const char *const log_names[] = {"error", "warn", "info", "debug"};

void log_setup(const char *prog, enum log_level level)
{
    if (prog)
        log_prog = prog;
    log_current = level;
}

enum log_level log_level_get(void) { return log_current; }

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i <= LOG_LEVEL_DEBUG; i++)
        if (strcmp(s, log_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    return -EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level > log_current)
        return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s[%d] %s: ", tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, log_prog, (int)getpid(),
                     log_names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w; /* nothing sensible to do if stderr is gone */
}

_Noreturn void kvd_bug(const char *file, int line, const char *what)
{
    log_msg(LOG_LEVEL_ERROR, "BUG at %s:%d: %s", file, line, what);
    abort();
}

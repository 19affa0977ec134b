/* log.h — leveled logging to stderr (journald picks it up under systemd).
 *
 * The level and the program name are process settings made once by main() through
 * log_setup(); they are the only mutable globals outside main, and only main writes
 * them. Any thread may log; each line is written with one write(2), so lines from
 * threads do not interleave. Style: lowercase, what failed first, subject in quotes,
 * then the reason; no full stop.
 */
#ifndef KVD_COMMON_LOG_H
#define KVD_COMMON_LOG_H

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

/* Sets the program tag ("kvd-broker") and the level. Call from main() only. */
void log_setup(const char *prog, enum log_level level);
/* Parses "error|warn|info|debug"; returns 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *out);
enum log_level log_level_get(void);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

/* Abort with file, line and message: for broken invariants (our bugs) only. */
#define KVD_BUG_ON(cond)                                                                 \
    do {                                                                                 \
        if (__builtin_expect(!!(cond), 0))                                               \
            kvd_bug(__FILE__, __LINE__, #cond);                                          \
    } while (0)
_Noreturn void kvd_bug(const char *file, int line, const char *what);

#endif

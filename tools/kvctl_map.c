/* kvctl_map.c — kvctl map (a picture of the pool) and kvctl top (a live view).
 *
 * map: one cell per page, or per group of ceil(pages / KVCTL_MAP_MAX_CELLS) pages on a
 * big pool; a group shows its most common state. top: redraws every --interval-ms
 * until 'q' (or --iterations N frames); throughput is the change of kvd's counters
 * between two frames divided by the time between them (first frame: since kvd started). */
#include "tools/kvctl.h"

#include "common/err.h"
#include "tools/kvctl_admin.h"
#include "tools/kvctl_json.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define KVCTL_MAP_MAX_CELLS 2048     /* cells drawn at most (64 x 32) */
#define KVCTL_MAP_WIDTH_DEFAULT 64   /* cells per row when stdout is not a terminal */
#define KVCTL_TOP_INTERVAL_MS 1000   /* default refresh period */
#define KVCTL_TOP_BAR_WIDTH 50       /* cells of the occupancy bar */

static const char cell_char[ADMIN_PAGE_COUNT_] = {
    [ADMIN_PAGE_FREE] = '.', [ADMIN_PAGE_USED] = '#', [ADMIN_PAGE_SHARED] = 'S',
    [ADMIN_PAGE_CACHED] = 'c'};
static const char *const cell_color[ADMIN_PAGE_COUNT_] = {
    [ADMIN_PAGE_FREE] = "\033[2m", [ADMIN_PAGE_USED] = "\033[31m",
    [ADMIN_PAGE_SHARED] = "\033[35m", [ADMIN_PAGE_CACHED] = "\033[36m"};
static const char *const cell_name[ADMIN_PAGE_COUNT_] = {
    [ADMIN_PAGE_FREE] = "free", [ADMIN_PAGE_USED] = "in use",
    [ADMIN_PAGE_SHARED] = "shared (in use by >1)", [ADMIN_PAGE_CACHED] = "cached (evictable)"};
#define COLOR_RESET "\033[0m"

static void put_cell(FILE *f, int state, bool color)
{
    if (color)
        fprintf(f, "%s%c%s", cell_color[state], cell_char[state], COLOR_RESET);
    else
        fputc(cell_char[state], f);
}

void kvctl_print_bar(FILE *f, const struct admin_pool *p, int width, bool color)
{
    uint64_t total = p->pages_total ? p->pages_total : 1;
    int n_shared = (int)((p->pages_shared * (uint64_t)width + total / 2) / total);
    int n_used = (int)(((p->pages_used - p->pages_shared) * (uint64_t)width + total / 2) / total);
    int n_cached = (int)((p->pages_cached * (uint64_t)width + total / 2) / total);
    if (n_shared + n_used + n_cached > width)
        n_cached = width - n_shared - n_used;
    if (n_cached < 0)
        n_cached = 0;
    fputc('[', f);
    for (int i = 0; i < width; i++) {
        int st = i < n_shared                      ? ADMIN_PAGE_SHARED
                 : i < n_shared + n_used            ? ADMIN_PAGE_USED
                 : i < n_shared + n_used + n_cached ? ADMIN_PAGE_CACHED
                                                    : ADMIN_PAGE_FREE;
        put_cell(f, st, color);
    }
    fputc(']', f);
}

static int term_width(void)
{
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 0;
}

int kvctl_cmd_map(const struct kvctl *k, int argc, char **argv)
{
    struct admin_conn c;
    struct admin_reply rep;
    struct admin_map mp;
    char err[WIRE_ERR_LEN] = "";
    if (argc > 1) {
        kvctl_error("map: unexpected argument '%s'", argv[1]);
        return KVCTL_EX_USAGE;
    }
    int rc = admin_conn_open(&c, k->runtime_dir, k->timeout_ms, err);
    if (rc == 0) {
        rc = admin_conn_call(&c, ADMIN_REQ_MAP, &rep, err);
        admin_conn_close(&c);
    }
    if (rc) {
        kvctl_error("%s", err);
        return kvctl_exit_for(rc);
    }
    rc = admin_map_decode(&rep.m, &mp, err);
    admin_reply_release(&rep);
    if (rc) {
        kvctl_error("bad 'map' reply from kvd: %s", err);
        return KVCTL_EX_FAIL;
    }
    uint64_t counts[ADMIN_PAGE_COUNT_] = {0};
    for (uint64_t i = 0; i < mp.pages_total; i++)
        counts[mp.pages[i]]++;
    uint64_t per_cell = (mp.pages_total + KVCTL_MAP_MAX_CELLS - 1) / KVCTL_MAP_MAX_CELLS;
    if (per_cell == 0)
        per_cell = 1;
    size_t n_cells = (size_t)((mp.pages_total + per_cell - 1) / per_cell);
    if (n_cells > KVCTL_MAP_MAX_CELLS)
        n_cells = KVCTL_MAP_MAX_CELLS; /* decode caps pages_total; this only tells gcc */
    char *cells = calloc(n_cells + 1, 1);
    if (!cells) {
        admin_map_release(&mp);
        kvctl_error("out of memory");
        return KVCTL_EX_FAIL;
    }
    for (uint64_t cidx = 0; cidx < n_cells; cidx++) {
        uint64_t cnt[ADMIN_PAGE_COUNT_] = {0};
        for (uint64_t i = cidx * per_cell; i < (cidx + 1) * per_cell && i < mp.pages_total; i++)
            cnt[mp.pages[i]]++;
        int best = ADMIN_PAGE_FREE;
        for (int s = 0; s < ADMIN_PAGE_COUNT_; s++)
            if (cnt[s] > cnt[best])
                best = s;
        cells[cidx] = (char)best;
    }
    if (k->json) {
        struct json j;
        char *pic = calloc(n_cells + 1, 1);
        for (uint64_t i = 0; pic && i < n_cells; i++)
            pic[i] = cell_char[(int)cells[i]];
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_u64(&j, "pages_total", mp.pages_total);
        json_u64(&j, "pages_free", counts[ADMIN_PAGE_FREE]);
        json_u64(&j, "pages_used", counts[ADMIN_PAGE_USED] + counts[ADMIN_PAGE_SHARED]);
        json_u64(&j, "pages_shared", counts[ADMIN_PAGE_SHARED]);
        json_u64(&j, "pages_cached", counts[ADMIN_PAGE_CACHED]);
        json_u64(&j, "pages_per_cell", per_cell);
        json_str(&j, "cells", pic ? pic : "");
        json_obj_end(&j);
        json_end(&j);
        free(pic);
    } else {
        int width = term_width();
        width = width ? width - 2 : KVCTL_MAP_WIDTH_DEFAULT;
        if (width > KVCTL_MAP_WIDTH_DEFAULT)
            width = KVCTL_MAP_WIDTH_DEFAULT;
        printf("pool: %llu pages, one cell = %llu page%s\n\n", (unsigned long long)mp.pages_total,
               (unsigned long long)per_cell, per_cell == 1 ? "" : "s");
        for (uint64_t i = 0; i < n_cells; i++) {
            put_cell(stdout, cells[i], k->color);
            if ((i + 1) % (uint64_t)width == 0 || i + 1 == n_cells)
                putchar('\n');
        }
        printf("\n");
        for (int s = 0; s < ADMIN_PAGE_COUNT_; s++) {
            int order[] = {ADMIN_PAGE_USED, ADMIN_PAGE_SHARED, ADMIN_PAGE_CACHED, ADMIN_PAGE_FREE};
            int st = order[s];
            put_cell(stdout, st, k->color);
            printf(" %-22s %10llu  %5.1f %%\n", cell_name[st], (unsigned long long)counts[st],
                   mp.pages_total ? 100.0 * (double)counts[st] / (double)mp.pages_total : 0.0);
        }
        printf("  %-22s %10llu\n", "total", (unsigned long long)mp.pages_total);
    }
    free(cells);
    admin_map_release(&mp);
    return 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits up to ms for 'q' on stdin (when it is a terminal). true = quit. */
static bool wait_quit(int ms, bool tty_in)
{
    struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
    if (!tty_in) {
        poll(NULL, 0, ms);
        return false;
    }
    double end = mono_s() + ms / 1000.0;
    for (;;) {
        int left = (int)((end - mono_s()) * 1000);
        if (left <= 0)
            return false;
        if (poll(&pfd, 1, left) > 0) {
            char ch;
            if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
                return true;
        }
    }
}

int kvctl_cmd_top(const struct kvctl *k, int argc, char **argv)
{
    long iterations = 0, interval = KVCTL_TOP_INTERVAL_MS;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
            iterations = strtol(argv[++i], &end, 10);
            if (*end || iterations < 1) {
                kvctl_error("top: --iterations needs a positive number");
                return KVCTL_EX_USAGE;
            }
        } else if (strcmp(argv[i], "--interval-ms") == 0 && i + 1 < argc) {
            interval = strtol(argv[++i], &end, 10);
            if (*end || interval < 50 || interval > 60000) {
                kvctl_error("top: --interval-ms must be 50..60000");
                return KVCTL_EX_USAGE;
            }
        } else {
            kvctl_error("top: unknown argument '%s' (use --iterations N, --interval-ms MS)",
                        argv[i]);
            return KVCTL_EX_USAGE;
        }
    }
    struct admin_conn c;
    char err[WIRE_ERR_LEN] = "";
    int rc = admin_conn_open(&c, k->runtime_dir, k->timeout_ms, err);
    if (rc) {
        kvctl_error("%s", err);
        return kvctl_exit_for(rc);
    }
    bool tty_out = isatty(STDOUT_FILENO), tty_in = isatty(STDIN_FILENO);
    struct termios saved;
    bool raw = false;
    if (tty_in && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios t = saved;
        t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
    struct admin_pool prev = {0}, p;
    double t_prev = 0;
    int exit_code = 0;
    for (long it = 0; iterations == 0 || it < iterations; it++) {
        if ((rc = admin_conn_pool(&c, &p, err))) {
            kvctl_error("%s", err);
            exit_code = kvctl_exit_for(rc);
            break;
        }
        /* rates: counter deltas between frames; the first frame averages since start */
        double t = mono_s(), dt = it ? t - t_prev : (double)p.uptime_ms / 1000.0;
        if (it == 0)
            memset(&prev, 0, sizeof(prev));
        double tok_s = dt > 0 ? (double)(p.output_tokens_total - prev.output_tokens_total) / dt : 0;
        double req_s = dt > 0 ? (double)((p.requests_finished + p.requests_failed) -
                                        (prev.requests_finished + prev.requests_failed)) / dt
                              : 0;
        double pre_s = dt > 0 ? (double)(p.prefill_tokens_total - prev.prefill_tokens_total) / dt : 0;
        if (k->json) {
            struct json j;
            json_init(&j, stdout);
            json_obj_begin(&j, NULL);
            json_f64(&j, "output_tok_per_s", tok_s);
            json_f64(&j, "prefill_tok_per_s", pre_s);
            json_f64(&j, "requests_per_s", req_s);
            json_u64(&j, "requests_running", p.requests_running);
            json_u64(&j, "requests_queued", p.requests_queued);
            json_u64(&j, "pages_total", p.pages_total);
            json_u64(&j, "pages_used", p.pages_used);
            json_u64(&j, "pages_cached", p.pages_cached);
            json_u64(&j, "pages_free", p.pages_free);
            json_f64(&j, "waste_ratio", p.waste_ratio);
            json_f64(&j, "prefix_hit_ratio", kvctl_hit_ratio(&p));
            json_u64(&j, "preemptions", p.preemptions);
            json_obj_end(&j);
            json_end(&j);
        } else {
            if (tty_out)
                fputs("\033[H\033[2J", stdout);
            printf("kvd top — %s, up %.0f s%s\n", k->runtime_dir ? k->runtime_dir : "default dir",
                   (double)p.uptime_ms / 1000.0, tty_in ? "   (q to quit)" : "");
            printf("%-14s %10.1f tok/s out   %10.1f tok/s prefill   %6.2f req/s\n", "throughput",
                   tok_s, pre_s, req_s);
            printf("%-14s %10u running     %10u queued\n", "requests", p.requests_running,
                   p.requests_queued);
            printf("%-14s ", "pool");
            kvctl_print_bar(stdout, &p, KVCTL_TOP_BAR_WIDTH, k->color);
            printf(" %5.1f %% used\n",
                   p.pages_total ? 100.0 * (double)p.pages_used / (double)p.pages_total : 0.0);
            printf("%-14s %10llu used  %10llu cached  %10llu free  (%llu total)\n", "pages",
                   (unsigned long long)p.pages_used, (unsigned long long)p.pages_cached,
                   (unsigned long long)p.pages_free, (unsigned long long)p.pages_total);
            printf("%-14s %10.1f %%\n", "waste", 100.0 * p.waste_ratio);
            printf("%-14s %10.1f %%     (%llu of %llu prompt tokens)\n", "prefix hits",
                   100.0 * kvctl_hit_ratio(&p), (unsigned long long)p.prefix_hit_tokens,
                   (unsigned long long)p.prefix_query_tokens);
            printf("%-14s %10llu\n", "preemptions", (unsigned long long)p.preemptions);
            if (!tty_out)
                printf("\n");
        }
        fflush(stdout);
        prev = p;
        t_prev = t;
        if (iterations && it + 1 >= iterations)
            break;
        if (wait_quit((int)interval, tty_in))
            break;
    }
    if (raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    admin_conn_close(&c);
    return exit_code;
}

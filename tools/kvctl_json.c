#include "tools/kvctl_json.h"

#include "common/log.h"

#include <math.h>
#include <string.h>

void json_init(struct json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->first[0] = true;
}

static void put_escaped(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Comma and key before a value. */
static void lead(struct json *j, const char *key)
{
    if (!j->first[j->depth])
        fputs(", ", j->f);
    j->first[j->depth] = false;
    if (key) {
        put_escaped(j->f, key, strlen(key));
        fputs(": ", j->f);
    }
}

static void open_c(struct json *j, const char *key, char c)
{
    lead(j, key);
    fputc(c, j->f);
    KVD_BUG_ON(j->depth + 1 >= JSON_DEPTH_MAX);
    j->first[++j->depth] = true;
}

static void close_c(struct json *j, char c)
{
    KVD_BUG_ON(j->depth == 0);
    j->depth--;
    fputc(c, j->f);
}

void json_obj_begin(struct json *j, const char *key) { open_c(j, key, '{'); }
void json_obj_end(struct json *j) { close_c(j, '}'); }
void json_arr_begin(struct json *j, const char *key) { open_c(j, key, '['); }
void json_arr_end(struct json *j) { close_c(j, ']'); }

void json_strn(struct json *j, const char *key, const char *s, size_t n)
{
    lead(j, key);
    put_escaped(j->f, s, n);
}

void json_str(struct json *j, const char *key, const char *s)
{
    if (!s) {
        json_null(j, key);
        return;
    }
    json_strn(j, key, s, strlen(s));
}

void json_u64(struct json *j, const char *key, uint64_t v)
{
    lead(j, key);
    fprintf(j->f, "%llu", (unsigned long long)v);
}

void json_i64(struct json *j, const char *key, int64_t v)
{
    lead(j, key);
    fprintf(j->f, "%lld", (long long)v);
}

void json_f64(struct json *j, const char *key, double v)
{
    lead(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.10g", v);
    else
        fputs("null", j->f);
}

void json_bool(struct json *j, const char *key, bool v)
{
    lead(j, key);
    fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j, const char *key)
{
    lead(j, key);
    fputs("null", j->f);
}

void json_end(struct json *j)
{
    KVD_BUG_ON(j->depth != 0);
    fputc('\n', j->f);
    fflush(j->f);
}

/* kvctl_json.h — a minimal streaming JSON writer for kvctl and kvd-bench --json.
 *
 * Values are written in order; the writer tracks commas and nesting. Keys are given for
 * members of objects and NULL for array elements or the top-level value. Strings are
 * escaped (", \, control characters); UTF-8 passes through. Non-finite numbers are
 * written as null (JSON has no NaN/inf). Output is one line, ended by json_end().
 * Nesting deeper than JSON_DEPTH_MAX is a bug (KVD_BUG_ON). Single-threaded.
 */
#ifndef KVD_TOOLS_KVCTL_JSON_H
#define KVD_TOOLS_KVCTL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_DEPTH_MAX 16   /* nesting levels */

struct json {
    FILE *f;
    int depth;                    /* open containers */
    bool first[JSON_DEPTH_MAX];   /* nothing written yet in container i */
};

void json_init(struct json *j, FILE *f);
void json_obj_begin(struct json *j, const char *key);
void json_obj_end(struct json *j);
void json_arr_begin(struct json *j, const char *key);
void json_arr_end(struct json *j);
void json_str(struct json *j, const char *key, const char *s);
void json_strn(struct json *j, const char *key, const char *s, size_t n);
void json_u64(struct json *j, const char *key, uint64_t v);
void json_i64(struct json *j, const char *key, int64_t v);
void json_f64(struct json *j, const char *key, double v);
void json_bool(struct json *j, const char *key, bool v);
void json_null(struct json *j, const char *key);
/* Writes the final newline; depth must be 0. */
void json_end(struct json *j);

#endif

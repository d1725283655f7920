/*
 * json.h — a small streaming JSON writer for the CLI's --json output.
 *
 * The writer inserts commas and escapes strings; the caller only says what
 * comes next.  Members of an object take a key, array elements pass NULL.
 * Output is compact (one line); json_end() writes the final newline.
 * Strings are written as valid JSON whatever the input bytes: control
 * characters are escaped and bytes that are not valid UTF-8 become U+FFFD.
 */
#ifndef PGLOCK_CLI_JSON_H
#define PGLOCK_CLI_JSON_H

#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json_writer {
    FILE *out;
    int depth;
    int count[JSON_MAX_DEPTH]; /* values written so far at each depth */
} json_writer;

void json_init(json_writer *w, FILE *out);
void json_object_begin(json_writer *w, const char *key);
void json_object_end(json_writer *w);
void json_array_begin(json_writer *w, const char *key);
void json_array_end(json_writer *w);
/* value NULL writes null. */
void json_string(json_writer *w, const char *key, const char *value);
void json_int(json_writer *w, const char *key, long long value);
/* A negative value writes null (durations: "unknown"). */
void json_seconds(json_writer *w, const char *key, double value);
void json_bool(json_writer *w, const char *key, int value);
void json_null(json_writer *w, const char *key);
/* Ends the document with a newline. */
void json_end(json_writer *w);

/* Writes s as a JSON string literal (with quotes) to out. */
void json_write_string(FILE *out, const char *s);

#endif

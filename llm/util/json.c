// json.c: the JSON object writer of json.h.
#include "llm/util/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void append(JsonWriter* j, const char* s, size_t n) {
    if (j->len + n + 1 > j->cap) {
        while (j->len + n + 1 > j->cap) j->cap = j->cap ? 2 * j->cap : 256;
        j->text = (char*)xrealloc(j->text, j->cap);
    }
    memcpy(j->text + j->len, s, n);
    j->len += n;
    j->text[j->len] = 0;
}

static void appendf(JsonWriter* j, const char* fmt, ...) PRINTF_LIKE(2, 3);
static void appendf(JsonWriter* j, const char* fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    append(j, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

// A JSON string literal: quotes, backslashes and control characters escaped.
static void append_quoted(JsonWriter* j, const char* s) {
    append(j, "\"", 1);
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        switch (*p) {
        case '"': append(j, "\\\"", 2); break;
        case '\\': append(j, "\\\\", 2); break;
        case '\n': append(j, "\\n", 2); break;
        case '\r': append(j, "\\r", 2); break;
        case '\t': append(j, "\\t", 2); break;
        default:
            if (*p < 0x20) appendf(j, "\\u%04x", *p);
            else append(j, (const char*)p, 1);
        }
    }
    append(j, "\"", 1);
}

static void key(JsonWriter* j, const char* k) {
    if (j->fields++) append(j, ",", 1);
    append_quoted(j, k);
    append(j, ":", 1);
}

void json_begin(JsonWriter* j) {
    j->len = 0;
    j->fields = 0;
    j->depth = 0;
    append(j, "{", 1);
}

const char* json_end(JsonWriter* j) {
    while (j->depth > 0) json_close_object(j);
    append(j, "}", 1);
    return j->text;
}

void json_free(JsonWriter* j) {
    free(j->text);
    memset(j, 0, sizeof *j);
}

void json_string(JsonWriter* j, const char* k, const char* value) {
    key(j, k);
    if (value) append_quoted(j, value);
    else append(j, "null", 4);
}

void json_number(JsonWriter* j, const char* k, double value) {
    key(j, k);
    if (isfinite(value)) appendf(j, "%.10g", value);
    else append(j, "null", 4);
}

void json_int(JsonWriter* j, const char* k, long long value) {
    key(j, k);
    appendf(j, "%lld", value);
}

void json_bool(JsonWriter* j, const char* k, int value) {
    key(j, k);
    if (value) append(j, "true", 4);
    else append(j, "false", 5);
}

void json_null(JsonWriter* j, const char* k) {
    key(j, k);
    append(j, "null", 4);
}

void json_open_object(JsonWriter* j, const char* k) {
    if (j->depth >= (int)(sizeof j->fields_outer / sizeof j->fields_outer[0])) fatal("json: objects nested too deeply");
    key(j, k);
    append(j, "{", 1);
    j->fields_outer[j->depth++] = j->fields;
    j->fields = 0;
}

void json_close_object(JsonWriter* j) {
    if (j->depth == 0) return;
    append(j, "}", 1);
    j->fields = j->fields_outer[--j->depth];
}

// json_reader.c: recursive-descent JSON parser into a JsonValue tree.
#include "llm/json_reader.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char* text;
    size_t len, pos;
    char* err;
    size_t err_size;
    int failed;
} Parser;

// Records the first error with its line and column (1-based, in bytes).
static int fail_at(Parser* p, size_t pos, const char* fmt, ...) PRINTF_LIKE(3, 4);
static int fail_at(Parser* p, size_t pos, const char* fmt, ...) {
    if (p->failed) return 0;
    p->failed = 1;
    int line = 1, col = 1;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->text[i] == '\n') { line++; col = 1; } else col++;
    }
    int n = snprintf(p->err, p->err_size, "line %d, column %d: ", line, col);
    if (n < 0 || (size_t)n >= p->err_size) return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
    va_end(ap);
    return 0;
}

static void skip_space(Parser* p) {
    while (p->pos < p->len) {
        char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int at_end(const Parser* p) { return p->pos >= p->len; }
static char peek(const Parser* p) { return at_end(p) ? '\0' : p->text[p->pos]; }

static int parse_value(Parser* p, JsonValue* v, int depth);

// A growable byte buffer for decoded strings.
typedef struct {
    char* data;
    size_t len, cap;
} Buf;

static void buf_put(Buf* b, char c) {
    if (b->len + 1 >= b->cap) {
        b->cap = b->cap ? 2 * b->cap : 32;
        b->data = (char*)xrealloc(b->data, b->cap);
    }
    b->data[b->len++] = c;
}

static void buf_put_utf8(Buf* b, unsigned cp) {
    if (cp < 0x80) {
        buf_put(b, (char)cp);
    } else if (cp < 0x800) {
        buf_put(b, (char)(0xC0 | (cp >> 6)));
        buf_put(b, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        buf_put(b, (char)(0xE0 | (cp >> 12)));
        buf_put(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
        buf_put(b, (char)(0x80 | (cp & 0x3F)));
    } else {
        buf_put(b, (char)(0xF0 | (cp >> 18)));
        buf_put(b, (char)(0x80 | ((cp >> 12) & 0x3F)));
        buf_put(b, (char)(0x80 | ((cp >> 6) & 0x3F)));
        buf_put(b, (char)(0x80 | (cp & 0x3F)));
    }
}

static int parse_hex4(Parser* p, unsigned* out) {
    if (p->pos + 4 > p->len) return fail_at(p, p->pos, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->text[p->pos + i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail_at(p, p->pos + i, "bad hex digit '%c' in \\u escape", c);
    }
    p->pos += 4;
    *out = v;
    return 1;
}

// Parses a string starting at the opening quote; *out is malloc'ed.
static int parse_string(Parser* p, char** out) {
    size_t start = p->pos;
    p->pos++;  // opening quote
    Buf b = {0};
    for (;;) {
        if (at_end(p)) {
            free(b.data);
            return fail_at(p, start, "unterminated string");
        }
        unsigned char c = (unsigned char)p->text[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            free(b.data);
            return fail_at(p, p->pos, "control character 0x%02x in string (escape it)", c);
        }
        if (c != '\\') {
            buf_put(&b, (char)c);
            p->pos++;
            continue;
        }
        size_t esc = p->pos++;
        char e = peek(p);
        p->pos++;
        switch (e) {
        case '"': buf_put(&b, '"'); break;
        case '\\': buf_put(&b, '\\'); break;
        case '/': buf_put(&b, '/'); break;
        case 'b': buf_put(&b, '\b'); break;
        case 'f': buf_put(&b, '\f'); break;
        case 'n': buf_put(&b, '\n'); break;
        case 'r': buf_put(&b, '\r'); break;
        case 't': buf_put(&b, '\t'); break;
        case 'u': {
            unsigned cp;
            if (!parse_hex4(p, &cp)) { free(b.data); return 0; }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                // A high surrogate must be followed by an escaped low surrogate.
                unsigned lo;
                if (p->pos + 2 > p->len || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u') {
                    free(b.data);
                    return fail_at(p, esc, "unpaired surrogate in \\u escape");
                }
                p->pos += 2;
                if (!parse_hex4(p, &lo)) { free(b.data); return 0; }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    free(b.data);
                    return fail_at(p, esc, "unpaired surrogate in \\u escape");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(b.data);
                return fail_at(p, esc, "unpaired surrogate in \\u escape");
            }
            if (cp == 0) {
                free(b.data);
                return fail_at(p, esc, "\\u0000 in a string is not supported");
            }
            buf_put_utf8(&b, cp);
            break;
        }
        default:
            free(b.data);
            return fail_at(p, esc, "bad escape '\\%c' in string", e ? e : ' ');
        }
    }
    buf_put(&b, '\0');
    *out = b.data;
    return 1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

// RFC 8259 number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
static int parse_number(Parser* p, JsonValue* v) {
    size_t start = p->pos;
    if (peek(p) == '-') p->pos++;
    if (peek(p) == '0') {
        p->pos++;
        if (is_digit(peek(p))) return fail_at(p, start, "number with a leading zero");
    } else if (is_digit(peek(p))) {
        while (is_digit(peek(p))) p->pos++;
    } else {
        return fail_at(p, start, "malformed number");
    }
    if (peek(p) == '.') {
        p->pos++;
        if (!is_digit(peek(p))) return fail_at(p, start, "malformed number (digits must follow '.')");
        while (is_digit(peek(p))) p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-') p->pos++;
        if (!is_digit(peek(p))) return fail_at(p, start, "malformed number (digits must follow the exponent)");
        while (is_digit(peek(p))) p->pos++;
    }
    size_t n = p->pos - start;
    v->type = JSON_NUMBER;
    v->text = (char*)xmalloc(n + 1);
    memcpy(v->text, p->text + start, n);
    v->text[n] = '\0';
    v->number = strtod(v->text, NULL);
    return 1;
}

static int parse_literal(Parser* p, const char* word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->text + p->pos, word, n) != 0) return 0;
    p->pos += n;
    return 1;
}

static int parse_array(Parser* p, JsonValue* v, int depth) {
    p->pos++;  // '['
    v->type = JSON_ARRAY;
    int cap = 0;
    skip_space(p);
    if (peek(p) == ']') {
        p->pos++;
        return 1;
    }
    for (;;) {
        if (v->count == cap) {
            cap = cap ? 2 * cap : 4;
            v->items = (JsonValue*)xrealloc(v->items, (size_t)cap * sizeof *v->items);
        }
        JsonValue* item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        v->count++;
        if (!parse_value(p, item, depth + 1)) return 0;
        skip_space(p);
        char c = peek(p);
        if (c == ',') { p->pos++; continue; }
        if (c == ']') { p->pos++; return 1; }
        return fail_at(p, p->pos, at_end(p) ? "unterminated array" : "expected ',' or ']' in array");
    }
}

static int parse_object(Parser* p, JsonValue* v, int depth) {
    p->pos++;  // '{'
    v->type = JSON_OBJECT;
    int cap = 0;
    skip_space(p);
    if (peek(p) == '}') {
        p->pos++;
        return 1;
    }
    for (;;) {
        skip_space(p);
        if (peek(p) != '"') return fail_at(p, p->pos, at_end(p) ? "unterminated object" : "expected a string key in object");
        size_t key_pos = p->pos;
        char* key;
        if (!parse_string(p, &key)) return 0;
        for (int i = 0; i < v->count; i++) {
            if (strcmp(v->keys[i], key) == 0) {
                fail_at(p, key_pos, "duplicate key \"%s\"", key);
                free(key);
                return 0;
            }
        }
        if (v->count == cap) {
            cap = cap ? 2 * cap : 4;
            v->items = (JsonValue*)xrealloc(v->items, (size_t)cap * sizeof *v->items);
            v->keys = (char**)xrealloc(v->keys, (size_t)cap * sizeof *v->keys);
        }
        JsonValue* item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        v->keys[v->count] = key;
        v->count++;
        skip_space(p);
        if (peek(p) != ':') return fail_at(p, p->pos, "expected ':' after key \"%s\"", key);
        p->pos++;
        if (!parse_value(p, item, depth + 1)) return 0;
        skip_space(p);
        char c = peek(p);
        if (c == ',') { p->pos++; continue; }
        if (c == '}') { p->pos++; return 1; }
        return fail_at(p, p->pos, at_end(p) ? "unterminated object" : "expected ',' or '}' in object");
    }
}

static int parse_value(Parser* p, JsonValue* v, int depth) {
    if (depth >= JSON_MAX_DEPTH) return fail_at(p, p->pos, "nested deeper than %d levels", JSON_MAX_DEPTH);
    skip_space(p);
    if (at_end(p)) return fail_at(p, p->pos, "unexpected end of input (expected a value)");
    char c = peek(p);
    switch (c) {
    case '{': return parse_object(p, v, depth);
    case '[': return parse_array(p, v, depth);
    case '"':
        v->type = JSON_STRING;
        return parse_string(p, &v->text);
    case 't':
        if (parse_literal(p, "true")) { v->type = JSON_BOOL; v->boolean = 1; return 1; }
        break;
    case 'f':
        if (parse_literal(p, "false")) { v->type = JSON_BOOL; v->boolean = 0; return 1; }
        break;
    case 'n':
        if (parse_literal(p, "null")) { v->type = JSON_NULL; return 1; }
        break;
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, v);
        break;
    }
    return fail_at(p, p->pos, "unexpected character '%c'", c);
}

int json_parse(const char* text, size_t len, JsonValue* out, char* err, size_t err_size) {
    Parser p = {text, len, 0, err, err_size, 0};
    memset(out, 0, sizeof *out);
    if (err_size) err[0] = '\0';
    // Tolerate a UTF-8 byte-order mark, which some editors write.
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) p.pos = 3;
    if (!parse_value(&p, out, 0)) {
        json_value_free(out);
        return 0;
    }
    skip_space(&p);
    if (!at_end(&p)) {
        fail_at(&p, p.pos, "unexpected text after the JSON value");
        json_value_free(out);
        return 0;
    }
    return 1;
}

void json_parse_file(const char* path, JsonValue* out) {
    FILE* f = fopen(path, "rb");
    if (!f) fatal("cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char* text = (char*)xmalloc(cap);
    size_t got;
    while ((got = fread(text + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) text = (char*)xrealloc(text, cap *= 2);
    }
    if (ferror(f)) {
        fclose(f);
        free(text);
        fatal("%s: read error: %s", path, strerror(errno));
    }
    fclose(f);
    char err[256];
    int ok = json_parse(text, len, out, err, sizeof err);
    free(text);
    if (!ok) fatal("%s: invalid JSON: %s", path, err);
}

void json_value_free(JsonValue* v) {
    if (!v) return;
    free(v->text);
    for (int i = 0; i < v->count; i++) {
        json_value_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

const JsonValue* json_get(const JsonValue* obj, const char* key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

const char* json_type_name(JsonType type) {
    switch (type) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

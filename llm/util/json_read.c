// json_read.c: a strict recursive-descent JSON parser.
#include "llm/util/json_read.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char* p;
    const char* end;
    const char* start;
    char* err;
    size_t errsize;
    int failed;
} Parser;

static int line_of(const Parser* ps) {
    int line = 1;
    for (const char* q = ps->start; q < ps->p && q < ps->end; q++) line += *q == '\n';
    return line;
}

static void fail(Parser* ps, const char* what) {
    if (ps->failed) return;
    ps->failed = 1;
    snprintf(ps->err, ps->errsize, "line %d: %s", line_of(ps), what);
}

static void skip_ws(Parser* ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int peek(const Parser* ps) { return ps->p < ps->end ? (unsigned char)*ps->p : -1; }

static int literal(Parser* ps, const char* word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return 0;
    ps->p += n;
    return 1;
}

static int hex4(Parser* ps, unsigned* out) {
    if (ps->end - ps->p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    ps->p += 4;
    *out = v;
    return 1;
}

static void put_utf8(char* dst, size_t* n, unsigned cp) {
    if (cp < 0x80) {
        dst[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        dst[(*n)++] = (char)(0xC0 | (cp >> 6));
        dst[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        dst[(*n)++] = (char)(0xE0 | (cp >> 12));
        dst[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        dst[(*n)++] = (char)(0xF0 | (cp >> 18));
        dst[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        dst[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

// Parses a string literal at ps->p (which is '"'); returns the decoded text.
static char* parse_string(Parser* ps) {
    ps->p++;  // opening quote
    // Decoded text is never longer than the literal.
    const char* q = ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end) {
        fail(ps, "unterminated string");
        return NULL;
    }
    char* out = (char*)xmalloc((size_t)(q - ps->p) + 1);
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            fail(ps, "control character in string");
            free(out);
            return NULL;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        if (ps->p >= ps->end) break;
        char e = *ps->p++;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!hex4(ps, &cp)) {
                fail(ps, "bad \\u escape");
                free(out);
                return NULL;
            }
            if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair: the low half must follow
                unsigned lo;
                if (!(ps->end - ps->p >= 2 && ps->p[0] == '\\' && ps->p[1] == 'u' && (ps->p += 2, hex4(ps, &lo)) &&
                      lo >= 0xDC00 && lo < 0xE000)) {
                    fail(ps, "unpaired surrogate in \\u escape");
                    free(out);
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                fail(ps, "unpaired surrogate in \\u escape");
                free(out);
                return NULL;
            }
            if (cp == 0) {  // would truncate the C string
                fail(ps, "\\u0000 in string");
                free(out);
                return NULL;
            }
            put_utf8(out, &n, cp);  // at most 4 bytes from at least 6 of input
            break;
        }
        default:
            fail(ps, "bad escape in string");
            free(out);
            return NULL;
        }
    }
    ps->p++;  // closing quote
    out[n] = 0;
    return out;
}

static int parse_value(Parser* ps, JsonValue* v, int depth);

static void parse_number(Parser* ps, JsonValue* v) {
    const char* s = ps->p;
    const char* q = s;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
        fail(ps, "bad number");
        return;
    }
    if (*q == '0') q++;
    else while (q < ps->end && *q >= '0' && *q <= '9') q++;
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
            fail(ps, "bad number");
            return;
        }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
            fail(ps, "bad number");
            return;
        }
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    v->type = JSON_NUMBER;
    v->text = (char*)xmalloc((size_t)(q - s) + 1);
    memcpy(v->text, s, (size_t)(q - s));
    v->text[q - s] = 0;
    v->number = strtod(v->text, NULL);
    ps->p = q;
}

// Appends one element to a growing array of values (and keys for objects).
static JsonValue* push(JsonValue* v, int* cap, char* key) {
    if (v->count == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        v->items = (JsonValue*)xrealloc(v->items, (size_t)*cap * sizeof(JsonValue));
        if (v->type == JSON_OBJECT) v->keys = (char**)xrealloc(v->keys, (size_t)*cap * sizeof(char*));
    }
    if (v->type == JSON_OBJECT) v->keys[v->count] = key;
    JsonValue* item = &v->items[v->count++];
    memset(item, 0, sizeof *item);
    return item;
}

static int parse_container(Parser* ps, JsonValue* v, int depth, int is_object) {
    char close = is_object ? '}' : ']';
    v->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    int cap = 0;
    ps->p++;
    skip_ws(ps);
    if (peek(ps) == close) {
        ps->p++;
        return 1;
    }
    for (;;) {
        char* key = NULL;
        if (is_object) {
            skip_ws(ps);
            if (peek(ps) != '"') {
                fail(ps, "expected a member name in quotes");
                return 0;
            }
            key = parse_string(ps);
            if (!key) return 0;
            skip_ws(ps);
            if (peek(ps) != ':') {
                free(key);
                fail(ps, "expected ':' after a member name");
                return 0;
            }
            ps->p++;
        }
        JsonValue* item = push(v, &cap, key);
        if (!parse_value(ps, item, depth + 1)) return 0;
        skip_ws(ps);
        int c = peek(ps);
        if (c == ',') {
            ps->p++;
            continue;
        }
        if (c == close) {
            ps->p++;
            return 1;
        }
        fail(ps, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        return 0;
    }
}

static int parse_value(Parser* ps, JsonValue* v, int depth) {
    if (depth > JSON_MAX_DEPTH) {
        fail(ps, "nesting deeper than 64");
        return 0;
    }
    skip_ws(ps);
    int c = peek(ps);
    if (c == '{' || c == '[') return parse_container(ps, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        v->text = parse_string(ps);
        return v->text != NULL;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        parse_number(ps, v);
        return !ps->failed;
    }
    if (literal(ps, "true")) { v->type = JSON_BOOL; v->boolean = 1; return 1; }
    if (literal(ps, "false")) { v->type = JSON_BOOL; v->boolean = 0; return 1; }
    if (literal(ps, "null")) { v->type = JSON_NULL; return 1; }
    fail(ps, c < 0 ? "unexpected end of text" : "unexpected character");
    return 0;
}

static void free_contents(JsonValue* v) {
    free(v->text);
    for (int i = 0; i < v->count; i++) {
        free_contents(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

JsonValue* json_parse(const char* text, size_t len, char* err, size_t errsize) {
    Parser ps = {text, text + len, text, err, errsize, 0};
    JsonValue* root = (JsonValue*)xcalloc(1, sizeof(JsonValue));
    if (parse_value(&ps, root, 0)) {
        skip_ws(&ps);
        if (ps.p != ps.end) fail(&ps, "text after the end of the value");
    }
    if (ps.failed) {
        json_value_free(root);
        return NULL;
    }
    return root;
}

void json_value_free(JsonValue* v) {
    if (!v) return;
    free_contents(v);
    free(v);
}

const JsonValue* json_get(const JsonValue* v, const char* key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (int i = v->count - 1; i >= 0; i--)  // the last of a repeated member, as Python's json reads it
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
    return NULL;
}

int json_as_i64(const JsonValue* v, int64_t* out) {
    if (!v || v->type != JSON_NUMBER) return 0;
    char* end;
    errno = 0;
    long long x = strtoll(v->text, &end, 10);
    if (errno || *end) return 0;  // fractions and exponents are not integers here
    *out = (int64_t)x;
    return 1;
}

int json_as_u64(const JsonValue* v, uint64_t* out) {
    if (!v || v->type != JSON_NUMBER || v->text[0] == '-') return 0;
    char* end;
    errno = 0;
    unsigned long long x = strtoull(v->text, &end, 10);
    if (errno || *end) return 0;
    *out = (uint64_t)x;
    return 1;
}

int json_get_i64(const JsonValue* v, const char* key, int64_t* out) { return json_as_i64(json_get(v, key), out); }
int json_get_u64(const JsonValue* v, const char* key, uint64_t* out) { return json_as_u64(json_get(v, key), out); }

int json_get_int(const JsonValue* v, const char* key, int* out) {
    int64_t x;
    if (!json_get_i64(v, key, &x) || x < -2147483647LL - 1 || x > 2147483647LL) return 0;
    *out = (int)x;
    return 1;
}

const char* json_get_string(const JsonValue* v, const char* key) {
    const JsonValue* s = json_get(v, key);
    return s && s->type == JSON_STRING ? s->text : NULL;
}

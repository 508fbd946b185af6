// json_read.h: a small JSON reader: text in, a tree of values out, enough
// for checkpoint manifests and config files (json.h writes JSON lines).
//
// The reader keeps every number's literal text next to its double value, so
// 64-bit integers (data positions, checksums) read back exactly. It rejects
// anything that is not strict JSON (trailing commas, comments, control
// characters in strings, nesting deeper than 64) with a message naming the
// line, and never reads past the buffer it is given.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue JsonValue;
struct JsonValue {
    JsonType type;
    int boolean;
    double number;
    char* text;        // JSON_STRING: the decoded string; JSON_NUMBER: the literal
    int count;         // elements of an array or members of an object
    JsonValue* items;  // array elements, or object member values
    char** keys;       // object member names (parallel to items)
};

// Parses `len` bytes of text. Returns NULL on malformed input and writes
// "line N: <problem>" into err.
JsonValue* json_parse(const char* text, size_t len, char* err, size_t errsize);
void json_value_free(JsonValue* v);

// Member `key` of an object (the last one if repeated, as Python's json and so
// transformers read it); NULL when v is not an object or has no such member.
const JsonValue* json_get(const JsonValue* v, const char* key);
// Typed member access: return 1 and store the value, or 0 when the member is
// missing, of another type, or (integers) not an exact integer in range.
int json_get_i64(const JsonValue* v, const char* key, int64_t* out);
int json_get_u64(const JsonValue* v, const char* key, uint64_t* out);
int json_get_int(const JsonValue* v, const char* key, int* out);
const char* json_get_string(const JsonValue* v, const char* key);  // NULL if not a string
// The same for a value itself (an array element).
int json_as_i64(const JsonValue* v, int64_t* out);
int json_as_u64(const JsonValue* v, uint64_t* out);

EXTERN_C_END

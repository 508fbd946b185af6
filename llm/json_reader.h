// json_reader.h: a small, strict JSON reader for the configuration files other
// programs write for us (SageMaker's /opt/ml/input/config/*.json).
//
// It parses a whole document into a tree of JsonValue. Strict means RFC 8259:
// no comments, no trailing commas, no duplicate object keys (a duplicate
// hyperparameter would otherwise be silently resolved one way or the other),
// nesting at most 64 deep. Numbers keep the literal text as written, so a
// caller that maps them onto flags parses "6e-4" exactly as the command line
// would. (llm/json.h writes JSON.)
#pragma once

#include <stddef.h>

#include "llm/util.h"

EXTERN_C_BEGIN

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    int boolean;              // JSON_BOOL
    double number;            // JSON_NUMBER
    char* text;               // JSON_STRING: decoded UTF-8; JSON_NUMBER: the literal as written
    int count;                // JSON_ARRAY / JSON_OBJECT: number of elements or members
    char** keys;              // JSON_OBJECT: member names, in document order
    struct JsonValue* items;  // JSON_ARRAY / JSON_OBJECT: the values, in document order
} JsonValue;

// Parses `len` bytes. On success returns 1 and fills *out (free with
// json_value_free). On a syntax error returns 0 and writes "line L, column C: what"
// into err.
int json_parse(const char* text, size_t len, JsonValue* out, char* err, size_t err_size);
// Reads and parses a file; fatal, naming the file, if it cannot be read or is not valid JSON.
void json_parse_file(const char* path, JsonValue* out);
void json_value_free(JsonValue* v);

// The member `key` of an object, or NULL if absent (or if obj is not an object).
const JsonValue* json_get(const JsonValue* obj, const char* key);
// "null", "a boolean", "a number", "a string", "an array", "an object": for error messages.
const char* json_type_name(JsonType type);

EXTERN_C_END

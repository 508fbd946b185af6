// json.h: building one JSON object in memory, for the one-object-per-line
// metrics log (JSONL). Only what the log needs: string, number, integer,
// boolean and null values, and nested objects written by the caller.
//
// Numbers that are not finite (a NaN loss, an unknown MFU) are written as
// null: JSON has no NaN, and a strict parser must read every line.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    char* text;    // NUL-terminated, owned
    size_t len, cap;
    int fields;    // members written at the current nesting level (for commas)
    int depth;
    int fields_outer[8];
} JsonWriter;

// Starts "{"; json_end closes every open object and returns the text, valid
// until the next json_begin or json_free on the same writer.
void json_begin(JsonWriter* j);
const char* json_end(JsonWriter* j);
void json_free(JsonWriter* j);

void json_string(JsonWriter* j, const char* key, const char* value);  // NULL value: null
void json_number(JsonWriter* j, const char* key, double value);       // %.10g; null if not finite
void json_int(JsonWriter* j, const char* key, long long value);
void json_bool(JsonWriter* j, const char* key, int value);
void json_null(JsonWriter* j, const char* key);
// "key": { ... } until json_close_object.
void json_open_object(JsonWriter* j, const char* key);
void json_close_object(JsonWriter* j);

EXTERN_C_END

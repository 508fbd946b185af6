// strbuf.h: a growing, always NUL-terminated string, and JSON string
// literals in it (for writers of JSON documents that need arrays, such as
// checkpoint manifests; json.h writes flat JSON lines).
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

typedef struct {
    char* data;
    size_t len, cap;
} StrBuf;

void sb_printf(StrBuf* sb, const char* fmt, ...) PRINTF_LIKE(2, 3);
// Appends s as a JSON string literal (quoted, escaped).
void sb_json_string(StrBuf* sb, const char* s);
void sb_free(StrBuf* sb);

EXTERN_C_END

// utf8.h: strict UTF-8 validation, as Rust's str::from_utf8 (and so the
// safetensors library) applies it to a safetensors header.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// 1 when the n bytes are valid UTF-8 (no overlong forms, no surrogates,
// nothing above U+10FFFF, no truncated sequence); else 0 with the offset of
// the first bad byte in *bad_at.
int utf8_valid(const char* s, size_t n, size_t* bad_at);

EXTERN_C_END

// strbuf.c: the growing string of strbuf.h.
#include "llm/util/strbuf.h"

#include <stdarg.h>
#include <stdlib.h>

void sb_printf(StrBuf* sb, const char* fmt, ...) {
    for (;;) {
        size_t room = sb->cap - sb->len;
        va_list ap;
        va_start(ap, fmt);
        int n = sb->data ? vsnprintf(sb->data + sb->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            sb->len += (size_t)n;
            return;
        }
        size_t need = sb->len + (n > 0 ? (size_t)n : 0) + 1;
        sb->cap = sb->cap * 2 > need ? sb->cap * 2 : need + 256;
        sb->data = (char*)xrealloc(sb->data, sb->cap);
        if (sb->len == 0) sb->data[0] = 0;
    }
}

void sb_json_string(StrBuf* sb, const char* s) {
    sb_printf(sb, "\"");
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        if (*p == '"' || *p == '\\') sb_printf(sb, "\\%c", *p);
        else if (*p == '\n') sb_printf(sb, "\\n");
        else if (*p == '\t') sb_printf(sb, "\\t");
        else if (*p < 0x20) sb_printf(sb, "\\u%04x", *p);
        else sb_printf(sb, "%c", *p);
    }
    sb_printf(sb, "\"");
}

void sb_free(StrBuf* sb) {
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

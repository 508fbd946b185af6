// utf8.c: strict UTF-8 validation (see utf8.h).
#include "llm/util/utf8.h"

int utf8_valid(const char* s, size_t n, size_t* bad_at) {
    const unsigned char* p = (const unsigned char*)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
        if (c < 0x80) len = 1;
        else if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;       // overlong
            else if (c == 0xED) hi = 0x9F;  // surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;       // overlong
            else if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
        } else {
            *bad_at = i;
            return 0;
        }
        if (i + len > n) {
            *bad_at = i;
            return 0;
        }
        for (size_t k = 1; k < len; k++) {
            unsigned b = p[i + k];
            unsigned want_lo = k == 1 ? lo : 0x80, want_hi = k == 1 ? hi : 0xBF;
            if (b < want_lo || b > want_hi) {
                *bad_at = i;
                return 0;
            }
        }
        i += len;
    }
    return 1;
}

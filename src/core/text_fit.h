/* Bracketed labels that fit a caller's buffer without losing their shape. */
#ifndef DPT_CORE_TEXT_FIT_H
#define DPT_CORE_TEXT_FIT_H
#include <stdio.h>
#include <string.h>

/* buf <- head text "]" (e.g. "  [does NOT cover: " + text + "]"). When it does not fit in
 * cap bytes, the text is cut at a whole UTF-8 character and the label ends in "...]", so a
 * reader sees that it was shortened and where it ends; buf is "" when not even that fits. */
static inline void dpt_bracket_fit(char *buf, size_t cap, const char *head, const char *text) {
    if (!cap) return;
    const int n = snprintf(buf, cap, "%s%s]", head, text);
    const size_t hl = strlen(head);
    if (n < 0 || ((size_t)n >= cap && cap < hl + 5)) {
        buf[0] = 0;
    } else if ((size_t)n >= cap) {
        size_t end = cap - 5;
        while (end > hl && ((unsigned char)buf[end] & 0xC0) == 0x80) end--;
        memcpy(buf + end, "...]", 5);
    }
}
#endif

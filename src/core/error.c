/* Status names, the thread-local error message, and the always-on assertion. */
#include <dptrain/core.h>

/* Messages longer than the buffer are cut on purpose: a long path must not lose the error. */
#if !defined(__clang__) /* clang has no such warning */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define DPT_ERR_LEN 1024
static _Thread_local char g_err[DPT_ERR_LEN]; /* per thread, like errno: never shared */

const char *dpt_status_name(dpt_status s) {
    switch (s) {
    case DPT_OK: return "ok";
    case DPT_EINVAL: return "invalid argument";
    case DPT_ENOMEM: return "out of memory";
    case DPT_EIO: return "I/O error";
    case DPT_EFORMAT: return "malformed input";
    case DPT_ERANGE: return "out of range";
    case DPT_ENOTSUP: return "not supported";
    case DPT_EBUDGET: return "privacy budget exceeded";
    case DPT_ECRYPTO: return "cryptographic library failure";
    case DPT_EMISMATCH: return "mismatch";
    case DPT_EBUSY: return "busy";
    }
    return "unknown error";
}

const char *dpt_last_error(void) { return g_err; }

void dpt_clear_error(void) { g_err[0] = 0; }

dpt_status dpt_set_error(dpt_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return s;
}

dpt_status dpt_error_context(dpt_status s, const char *fmt, ...) {
    char prefix[DPT_ERR_LEN], old[DPT_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_err, sizeof old);
    snprintf(g_err, sizeof g_err, "%s: %s", prefix, old);
    return s;
}

void dpt_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "dptrain: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

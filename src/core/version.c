/* The library's own version, fixed when it was built (dptrain/version.h is generated). */
#include <dptrain/version.h>

const char *dpt_version(void) { return DPT_VERSION_STRING; }

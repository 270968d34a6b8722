/* The library's own version and source revision, fixed when it was built (dptrain/version.h
 * is generated at configure time, dpt_build_id.h at every build by cmake/build_id.cmake). */
#include <dptrain/version.h>

#include "dpt_build_id.h"

const char *dpt_version(void) { return DPT_VERSION_STRING; }

const char *dpt_build_id(void) { return DPT_BUILD_ID; }

/* data module internals shared between its files (hidden from the library's exports). */
#ifndef DPT_DATA_INTERNAL_H
#define DPT_DATA_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "dptrain/core.h"

/* The whole file, inflated when it starts with the gzip magic 1f 8b; at most 4 GiB once
 * inflated. *out is malloc'd (free with free()). Errors name the path. */
dpt_status dpt_data_read_maybe_gz(const char *path, uint8_t **out, size_t *n_out);
#endif

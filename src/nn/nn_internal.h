/* nn internals: layer constructors and small helpers shared by the nn source files.
 * Not installed; only the files in src/nn includes it. */
#ifndef DPTRAIN_NN_INTERNAL_H
#define DPTRAIN_NN_INTERNAL_H

#include <dptrain/nn.h>

/* Element count above which an elementwise or per-example loop is split over threads
 * (below it, thread start-up costs more than it saves). */
#define DPT_NN_PAR_MIN 65536

/* Sets up L as a Linear layer D -> K (weights and scratch are attached by the model). */
void dpt_layer_linear_setup(dpt_layer *L, size_t D, size_t K, int has_bias);
/* Sets up L as an elementwise activation on n features; kind is not LINEAR. */
void dpt_layer_act_setup(dpt_layer *L, dpt_layer_kind kind, size_t n);
/* "relu" ... for a kind (static string). */
const char *dpt_layer_kind_name(dpt_layer_kind kind);

/* ==== Model specs ==== */

#define DPT_SPEC_MAX_WIDTHS 65 /* at most 64 Linear layers */
#define DPT_SPEC_MAX_WIDTH ((size_t)1 << 24)
typedef struct {
    int autoencoder;                     /* "ae:" (requires in == out) */
    size_t n_widths;                     /* >= 2 */
    size_t widths[DPT_SPEC_MAX_WIDTHS];  /* m_0 (input) .. m_L (output) */
    dpt_layer_kind act;                  /* between Linear layers; relu when not given */
    int has_bias;
} dpt_spec;
/* Parses "mlp:784-128-10:gelu[:nobias]"; DPT_EINVAL naming the bad part. */
dpt_status dpt_spec_parse(const char *spec, dpt_spec *out);

#endif

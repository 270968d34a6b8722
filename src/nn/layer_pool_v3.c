/* layer_pool.c built for x86-64-v3 (AVX2, FMA), chosen at run time (core/isa.h). */
#define DPT_ISA_V3_TU 1
#include "core/isa.h"
#if DPT_ISA_DISPATCH
#pragma GCC target("arch=x86-64-v3")
#include "layer_pool.c"
#endif
typedef int dpt_layer_pool_v3_tu; /* a translation unit is never empty (ISO C) */

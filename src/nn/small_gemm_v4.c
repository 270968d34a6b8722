/* small_gemm.c built for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL), chosen at run time (core/isa.h):
 * the convolution kernels take their 16-float paths (DPT_SMALL_GEMM_Z). */
#define DPT_ISA_V4_TU 1
#include "core/isa.h"
#if DPT_ISA_DISPATCH
#pragma GCC target("arch=x86-64-v4")
#include "small_gemm.c"
#endif
typedef int dpt_small_gemm_v4_tu; /* a translation unit is never empty (ISO C) */

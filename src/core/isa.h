/* Internal: run-time choice of the instruction set for the hot kernels. The library is
 * built for the compiler's baseline (x86-64: SSE2; aarch64: its default), so it runs on
 * every CPU of its architecture; on x86-64 with GCC the files whose speed depends on AVX2
 * and FMA are compiled a second time for x86-64-v3, each through a two-line
 * `<file>_v3.c` (`#pragma GCC target` + `#include "<file>.c"`), and their entry points pick
 * the v3 build when the CPU has it (dpt_isa_v3). The choice depends only on the CPU: one
 * machine always runs the same code (same bits for the same seed); results may differ in
 * the last bits between a v3 and a baseline CPU (FMA contraction).
 *
 * In such a file, name each entry point DPT_ISA_NAME(f) (f_base in the baseline build, f_v3
 * in the v3 one, f where there is no second build), keep what must exist once (tables,
 * parsers, once-initialized state) inside `#if !DPT_ISA_V3_TU`, and define the dispatcher
 * f inside `#if DPT_ISA_DISPATCH && !DPT_ISA_V3_TU`. A build that already targets AVX2 and
 * FMA (-march=native on such a CPU: DPT_NATIVE) or another compiler or architecture has
 * one build of each file: DPT_ISA_DISPATCH 0. Thread-safe (reads the CPU model libgcc
 * fills in before main). */
#ifndef DPT_CORE_ISA_H
#define DPT_CORE_ISA_H

/* decided before a _v3.c file's pragma (which defines __AVX2__ for what follows it) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !(defined(__AVX2__) && defined(__FMA__))
#define DPT_ISA_DISPATCH 1
#else
#define DPT_ISA_DISPATCH 0
#endif

#ifndef DPT_ISA_V3_TU
#define DPT_ISA_V3_TU 0 /* 1 in the _v3.c files, defined before they include this header */
#endif
#ifndef DPT_ISA_V4_TU
#define DPT_ISA_V4_TU 0 /* 1 in the _v4.c files (x86-64-v4: AVX-512), as DPT_ISA_V3_TU */
#endif

#if DPT_ISA_V4_TU
#define DPT_ISA_NAME(f) f##_v4
#elif DPT_ISA_V3_TU
#define DPT_ISA_NAME(f) f##_v3
#elif DPT_ISA_DISPATCH
#define DPT_ISA_NAME(f) f##_base
#else
#define DPT_ISA_NAME(f) f
#endif

#if DPT_ISA_DISPATCH
/* 1 when this CPU runs x86-64-v3 code (AVX, AVX2, BMI1/2, F16C, FMA, LZCNT, MOVBE). */
static inline int dpt_isa_v3(void) { return __builtin_cpu_supports("x86-64-v3") != 0; }
/* 1 when this CPU runs x86-64-v4 code (v3 and AVX-512 F, BW, CD, DQ, VL). Only the
 * convolution kernels of small_gemm.c have a v4 build (small_gemm_v4.c). */
static inline int dpt_isa_v4(void) { return __builtin_cpu_supports("x86-64-v4") != 0; }
#endif

#endif

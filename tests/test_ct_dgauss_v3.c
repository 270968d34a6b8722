/* test_ct_dgauss.c on the x86-64-v3 build of the table sampler (src/privacy/dgauss_v3.c,
 * core/isa.h): the same ctgrind check of dg_group_v3, compiled here with the hook. Skipped
 * where there is no such build or the CPU cannot run it. */
#define DPT_ISA_V3_TU 1
#include "core/isa.h"
#if DPT_ISA_DISPATCH
#include <stdio.h>
#include <stdlib.h>
/* before main, and built for the baseline: main itself is v3 code */
__attribute__((constructor)) static void skip_without_v3(void) {
    __builtin_cpu_init();
    if (!dpt_isa_v3()) {
        printf("SKIP: this CPU does not run x86-64-v3\n");
        exit(77);
    }
}
#pragma GCC target("arch=x86-64-v3")
#define CT_DGAUSS_V3 1
#include "test_ct_dgauss.c"
#else
#include <stdio.h>
int main(void) {
    printf("SKIP: no x86-64-v3 build of the sampler in this build\n");
    return 77;
}
#endif

/* bench/scatter_speed: seconds of the scattering layer's forward pass (J = 2, L = 8) over n
 * images of C x H x W (default 60000 of 1 x 28 x 28: Fashion-MNIST's training set), in
 * batches of 256, with `threads` threads (default 1); random pixels in [0, 1] (the transform's
 * cost does not depend on them). Prints wall and CPU seconds and microseconds per image.
 * Usage: scatter_speed [threads] [n] [C] [H] [W] */
#include <dptrain/nn.h>

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const size_t n = argc > 2 ? (size_t)atol(argv[2]) : 60000, C = argc > 3 ? (size_t)atol(argv[3]) : 1;
    const size_t H = argc > 4 ? (size_t)atol(argv[4]) : 28, W = argc > 5 ? (size_t)atol(argv[5]) : H, B = 256;
    char spec[128];
    snprintf(spec, sizeof spec, "cnn:%zux%zux%zu:scatter", C, H, W);
    dpt_model *m = NULL;
    double t0 = bench_wall_now();
    if (dpt_model_new(spec, B, threads, &m) != DPT_OK) {
        fprintf(stderr, "scatter_speed: %s\n", dpt_last_error());
        return 1;
    }
    const double setup = bench_wall_now() - t0;
    const size_t D = m->in_dim;
    float *x = malloc(B * D * sizeof *x);
    if (!x) return 1;
    unsigned s = 12345;
    for (size_t i = 0; i < B * D; i++) s = s * 1103515245u + 12345u, x[i] = (float)((s >> 8) & 0xFFFF) / 65535.0f;
    const double w0 = bench_wall_now(), c0 = bench_cpu_now();
    for (size_t lo = 0; lo < n; lo += B) {
        const size_t b = n - lo < B ? n - lo : B;
        if (dpt_model_forward(m, x, b) != DPT_OK) {
            fprintf(stderr, "scatter_speed: %s\n", dpt_last_error());
            return 1;
        }
    }
    const double wall = bench_wall_now() - w0, cpu = bench_cpu_now() - c0;
    printf("scatter J=2 L=8 on %zu images %zux%zux%zu -> %zux%zux%zu, %d thread(s): %.2f s wall, %.2f s CPU, "
           "%.1f us/image (filter bank and plans: %.3f s)\n",
           n, C, H, W, m->layers[0].out_shape[0], m->layers[0].out_shape[1], m->layers[0].out_shape[2], threads, wall,
           cpu, 1e6 * wall / (double)n, setup);
    free(x);
    dpt_model_free(m);
    return 0;
}

/* USPS reference errors for docs/dpmac.md: exact PCA (double, LAPACKE dsyev) of the first
 * NTRAIN images of zip.train, test error of the rank-K reconstruction on zip.test as
 * half the per-image sum of squared errors over 256 pixels, averaged over images (the DP-MAC
 * paper's "MSE"), with pixels mapped x -> x * SCALE + SHIFT (1 0: as stored in [-1, 1];
 * 0.5 0.5: [0, 1]). Not part of the build:
 *   cc -O2 -o /tmp/usps_pca experiments/dpmac/usps_pca.c -llapacke -lz -lm
 *   /tmp/usps_pca DATA_DIR/usps 5000 0.5 0.5 */
#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int load(const char *path, double *x, int max) {
    gzFile f = gzopen(path, "r");
    if (!f) { fprintf(stderr, "usps_pca: cannot open %s\n", path); exit(2); }
    char buf[8192];
    int n = 0;
    while (n < max && gzgets(f, buf, sizeof buf)) {
        char *s = buf;
        strtod(s, &s); /* label */
        for (int j = 0; j < 256; j++) x[n * 256 + j] = strtod(s, &s);
        n++;
    }
    gzclose(f);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: usps_pca USPS_DIR NTRAIN SCALE SHIFT\n"); return 2; }
    int ntr_max = atoi(argv[2]);
    double scale = atof(argv[3]), shift = atof(argv[4]);
    char p[4096];
    double *tr = malloc(sizeof(double) * 7291 * 256), *te = malloc(sizeof(double) * 2007 * 256);
    double *C = calloc(256 * 256, sizeof(double));
    if (!tr || !te || !C || ntr_max < 2 || ntr_max > 7291) return 2;
    snprintf(p, sizeof p, "%s/zip.train.gz", argv[1]);
    int ntr = load(p, tr, ntr_max);
    snprintf(p, sizeof p, "%s/zip.test.gz", argv[1]);
    int nte = load(p, te, 2007);
    for (int i = 0; i < ntr * 256; i++) tr[i] = tr[i] * scale + shift;
    for (int i = 0; i < nte * 256; i++) te[i] = te[i] * scale + shift;
    double mu[256] = {0};
    for (int i = 0; i < ntr; i++)
        for (int j = 0; j < 256; j++) mu[j] += tr[i * 256 + j] / ntr;
    for (int i = 0; i < ntr; i++)
        for (int a = 0; a < 256; a++) {
            double da = tr[i * 256 + a] - mu[a];
            for (int b = 0; b < 256; b++) C[a * 256 + b] += da * (tr[i * 256 + b] - mu[b]) / ntr;
        }
    double w[256];
    if (LAPACKE_dsyev(LAPACK_ROW_MAJOR, 'V', 'U', 256, C, 256, w) != 0) return 1;
    const int ks[] = {0, 5, 10, 20, 40};
    for (int ki = 0; ki < 5; ki++) {
        int k = ks[ki];
        double err = 0;
        for (int i = 0; i < nte; i++) {
            double r[256];
            for (int j = 0; j < 256; j++) r[j] = te[i * 256 + j] - mu[j];
            for (int c = 255; c > 255 - k; c--) { /* eigenvalues ascending: top-k are last */
                double d = 0;
                for (int j = 0; j < 256; j++) d += r[j] * C[j * 256 + c];
                for (int j = 0; j < 256; j++) r[j] -= d * C[j * 256 + c];
            }
            for (int j = 0; j < 256; j++) err += 0.5 * r[j] * r[j];
        }
        printf("pixels x*%g%+g, %d train / %d test: PCA-%d test half-SSE per image %.3f\n", scale, shift, ntr, nte,
               k, err / nte);
    }
    free(tr); free(te); free(C);
    return 0;
}

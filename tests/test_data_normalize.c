/* data/normalize: normalizers that use no statistic of the data. The published constants
 * of each named dataset agree with the statistics of that dataset's full training split,
 * fitted here on the real files when they are present (a swapped or mistyped constant
 * fails), and are refused for unknown names (CSV) or a dim that is not a multiple of the
 * channels; caller-given constants are validated (finite mean, std > 0, k divides dim,
 * per-feature k == dim) and applied exactly. */
#include <dptrain/data.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static int exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* the constants of `name` against dpt_normalizer_fit (per channel) on training data d */
static void check_against_fit(const char *name, const dpt_dataset *d, double tol) {
    dpt_normalizer pub, fit;
    CHECK_OK(dpt_normalizer_public(name, d->dim, &pub));
    CHECK_OK(dpt_normalizer_fit(d, DPT_NORM_PER_CHANNEL, &fit));
    CHECK(pub.channels == fit.channels && pub.dim == d->dim);
    for (size_t c = 0; c < pub.channels && c < fit.channels; c++) {
        CHECK_CLOSE(pub.mean[c], fit.mean[c], tol, 0);
        CHECK_CLOSE(pub.std[c], fit.std[c], tol, 0);
    }
    printf("%s: published (%.4f, %.4f), fitted (%.6f, %.6f) for channel 0\n", name, pub.mean[0], pub.std[0],
           fit.mean[0], fit.std[0]);
    dpt_normalizer_free(&pub);
    dpt_normalizer_free(&fit);
}

static int test_real(void) {
    int seen = 0;
    char a[1024], b[1024];
    const char *sd = tu_shared_datasets();
    dpt_dataset d;
    memset(&d, 0, sizeof d);
    if (sd) {
        snprintf(a, sizeof a, "%s/mnist/train-images-idx3-ubyte.gz", sd);
        if (exists(a) && dpt_data_load("mnist", sd, DPT_SPLIT_TRAIN, &d) == DPT_OK) {
            check_against_fit("mnist", &d, 1e-4);
            dpt_dataset_free(&d), seen++;
        }
        snprintf(a, sizeof a, "%s/usps/zip.train.gz", sd);
        if (exists(a) && dpt_data_load("usps", sd, DPT_SPLIT_TRAIN, &d) == DPT_OK) {
            check_against_fit("usps", &d, 1e-4);
            dpt_dataset_free(&d), seen++;
        }
        /* one batch of 10000 (the whole set is 600 MB as floats); this copy was rebuilt from
         * JPEG, so its statistics differ from the official ones by up to 0.002 */
        snprintf(a, sizeof a, "%s/cifar10/data_batch_1.bin.gz", sd);
        snprintf(b, sizeof b, "%s/cifar10/data_batch_1.bin", sd);
        const char *p = exists(a) ? a : exists(b) ? b : NULL;
        if (p && dpt_data_load_cifar10(&p, 1, &d) == DPT_OK) {
            check_against_fit("cifar10", &d, 0.004);
            dpt_dataset_free(&d), seen++;
        }
    }
    if (exists(DPT_DEFAULT_DATA_DIR "/fashion-mnist/train-images-idx3-ubyte.gz") &&
        dpt_data_load("fashion-mnist", NULL, DPT_SPLIT_TRAIN, &d) == DPT_OK) {
        check_against_fit("fashion-mnist", &d, 1e-4);
        dpt_dataset_free(&d), seen++;
    }
    return seen;
}

static void test_public(void) {
    dpt_normalizer nz;
    CHECK_OK(dpt_normalizer_public("cifar10", 3072, &nz));
    CHECK(nz.channels == 3 && nz.dim == 3072);
    dpt_normalizer_free(&nz);
    CHECK_OK(dpt_normalizer_public("usps-pooled", 256, &nz));
    dpt_normalizer u;
    CHECK_OK(dpt_normalizer_public("usps", 256, &u));
    CHECK(nz.mean[0] == u.mean[0] && nz.std[0] == u.std[0]);
    dpt_normalizer_free(&u);
    dpt_normalizer_free(&nz);
    CHECK_STATUS(dpt_normalizer_public("csv:/tmp/x.csv", 10, &nz), DPT_EINVAL);
    CHECK_ERR_HAS("no published constants");
    CHECK(nz.mean == NULL && nz.std == NULL);
    CHECK_STATUS(dpt_normalizer_public("cifar10", 100, &nz), DPT_EINVAL); /* not a multiple of 3 */
    CHECK_ERR_HAS("channels");
    CHECK_STATUS(dpt_normalizer_public(NULL, 10, &nz), DPT_EINVAL);
}

static void test_from_values(void) {
    const float mean[3] = {0.5f, -1.0f, 2.0f}, sd[3] = {0.25f, 2.0f, 4.0f};
    dpt_normalizer nz;
    float x[6] = {1.0f, 0.5f, 3.0f, -1.0f, 6.0f, 10.0f};
    dpt_dataset d = {.n = 1, .dim = 6, .x = x, .n_classes = 1, .shape = {3, 1, 2}};
    /* per channel: pairs over runs of 2 features */
    CHECK_OK(dpt_normalizer_from_values(6, mean, sd, 3, 0, &nz));
    CHECK(nz.channels == 3);
    CHECK_OK(dpt_normalizer_apply(&nz, &d));
    const float want[6] = {2.0f, 0.0f, 2.0f, 0.0f, 1.0f, 2.0f};
    for (int j = 0; j < 6; j++) CHECK_CLOSE(x[j], want[j], 1e-6, 0);
    dpt_normalizer_free(&nz);
    /* per feature: k == dim */
    CHECK_OK(dpt_normalizer_from_values(3, mean, sd, 3, 1, &nz));
    CHECK(nz.channels == 0 && nz.dim == 3);
    dpt_normalizer_free(&nz);
    CHECK_STATUS(dpt_normalizer_from_values(6, mean, sd, 3, 1, &nz), DPT_EINVAL); /* per feature, k != dim */
    CHECK_ERR_HAS("k == dim");
    CHECK_STATUS(dpt_normalizer_from_values(7, mean, sd, 3, 0, &nz), DPT_EINVAL);
    CHECK_ERR_HAS("divide");
    const float bad_sd[3][3] = {{0.25f, 0.0f, 1.0f}, {0.25f, -1.0f, 1.0f}, {0.25f, NAN, 1.0f}};
    for (int i = 0; i < 3; i++) {
        CHECK_STATUS(dpt_normalizer_from_values(6, mean, bad_sd[i], 3, 0, &nz), DPT_EINVAL);
        CHECK_ERR_HAS("std[1]");
    }
    const float bad_mean[3] = {0.5f, INFINITY, 0.0f};
    CHECK_STATUS(dpt_normalizer_from_values(6, bad_mean, sd, 3, 0, &nz), DPT_EINVAL);
    CHECK_ERR_HAS("mean[1]");
    CHECK_STATUS(dpt_normalizer_from_values(6, mean, sd, 0, 0, &nz), DPT_EINVAL);
    CHECK_STATUS(dpt_normalizer_from_values(6, NULL, sd, 3, 0, &nz), DPT_EINVAL);
    CHECK(nz.mean == NULL);
}

int main(void) {
    test_public();
    test_from_values();
    if (test_real() == 0) printf("no real dataset found: the published constants were not compared with the data\n");
    TEST_MAIN_END();
}

/* Datasets built from the caller's arrays (dpt_dataset_from_arrays, dpt_dataset_set_shape):
 * the copy is exact and independent of the caller's memory, and every bad argument is
 * refused with a message naming the parameter (and the first bad index for data) while
 * *out stays zeroed. */
#include <dptrain/data.h>

#include <stdint.h>

#include "testutil.h"

static int is_zeroed(const dpt_dataset *d) {
    static const dpt_dataset zero;
    return !memcmp(d, &zero, sizeof zero);
}

static void test_copy(void) {
    enum { N = 5, D = 3 };
    float x[N * D];
    int32_t y[N] = {0, 2, 1, 2, 0};
    for (int i = 0; i < N * D; i++) x[i] = 0.25f * (float)i - 1.0f;
    dpt_dataset d;
    memset(&d, 0xAB, sizeof d); /* *out is overwritten, never read */
    CHECK_OK(dpt_dataset_from_arrays(x, y, N, D, 0, &d));
    CHECK(d.n == N && d.dim == D);
    CHECK(d.n_classes == 3); /* max label + 1 */
    CHECK(d.shape[0] == 1 && d.shape[1] == 1 && d.shape[2] == D);
    CHECK(d.x != x && d.y != y);
    CHECK(!memcmp(d.x, x, sizeof x) && !memcmp(d.y, y, sizeof y));
    /* the copy does not alias the caller's arrays */
    x[0] = 99.0f;
    y[0] = 1;
    CHECK(d.x[0] == -1.0f && d.y[0] == 0);
    CHECK_OK(dpt_dataset_validate(&d));
    /* hashing sees the content: the same arrays give the same hash */
    uint8_t h1[32], h2[32];
    x[0] = -1.0f;
    y[0] = 0;
    dpt_dataset e;
    CHECK_OK(dpt_dataset_from_arrays(x, y, N, D, 0, &e));
    CHECK_OK(dpt_dataset_hash(&d, h1));
    CHECK_OK(dpt_dataset_hash(&e, h2));
    CHECK(!memcmp(h1, h2, 32));
    dpt_dataset_free(&e);
    /* explicit n_classes larger than the labels present (a test split missing a class) */
    CHECK_OK(dpt_dataset_from_arrays(x, y, N, D, 10, &e));
    CHECK(e.n_classes == 10);
    dpt_dataset_free(&e);

    /* shape for convolutional models */
    dpt_dataset img;
    float px[2 * 12] = {0};
    int32_t py[2] = {1, 0};
    CHECK_OK(dpt_dataset_from_arrays(px, py, 2, 12, 2, &img));
    CHECK_OK(dpt_dataset_set_shape(&img, 3, 2, 2));
    CHECK(img.shape[0] == 3 && img.shape[1] == 2 && img.shape[2] == 2);
    CHECK_OK(dpt_dataset_validate(&img));
    CHECK_STATUS(dpt_dataset_set_shape(&img, 1, 3, 5), DPT_EINVAL);
    CHECK_ERR_HAS("c * h * w = 1 * 3 * 5 must equal the 12 features");
    CHECK(img.shape[0] == 3 && img.shape[1] == 2 && img.shape[2] == 2); /* unchanged */
    CHECK_STATUS(dpt_dataset_set_shape(&img, 0, 3, 4), DPT_EINVAL);
    CHECK_ERR_HAS("c, h and w must be >= 1");
    CHECK_STATUS(dpt_dataset_set_shape(&img, SIZE_MAX, 2, 2), DPT_EINVAL); /* overflow */
    CHECK_STATUS(dpt_dataset_set_shape(NULL, 1, 1, 12), DPT_EINVAL);
    CHECK_ERR_HAS("d is NULL");
    dpt_dataset_free(&img);
    dpt_dataset_free(&d);
    CHECK(is_zeroed(&d));
}

/* Each bad call: the status, a message fragment, and *out left zeroed. */
#define REFUSED(call, st, needle)                                                                                      \
    do {                                                                                                               \
        dpt_dataset o_;                                                                                                \
        memset(&o_, 0x5A, sizeof o_);                                                                                  \
        dpt_dataset *out_ = &o_;                                                                                       \
        (void)out_;                                                                                                    \
        CHECK_STATUS(call, st);                                                                                        \
        CHECK_ERR_HAS(needle);                                                                                         \
        CHECK(is_zeroed(&o_));                                                                                         \
    } while (0)

static void test_refused(void) {
    enum { N = 20, D = 4 };
    float x[N * D];
    int32_t y[N];
    for (int i = 0; i < N * D; i++) x[i] = (float)i;
    for (int i = 0; i < N; i++) y[i] = i % 10;
    REFUSED(dpt_dataset_from_arrays(NULL, y, N, D, 0, out_), DPT_EINVAL, "dpt_dataset_from_arrays: x is NULL");
    REFUSED(dpt_dataset_from_arrays(x, NULL, N, D, 0, out_), DPT_EINVAL, "dpt_dataset_from_arrays: y is NULL");
    REFUSED(dpt_dataset_from_arrays(x, y, 0, D, 0, out_), DPT_EINVAL, "n must be >= 1");
    REFUSED(dpt_dataset_from_arrays(x, y, N, 0, 0, out_), DPT_EINVAL, "dim must be >= 1");
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, -3, out_), DPT_EINVAL, "n_classes must be >= 1, or 0");
    /* n * dim overflows size_t (nothing is read: refused before the data pass) */
    REFUSED(dpt_dataset_from_arrays(x, y, SIZE_MAX / 2, 3, 0, out_), DPT_ENOMEM, "n * dim");
    CHECK_STATUS(dpt_dataset_from_arrays(x, y, N, D, 0, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("out is NULL");

    /* labels: the FIRST bad index is named */
    y[17] = 12;
    y[18] = 13;
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, 10, out_), DPT_EINVAL, "y[17] = 12 is outside [0, 10)");
    y[17] = 7;
    y[18] = 8;
    y[4] = -1;
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, 0, out_), DPT_EINVAL, "y[4] = -1 is not a class index");
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, 10, out_), DPT_EINVAL, "y[4] = -1 is outside [0, 10)");
    y[4] = 4;
    /* n_classes 0 with a label INT32_MAX would need INT32_MAX + 1 classes */
    y[2] = INT32_MAX;
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, 0, out_), DPT_EINVAL, "y[2] = 2147483647");
    y[2] = 2;

    /* features: NaN and both infinities, first index with its example and feature */
    x[1234 % (N * D)] = NAN; /* 1234 % 80 = 34: example 8, feature 2 */
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, 0, out_), DPT_EINVAL, "x[34] = nan (example 8, feature 2) is not finite");
    x[34] = 34.0f;
    x[79] = INFINITY;
    x[78] = -INFINITY;
    REFUSED(dpt_dataset_from_arrays(x, y, N, D, 0, out_), DPT_EINVAL, "x[78] = -inf (example 19, feature 2)");
    x[78] = 78.0f;
    x[79] = 79.0f;
    dpt_dataset d;
    CHECK_OK(dpt_dataset_from_arrays(x, y, N, D, 0, &d));
    CHECK(d.n_classes == 10);
    dpt_dataset_free(&d);
    dpt_dataset_free(NULL);
}

int main(void) {
    test_copy();
    test_refused();
    TEST_MAIN_END();
}

/* Loaders on the real datasets: counts and class counts from ../shared/datasets/SOURCES.md
 * (MNIST, USPS, CIFAR-10) and Fashion-MNIST from the Debian package dataset-fashion-mnist.
 * Each dataset that is absent is reported; the program skips (77) when none is present. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dptrain/data.h"
#include "testutil.h"

static void count_classes(const dpt_dataset *d, long *counts) {
    for (int c = 0; c < d->n_classes; c++) counts[c] = 0;
    for (size_t i = 0; i < d->n; i++) counts[d->y[i]]++;
}

static void check_counts(const dpt_dataset *d, const long *want, const char *what) {
    long got[10];
    CHECK(d->n_classes == 10);
    count_classes(d, got);
    for (int c = 0; c < 10; c++) {
        if (got[c] != want[c])
            fprintf(stderr, "%s: class %d count %ld, want %ld\n", what, c, got[c], want[c]);
        CHECK(got[c] == want[c]);
    }
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* FNV-1a of a row's label and feature bytes */
static uint64_t row_hash(const dpt_dataset *d, size_t i) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)(d->x + i * d->dim);
    for (size_t k = 0; k < d->dim * sizeof(float); k++) h = (h ^ p[k]) * 1099511628211ull;
    return (h ^ (uint64_t)d->y[i]) * 1099511628211ull;
}
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* usps-pooled: 5000 / 4298, together exactly the images of zip.train + zip.test (as a
 * multiset of (label, pixels)), class counts adding up to both files', the same on every
 * load, and not simply the files' order (the permutation is applied). */
static void test_usps_pooled(const char *sd, const long *tr, const long *te) {
    dpt_dataset a, b, p, q, p2;
    CHECK_OK(dpt_data_load("usps", sd, DPT_SPLIT_TRAIN, &a));
    CHECK_OK(dpt_data_load("usps", sd, DPT_SPLIT_TEST, &b));
    CHECK_OK(dpt_data_load("usps-pooled", sd, DPT_SPLIT_TRAIN, &p));
    CHECK_OK(dpt_data_load("usps-pooled", sd, DPT_SPLIT_TEST, &q));
    CHECK_OK(dpt_data_load("usps-pooled", sd, DPT_SPLIT_TRAIN, &p2));
    CHECK(p.n == 5000 && q.n == 4298 && p.dim == 256 && q.dim == 256 && p.n_classes == 10);
    CHECK(p2.n == p.n && !memcmp(p.x, p2.x, p.n * p.dim * sizeof(float)) && !memcmp(p.y, p2.y, p.n * sizeof(int32_t)));
    CHECK(memcmp(p.x, a.x, 10 * 256 * sizeof(float)) != 0);
    long cp[10] = {0}, cq[10] = {0};
    count_classes(&p, cp);
    count_classes(&q, cq);
    for (int c = 0; c < 10; c++) CHECK(cp[c] + cq[c] == tr[c] + te[c]);
    const size_t N = a.n + b.n;
    uint64_t *h1 = malloc(N * sizeof(uint64_t)), *h2 = malloc(N * sizeof(uint64_t));
    for (size_t i = 0; i < a.n; i++) h1[i] = row_hash(&a, i);
    for (size_t i = 0; i < b.n; i++) h1[a.n + i] = row_hash(&b, i);
    for (size_t i = 0; i < p.n; i++) h2[i] = row_hash(&p, i);
    for (size_t i = 0; i < q.n && p.n + i < N; i++) h2[p.n + i] = row_hash(&q, i);
    qsort(h1, N, sizeof(uint64_t), cmp_u64);
    qsort(h2, N, sizeof(uint64_t), cmp_u64);
    CHECK(p.n + q.n == N && !memcmp(h1, h2, N * sizeof(uint64_t)));
    free(h1), free(h2);
    dpt_dataset_free(&a), dpt_dataset_free(&b), dpt_dataset_free(&p), dpt_dataset_free(&q), dpt_dataset_free(&p2);
}

static int test_real(void) {
    int ran = 0;
    const char *sd = tu_shared_datasets();
    char p[1024];
    dpt_dataset d = {0};
    if (sd && (snprintf(p, sizeof p, "%s/mnist/t10k-labels-idx1-ubyte.gz", sd), exists(p))) {
        ran++;
        static const long tr[10] = {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949};
        static const long te[10] = {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009};
        CHECK_OK(dpt_data_load("mnist", sd, DPT_SPLIT_TRAIN, &d));
        CHECK(d.n == 60000 && d.dim == 784 && d.shape[1] == 28);
        check_counts(&d, tr, "mnist train");
        float mx = 0;
        for (size_t i = 0; i < d.n * d.dim; i++) mx = d.x[i] > mx ? d.x[i] : mx;
        CHECK(mx == 1.0f);
        dpt_normalizer nz;
        CHECK_OK(dpt_normalizer_fit(&d, DPT_NORM_PER_CHANNEL, &nz));
        CHECK_CLOSE(nz.mean[0], 0.1307, 1e-4, 0); /* the well-known MNIST mean/std */
        CHECK_CLOSE(nz.std[0], 0.3081, 1e-4, 0);
        dpt_dataset_free(&d);
        CHECK_OK(dpt_data_load("mnist", sd, DPT_SPLIT_TEST, &d));
        CHECK(d.n == 10000);
        check_counts(&d, te, "mnist test");
        CHECK_OK(dpt_normalizer_apply(&nz, &d));
        dpt_normalizer_free(&nz);
        dpt_dataset_free(&d);
    } else {
        printf("note: MNIST not found under DPT_SHARED_DATASETS=%s; skipped\n", sd ? sd : "(unset)");
    }
    if (sd && (snprintf(p, sizeof p, "%s/usps/zip.test.gz", sd), exists(p))) {
        ran++;
        static const long tr[10] = {1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644};
        static const long te[10] = {359, 264, 198, 166, 200, 160, 170, 147, 166, 177};
        CHECK_OK(dpt_data_load("usps", sd, DPT_SPLIT_TRAIN, &d));
        CHECK(d.n == 7291 && d.dim == 256);
        check_counts(&d, tr, "usps train");
        dpt_dataset_free(&d);
        CHECK_OK(dpt_data_load("usps", sd, DPT_SPLIT_TEST, &d));
        CHECK(d.n == 2007);
        check_counts(&d, te, "usps test");
        dpt_dataset_free(&d);
        test_usps_pooled(sd, tr, te);
    } else {
        printf("note: USPS not found under DPT_SHARED_DATASETS; skipped\n");
    }
    if (sd && (snprintf(p, sizeof p, "%s/cifar10/test_batch.bin.gz", sd), exists(p))) {
        ran++;
        static const long b1[10] = {1024, 957, 968, 1019, 989, 1026, 1030, 987, 977, 1023};
        static const long all[10] = {5000, 5000, 5000, 5000, 5000, 5000, 5000, 5000, 5000, 5000};
        static const long te[10] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
        CHECK_OK(dpt_data_load("cifar10", sd, DPT_SPLIT_TRAIN, &d));
        CHECK(d.n == 50000 && d.dim == 3072 && d.shape[0] == 3);
        check_counts(&d, all, "cifar10 train");
        CHECK_OK(dpt_dataset_take(&d, 10000)); /* = data_batch_1 */
        check_counts(&d, b1, "cifar10 data_batch_1");
        int cls[2] = {0, 1}; /* airplane, automobile */
        CHECK_OK(dpt_dataset_filter_classes(&d, cls, 2));
        CHECK(d.n == 1024 + 957 && d.n_classes == 2);
        dpt_dataset_free(&d);
        CHECK_OK(dpt_data_load("cifar10", sd, DPT_SPLIT_TEST, &d));
        CHECK(d.n == 10000);
        check_counts(&d, te, "cifar10 test");
        dpt_dataset_free(&d);
    } else {
        printf("note: CIFAR-10 not found under DPT_SHARED_DATASETS; skipped\n");
    }
    if (exists(DPT_DEFAULT_DATA_DIR "/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
        ran++;
        static const long tr[10] = {6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000};
        static const long te[10] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
        CHECK_OK(dpt_data_load("fashion-mnist", NULL, DPT_SPLIT_TRAIN, &d));
        CHECK(d.n == 60000 && d.dim == 784);
        check_counts(&d, tr, "fashion-mnist train");
        dpt_dataset_free(&d);
        CHECK_OK(dpt_data_load("fashion-mnist", "", DPT_SPLIT_TEST, &d));
        CHECK(d.n == 10000);
        check_counts(&d, te, "fashion-mnist test");
        dpt_dataset_free(&d);
    } else {
        printf("note: Fashion-MNIST not installed in " DPT_DEFAULT_DATA_DIR
               "/fashion-mnist (Debian package dataset-fashion-mnist); skipped\n");
    }
    return ran;
}

int main(void) {
    double t0 = dpt_now();
    int ran = test_real();
    if (ran == 0)
        TEST_SKIP("no real dataset found (DPT_SHARED_DATASETS=%s, " DPT_DEFAULT_DATA_DIR
                  "/fashion-mnist)", tu_shared_datasets() ? tu_shared_datasets() : "(unset)");
    printf("real datasets checked: %d of 4 in %.1f s\n", ran, dpt_now() - t0);
    TEST_MAIN_END();
}

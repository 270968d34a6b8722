/* Fuzzes the dataset loaders on files they did not write: the first byte picks the format
 * (IDX image + label pair, CIFAR-10 batch, USPS text, CSV, CSV with 1-3 regression target
 * columns, CSV of features alone after 0-2 skipped columns), the rest is the file (for IDX:
 * a 2-byte little-endian length of the image file, then both files). A loaded dataset must
 * pass dpt_dataset_validate. Seeds: small valid files of each format made here. */
#include <dptrain/data.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int kind = data[0] % 6;
    data++, size--;
    const char *a = fuzz_path("a"), *b = fuzz_path("b");
    dpt_dataset d;
    memset(&d, 0, sizeof d);
    dpt_status st;
    if (kind == 0) {
        if (size < 2) return 0;
        size_t na = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2, size -= 2;
        if (na > size) na = size;
        fuzz_write(a, data, na);
        fuzz_write(b, data + na, size - na);
        st = dpt_data_load_idx(a, b, &d);
    } else if (kind == 1) {
        fuzz_write(a, data, size);
        const char *paths[2] = {a, a};
        st = dpt_data_load_cifar10(paths, 1 + (size % 2), &d);
    } else {
        fuzz_write(a, data, size);
        st = kind == 2   ? dpt_data_load_usps(a, &d)
             : kind == 3 ? dpt_data_load_csv(a, &d)
             : kind == 4 ? dpt_data_load_csv_targets(a, 1 + size % 3, &d)
                         : dpt_data_load_csv_features(a, size % 3, &d);
    }
    if (st == DPT_OK && dpt_dataset_validate(&d) != DPT_OK) abort(); /* a loader returned an invalid dataset */
    dpt_dataset_free(&d);
    unlink(a);
    unlink(b);
    return 0;
}

static void put_be32(uint8_t *p, uint32_t x) {
    p[0] = (uint8_t)(x >> 24), p[1] = (uint8_t)(x >> 16), p[2] = (uint8_t)(x >> 8), p[3] = (uint8_t)x;
}

static void fuzz_seeds(const char *dir) {
    /* IDX: 3 images of 4x4, 3 labels */
    uint8_t idx[1 + 2 + 16 + 48 + 8 + 3];
    size_t k = 0;
    idx[k++] = 0;
    idx[k++] = 16 + 48, idx[k++] = 0;
    put_be32(idx + k, 2051), put_be32(idx + k + 4, 3), put_be32(idx + k + 8, 4), put_be32(idx + k + 12, 4);
    k += 16;
    for (int i = 0; i < 48; i++) idx[k++] = (uint8_t)(i * 5);
    put_be32(idx + k, 2049), put_be32(idx + k + 4, 3);
    k += 8;
    idx[k++] = 1, idx[k++] = 9, idx[k++] = 0;
    fuzz_seed(dir, "idx", idx, k);
    /* CIFAR-10: two records */
    static uint8_t cif[1 + 2 * 3073];
    cif[0] = 1;
    for (int r = 0; r < 2; r++) {
        cif[1 + r * 3073] = (uint8_t)(3 + r);
        for (int i = 0; i < 3072; i++) cif[2 + r * 3073 + i] = (uint8_t)(i * 7 + r);
    }
    fuzz_seed(dir, "cifar", cif, sizeof cif);
    /* USPS: two lines of a label and 256 values */
    char *u = malloc(2 + 2 * (8 + 256 * 8));
    size_t n = 0;
    u[n++] = 2;
    for (int r = 0; r < 2; r++) {
        n += (size_t)sprintf(u + n, "%d.0000", 3 + r);
        for (int i = 0; i < 256; i++) n += (size_t)sprintf(u + n, " %.4f", -1.0 + (i % 9) * 0.25);
        u[n++] = '\n';
    }
    fuzz_seed(dir, "usps", u, n);
    free(u);
    static const char csv[] = "\3label,a,b,c\n0,1.5,2,-3\n1,0.5,3e2,4\r\n\n2,1,1,1\n";
    fuzz_seed(dir, "csv", csv, sizeof csv - 1);
    static const char reg[] = "\4price,a,b\n1.25,0.5,-2\n-3e-2,1,1\r\n";
    fuzz_seed(dir, "csv_targets", reg, sizeof reg - 1);
    static const char feat[] = "\5id,a,b\nx7,0.5,-2\n,1,1e3\r\n";
    fuzz_seed(dir, "csv_features", feat, sizeof feat - 1);
}

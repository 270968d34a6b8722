/* Loaders on small files made here (good and bad: wrong magic, truncation, dimension
 * mismatch, label out of range, NaN/garbage in CSV, corrupt gzip); normalization with
 * training statistics; filter/take/gather/hash. The real datasets: test_data_real.c. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dptrain/data.h"
#include "testutil.h"

/* ==== Helpers to write test files ==== */

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tu_tmpdir(), name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    if (!g || gzwrite(g, data, (unsigned)n) != (int)n) {
        fprintf(stderr, "gzwrite %s failed\n", path);
        exit(1);
    }
    gzclose(g);
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static void be32w(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* IDX images file: n images of r x c with pixel (i, j) = (i * 7 + j) % 256. */
static size_t make_idx_images(uint8_t *buf, uint32_t magic, uint32_t n, uint32_t r, uint32_t c) {
    be32w(buf, magic);
    be32w(buf + 4, n);
    be32w(buf + 8, r);
    be32w(buf + 12, c);
    for (size_t i = 0; i < (size_t)n * r * c; i++) buf[16 + i] = (uint8_t)((i * 7) % 256);
    return 16 + (size_t)n * r * c;
}
static size_t make_idx_labels(uint8_t *buf, uint32_t magic, uint32_t n) {
    be32w(buf, magic);
    be32w(buf + 4, n);
    for (uint32_t i = 0; i < n; i++) buf[8 + i] = (uint8_t)(i % 10);
    return 8 + n;
}

/* ==== IDX ==== */

static void test_idx(void) {
    uint8_t im[16 + 12 * 6], lb[8 + 12];
    size_t ni = make_idx_images(im, 2051, 12, 2, 3), nl = make_idx_labels(lb, 2049, 12);
    dpt_dataset d = {0};

    /* raw files */
    write_bytes(tpath("im.raw"), im, ni);
    write_bytes(tpath("lb.raw"), lb, nl);
    CHECK_OK(dpt_data_load_idx(tpath("im.raw"), tpath("lb.raw"), &d));
    CHECK(d.n == 12 && d.dim == 6 && d.n_classes == 10);
    CHECK(d.shape[0] == 1 && d.shape[1] == 2 && d.shape[2] == 3);
    CHECK_CLOSE(d.x[1], 7.0 / 255.0, 1e-7, 0);
    CHECK_CLOSE(d.x[12 * 6 - 1], ((71 * 7) % 256) / 255.0, 1e-7, 0);
    CHECK(d.y[11] == 1);
    dpt_dataset_free(&d);
    CHECK(d.x == NULL && d.n == 0);

    /* gzip detected by magic, not name: gzip content named .raw, raw content named .gz */
    write_gz(tpath("im_gz.raw"), im, ni);
    write_bytes(tpath("lb_raw.gz"), lb, nl);
    CHECK_OK(dpt_data_load_idx(tpath("im_gz.raw"), tpath("lb_raw.gz"), &d));
    CHECK(d.n == 12);
    CHECK_CLOSE(d.x[1], 7.0 / 255.0, 1e-7, 0);
    dpt_dataset_free(&d);

    /* wrong magic: images file given as labels and the other way round */
    CHECK_STATUS(dpt_data_load_idx(tpath("lb.raw"), tpath("lb.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS(tpath("lb.raw"));
    CHECK_ERR_HAS("bad magic 0x00000801, expected 2051 (IDX images)");
    CHECK(d.x == NULL && d.n == 0);
    CHECK_STATUS(dpt_data_load_idx(tpath("im.raw"), tpath("im.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("expected 2049 (IDX labels)");

    /* truncated header and body */
    write_bytes(tpath("im_hdr.raw"), im, 10);
    CHECK_STATUS(dpt_data_load_idx(tpath("im_hdr.raw"), tpath("lb.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("truncated IDX header");
    CHECK_ERR_HAS("im_hdr.raw");
    write_bytes(tpath("im_body.raw"), im, ni - 5);
    CHECK_STATUS(dpt_data_load_idx(tpath("im_body.raw"), tpath("lb.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("truncated");
    CHECK_ERR_HAS("12 images of 2x3");
    write_bytes(tpath("lb_body.raw"), lb, nl - 1);
    CHECK_STATUS(dpt_data_load_idx(tpath("im.raw"), tpath("lb_body.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("lb_body.raw: truncated");

    /* images vs labels count mismatch */
    uint8_t lb11[8 + 11];
    size_t nl11 = make_idx_labels(lb11, 2049, 11);
    write_bytes(tpath("lb11.raw"), lb11, nl11);
    CHECK_STATUS(dpt_data_load_idx(tpath("im.raw"), tpath("lb11.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("has 12 images but");
    CHECK_ERR_HAS("has 11 labels");

    /* label out of range */
    uint8_t lbbad[8 + 12];
    memcpy(lbbad, lb, nl);
    lbbad[8 + 5] = 10;
    write_bytes(tpath("lb_bad.raw"), lbbad, nl);
    CHECK_STATUS(dpt_data_load_idx(tpath("im.raw"), tpath("lb_bad.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("label 10 of example 5 out of range");

    /* header sizes whose product overflows: refused before allocating, no crash */
    uint8_t huge[16];
    be32w(huge, 2051);
    be32w(huge + 4, 0xFFFFFFFFu);
    be32w(huge + 8, 0xFFFFFFFFu);
    be32w(huge + 12, 0xFFFFFFFFu);
    write_bytes(tpath("im_huge.raw"), huge, 16);
    CHECK_STATUS(dpt_data_load_idx(tpath("im_huge.raw"), tpath("lb.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("im_huge.raw");

    /* missing file */
    CHECK_STATUS(dpt_data_load_idx(tpath("nope.gz"), tpath("lb.raw"), &d), DPT_EIO);
    CHECK_ERR_HAS(tpath("nope.gz"));

    /* truncated gzip stream */
    write_gz(tpath("im_full.gz"), im, ni);
    uint8_t *gz;
    size_t gzn;
    CHECK_OK(dpt_read_file(tpath("im_full.gz"), &gz, &gzn));
    write_bytes(tpath("im_cut.gz"), gz, gzn / 2);
    CHECK_STATUS(dpt_data_load_idx(tpath("im_cut.gz"), tpath("lb.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("im_cut.gz: truncated gzip stream");
    /* corrupt gzip stream: damage the deflate data and the CRC */
    for (size_t i = 12; i < gzn - 8 && i < 30; i++) gz[i] ^= 0x5a;
    write_bytes(tpath("im_bad.gz"), gz, gzn);
    CHECK_STATUS(dpt_data_load_idx(tpath("im_bad.gz"), tpath("lb.raw"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("im_bad.gz");
    CHECK_ERR_HAS("gzip");

    /* every truncation of the gzip file and of the raw file is refused, never a crash */
    int all_refused = 1;
    dpt_free(gz);
    CHECK_OK(dpt_read_file(tpath("im_full.gz"), &gz, &gzn));
    for (size_t cut = 0; cut < gzn; cut++) {
        write_bytes(tpath("im_sweep.gz"), gz, cut);
        if (dpt_data_load_idx(tpath("im_sweep.gz"), tpath("lb.raw"), &d) != DPT_EFORMAT ||
            d.x != NULL)
            all_refused = 0;
    }
    for (size_t cut = 0; cut < ni; cut++) {
        write_bytes(tpath("im_sweep.raw"), im, cut);
        if (dpt_data_load_idx(tpath("im_sweep.raw"), tpath("lb.raw"), &d) != DPT_EFORMAT)
            all_refused = 0;
    }
    CHECK(all_refused);
    dpt_free(gz);
}

/* ==== CIFAR-10 ==== */

static void test_cifar(void) {
    enum { R = 3073 };
    static uint8_t buf[3 * R + 5];
    for (int r = 0; r < 3; r++) {
        buf[r * R] = (uint8_t)(r * 4); /* labels 0, 4, 8 */
        for (int j = 0; j < 3072; j++) buf[r * R + 1 + j] = (uint8_t)((j + r) % 256);
    }
    write_gz(tpath("c1.bin.gz"), buf, 2 * R);
    write_bytes(tpath("c2.bin"), buf + 2 * R, R);
    const char *paths[2] = {tpath("c1.bin.gz"), tpath("c2.bin")};
    dpt_dataset d = {0};
    CHECK_OK(dpt_data_load_cifar10(paths, 2, &d));
    CHECK(d.n == 3 && d.dim == 3072 && d.n_classes == 10);
    CHECK(d.shape[0] == 3 && d.shape[1] == 32 && d.shape[2] == 32);
    CHECK(d.y[0] == 0 && d.y[1] == 4 && d.y[2] == 8);
    /* planar: green plane of record 2 starts at 1024 */
    CHECK_CLOSE(d.x[2 * 3072 + 1024], ((1024 + 2) % 256) / 255.0, 1e-7, 0);
    CHECK_CLOSE(d.x[3072 + 255], 0.0, 1e-7, 0); /* (255 + 1) % 256 */
    dpt_dataset_free(&d);

    /* record size mismatch */
    write_bytes(tpath("c_bad.bin"), buf, 2 * R + 5);
    const char *bad[1] = {tpath("c_bad.bin")};
    CHECK_STATUS(dpt_data_load_cifar10(bad, 1, &d), DPT_EFORMAT);
    CHECK_ERR_HAS("c_bad.bin: size 6151 bytes is not a multiple of the CIFAR-10 record size");
    /* label out of range */
    buf[R] = 10;
    write_bytes(tpath("c_lab.bin"), buf, 2 * R);
    const char *lab[1] = {tpath("c_lab.bin")};
    CHECK_STATUS(dpt_data_load_cifar10(lab, 1, &d), DPT_EFORMAT);
    CHECK_ERR_HAS("c_lab.bin: label 10 of record 1 out of range");
    CHECK(d.x == NULL);
}

/* ==== USPS ==== */

static char *usps_line(char *p, const char *label, int nvals, double v) {
    p += sprintf(p, "%s", label);
    for (int j = 0; j < nvals; j++) p += sprintf(p, " %.4f", j == 3 ? v : -1.0 + j / 128.0);
    p += sprintf(p, " \n");
    return p;
}

static void test_usps(void) {
    static char txt[3 * 256 * 12 + 100];
    char *p = txt;
    p = usps_line(p, "6.0000", 256, 0.5);
    p = usps_line(p, "0.0000", 256, -0.25);
    dpt_dataset d = {0};
    write_gz(tpath("zip.train.gz"), txt, strlen(txt));
    CHECK_OK(dpt_data_load_usps(tpath("zip.train.gz"), &d));
    CHECK(d.n == 2 && d.dim == 256 && d.shape[1] == 16 && d.shape[2] == 16);
    CHECK(d.y[0] == 6 && d.y[1] == 0);
    CHECK_CLOSE(d.x[3], 0.5, 1e-7, 0);
    CHECK_CLOSE(d.x[256 + 3], -0.25, 1e-7, 0);
    CHECK_CLOSE(d.x[256 + 255], -1.0 + 255 / 128.0, 1e-4, 0);
    dpt_dataset_free(&d);

    p = usps_line(txt, "6.0000", 256, 0.5);
    p = usps_line(p, "1.0000", 200, 0.5);
    write_text(tpath("usps_fields"), txt);
    CHECK_STATUS(dpt_data_load_usps(tpath("usps_fields"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("usps_fields:2: 201 fields, expected 257");

    p = usps_line(txt, "6.0000", 256, 1.5);
    write_text(tpath("usps_range"), txt);
    CHECK_STATUS(dpt_data_load_usps(tpath("usps_range"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("usps_range:1: field 5 value 1.5 outside [-1, 1]");

    p = usps_line(txt, "10.0000", 256, 0.0);
    write_text(tpath("usps_label"), txt);
    CHECK_STATUS(dpt_data_load_usps(tpath("usps_label"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("usps_label:1: label 10 out of range");

    p = usps_line(txt, "3", 256, 0.0);
    p = usps_line(p, "3", 256, 0.0);
    memcpy(strstr(txt + 10, "\n3") - 7, "  nan  ", 7);
    write_text(tpath("usps_nan"), txt);
    CHECK_STATUS(dpt_data_load_usps(tpath("usps_nan"), &d), DPT_EFORMAT);
    CHECK_ERR_HAS("usps_nan:1: field 257 \"nan\": not finite");
}

/* ==== CSV ==== */

static void test_csv(void) {
    dpt_dataset d = {0};
    write_text(tpath("a.csv"), "label,f1,f2\r\n1,0.5,2\r\n0,-1e-3,3.25\r\n\r\n2.0, 7 ,8\r\n");
    CHECK_OK(dpt_data_load_csv(tpath("a.csv"), &d));
    CHECK(d.n == 3 && d.dim == 2 && d.n_classes == 3);
    CHECK(d.shape[0] == 1 && d.shape[1] == 1 && d.shape[2] == 2);
    CHECK(d.y[0] == 1 && d.y[1] == 0 && d.y[2] == 2);
    CHECK_CLOSE(d.x[1], 2.0, 0, 0);
    CHECK_CLOSE(d.x[2], -1e-3, 0, 1e-7);
    CHECK_CLOSE(d.x[4], 7.0, 0, 0);
    dpt_dataset_free(&d);

    write_text(tpath("nohdr.csv"), "1,0.5\n0,1\n");
    CHECK_OK(dpt_data_load_csv(tpath("nohdr.csv"), &d));
    CHECK(d.n == 2 && d.dim == 1 && d.n_classes == 2);
    CHECK_STATUS(dpt_dataset_set_n_classes(&d, 1), DPT_EFORMAT);
    CHECK_OK(dpt_dataset_set_n_classes(&d, 5));
    CHECK(d.n_classes == 5);
    dpt_dataset_free(&d);

    struct {
        const char *name, *text, *msg;
    } bad[] = {
        {"nan.csv", "y,a,b\n1,0.5,2\n0,NaN,3\n", "nan.csv:3:2: not finite"},
        {"inf.csv", "1,0.5,2\n0,1,-inf\n", "inf.csv:2:3: not finite"},
        {"empty.csv", "1,0.5,2\n0,,3\n", "empty.csv:2:2: empty field"},
        {"garbage.csv", "1,0.5,2\n0,1,abc\n", "garbage.csv:2:3: not a number (\"abc\")"},
        {"trail.csv", "1,0.5,2\n0,1,3x\n", "trail.csv:2:3: not a number"},
        {"fields.csv", "1,0.5,2\n0,1\n", "fields.csv:2: 2 fields, expected 3"},
        {"neglabel.csv", "1,0.5,2\n-1,1,2\n", "neglabel.csv:2:1: label -1 is not an integer"},
        {"fraclabel.csv", "1.5,0.5,2\n", "fraclabel.csv:1:1: label 1.5 is not an integer"},
        {"hdronly.csv", "y,a\n", "hdronly.csv: no data rows"},
        {"big.csv", "1,1e300\n", "big.csv:1:2: 1e+300 overflows float32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(tpath(bad[i].name), bad[i].text);
        CHECK_STATUS(dpt_data_load_csv(tpath(bad[i].name), &d), DPT_EFORMAT);
        CHECK_ERR_HAS(bad[i].msg);
        CHECK(d.x == NULL && d.n == 0);
    }
    CHECK_STATUS(dpt_data_load_csv(tpath("absent.csv"), &d), DPT_EIO);
    CHECK_ERR_HAS("absent.csv");
}

/* ==== dpt_data_load: names and data dir layout ==== */

static void test_named(void) {
    dpt_dataset d = {0};
    CHECK_STATUS(dpt_data_load("mnist", tpath("nodir"), DPT_SPLIT_TRAIN, &d), DPT_EIO);
    CHECK_ERR_HAS(tpath("nodir/mnist/train-images-idx3-ubyte.gz"));
    CHECK_ERR_HAS("set data_dir to a directory DIR with the files under DIR/mnist/");
    CHECK_STATUS(dpt_data_load("imagenet", NULL, DPT_SPLIT_TRAIN, &d), DPT_EINVAL);
    CHECK_ERR_HAS("unknown dataset \"imagenet\"");

    /* a data dir with raw (not .gz) usps files */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/dd", tu_tmpdir());
    mkdir(dir, 0700);
    snprintf(dir, sizeof dir, "%s/dd/usps", tu_tmpdir());
    mkdir(dir, 0700);
    static char txt[256 * 12 + 100];
    usps_line(txt, "4.0000", 256, 0.0);
    write_text(tpath("dd/usps/zip.test"), txt);
    CHECK_OK(dpt_data_load("usps", tpath("dd"), DPT_SPLIT_TEST, &d));
    CHECK(d.n == 1 && d.y[0] == 4);
    CHECK(strstr(d.source, "dd/usps/zip.test") != NULL);
    dpt_dataset_free(&d);
    CHECK_STATUS(dpt_data_load("usps", tpath("dd"), DPT_SPLIT_TRAIN, &d), DPT_EIO);
    CHECK_ERR_HAS("dd/usps/zip.train.gz: no such file");

    /* csv:TRAIN,TEST and csv:PATH */
    write_text(tpath("tr.csv"), "0,1\n1,2\n1,3\n");
    write_text(tpath("te.csv"), "1,5\n");
    char name[1200];
    snprintf(name, sizeof name, "csv:%s,%s", tpath("tr.csv"), tpath("te.csv"));
    CHECK_OK(dpt_data_load(name, NULL, DPT_SPLIT_TRAIN, &d));
    CHECK(d.n == 3);
    dpt_dataset_free(&d);
    CHECK_OK(dpt_data_load(name, NULL, DPT_SPLIT_TEST, &d));
    CHECK(d.n == 1 && d.x[0] == 5.0f);
    dpt_dataset_free(&d);
    snprintf(name, sizeof name, "csv:%s", tpath("tr.csv"));
    CHECK_OK(dpt_data_load(name, NULL, DPT_SPLIT_TEST, &d));
    CHECK(d.n == 3);
    dpt_dataset_free(&d);
    CHECK_STATUS(dpt_data_load("csv:/no/such.csv", NULL, DPT_SPLIT_TRAIN, &d), DPT_EIO);
    CHECK_ERR_HAS("/no/such.csv: no such file");
}

/* ==== Transforms ==== */

static void make_ds(dpt_dataset *d, size_t n, size_t C, size_t HW, float offset) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->dim = C * HW;
    d->x = dpt_alloc(n * C * HW, sizeof(float), "x");
    d->y = dpt_alloc(n, sizeof(int32_t), "y");
    d->n_classes = 4;
    d->shape[0] = C;
    d->shape[1] = 1;
    d->shape[2] = HW;
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)(i % 4);
        for (size_t c = 0; c < C; c++)
            for (size_t j = 0; j < HW; j++)
                d->x[i * C * HW + c * HW + j] =
                    offset + (float)(c * 10) + (float)((i * 3 + j * 5) % 7) * (float)(c + 1);
    }
    snprintf(d->source, sizeof d->source, "synthetic");
}

static void moments(const dpt_dataset *d, size_t c, size_t HW, double *m, double *sd) {
    double s = 0, s2 = 0;
    size_t cnt = 0;
    for (size_t i = 0; i < d->n; i++)
        for (size_t j = 0; j < HW; j++) {
            double v = d->x[i * d->dim + c * HW + j];
            s += v;
            s2 += v * v;
            cnt++;
        }
    *m = s / cnt;
    *sd = sqrt(s2 / cnt - *m * *m);
}

static void test_normalizer(void) {
    dpt_dataset tr, te;
    make_ds(&tr, 20, 3, 5, 0.0f);
    make_ds(&te, 7, 3, 5, 100.0f); /* test split is shifted by 100 */
    dpt_normalizer nz = {0};
    CHECK_OK(dpt_normalizer_fit(&tr, DPT_NORM_PER_CHANNEL, &nz));
    CHECK(nz.channels == 3 && nz.dim == 15);
    double m[3], sd[3];
    for (size_t c = 0; c < 3; c++) moments(&tr, c, 5, &m[c], &sd[c]);
    for (size_t c = 0; c < 3; c++) {
        CHECK_CLOSE(nz.mean[c], m[c], 0, 1e-6);
        CHECK_CLOSE(nz.std[c], sd[c], 0, 1e-5);
    }
    float te0 = te.x[5]; /* channel 1 */
    CHECK_OK(dpt_normalizer_apply(&nz, &tr));
    CHECK_OK(dpt_normalizer_apply(&nz, &te));
    for (size_t c = 0; c < 3; c++) {
        double mm, ss;
        moments(&tr, c, 5, &mm, &ss);
        CHECK_CLOSE(mm, 0.0, 1e-5, 0);
        CHECK_CLOSE(ss, 1.0, 1e-4, 0);
    }
    /* test split uses the TRAIN statistics: mean stays ~100/std, not 0 */
    CHECK_CLOSE(te.x[5], (te0 - m[1]) / sd[1], 1e-4, 1e-5);
    double mt, st;
    moments(&te, 0, 5, &mt, &st);
    CHECK(mt > 10.0);
    dpt_normalizer_free(&nz);
    CHECK(nz.mean == NULL);

    /* scalar mode: one mean over everything; per-feature mode */
    dpt_dataset a;
    make_ds(&a, 10, 2, 3, 1.0f);
    CHECK_OK(dpt_normalizer_fit(&a, DPT_NORM_SCALAR, &nz));
    CHECK(nz.channels == 1);
    double s = 0;
    for (size_t i = 0; i < a.n * a.dim; i++) s += a.x[i];
    CHECK_CLOSE(nz.mean[0], s / (a.n * a.dim), 0, 1e-6);
    dpt_normalizer_free(&nz);
    CHECK_OK(dpt_normalizer_fit(&a, DPT_NORM_PER_FEATURE, &nz));
    CHECK(nz.channels == 0);
    s = 0;
    for (size_t i = 0; i < a.n; i++) s += a.x[i * a.dim + 4];
    CHECK_CLOSE(nz.mean[4], s / a.n, 0, 1e-6);
    CHECK_STATUS(dpt_normalizer_apply(&nz, &tr), DPT_EINVAL); /* dim 15 vs 6 */
    CHECK_ERR_HAS("fitted on 6");
    dpt_normalizer_free(&nz);
    /* a constant feature gets std 1, not a division by zero */
    for (size_t i = 0; i < a.n; i++) a.x[i * a.dim] = 3.0f;
    CHECK_OK(dpt_normalizer_fit(&a, DPT_NORM_PER_FEATURE, &nz));
    CHECK(nz.std[0] == 1.0f);
    CHECK_OK(dpt_normalizer_apply(&nz, &a));
    CHECK(a.x[0] == 0.0f);
    CHECK(dpt_all_finite(a.x, a.n * a.dim));
    dpt_normalizer_free(&nz);
    dpt_dataset_free(&a);
    dpt_dataset_free(&tr);
    dpt_dataset_free(&te);
}

static void test_filter_take_gather_hash(void) {
    dpt_dataset d;
    make_ds(&d, 12, 1, 2, 0.0f); /* labels 0,1,2,3,0,1,... */
    uint8_t h0[32], h1[32], h2[32];
    CHECK_OK(dpt_dataset_hash(&d, h0));
    CHECK_OK(dpt_dataset_hash(&d, h1));
    CHECK(memcmp(h0, h1, 32) == 0);
    float x7 = d.x[7 * 2], x2 = d.x[2 * 2];
    int cls[2] = {3, 2};
    CHECK_OK(dpt_dataset_filter_classes(&d, cls, 2));
    CHECK(d.n == 6 && d.n_classes == 2);
    /* order kept: old examples 2 (label 2 -> 1), 3 (3 -> 0), 6, 7, 10, 11 */
    CHECK(d.y[0] == 1 && d.y[1] == 0 && d.y[2] == 1 && d.y[3] == 0);
    CHECK(d.x[0] == x2 && d.x[3 * 2] == x7);
    CHECK_OK(dpt_dataset_validate(&d));
    CHECK_OK(dpt_dataset_hash(&d, h2));
    CHECK(memcmp(h0, h2, 32) != 0);
    int badc[2] = {1, 1};
    CHECK_STATUS(dpt_dataset_filter_classes(&d, badc, 2), DPT_EINVAL);
    CHECK_ERR_HAS("repeated");
    int outc[1] = {5};
    CHECK_STATUS(dpt_dataset_filter_classes(&d, outc, 1), DPT_EINVAL);
    CHECK_ERR_HAS("out of range");

    CHECK_OK(dpt_dataset_take(&d, 4));
    CHECK(d.n == 4);
    CHECK_STATUS(dpt_dataset_take(&d, 5), DPT_EINVAL);
    CHECK_ERR_HAS("first 5 examples of 4");

    uint32_t idx[3] = {3, 0, 3};
    float xo[6];
    int32_t yo[3];
    dpt_dataset_gather(&d, idx, 3, xo, yo);
    CHECK(xo[0] == d.x[6] && xo[1] == d.x[7] && xo[2] == d.x[0] && xo[5] == d.x[7]);
    CHECK(yo[0] == d.y[3] && yo[1] == d.y[0]);

    /* validate catches NaN and labels out of range */
    d.x[1] = NAN;
    CHECK_STATUS(dpt_dataset_validate(&d), DPT_EFORMAT);
    CHECK_ERR_HAS("synthetic: non-finite value");
    d.x[1] = 0;
    d.y[2] = 2;
    CHECK_STATUS(dpt_dataset_validate(&d), DPT_EFORMAT);
    CHECK_ERR_HAS("label 2 of example 2 out of range [0, 2)");
    dpt_dataset_free(&d);
    dpt_dataset_free(NULL);
}

int main(void) {
    test_idx();
    test_cifar();
    test_usps();
    test_csv();
    test_named();
    test_normalizer();
    test_filter_take_gather_hash();
    TEST_MAIN_END();
}

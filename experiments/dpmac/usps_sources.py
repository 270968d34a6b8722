#!/usr/bin/env python3
"""How far apart are the two USPS distributions? (issue 23, docs/dpmac.md)

The DP-MAC authors train on `usps_all.mat` (S. Roweis' copy: 1100 16x16 images per digit,
uint8 0..255; their code draws 500 per digit for training and 100 per digit for testing,
pixels / 255 minus the scalar mean). dptrain's `usps` is the ESL "ZIP code" set (zip.train,
zip.test: 7291 + 2007 images in [-1, 1], here mapped to [0, 1] as the DP-MAC runs do).
This script measures, without training anything, the reconstruction error of the best
k-dimensional linear code (PCA fitted on the training split, evaluated on the test split;
error = half the per-image sum of squared errors on [0, 1] pixels, the paper's MSE) on
both, for k = 0 (mean image), 5, 10, 20, 40. The autoencoder's 20-unit bottleneck can do
better than PCA-20, but the ratio between the two data sets shows how much of a test-MSE
gap is the data.

    usps_sources.py USPS_ALL_MAT ZIP_DIR OUT_CSV [SEEDS]
    usps_sources.py --write-csv USPS_ALL_MAT OUTDIR [SEED [TRAIN_PER_DIGIT TEST_PER_DIGIT]]

The second form (issue 40) writes one draw of the authors' split as dptrain CSV files,
OUTDIR/usps_all_sSEED_train.csv and _test.csv (label = the .mat's digit index, then the
256 pixels / 255 in [0, 1]; no centring), so that a run can train on it with
`--dataset csv:TRAIN,TEST --normalize none` (seeds.sh: USPS_DATASET, USPS_NORMALIZE).
Default: seed 1, 500 / 500 per digit (the DP-SGD script's 5000 / 5000, the paper's text).

USPS_ALL_MAT is the file data/usps/usps_all.mat of github.com/mijungi/dp_mac (not part of
dptrain; never committed here); ZIP_DIR holds zip.train.gz and zip.test.gz. The authors'
split is random: SEEDS (default 1,2,3) draws it several times. Needs numpy.
"""
import csv
import gzip
import struct
import sys
import zlib

import numpy as np


def read_mat_uint8(path):
    """The first variable of a MATLAB 5 file holding one compressed uint8 array."""
    raw = open(path, "rb").read()
    assert raw[:6] == b"MATLAB", "not a MATLAB 5 file"
    typ, n = struct.unpack("<II", raw[128:136])
    assert typ == 15, "expected a compressed element (miCOMPRESSED), got type %d" % typ
    b = zlib.decompress(raw[136:136 + n])
    typ, n = struct.unpack("<II", b[:8])
    assert typ == 14, "expected miMATRIX"
    p = 8
    def element(p):
        t, nb = struct.unpack("<II", b[p:p + 8])
        if t >> 16:  # small data element: size in the upper half, data in the same 8 bytes
            return t & 0xFFFF, b[p + 4:p + 4 + (t >> 16)], p + 8
        return t, b[p + 8:p + 8 + nb], p + 8 + ((nb + 7) // 8) * 8
    _, flags, p = element(p)
    _, dims, p = element(p)
    dims = struct.unpack("<%di" % (len(dims) // 4), dims)
    _, name, p = element(p)
    t, data, p = element(p)
    assert t == 2, "expected uint8 data (miUINT8), got type %d" % t
    return name.decode(), np.frombuffer(data, dtype=np.uint8).reshape(dims[::-1]).transpose()  # column-major


def read_zip(path):
    rows = np.loadtxt(gzip.open(path, "rt"))
    return (rows[:, 1:] + 1.0) / 2.0  # [-1, 1] -> [0, 1]


def pca_errors(train, test, ks):
    mu = train.mean(axis=0)
    _, _, vt = np.linalg.svd(train - mu, full_matrices=False)
    out = {}
    for k in ks:
        c = test - mu
        if k:
            v = vt[:k].T
            c = c - c @ v @ v.T
        out[k] = 0.5 * float((c ** 2).sum(axis=1).mean())
    return out


def authors_split(data, seed, n_train, n_test):
    """One draw of the authors' split: per digit, n_train + n_test of its 1100 images without
    replacement (the first n_train for training), pixels / 255; returns (train, test, labels)."""
    rng = np.random.RandomState(seed)
    tr, te = [], []
    for d in range(10):
        idx = rng.choice(1100, n_train + n_test, replace=False)
        imgs = data[:, idx, d].T.astype(np.float64) / 255.0
        tr.append(imgs[:n_train]), te.append(imgs[n_train:])
    return np.concatenate(tr), np.concatenate(te), np.repeat(np.arange(10), n_train), np.repeat(np.arange(10), n_test)


def write_csv(argv):
    mat, outdir = argv[:2]
    seed = int(argv[2]) if len(argv) > 2 else 1
    ntr, nte = (int(argv[3]), int(argv[4])) if len(argv) > 4 else (500, 500)
    _, data = read_mat_uint8(mat)
    assert data.shape == (256, 1100, 10), data.shape
    tr, te, ltr, lte = authors_split(data, seed, ntr, nte)
    for name, x, lab in (("train", tr, ltr), ("test", te, lte)):
        path = "%s/usps_all_s%d_%s.csv" % (outdir, seed, name)
        with open(path, "w") as fh:
            for l, row in zip(lab, x):
                fh.write("%d,%s\n" % (l, ",".join("%.6g" % v for v in row)))
        print("wrote %s (%d rows)" % (path, len(x)))


def main():
    if sys.argv[1] == "--write-csv":
        return write_csv(sys.argv[2:])
    mat, zipdir, out = sys.argv[1:4]
    seeds = [int(s) for s in (sys.argv[4] if len(sys.argv) > 4 else "1,2,3").split(",")]
    ks = [0, 5, 10, 20, 40]
    name, data = read_mat_uint8(mat)  # [256, 1100, 10]: pixel, example, digit (digit 10 = '0')
    assert data.shape == (256, 1100, 10), data.shape
    rows = []
    for seed in seeds:
        tr, te, _, _ = authors_split(data, seed, 500, 100)
        e = pca_errors(tr, te, ks)
        rows.append(["usps_all.mat (authors: 500/digit train, 100/digit test, seed %d)" % seed, len(tr), len(te),
                     "%.4f" % tr.mean(), "%.4f" % (tr > 0.5).mean()] + ["%.3f" % e[k] for k in ks])
    ztr, zte = read_zip(zipdir + "/zip.train.gz"), read_zip(zipdir + "/zip.test.gz")
    e = pca_errors(ztr[:5000], zte, ks)
    rows.append(["zip (dptrain usps: first 5000 of zip.train / zip.test)", 5000, len(zte), "%.4f" % ztr[:5000].mean(),
                 "%.4f" % (ztr[:5000] > 0.5).mean()] + ["%.3f" % e[k] for k in ks])
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["data", "n_train", "n_test", "mean_pixel", "frac_pixels_above_half"] + ["pca%d_test_mse" % k for k in ks])
        w.writerows(rows)
    print(open(out).read())


if __name__ == "__main__":
    main()

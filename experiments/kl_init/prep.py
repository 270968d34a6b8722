#!/usr/bin/env python3
"""CIFAR-10 'airplane' (label 0) and 'automobile' (label 1) images as CSV for dptrain
(label first, then 3072 pixels / 255 in [0, 1], planar RGB as in the binary files): the
first N_TRAIN of the training batches and the first N_TEST of the test batch, in file order.
usage: prep.py CIFAR_DIR N_TRAIN N_TEST OUT_TRAIN OUT_TEST"""
import gzip, os, sys

def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    for off in range(0, len(data), 3073):
        yield data[off], data[off + 1:off + 3073]

def find(d, name):
    for cand in (name, name + ".gz"):
        p = os.path.join(d, cand)
        if os.path.exists(p):
            return p
    sys.exit("prep.py: %s/%s(.gz) not found" % (d, name))

def write(paths, n, out):
    k = 0
    with open(out, "w") as f:
        f.write("label," + ",".join("p%d" % j for j in range(3072)) + "\n")
        for p in paths:
            for lab, px in records(p):
                if lab > 1:
                    continue
                f.write("%d,%s\n" % (lab, ",".join("%.6g" % (b / 255.0) for b in px)))
                k += 1
                if k == n:
                    return k
    return k

d, ntr, nte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
got = write([find(d, "data_batch_%d.bin" % i) for i in range(1, 6)], ntr, sys.argv[4])
gte = write([find(d, "test_batch.bin")], nte, sys.argv[5])
if got < ntr or gte < nte:
    sys.exit("prep.py: only %d/%d training and %d/%d test images of classes 0, 1" % (got, ntr, gte, nte))

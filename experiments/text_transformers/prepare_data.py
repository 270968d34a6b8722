#!/usr/bin/env python3
"""CSV files for experiments/text_transformers/run.sh, cut from the fortunes corpus exactly as
`dptrain train --dataset fortunes-topic|fortunes-chars --seq-len T` loads it (the library's
loader through the dptrain Python package: same bytes, same train/test rule).

  topic_fit.csv, topic_val.csv   fortunes-topic's TRAINING entries split 4:1 by index
      (entry i is validation when i % 5 == 0; the entries come sorted by topic, so every
      topic is in both): label, then T byte ids (256 pads). Hyperparameter search only.
  lm_train.csv, lm_val.csv, lm_test.csv   fortunes-chars windows of T byte ids with their T
      next ids (the next window's first id is the window's label, checked here): T targets,
      then T inputs (the csv: layout of `--targets T --loss token-ce`). lm_train: N_TRAIN
      training windows evenly spaced over the whole training stream (windows s*k, s = the
      stream's windows // N_TRAIN: every topic file, not the first few); lm_val: N_VAL other
      training windows (offset s // 2, disjoint from lm_train); lm_test: N_TEST test windows
      evenly spaced over the test split.
The subsets are fixed functions of the window index, never of the text.

    PYTHONPATH=python DPTRAIN_BUILD_DIR=build /usr/bin/python3 prepare_data.py --out DIR
        [--topic-len 64] [--lm-len 32] [--lm-train 8000] [--lm-val 2000] [--lm-test 3000]
        [--topic-max 0]
--topic-max N: only every (8601 // N)-th training entry (the smoke mode's small files).
"""
import argparse
import os


def write(path, rows):
    # written aside, then renamed: a parallel invocation never reads a half-written file
    with open(path + ".tmp", "w") as f:
        for r in rows:
            f.write(",".join("%d" % v for v in r) + "\n")
    os.replace(path + ".tmp", path)


def evenly(n_all, n, offset=0):
    s = max(1, n_all // max(1, n))
    return [i for i in range(offset, n_all, s)][:n], s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--topic-len", type=int, default=64)
    ap.add_argument("--topic-max", type=int, default=0)
    ap.add_argument("--lm-len", type=int, default=32)
    ap.add_argument("--lm-train", type=int, default=8000)
    ap.add_argument("--lm-val", type=int, default=2000)
    ap.add_argument("--lm-test", type=int, default=3000)
    a = ap.parse_args()
    import numpy as np
    from dptrain import data
    os.makedirs(a.out, exist_ok=True)

    x, y = data.load_fortunes("topic", "train", seq_len=a.topic_len)
    keep = np.arange(len(y))
    if a.topic_max > 0:
        keep = keep[:: max(1, len(y) // a.topic_max)]
    val = keep[keep % 5 == 0]
    fit = keep[keep % 5 != 0]
    write(os.path.join(a.out, "topic_fit.csv"), (np.concatenate([[y[i]], x[i]]) for i in fit))
    write(os.path.join(a.out, "topic_val.csv"), (np.concatenate([[y[i]], x[i]]) for i in val))

    T = a.lm_len
    for split in ("train", "test"):
        x, y = data.load_fortunes("chars", split, seq_len=T)
        # windows at stride T of one stream: window w + 1 starts with window w's label
        if not np.array_equal(x[1:, 0], y[:-1]):
            raise SystemExit("prepare_data.py: fortunes-chars windows are not contiguous")
        tgt = np.concatenate([x[:, 1:], y[:, None]], axis=1)
        rows = lambda idx: (np.concatenate([tgt[i], x[i]]) for i in idx)
        if split == "train":
            idx, s = evenly(len(y), a.lm_train)
            write(os.path.join(a.out, "lm_train.csv"), rows(idx))
            vidx = [i + s // 2 for i in idx if i + s // 2 < len(y) and s >= 2]
            vidx = vidx[:: max(1, len(vidx) // max(1, a.lm_val))][: a.lm_val]
            if not vidx:  # stride 1: no window left between the training windows
                raise SystemExit("prepare_data.py: --lm-train %d leaves no validation windows: at most %d "
                                 "(half of the %d training windows)" % (a.lm_train, len(y) // 2, len(y)))
            write(os.path.join(a.out, "lm_val.csv"), rows(vidx))
        else:
            idx, _ = evenly(len(y), a.lm_test)
            write(os.path.join(a.out, "lm_test.csv"), rows(idx))
    print("prepare_data.py: wrote", a.out, "topic fit/val %d/%d" % (len(fit), len(val)))


if __name__ == "__main__":
    main()

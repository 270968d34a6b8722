"""Text data from Python: save_tokens / load_tokens round trip through the library's reader
(padding, truncation, next-token windows, malformed files refused naming the file), and the
fortunes corpus (skipped without the Debian package `fortunes`): the split reproduced from
its documented rule in pure Python, the rows equal to the entries' bytes, and one epoch of
dptrain.train on the topic rows."""
import gzip
import os
import struct

import numpy as np
import pytest

import dptrain
from dptrain import data
from dptrain.errors import DptrainIOError, FormatError

HAVE_FORTUNES = os.path.isdir(data.FORTUNES_DIR)
needs_fortunes = pytest.mark.skipif(not HAVE_FORTUNES, reason="the Debian package fortunes is not installed "
                                    "(apt-get install fortunes; scripts/setup.sh installs it)")


def test_tokens_round_trip(tmp_path):
    p = tmp_path / "a.tok"
    seqs = [[1, 2], [3, 4, 5, 6, 7], [8, 9, 10]]
    data.save_tokens(p, seqs, vocab=300, labels=[2, 0, 1])
    raw = p.read_bytes()
    assert raw[:4] == b"DPTK" and struct.unpack("<IIIIIQQ", raw[4:40]) == (1, 2, 300, 3, 0, 3, 10)
    assert len(raw) == 40 + 3 * 4 + 3 * 4 + 10 * 2
    x, y = data.load_tokens(p, 3, pad_id=299)
    np.testing.assert_array_equal(x, np.array([[1, 2, 299], [3, 4, 5], [8, 9, 10]], dtype=np.float32))
    np.testing.assert_array_equal(y, [2, 0, 1])
    assert x.dtype == np.float32 and y.dtype == np.int64
    # next-token windows, T = 2 at stride 1: within each sequence only
    x, y = data.load_tokens(p, 2, kind="lm", stride=1)
    assert x.shape == (0 + 3 + 1, 2)
    np.testing.assert_array_equal(y, [5, 6, 7, 10])
    # gzip and 4-byte ids
    g = tmp_path / "b.tok.gz"
    data.save_tokens(tmp_path / "b.tok", [np.arange(70000, 70010)], vocab=2 ** 24)
    g.write_bytes(gzip.compress((tmp_path / "b.tok").read_bytes()))
    x, y = data.load_tokens(g, 4, kind="lm", stride=4)
    np.testing.assert_array_equal(x, [[70000, 70001, 70002, 70003], [70004, 70005, 70006, 70007]])
    np.testing.assert_array_equal(y, [70004, 70008])


def test_tokens_refused(tmp_path):
    p = tmp_path / "bad.tok"
    data.save_tokens(p, [[1, 2, 3]], vocab=4, labels=[0])
    good = p.read_bytes()
    p.write_bytes(good[:20])
    with pytest.raises(FormatError, match="bad.tok: truncated token-id header"):
        data.load_tokens(p, 3)
    p.write_bytes(b"XPTK" + good[4:])
    with pytest.raises(FormatError, match="bad.tok: bad magic"):
        data.load_tokens(p, 3)
    p.write_bytes(good[:12] + struct.pack("<I", 3) + good[16:])
    with pytest.raises(FormatError, match=r"id 3 at position 2 \(sequence 0\) is outside the vocabulary \[0, 3\)"):
        data.load_tokens(p, 3)
    with pytest.raises(DptrainIOError, match="nope.tok"):
        data.load_tokens(tmp_path / "nope.tok", 3)
    with pytest.raises(ValueError, match="ids must be integers in"):
        data.save_tokens(p, [[1, 5]], vocab=5)


def _entries(path):
    """The entries of a fortune file, as docs/data.md defines them."""
    b = open(path, "rb").read()
    out, start, pos = [], 0, 0
    lines = b.split(b"\n")
    for i, line in enumerate(lines):
        end = pos + len(line)
        last = i == len(lines) - 1
        if line == b"%" or last:
            stop = pos if line == b"%" else len(b)
            e = b[start:stop]
            if e.endswith(b"\n"):
                e = e[:-1]
            if e:
                out.append(e)
            start = end + 1
        pos = end + 1
    return out


def _is_test(e):
    m = (1 << 64) - 1
    h = 0xcbf29ce484222325
    for c in e:
        h = ((h ^ c) * 0x100000001b3) & m
    z = (h + 0x9e3779b97f4a7c15) & m
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
    return (z ^ (z >> 31)) % 5 == 0


@needs_fortunes
def test_fortunes_split_rule():
    topics = data.fortunes_topics()
    assert len(topics) == 20 and topics[0] == "art" and topics[-1] == "zippy"
    xs = {}
    for split in ("train", "test"):
        x, y = data.load_fortunes("topic", split, seq_len=64)
        want = [(k, e) for k, t in enumerate(topics) for e in _entries(os.path.join(data.FORTUNES_DIR, t))
                if _is_test(e) == (split == "test")]
        assert len(x) == len(want)
        np.testing.assert_array_equal(y, [k for k, _ in want])
        for row, (_, e) in zip(x, want):
            b = np.frombuffer(e[:64], dtype=np.uint8).astype(np.float32)
            np.testing.assert_array_equal(row[:len(b)], b)
            assert (row[len(b):] == 256).all()
        xs[split] = {e for _, e in want}
    # the rows are these entries, and equal texts fall on one side: the splits share none
    assert xs["train"] and xs["test"] and not xs["train"] & xs["test"]
    x, y = data.load_fortunes("chars", "test")
    assert x.shape[1] == 64 and y.max() < 258 and (y[:-1] == x[1:, 0]).all()


@needs_fortunes
def test_fortunes_trains():
    x, y = data.load_fortunes("topic", "train", seq_len=32)
    xt, yt = data.load_fortunes("topic", "test", seq_len=32)
    run = dptrain.train(x[:2000] / 256.0, y[:2000], x_test=xt[:500] / 256.0, y_test=yt[:500], model="mlp:32-32-20",
                        epochs=1, n_classes=20, verbose=False, progress=False, history="list")
    assert np.isfinite(run.history[-1]["test_loss"])


def test_fortunes_missing(tmp_path):
    if HAVE_FORTUNES:  # data_dir/fortunes/ wins when present: an empty one has no topic files
        (tmp_path / "fortunes").mkdir()
        with pytest.raises(DptrainIOError, match="apt-get install fortunes"):
            data.load_fortunes("topic", data_dir=str(tmp_path))
    else:
        with pytest.raises(DptrainIOError, match="Debian package fortunes"):
            data.load_fortunes("topic")
    with pytest.raises(ValueError, match="kind must be"):
        data.load_fortunes("words")

"""Labels on every line that shows an epsilon or a result: a seeded run, an epsilon that
excludes something, a run no accountant covers and one with no formal guarantee say so on
each epoch line (verbose), in every history record and in repr(run), with the library's
own text (dpt_ledger_label, the one the CLI prints), not only at the end."""
import math

import dptrain

from helpers import blobs

SPEC = "mlp:20-8-3:relu"


def run(capsys, **kw):
    x, y = blobs(n=300)
    kw.setdefault("algorithm", dptrain.DPSGD(sigma=1.0))
    kw.setdefault("x_test", x)
    kw.setdefault("y_test", y)
    r = dptrain.train(x, y, model=SPEC, batch_size=50, threads=1, optimizer="sgd", lr=0.3, epochs=2,
                      verbose=True, progress=False, **kw)
    err = capsys.readouterr().err
    return r, [s for s in err.splitlines() if s.startswith("epoch ")]


def test_seeded_run_labels_every_epoch_line(capsys):
    r, lines = run(capsys, seed=5)
    assert len(lines) == 2 and all("epsilon" in s and "[SEEDED]" in s for s in lines), lines
    assert all("[SEEDED]" in h["privacy_label"] for h in r.history)
    assert "[SEEDED]" in repr(r)
    # the same function as the CLI's final line: the full form names what it means
    assert "SEEDED run" in r.ledger.label() and r.ledger.label(full=False) == r.history[-1]["privacy_label"]


def test_os_seeded_run_has_no_label(capsys):
    r, lines = run(capsys, x_test=None, y_test=None)
    assert len(lines) == 2 and not any("[" in s for s in lines), lines
    assert r.privacy_label == "" and r.ledger.label() == ""


def test_exclusions_on_every_epoch_line(capsys):
    # the test set is the training set: those metrics are outside the epsilon
    r, lines = run(capsys)
    assert all("[epsilon does NOT cover: test metrics computed on the training data]" in s for s in lines), lines


def test_no_formal_guarantee_on_every_epoch_line(capsys):
    r, lines = run(capsys, algorithm=dptrain.PDPSGD(kappa=0.01))
    assert len(lines) == 2 and all("[no formal DP guarantee]" in s for s in lines), lines
    assert "no formal DP guarantee" in repr(r)


def test_non_accounted_dp_mechanism_publishes_no_train_loss(capsys):
    """DP-ULR on shuffled batches has no accountant, yet clips and noises like the private
    mode: as a private run it publishes no noiseless train loss (history, epoch lines),
    while PDP-SGD (no clipping, no DP claim) keeps it."""
    r, lines = run(capsys, algorithm=dptrain.DPULR(sigma0=2.0, copies=4), sampler="shuffle", x_test=None,
                   y_test=None)
    assert "non-accounted" in r.privacy_label and r.ledger is None
    assert len(lines) == 2 and not any("train loss" in s for s in lines), lines
    assert all(math.isnan(h["train_loss"]) for h in r.history), r.history
    r, lines = run(capsys, algorithm=dptrain.PDPSGD(kappa=0.01))
    assert all(math.isfinite(h["train_loss"]) for h in r.history) and all("train loss" in s for s in lines), lines


def test_forced_delta_on_every_epoch_line(capsys):
    """force=True with delta >= 1/N (N = 300): recorded in the ledger and labelled like a seed."""
    r, lines = run(capsys, algorithm=dptrain.DPSGD(sigma=1.0, delta=0.01, force=True), x_test=None, y_test=None)
    assert len(lines) == 2 and all("[delta >= 1/N (forced)]" in s for s in lines), lines
    assert r.ledger.get_meta("delta_forced") == "0.01"
    assert "[delta 0.01 >= 1/N accepted (force)" in r.ledger.label()

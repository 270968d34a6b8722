"""dptrain.audit: every wrapper against an independent numpy / pure-Python computation.

Statistics of given scores: the AUC against a pairwise count (ties 1/2), the ROC and TPR at
FPR against a threshold sweep, the epsilon lower bound against Clopper-Pearson intervals
computed here by bisection on exact binomial tails, the bound from scores against the same
split-half selection done here, the one-run bound against its delta = 0 closed form, the
one-run guesses against a sort. Scores of a Model against the softmax of its predict()
logits. The whole audit on a small synthetic population with label noise that non-private
training memorizes (a loss attack clearly above chance), its result's fields and shapes,
the scores it reports for a given target equal to scores(); bad arguments are refused
naming them. Each comparison uses data where swapping members and non-members (or the
arguments of a count) changes the answer."""
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dptrain
from dptrain import audit

pytestmark = pytest.mark.skipif(not audit.HAVE_AUDIT, reason="libdptrain without the auditing API")
needs_run = pytest.mark.skipif(not audit.HAVE_AUDIT_RUN, reason="libdptrain without dpt_audit_run")


# ==== naive references ====

def naive_auc(i, o):
    """Mann-Whitney over all pairs, ties 1/2."""
    d = np.asarray(i, np.float64)[:, None] - np.asarray(o, np.float64)[None, :]
    return float(np.mean((d > 0) + 0.5 * (d == 0)))


def naive_roc(i, o):
    """The test "score >= t" at every distinct score t from the highest down, after (0, 0)."""
    i, o = np.asarray(i, np.float64), np.asarray(o, np.float64)
    ts = np.unique(np.concatenate([i, o]))[::-1]
    fpr = [0.0] + [float(np.mean(o >= t)) for t in ts]
    tpr = [0.0] + [float(np.mean(i >= t)) for t in ts]
    return np.array(fpr), np.array(tpr)


def naive_tpr_at_fpr(i, o, f):
    fpr, tpr = naive_roc(i, o)
    return float(tpr[fpr <= f + 1e-15].max())


def binom_sf(k, n, p):
    """P[Bin(n, p) >= k], exact sum."""
    return math.fsum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


def bisect(f, lo=0.0, hi=1.0):
    """The root of an increasing f on [lo, hi], to double resolution."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson(k, n, alpha):
    """Two-sided interval: lo solves P[Bin(n, lo) >= k] = alpha/2, hi solves P[Bin(n, hi) <= k] = alpha/2
    (both tails increase with p)."""
    lo = 0.0 if k == 0 else bisect(lambda p: binom_sf(k, n, p) - alpha / 2)
    hi = 1.0 if k == n else bisect(lambda p: binom_sf(k + 1, n, p) - (1 - alpha / 2))
    return lo, hi


def naive_eps_lb(tp, fn, fp, tn, delta, alpha):
    tpr_lo, _ = clopper_pearson(tp, tp + fn, alpha)
    _, fpr_hi = clopper_pearson(fp, fp + tn, alpha)
    e = 0.0
    for a, b in ((tpr_lo - delta, fpr_hi), ((1 - fpr_hi) - delta, 1 - tpr_lo)):
        if a > 0 and b > 0:
            e = max(e, math.log(a / b))
    return e


def gaussians(n_in, n_out, shift, seed, decimals=None):
    r = np.random.default_rng(seed)
    i, o = r.normal(shift, 1, n_in), r.normal(0, 1, n_out)
    if decimals is not None:  # ties within and across the sets
        i, o = np.round(i, decimals), np.round(o, decimals)
    return i, o


# ==== statistics of given scores ====

@pytest.mark.parametrize("n_in,n_out,shift,decimals", [(50, 70, 0.7, 1), (200, 150, 1.5, None), (1, 1, 0.0, 0),
                                                       (30, 40, -0.5, 0)])
def test_auc_is_the_pairwise_count(n_in, n_out, shift, decimals):
    i, o = gaussians(n_in, n_out, shift, 1, decimals)
    assert audit.auc(i, o) == pytest.approx(naive_auc(i, o), abs=1e-12)
    assert audit.auc(o, i) == pytest.approx(1 - naive_auc(i, o), abs=1e-12)


def test_auc_takes_lists_and_integers():
    assert audit.auc([3, 2, 2], [1, 2]) == pytest.approx(naive_auc([3, 2, 2], [1, 2]), abs=1e-15) == 5 / 6
    assert audit.auc(np.array([1, 2], np.int32), np.array([0.5], np.float32)) == 1.0


@pytest.mark.parametrize("decimals", [None, 1])
def test_roc_and_tpr_at_fpr_are_the_threshold_sweep(decimals):
    i, o = gaussians(120, 300, 1.0, 2, decimals)
    fpr, tpr = audit.roc(i, o)
    want_f, want_t = naive_roc(i, o)
    assert fpr.dtype == tpr.dtype == np.float64
    np.testing.assert_array_equal(fpr, want_f)
    np.testing.assert_array_equal(tpr, want_t)
    for f in (0.0, 1 / 300, 0.01, 0.05, 0.3, 1.0):
        assert audit.tpr_at_fpr(i, o, f) == naive_tpr_at_fpr(i, o, f), f
    # the roles matter: the swapped call is another curve
    assert not np.array_equal(audit.roc(o, i).tpr, tpr)


def test_summarize():
    i, o = gaussians(300, 400, 1.0, 3)
    s = audit.summarize(i, o, n_boot=300, alpha=0.1, seed=5)
    assert s.auc == audit.auc(i, o)
    assert s.tpr_0_1pct == audit.tpr_at_fpr(i, o, 0.001) and s.tpr_1pct == audit.tpr_at_fpr(i, o, 0.01)
    assert s.auc_lo < s.auc < s.auc_hi and s.auc_hi - s.auc_lo < 0.15
    assert s.tpr_1pct_lo <= s.tpr_1pct <= s.tpr_1pct_hi and s.tpr_0_1pct_lo <= s.tpr_0_1pct_hi
    assert audit.summarize(i, o, n_boot=300, alpha=0.1, seed=5) == s           # the seed fixes the resamples
    assert audit.summarize(i, o, n_boot=300, alpha=0.1, seed=6) != s
    wide = audit.summarize(i, o, n_boot=300, alpha=0.01, seed=5)               # 99% is wider than 90%
    assert wide.auc_lo <= s.auc_lo and wide.auc_hi >= s.auc_hi
    none = audit.summarize(i, o, n_boot=0)
    assert none.auc_lo == none.auc == none.auc_hi and none.tpr_1pct_lo == none.tpr_1pct == none.tpr_1pct_hi
    assert audit.summarize(o, i, n_boot=0).auc == pytest.approx(1 - s.auc, abs=1e-12)
    assert str(s).startswith("AUC %.3f [" % s.auc)
    with pytest.raises(Exception):
        s.auc = 0.5  # frozen


@pytest.mark.parametrize("counts,delta,alpha", [
    ((50, 0, 0, 50), 0.0, 0.05), ((40, 10, 5, 45), 1e-5, 0.05), ((5, 45, 40, 10), 0.0, 0.05),
    ((30, 20, 20, 30), 0.0, 0.05), ((12, 3, 1, 20), 0.01, 0.1), ((10, 90, 0, 100), 0.0, 0.05)])
def test_eps_lower_bound_is_clopper_pearson(counts, delta, alpha):
    got = audit.eps_lower_bound(*counts, delta=delta, alpha=alpha)
    assert got == pytest.approx(naive_eps_lb(*counts, delta, alpha), abs=1e-9)


def test_eps_lower_bound_known_values():
    # a perfect attack on 50 + 50 trials at 95%: ln(0.025^(1/50) / (1 - 0.025^(1/50))) (docs/audit.md)
    q = 0.025 ** (1 / 50)
    assert audit.eps_lower_bound(50, 0, 0, 50, 0.0) == pytest.approx(math.log(q / (1 - q)), abs=1e-9)
    assert audit.eps_lower_bound(50, 0, 0, 50, 0.0) == pytest.approx(2.5696, abs=1e-4)
    assert audit.eps_lower_bound(25, 25, 25, 25, 0.0) == 0.0                     # chance
    assert audit.eps_lower_bound(40, 10, 5, 45, 0.0) > audit.eps_lower_bound(35, 15, 5, 45, 0.0) > 0
    assert audit.eps_lower_bound(40, 10, 5, 45, 0.1) < audit.eps_lower_bound(40, 10, 5, 45, 0.0)


def naive_eps_from_scores(i, o, delta, alpha):
    """The library's split: choose the threshold on the even-indexed scores (the first of the
    best, members' candidates first), bound the odd-indexed ones at it."""
    si, so, ti, to = i[0::2], o[0::2], i[1::2], o[1::2]
    best, best_t = -1.0, math.inf
    for t in np.concatenate([si, so]):
        tp, fp = int(np.sum(si >= t)), int(np.sum(so >= t))
        e = naive_eps_lb(tp, len(si) - tp, fp, len(so) - fp, delta, alpha)
        if e > best:
            best, best_t = e, t
    tp, fp = int(np.sum(ti >= best_t)), int(np.sum(to >= best_t))
    return naive_eps_lb(tp, len(ti) - tp, fp, len(to) - fp, delta, alpha), best_t


def test_eps_from_scores():
    i, o = gaussians(40, 50, 3.0, 4, decimals=1)
    got = audit.eps_from_scores(i, o, delta=1e-5)
    want = naive_eps_from_scores(i, o, 1e-5, 0.05)
    assert got.eps_lb == pytest.approx(want[0], abs=1e-9) and got.threshold == want[1]
    assert got.eps_lb > 0.5
    # perfectly separated sets: a positive bound; identical distributions: none
    q = 0.025 ** (1 / 20)  # all 20 + 20 of the bounding half right
    sep = audit.eps_from_scores(np.arange(100, 140), np.arange(0, 40), 0.0)
    assert sep.eps_lb == pytest.approx(math.log(q / (1 - q)), abs=1e-9) and 40 <= sep.threshold <= 100
    same = [audit.eps_from_scores(*gaussians(200, 200, 0.0, s), 0.0).eps_lb for s in range(5)]
    assert max(same) < 0.3 and sorted(same)[2] == 0.0, same
    assert audit.eps_from_scores(o, i, 1e-5).eps_lb < got.eps_lb


def test_one_run_eps():
    # delta = 0, all r guesses right: P[Bin(r, q) >= r] = q^r = alpha, eps = logit(alpha^(1/r))
    for r, alpha in ((100, 0.05), (20, 0.05), (40, 0.1)):
        q = alpha ** (1 / r)
        assert audit.one_run_eps(1000, r, r, 0.0, alpha) == pytest.approx(math.log(q / (1 - q)), abs=2e-6)
    assert audit.one_run_eps(100, 100, 100, 0.0) == pytest.approx(3.493, abs=1e-3)   # docs/audit.md
    assert audit.one_run_eps(1000, 100, 50, 0.0) == 0.0                                # chance
    a, b, c = (audit.one_run_eps(1000, 100, v, 0.0) for v in (70, 80, 90))
    assert 0 < a < b < c
    assert audit.one_run_eps(1000, 100, 90, 1e-5) < c                                 # delta costs
    # general v, delta = 0: P[Bin(r, q) >= v] = alpha at the bound, by exact binomial tails here
    eps = audit.one_run_eps(500, 60, 45, 0.0, 0.05)
    q = 1 / (1 + math.exp(-eps))
    assert binom_sf(45, 60, q) == pytest.approx(0.05, abs=1e-5)


def naive_guesses(score, member, k):
    order = np.lexsort((np.arange(len(score)), -np.asarray(score)))  # highest first, ties by index
    return 2 * k, int(member[order[:k]].sum() + (1 - member[order[-k:]]).sum())


def test_one_run_guess_is_a_sort():
    r = np.random.default_rng(6)
    member = (r.random(200) < 0.5)
    score = np.round(r.normal(member * 1.0, 1.0), 1)  # informative, with ties
    for k in (1, 10, 37, 100):
        got = audit.one_run_guess(score, member, k)
        assert tuple(got) == naive_guesses(score, member.astype(int), k) and got.r == 2 * k
    assert audit.one_run_guess(score, member.astype(np.int64), 10) == audit.one_run_guess(score, member, 10)
    assert audit.one_run_guess(score, member, 20).v > audit.one_run_guess(-score, member, 20).v


@pytest.mark.parametrize("call,exc,match", [
    (lambda: audit.auc([1.0, np.nan], [0.0]), ValueError, r"inside\[1\] = nan"),
    (lambda: audit.auc([1.0], [0.0, np.inf]), ValueError, r"outside\[1\] = inf"),
    (lambda: audit.auc([], [0.0]), ValueError, "inside has 0 scores"),
    (lambda: audit.auc([1.0], np.zeros((2, 2))), ValueError, "outside must be a 1-D array"),
    (lambda: audit.auc(np.array(["a"]), [0.0]), TypeError, "inside: expected real-valued scores"),
    (lambda: audit.auc([True], [0.0]), TypeError, "inside: expected real-valued scores"),
    (lambda: audit.auc(None, [0.0]), TypeError, "inside must be a 1-D array"),
    (lambda: audit.roc([1.0], [1.0 + 1j]), TypeError, "outside"),
    (lambda: audit.tpr_at_fpr([1.0], [0.0], 1.5), ValueError, "max_fpr"),
    (lambda: audit.tpr_at_fpr([1.0], [0.0], float("nan")), ValueError, "max_fpr"),
    (lambda: audit.summarize([1.0], [0.0], alpha=1.0), ValueError, "alpha"),
    (lambda: audit.summarize([1.0], [0.0], n_boot=-1), ValueError, "n_boot"),
    (lambda: audit.summarize([1.0], [0.0], seed=1.5), ValueError, "seed"),
    (lambda: audit.eps_from_scores([1.0], [0.0, 1.0], 0.0), ValueError, "inside has 1 score"),
    (lambda: audit.eps_from_scores([1.0, 2.0], [0.0, 1.0], 1.0), ValueError, "delta"),
    (lambda: audit.eps_lower_bound(0, 0, 1, 1, 0.0), ValueError, "no member trials"),
    (lambda: audit.eps_lower_bound(1, 1, 0, 0, 0.0), ValueError, "no non-member trials"),
    (lambda: audit.eps_lower_bound(-1, 1, 1, 1, 0.0), ValueError, "tp"),
    (lambda: audit.eps_lower_bound(1, 1, 1.5, 1, 0.0), ValueError, "fp"),
    (lambda: audit.eps_lower_bound(1, 1, 1, "1", 0.0), TypeError, "tn"),
    (lambda: audit.eps_lower_bound(1, 1, 1, 1, -0.1), ValueError, "delta"),
    (lambda: audit.one_run_eps(10, 11, 1, 0.0), ValueError, "r = 11 .* m = 10"),
    (lambda: audit.one_run_eps(10, 4, 5, 0.0), ValueError, "v = 5 .* r = 4"),
    (lambda: audit.one_run_eps(0, 0, 0, 0.0), ValueError, "m must be"),
    (lambda: audit.one_run_eps(10, 4, 2, 0.0, alpha=0), ValueError, "alpha"),
    (lambda: audit.one_run_guess([1.0, 2.0, 3.0], [1, 0], 1), ValueError, "is_member must have shape"),
    (lambda: audit.one_run_guess([1.0, 2.0, 3.0], [1, 0, 2], 1), ValueError, r"is_member\[2\] = 2"),
    (lambda: audit.one_run_guess([1.0, 2.0, 3.0], [1, 0, 1], 2), ValueError, "k = 2"),
    (lambda: audit.one_run_guess([1.0, 2.0, 3.0], [1, 0, 1], 0), ValueError, "k must be"),
])
def test_statistics_refuse_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ==== scores of a trained model ====

D, K = 32, 4
CENTERS = np.random.default_rng(12345).normal(size=(K, D))


def population(n, seed, flip=0.2):
    """K Gaussian classes in D dimensions, a fraction `flip` of the labels replaced by another
    class: the flipped examples are learned only by memorizing them, which a non-private
    model does (their loss is low for members, high for non-members)."""
    r = np.random.default_rng(seed)
    y = r.integers(0, K, n)
    x = (CENTERS[y] + r.normal(size=(n, D))).astype(np.float32)
    y = np.where(r.random(n) < flip, (y + r.integers(1, K, n)) % K, y)
    return x, y


@pytest.fixture(scope="module")
def overfit():
    """A non-private model trained on the first 200 of 400 examples until it memorizes them."""
    x, y = population(400, 1)
    run = dptrain.train(x[:200], y[:200], model="mlp:32-128-4:relu", epochs=30, batch_size=32, optimizer="adam",
                        lr=1e-2, threads=1, verbose=False, progress=False, history="list")
    return run.model, x, y


def test_scores_are_the_softmax_of_predict(overfit):
    m, x, y = overfit
    loss, phi = audit.scores(m, x, y)
    assert loss.dtype == phi.dtype == np.float64 and loss.shape == phi.shape == (400,)
    z = m.predict(x).astype(np.float64)
    zy = z[np.arange(len(y)), y]
    lse = np.log(np.sum(np.exp(z - z.max(1, keepdims=True)), 1)) + z.max(1)
    others = np.where(np.arange(K)[None, :] == y[:, None], -np.inf, z)
    lse_other = np.log(np.sum(np.exp(others - others.max(1, keepdims=True)), 1)) + others.max(1)
    np.testing.assert_allclose(loss, lse - zy, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(phi, zy - lse_other, rtol=1e-5, atol=1e-5)
    mean_loss, _ = m.evaluate(x, y)
    assert loss.mean() == pytest.approx(mean_loss, rel=1e-5)
    # members were memorized: the loss attack separates them from the other 200
    assert audit.auc(-loss[:200], -loss[200:]) > 0.65


def test_scores_refuse(overfit):
    m, x, y = overfit
    with pytest.raises(TypeError, match="model must be a dptrain.Model"):
        audit.scores("mlp:32-4", x, y)
    with pytest.raises(ValueError, match="x has 16 features per example, the model takes 32"):
        audit.scores(m, x[:, :16], y)
    with pytest.raises(ValueError, match=r"y\[3\] = 7"):
        audit.scores(m, x[:5], np.array([0, 1, 2, 7, 1]))
    with pytest.raises(ValueError, match="y has 5 labels for 400 examples"):
        audit.scores(m, x, y[:5])
    one = dptrain.Model.from_spec("mlp:32-1")
    with pytest.raises(ValueError, match="model: the model has one output"):
        audit.scores(one, x, (y > 1).astype(int))
    r = np.random.default_rng(0)
    xr = r.normal(size=(64, 3)).astype(np.float32)
    reg = dptrain.train(xr, xr @ np.ones((3, 2)), regression=True, model="mlp:3-2", epochs=1, batch_size=32,
                        verbose=False, progress=False, history="list").model
    with pytest.raises(ValueError, match="model: a regression model"):
        audit.scores(reg, xr, np.zeros(64, int))
    bce = dptrain.Model.from_spec("mlp:32-4")
    bce.loss = "bce"
    with pytest.raises(ValueError, match="loss 'bce'"):
        audit.scores(bce, x, y)


# ==== the whole audit ====

def quiet_run(x, y, **kw):
    base = dict(model="mlp:32-128-4:relu", epochs=10, batch_size=32, lr=1e-2, shadows=4, verbose=False)
    base.update(kw)
    return audit.run(x, y, **base)


@needs_run
def test_run_sgd_leaks():
    x, y = population(400, 1)
    xt, yt = population(200, 2)
    events = []
    res = quiet_run(x, y, x_test=xt, y_test=yt, on_progress=events.append)
    assert (res.algorithm, res.population, res.members, res.shadows) == ("sgd", 400, 200, 4)
    assert list(res.attacks) == ["loss", "lira-offline", "lira-online"]
    assert res.loss is res.attacks["loss"] and res.lira_online is res.attacks["lira-online"]
    for a in res.attacks.values():
        assert a.inside.dtype == a.outside.dtype == np.float64
        assert a.inside.shape == (200,) and a.outside.shape == (200,)
        assert a.summary.auc == audit.auc(a.inside, a.outside)
        assert a.summary.tpr_1pct == audit.tpr_at_fpr(a.inside, a.outside, 0.01)
        assert a.summary.auc_lo < a.summary.auc < a.summary.auc_hi
    # memorized flipped labels: both attacks clearly above chance, the interval too
    assert res.loss.summary.auc_lo > 0.6, res.loss.summary
    assert res.lira_online.summary.auc > 0.6, res.lira_online.summary
    assert 0.5 < res.test_accuracy <= 1.0
    assert res.epsilon is None and res.sample_rate is None and res.canaries is None
    assert res.alpha == 0.05 and res.bootstrap == 200 and res.target_s >= 0 and res.shadow_s >= 0
    assert "no formal DP guarantee for algorithm sgd" in str(res) and "lira-online" in str(res)
    stages = [e["stage"] for e in events]
    assert stages == ["start", "target"] + ["shadow"] * 4, stages
    assert [e["done"] for e in events[2:]] == [1, 2, 3, 4] and events[0]["population"] == 400
    assert events[1]["test_accuracy"] == res.test_accuracy
    # the same seed gives the same audit; jobs does not change it; another seed another split
    again = quiet_run(x, y, x_test=xt, y_test=yt, jobs=2)
    for k, a in res.attacks.items():
        np.testing.assert_array_equal(again.attacks[k].inside, a.inside)
        np.testing.assert_array_equal(again.attacks[k].outside, a.outside)
    other = quiet_run(x, y, shadows=0, seed=2)
    assert not np.array_equal(np.sort(other.loss.inside), np.sort(res.loss.inside))


@needs_run
def test_run_with_a_target_reports_its_scores(overfit):
    m, x, y = overfit
    loss, _ = audit.scores(m, x, y)
    # x[:200] is the target's training set, x[200:] held out: members and non-members are all of them
    res = quiet_run(x[:200], y[:200], x_test=x[200:], y_test=y[200:], target=m, shadows=0, epochs=30)
    a = res.loss
    # (the library batches the examples otherwise: float32 sums in another order)
    np.testing.assert_allclose(np.sort(a.inside), np.sort(-loss[:200]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.sort(a.outside), np.sort(-loss[200:]), rtol=1e-5, atol=1e-6)
    assert a.summary.auc == pytest.approx(audit.auc(-loss[:200], -loss[200:]), abs=2e-3)
    assert a.summary.auc > 0.65
    assert res.test_accuracy == pytest.approx(m.evaluate(x[200:], y[200:])[1], abs=1e-12)
    assert res.given_target and res.epsilon is None and "a given model" in str(res)
    # the intervals' settings reach the library: 50% intervals are narrower, no resamples none
    narrow = quiet_run(x[:200], y[:200], x_test=x[200:], y_test=y[200:], target=m, shadows=0, alpha=0.5).loss.summary
    assert narrow.auc == a.summary.auc and a.summary.auc_lo < narrow.auc_lo and narrow.auc_hi < a.summary.auc_hi
    none = quiet_run(x[:200], y[:200], x_test=x[200:], y_test=y[200:], target=m, shadows=0, bootstrap=0).loss.summary
    assert none.auc_lo == none.auc == none.auc_hi
    small = quiet_run(x[:200], y[:200], x_test=x[200:], y_test=y[200:], target=m, shadows=0, max_pairs=50,
                      batch_size=16)
    assert small.loss.inside.shape == small.loss.outside.shape == (50,)
    near = lambda v, ref: np.abs(v[:, None] - ref[None, :]).min(1) <= 1e-6 + 1e-5 * np.abs(v)  # noqa: E731
    assert near(small.loss.inside, -loss[:200]).all() and near(small.loss.outside, -loss[200:]).all()


@needs_run
def test_run_dpsgd_reports_its_epsilon():
    x, y = population(400, 1)
    res = quiet_run(x, y, algorithm="dpsgd", sigma=1.5, clip=0.5, delta=1e-3, epochs=2, batch_size=40, shadows=0,
                    lr=0.1, optimizer="sgd")
    q = 40 / 200
    assert res.sample_rate == q and res.sigma == 1.5 and res.delta == 1e-3
    steps = 2 * round(1 / q)
    assert res.epsilon == pytest.approx(dptrain.accounting.epsilon(1.5, q, steps, 1e-3), rel=1e-9)
    assert "epsilon %.4g (default accountant: min of PLD, RDP) at delta 0.001" % res.epsilon in str(res)


@needs_run
def test_run_dpsgd_epsilon_carries_the_seeded_label():
    """Every model of an audit is trained from its seed (default 1): the epsilon it reports,
    and a canary run's, carry the run's [SEEDED] label, as train's lines do."""
    x, y = population(400, 1)
    xt, yt = population(100, 2)
    res = quiet_run(x, y, x_test=xt, y_test=yt, algorithm="dpsgd", sigma=1.5, clip=0.5, delta=1e-3, epochs=1,
                    batch_size=40, shadows=0, lr=0.1, optimizer="sgd", canaries=20)
    lab = "[SEEDED run (a chosen seed): holds only while the seed stays secret and no other run uses it]"
    assert res.privacy_label == lab
    text = str(res).splitlines()
    assert [ln for ln in text if ln.startswith("privacy (accountant): epsilon")][0].endswith("  " + lab), text
    assert [ln for ln in text if "accountant epsilon of a canary run" in ln][0].endswith("  " + lab), text
    assert quiet_run(x, y, shadows=0, epochs=1).privacy_label == ""  # no epsilon, no label


@needs_run
def test_run_canaries():
    x, y = population(400, 1)
    xt, yt = population(100, 2)
    res = quiet_run(x, y, x_test=xt, y_test=yt, shadows=0, canaries=40, one_run_guesses=5)
    c = res.canaries
    assert (c.canaries, c.runs, c.n_in + c.n_out, c.delta) == (40, 1, 40, 0.0)
    assert 0 <= c.auc <= 1 and c.eps_lb >= 0 and c.run_epsilon is None
    assert c.one_run_guesses == 10 and 0 <= c.one_run_correct <= 10 and c.one_run_eps_lb >= 0
    assert c.one_run_eps_lb == audit.one_run_eps(40, 10, c.one_run_correct, 0.0)
    assert "canary audit: 40 canaries x 1 runs" in str(res)
    two = quiet_run(x, y, x_test=xt, y_test=yt, shadows=0, canaries=10, canary_runs=2)
    assert two.canaries.runs == 2 and two.canaries.n_in + two.canaries.n_out == 20
    assert two.canaries.one_run_eps_lb is None and two.canaries.one_run_guesses is None


X8, Y8 = population(40, 3)


@needs_run
@pytest.mark.parametrize("kw,exc,match", [
    (dict(shadows=1), ValueError, "shadows must be 0"),
    (dict(jobs=0), ValueError, "jobs must be in"),
    (dict(alpha=1.5), ValueError, "alpha must be in"),
    (dict(bootstrap=-1), ValueError, "bootstrap must be in"),
    (dict(algorithm="dpulr"), ValueError, "algorithm: the audit trains with sgd, dpsgd"),
    (dict(algorithm=3), TypeError, "algorithm must be a str"),
    (dict(sigma=1.0), ValueError, "sigma is an option of algorithm dpsgd, not of sgd"),
    (dict(prop_sigma=0.1, algorithm="pdp-sgd"), ValueError, "prop_sigma is an option of algorithm "
                                                            "proportional-noise"),
    (dict(algorithm="proportional-noise"), ValueError, "needs prop_sigma"),
    (dict(algorithm="pdp-sgd", kappa=1.0, pdp_sigma=1.0), ValueError, "kappa and pdp_sigma"),
    (dict(algorithm="dpsgd", sigma=0.0), ValueError, "sigma"),
    (dict(algorithm="dpsgd", delta=0.1), ValueError, "delta 0.1 >= 1/members"),
    (dict(batch_size=21), ValueError, "batch_size 21 is larger than the 20 members"),
    (dict(epochs=0), ValueError, "epochs must be"),
    (dict(lr=-1.0), ValueError, "lr must be > 0"),
    (dict(optimizer="rmsprop"), ValueError, "optimizer"),
    (dict(model="mlp:784-128-10:relu"), ValueError, "model 'mlp:784-128-10:relu' takes 784 inputs, x has 32"),
    (dict(model="mlp:32-8-3"), ValueError, "model 'mlp:32-8-3' has 3 outputs, y has 4 classes"),
    (dict(model="mlp:32-1"), ValueError, "has one output"),
    (dict(model="no-such-model"), dptrain.InvalidArgumentError, "model"),
    (dict(model=dptrain.Model.from_spec("mlp:32-4")), TypeError, "model: a dptrain.Model is audited with target="),
    (dict(canaries=8), ValueError, "canaries: the canaries are test examples"),
    (dict(canaries=4), ValueError, "at least 8 canary trials"),
    (dict(canaries=8, x_test=X8[:5], y_test=Y8[:5]), ValueError, "canaries 8: only 5 test examples"),
    (dict(one_run_guesses=2), ValueError, "one_run_guesses: only with canaries"),
    (dict(canaries=8, canary_runs=2, one_run_guesses=2, x_test=X8, y_test=Y8), ValueError, "one_run_guesses 2"),
    (dict(max_pairs=10), ValueError, "max_pairs: only with a given target"),
    (dict(x_test=X8), ValueError, "x_test and y_test: give both"),
    (dict(x_test=X8[:, :5], y_test=Y8), ValueError, "x_test has 5 features per example"),
    (dict(x_test=X8, y_test=Y8 + 4), ValueError, r"y_test\[0\] = \d+ is outside \[0, 4\)"),
    (dict(on_progress="print"), TypeError, "on_progress must be callable"),
    (dict(target=dptrain.Model.from_spec("mlp:32-4")), ValueError, "target: a given target needs x_test"),
    (dict(target=dptrain.Model.from_spec("mlp:32-1"), x_test=X8, y_test=Y8), ValueError, "target: the model has one"),
    (dict(target=dptrain.Model.from_spec("mlp:16-4"), x_test=X8, y_test=Y8), ValueError, "the target takes 16"),
    (dict(target=dptrain.Model.from_spec("mlp:32-4"), x_test=X8, y_test=Y8, canaries=8), ValueError,
     "canaries: a canary audit trains its own models"),
    (dict(target="model.safetensors", x_test=X8, y_test=Y8), TypeError, "target must be a dptrain.Model"),
])
def test_run_refuses_bad_arguments(kw, exc, match):
    base = dict(model="mlp:32-4", batch_size=8, shadows=0, verbose=False)
    base.update(kw)
    with pytest.raises(exc, match=match):
        audit.run(X8, Y8, **base)


@needs_run
def test_run_refuses_bad_data():
    with pytest.raises(ValueError, match="x: the audit needs at least 8 examples"):
        audit.run(X8[:7], Y8[:7], model="mlp:32-4", batch_size=2, verbose=False)
    with pytest.raises(ValueError, match=r"y\[0\] = \d\.5 is not an integer class label"):
        audit.run(X8, Y8 + 0.5, model="mlp:32-4", batch_size=2, verbose=False)
    bad = X8.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"x, y: .*x\[98\]"):
        audit.run(bad, Y8, model="mlp:32-4", batch_size=2, shadows=0, verbose=False)


@needs_run
def test_run_progress_error_stops_the_audit():
    x, y = population(400, 1)
    calls = []

    def fail(p):
        calls.append(p["stage"])
        raise RuntimeError("stop here")

    t = time.monotonic()
    with pytest.raises(RuntimeError, match="stop here"):
        quiet_run(x, y, shadows=20, epochs=2000, on_progress=fail)
    # 21 models of 2000 epochs take about 20 s (0.9 s each, measured): after the error every
    # model stopped after one step, and the callback was not called again
    assert time.monotonic() - t < 8 and calls == ["start"]


SIGINT_SCRIPT = r"""
import numpy as np
from dptrain import audit
r = np.random.default_rng(0)
x = r.normal(size=(400, 32)).astype(np.float32)
y = r.integers(0, 4, 400)
audit.run(x, y, model="mlp:32-64-4:relu", algorithm="dpsgd", sigma=1.0, delta=1e-3, epochs=100000, batch_size=20,
          shadows=4, on_progress=lambda p: print("STAGE", p["stage"], flush=True), verbose=False)
print("RETURNED", flush=True)
"""


@needs_run
def test_run_sigint_raises_keyboardinterrupt():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(dptrain.__file__))] +
                                                      sys.path))
    p = subprocess.Popen([sys.executable, "-c", SIGINT_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("STAGE start"), (line, p.stderr.read() if p.poll() is not None else "")
        time.sleep(0.3)  # the target is training
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0 and "KeyboardInterrupt: dptrain: audit interrupted" in stderr, (p.returncode, stderr)
    assert "RETURNED" not in stdout and took < 20, took

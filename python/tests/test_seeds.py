"""Seeds (issue 38, item 2): seed=0, the default, draws the seed from the OS, so a private
run published twice is not a membership test; a chosen seed is reproducible and labelled
(Run.seed_source, the ledger, every history line); the seed and the streams stay in the
run's secret file, outside out_dir (secret_dir, default $DPTRAIN_SECRETS_DIR: conftest
points it at a temporary directory), and a resume continues them, regenerating (never
redrawing) the releases made before training."""
import json
import os
import stat

import numpy as np
import pytest

import dptrain

from helpers import blobs

SPEC = "mlp:20-8-3:relu"


def private(x, y, **kw):
    kw.setdefault("epochs", 1)
    return dptrain.train(x, y, model=SPEC, algorithm=dptrain.DPSGD(sigma=1.0), batch_size=50, threads=1,
                         optimizer="sgd", lr=0.3, verbose=False, progress=False, **kw)


def flat(run):
    return np.concatenate([v.ravel() for v in run.model.parameters().values()])


def test_default_seed_is_from_the_os_and_labelled():
    x, y = blobs(n=300)
    a, b = private(x, y), private(x, y)
    assert not np.array_equal(flat(a), flat(b))  # a fixed default would make them equal
    assert a.seed_source == "os" and b.seed_source == "os"
    c, d = private(x, y, seed=5), private(x, y, seed=5)
    assert np.array_equal(flat(c), flat(d))
    assert c.seed_source == "caller"
    assert dptrain.train.__kwdefaults__ is None or dptrain.train.__kwdefaults__.get("seed", 0) == 0


def test_published_files_hold_no_seed_and_resume_continues(tmp_path):
    x, y = blobs(n=300)
    out = str(tmp_path / "r")
    private(x, y, seed=987654, out_dir=out)
    for name in os.listdir(out):  # every file a user would share
        data = open(os.path.join(out, name), "rb").read()
        assert b"987654" not in data and b"noise_rng" not in data, name
    lines = [json.loads(s) for s in open(os.path.join(out, "metrics.jsonl"))]
    assert all(line["seed_source"] == "caller" for line in lines)
    assert not os.path.exists(os.path.join(out, "dptrain.secret"))
    r1 = private(x, y, out_dir=str(tmp_path / "other"))
    secret = os.path.join(os.environ["DPTRAIN_SECRETS_DIR"], r1.run_id + ".secret")
    assert r1.secret_path == secret and os.path.exists(secret)
    # resumed with the default seed: the run goes on with its own
    r = private(x, y, out_dir=out, resume=True, epochs=2)
    assert r.seed_source == "caller" and r.steps == 12
    secret = r.secret_path
    assert secret == os.path.join(os.environ["DPTRAIN_SECRETS_DIR"], r.run_id + ".secret")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert b"987654" in open(secret, "rb").read()


def test_secret_dir(tmp_path):
    """secret_dir=: the secret goes there (made mode 0700), a resume finds it there and is
    refused without it, naming where it looked; one others can enter is refused."""
    x, y = blobs(n=300)
    out, sd = str(tmp_path / "r"), str(tmp_path / "keys")
    a = private(x, y, out_dir=out, secret_dir=sd)
    assert a.secret_path == os.path.join(sd, a.run_id + ".secret") and os.listdir(sd) == [a.run_id + ".secret"]
    assert stat.S_IMODE(os.stat(sd).st_mode) == 0o700 and sorted(os.listdir(out)) == [
        "checkpoint.safetensors", "dptrain.lock", "ledger.json", "metrics.jsonl"]
    assert private(x, y, out_dir=out, secret_dir=sd, resume=True, epochs=2).steps == 12
    try:
        private(x, y, out_dir=out, resume=True, epochs=3)
        raise AssertionError("resumed without its secret")
    except dptrain.DptrainError as e:
        assert "the run's secret file is missing" in str(e) and os.environ["DPTRAIN_SECRETS_DIR"] in str(e)
    opened = tmp_path / "open"
    opened.mkdir()
    os.chmod(opened, 0o755)
    try:
        private(x, y, out_dir=str(tmp_path / "r2"), secret_dir=str(opened))
        raise AssertionError("a secret directory others can enter was used")
    except dptrain.DptrainError as e:
        assert "open to other users (mode 0755)" in str(e)
    assert os.listdir(opened) == []


def test_dp_pca_run_resumes_with_an_os_seed(tmp_path):
    """DP-PCA is computed before the trainer from the run's seed: a resume regenerates the
    same release from the secret file (a new draw would be a second, unaccounted release,
    and a different projection of the data, which the trainer refuses)."""
    x, y = blobs(n=300)
    out = str(tmp_path / "pca")
    kw = dict(model="mlp:6-8-3:relu", algorithm=dptrain.DPMAC(sigma=1.1, pca_dims=6, pca_sigma=4.0, z_steps=2),
              batch_size=50, threads=1, verbose=False, progress=False, out_dir=out)
    a = dptrain.train(x, y, epochs=1, **kw)
    b = dptrain.train(x, y, epochs=2, resume=True, **kw)
    assert np.array_equal(a.pca_components, b.pca_components)
    assert b.history[-1]["epoch"] == 2


def test_dp_pca_resume_with_a_mismatch_allowed_is_refused(tmp_path):
    """With allow_ledger_mismatch the resumed data or seed (a lost secret) may differ from the
    run's, so the DP-PCA computed again would be a second release the ledger does not hold:
    two published projections would reveal their difference (the adversarial review of
    2026-12-07 recovered a noiseless mean that way from the CLI). Refused before anything is
    computed."""
    x, y = blobs(n=300)
    out = str(tmp_path / "pca")
    kw = dict(model="mlp:6-8-3:relu", batch_size=50, threads=1, verbose=False, progress=False, out_dir=out)
    algo = dict(sigma=1.1, pca_dims=6, pca_sigma=4.0, z_steps=2)
    dptrain.train(x, y, epochs=1, algorithm=dptrain.DPMAC(**algo), **kw)
    with pytest.raises(ValueError, match="pca_dims and allow_ledger_mismatch"):
        dptrain.train(x[:299], y[:299], epochs=2, resume=True,
                      algorithm=dptrain.DPMAC(allow_ledger_mismatch=True, **algo), **kw)
    # without the mismatch the same resume regenerates the recorded release (the test above)
    b = dptrain.train(x, y, epochs=2, resume=True, algorithm=dptrain.DPMAC(**algo), **kw)
    assert b.history[-1]["epoch"] == 2

"""Transformers between dptrain and PyTorch: to_torch of the named models (gpt_tiny,
bert_tiny, vit_mnist at small options) and of every sequence layer, from_torch of modules
built from nn.Embedding / TokenEmbedding, nn.LayerNorm, RMSNorm, nn.Linear per position,
SelfAttention around nn.MultiheadAttention, nn.TransformerEncoderLayer (bidirectional) and
EncoderLayer (causal), MeanPool / ClsPool and a ViT's nn.Conv2d + ToSeq: outputs equal to
1e-5, weights moved exactly (in_proj_weight is plin<3D>'s weight bit for bit), round trips
Model -> to_torch -> from_torch with the same spec and bit-identical parameters, DP-SGD
per-example norms of the converted model against torch's per-example gradients, and every
unsupported setting refused by name in one line.

Tolerance |dptrain - torch| <= 1e-5 + 1e-5 |torch|: float32 on both sides, different
summation orders (errors ~1e-6 here); a wrong layout or mask is off by O(0.1)."""
import numpy as np
import pytest

import dptrain
from dptrain._lib import check, ffi, lib

torch = pytest.importorskip("torch")
nn = torch.nn
ti = dptrain.torch_interop


def close(got, want, atol=1e-5, rtol=1e-5):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want) - (atol + rtol * np.abs(want))
    assert float(err.max()) <= 0, float(np.abs(got - want).max())


def randomize(model, seed, scale=0.3):
    """Parameters N(0, scale^2) (scales of the norms 1 + that): away from 1 and 0."""
    rng = np.random.default_rng(seed)
    p = {}
    for k, v in model.parameters().items():
        p[k] = (rng.standard_normal(v.shape) * scale + (1.0 if ".weight" in k and v.ndim == 1 else 0.0)
                ).astype(np.float32)
    model.set_parameters(p)


def tokens(n, T, V, seed):
    return np.random.default_rng(seed).integers(0, V, size=(n, T)).astype(np.float32)


def roundtrip(model):
    """to_torch -> from_torch: the same spec and bit-identical parameters."""
    net = model.to_torch()
    back = dptrain.from_torch(net)
    assert back.spec == model.spec
    a, b = model.parameters(), back.parameters()
    assert list(a) == list(b)
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k
    return net


@pytest.mark.parametrize("spec,V", [
    ("gpt_tiny:t6:v11", 11),
    ("bert_tiny:t5:v9:c3", 9),
    ("seq:6:emb7x8nopos,[rms,plin24nobias,attn2c,plin8],ln,clspool,fc2", 7),
    ("seq:4x6:identity,[ln,plin18,attn3,plin6],[ln,plin12,relu,plin6],meanpool,fc2", 0),
    ("vit_mnist:c4", 0),
    ("cnn:2x4x4:conv6k2s2nobias,toseqnopos,ln,plin6,flatten,fc3", 0),
])
def test_to_torch_equals_and_round_trips(spec, V):
    m = dptrain.Model.from_spec(spec, threads=1)
    randomize(m, 1)
    n = 3
    x = tokens(n, m.input_dim, V, 2) if V else np.random.default_rng(2).standard_normal(
        (n, m.input_dim)).astype(np.float32)
    net = roundtrip(m)
    with torch.no_grad():
        out = net(torch.from_numpy(x)).numpy()
    close(m.predict(x), out)
    if V:  # torch's usual long ids give the same
        with torch.no_grad():
            close(net(torch.from_numpy(x).long()).numpy(), out, 0, 0)


def test_named_models_keep_their_name():
    for name in ("gpt_tiny", "bert_tiny", "vit_cifar"):
        m = dptrain.Model.from_spec(name, threads=1)
        assert dptrain.from_torch(m.to_torch()).spec == name


def _mha(D, H, seed, bias=True):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(D, H, batch_first=True, bias=bias)
    if bias:
        with torch.no_grad():
            mha.in_proj_bias.normal_(0, 0.3)
            mha.out_proj.bias.normal_(0, 0.3)
    return mha


def _block(D, H, Fw, seed, act="gelu"):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, Fw, dropout=0.0, activation=act, batch_first=True, norm_first=True)
    with torch.no_grad():
        for p in (layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias,
                  layer.self_attn.in_proj_bias, layer.self_attn.out_proj.bias):
            p.add_(0.3 * torch.randn_like(p))
    return layer.eval()


def check_from_torch(net, input_shape, x, want_spec):
    """from_torch(net) has spec want_spec and equals net on x (to 1e-5); the converted
    model's to_torch converts back to the same spec and parameters."""
    net = net.eval()
    m = dptrain.from_torch(net, input_shape, threads=1)
    assert m.spec == want_spec
    with torch.no_grad():
        want = net(x).reshape(x.shape[0], -1).numpy()
    xs = x.numpy().reshape(x.shape[0], -1).astype(np.float32)
    close(m.predict(xs), want)
    roundtrip(m)
    return m


@pytest.mark.parametrize("causal", [False, True])
def test_gpt_and_bert_from_torch(causal):
    T, V, D, H, Fw = 6, 10, 8, 2, 16
    torch.manual_seed(3)
    emb = ti.TokenEmbedding(V, D, T)
    blocks = [ti.EncoderLayer(_block(D, H, Fw, 4 + k), causal=True) if causal else _block(D, H, Fw, 4 + k)
              for k in range(2)]
    ln = nn.LayerNorm(D)
    head = [nn.Linear(D, V)] if causal else [ti.MeanPool(), nn.Linear(D, 3)]
    net = nn.Sequential(emb, *blocks, ln, *head)
    x = torch.randint(0, V, (4, T))
    c = "c" if causal else ""
    blk = "[ln,plin24,attn2%s,plin8],[ln,plin16,gelu,plin8]" % c
    tail = "ln,plin10" if causal else "ln,meanpool,fc3"
    m = check_from_torch(net, (T,), x, "seq:%d:emb%dx%d,%s,%s,%s" % (T, V, D, blk, blk, tail))
    # weights moved exactly: in_proj packs q, k, v in plin<3D>'s row order
    sa = blocks[0].layer.self_attn if causal else blocks[0].self_attn
    p = m.parameters()
    assert p["plin1.weight"].tobytes() == sa.in_proj_weight.detach().numpy().tobytes()
    assert p["plin2.bias"].tobytes() == sa.out_proj.bias.detach().numpy().tobytes()
    assert p["emb1.position"].tobytes() == emb.position.detach().numpy().tobytes()


@pytest.mark.parametrize("spec", ["gpt_tiny:t5:v7", "vit_mnist:c3"])
def test_named_models_match_torch_per_example(spec):
    """The named GPT (small options) and ViT as torch modules: per-example gradients of
    <dout, output> in torch (each example alone) against dptrain's PER_EXAMPLE rows and
    SQNORM (the ViT's: conv patches, toseq's CLS vector and positions)."""
    m = dptrain.Model.from_spec(spec, threads=1)
    randomize(m, 5, 0.2)
    net = m.to_torch()
    B = 3
    x = tokens(B, 5, 7, 6) if spec.startswith("gpt") else np.random.default_rng(6).standard_normal(
        (B, m.input_dim)).astype(np.float32)
    dout = np.random.default_rng(7).standard_normal((B, m.output_dim)).astype(np.float32)
    mm = m._m
    check(lib.dpt_model_forward(mm, ffi.cast("const float *", ffi.from_buffer(x)), B))
    check(lib.dpt_model_backward(mm, ffi.cast("const float *", ffi.from_buffer(dout)), B))
    P = int(mm.n_params)
    rows = np.zeros(B * P, dtype=np.float32)
    sq = np.zeros(B, dtype=np.float32)
    check(lib.dpt_model_param_grad(mm, B, lib.DPT_GRAD_PER_EXAMPLE, ffi.NULL, ffi.cast("float *", ffi.from_buffer(rows)),
                                   P, 0))
    check(lib.dpt_model_param_grad(mm, B, lib.DPT_GRAD_SQNORM, ffi.NULL, ffi.cast("float *", ffi.from_buffer(sq)), 0, 0))
    rows = rows.reshape(B, P)
    names = list(m.parameters())
    params = dict(net.named_parameters())
    for i in range(B):
        out = net(torch.from_numpy(x[i:i + 1]))
        g = torch.autograd.grad((out * torch.from_numpy(dout[i:i + 1])).sum(), [params[k] for k in names])
        g = torch.cat([t.reshape(-1) for t in g]).numpy()
        close(rows[i], g, 1e-5, 1e-4)
        want = float(np.dot(g.astype(np.float64), g))
        assert abs(sq[i] - want) <= 1e-4 * want


def test_vit_from_torch():
    C, S, p, D, H = 3, 8, 4, 8, 2
    torch.manual_seed(8)
    net = nn.Sequential(nn.Conv2d(C, D, p, stride=p), ti.ToSeq(D, (S // p) ** 2, cls=True),
                        _block(D, H, 4 * D, 9), nn.LayerNorm(D), ti.ClsPool(), nn.Linear(D, 5))
    x = torch.randn(2, C, S, S)
    check_from_torch(net, (C, S, S), x, "cnn:3x8x8:conv8k4s4,toseqcls,[ln,plin24,attn2,plin8],"
                     "[ln,plin32,gelu,plin8],ln,clspool,fc5")


def test_sequence_modules_from_torch():
    """nn.Embedding (no positions), RMSNorm, SelfAttention (causal, no biases), nn.Linear per
    position, a ReLU block, float sequences (T, D) and flatten."""
    T, V, D = 5, 6, 4
    torch.manual_seed(10)
    net = nn.Sequential(nn.Embedding(V, D), ti.RMSNorm(D), ti.SelfAttention(_mha(D, 2, 11, bias=False), causal=True),
                        nn.Linear(D, 6), nn.GELU(), nn.Flatten(), nn.Linear(T * 6, 2))
    with torch.no_grad():
        net[1].weight.add_(0.3 * torch.randn(D))
    check_from_torch(net, T, torch.randint(0, V, (3, T)),
                     "seq:5:emb6x4nopos,rms,plin12nobias,attn2c,plin4nobias,plin6,gelu,flatten,fc2")
    net = nn.Sequential(ti.SelfAttention(_mha(D, 1, 12)), _block(D, 2, 8, 13, act="relu"), nn.LayerNorm(D),
                        ti.MeanPool())
    check_from_torch(net, (T, D), torch.randn(3, T, D),
                     "seq:5x4:plin12,attn1,plin4,[ln,plin12,attn2,plin4],[ln,plin8,relu,plin4],ln,meanpool")
    if hasattr(nn, "RMSNorm"):  # torch >= 2.4
        net = nn.Sequential(nn.RMSNorm(D, eps=1e-6), ti.MeanPool())
        check_from_torch(net, (T, D), torch.randn(2, T, D), "seq:5x4:rms,meanpool")


def _one_line(excinfo, *needles):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, (n, msg)


def test_unsupported_refused_by_name():
    T, V, D = 4, 5, 8
    emb = ti.TokenEmbedding(V, D, T)

    def refused(mods, needles, shape=(T,), exc=dptrain.UnsupportedError):
        with pytest.raises(exc) as e:
            dptrain.from_torch(nn.Sequential(*mods), shape)
        _one_line(e, *needles)

    post = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, activation="gelu", batch_first=True, norm_first=False)
    refused([emb, post], ["1 (TransformerEncoderLayer)", "norm_first=False"])
    drop = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)
    refused([emb, drop.train()], ["1 (TransformerEncoderLayer)", "dropout 0.1 in training mode"])
    m = dptrain.from_torch(nn.Sequential(emb, drop.eval()), (T,))  # eval mode: no dropout, accepted
    assert m.spec.startswith("seq:4:emb5x8,[ln,plin24,attn2,plin8]")
    seqf = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, batch_first=False, norm_first=True)
    refused([emb, seqf], ["batch_first=False"])
    tanh = nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, activation=torch.tanh, batch_first=True, norm_first=True)
    refused([emb, tanh], ["activation"])
    refused([emb, _mha(D, 2, 1)], ["1 (MultiheadAttention)", "SelfAttention(mha"])
    kd = nn.MultiheadAttention(D, 2, batch_first=True, kdim=4, vdim=4)
    refused([emb, ti.SelfAttention(kd)], ["kdim 4", "embed_dim 8"])
    refused([emb, ti.SelfAttention(nn.MultiheadAttention(D, 2, batch_first=True, add_bias_kv=True))],
            ["add_bias_kv"])
    refused([emb, ti.SelfAttention(nn.MultiheadAttention(D, 2, batch_first=True, dropout=0.2).train())],
            ["dropout 0.2 in training mode"])
    refused([emb, ti.SelfAttention(nn.MultiheadAttention(D, 2, batch_first=False))], ["batch_first=False"])
    refused([nn.Embedding(V, D, padding_idx=0)], ["0 (Embedding)", "padding_idx 0"])
    refused([nn.Embedding(V, D, max_norm=1.0)], ["max_norm"])
    refused([emb, nn.LayerNorm(D, eps=1e-6)], ["eps 1e-06"])
    refused([emb, nn.LayerNorm(D, elementwise_affine=False)], ["without weight and bias"])
    refused([emb, ti.RMSNorm(D, eps=1e-5)], ["eps 1e-05", "eps=1e-6"])
    refused([nn.Linear(3, 2), nn.Embedding(V, D)], ["1 (Embedding)", "needs token ids"], shape=(3,))
    refused([nn.Conv2d(1, D, 2, stride=2), nn.LayerNorm(D)], ["1 (LayerNorm)", "an image"], shape=(1, 4, 4))
    refused([emb, nn.Conv2d(D, 2, 1)], ["1 (Conv2d)", "a sequence [n, 4, 8]"])
    with pytest.raises(dptrain.InvalidArgumentError) as e:
        dptrain.from_torch(nn.Sequential(ti.TokenEmbedding(V, D, T + 1)), (T,))
    _one_line(e, "0 (TokenEmbedding)", "position has 5 rows but 4 token ids")
    with pytest.raises(dptrain.InvalidArgumentError) as e:
        dptrain.from_torch(nn.Sequential(emb, nn.Linear(D + 1, 2)), (T,))
    _one_line(e, "1 (Linear)", "in_features 9")
    # padding masks: the wrapper refuses key_padding_mask
    sa = ti.SelfAttention(_mha(D, 2, 2))
    with pytest.raises(dptrain.UnsupportedError) as e:
        sa(torch.randn(1, T, D), key_padding_mask=torch.zeros(1, T, dtype=torch.bool))
    _one_line(e, "key_padding_mask")


def test_dp_training_of_a_converted_model():
    """A BERT-style torch module trained by dptrain's DP-SGD after from_torch: the run
    finishes and converts back to torch (the layers keep their names and shapes)."""
    T, V, D = 4, 6, 8
    torch.manual_seed(14)
    net = nn.Sequential(ti.TokenEmbedding(V, D, T), _block(D, 2, 16, 15), nn.LayerNorm(D), ti.MeanPool(),
                        nn.Linear(D, 2))
    m = dptrain.from_torch(net, (T,))
    x = tokens(64, T, V, 16)
    y = (x[:, 0] >= 3).astype(np.int32)  # class from the first token
    run = dptrain.train(x, y, model=m, algorithm=dptrain.DPSGD(sigma=1.0, clip=1.0, delta=1e-5), epochs=1,
                        batch_size=16, lr=0.1, seed=1, threads=1)
    back = run.model.to_torch()
    assert [k for k, _ in back.named_parameters()] == list(run.model.parameters())
    with torch.no_grad():
        close(run.model.predict(x[:5]), back(torch.from_numpy(x[:5])).numpy())


def test_token_loss_against_torch_and_lm_training():
    """loss="token-ce": dptrain's mean per-token cross-entropy equals torch's
    F.cross_entropy over the T positions of each example (same model via to_torch), and
    gpt_tiny's structure trains on next tokens as regression targets (DP-SGD runs; the
    non-private run learns the rule)."""
    T, V = 6, 5
    rng = np.random.default_rng(20)
    s = rng.integers(0, V, size=(300, T + 1))
    for t in range(1, T + 1):  # next token = current + 2 mod V
        s[:, t] = (s[:, t - 1] + 2) % V
    x, y = s[:, :T].astype(np.float32), s[:, 1:].astype(np.float32)
    spec = "seq:6:emb5x8,[ln,plin24,attn2c,plin8],[ln,plin32,gelu,plin8],ln,plin5"
    dp = dptrain.train(x[:240], y[:240], model=spec, algorithm=dptrain.DPSGD(sigma=0.8, clip=1.0, delta=1e-3),
                       loss="token-ce", regression=True, x_test=x[240:], y_test=y[240:], epochs=2,
                       batch_size=24, lr=0.02, seed=2, threads=1, verbose=False)
    assert dp.model.loss == "token-ce" and np.isfinite(dp.last["test_loss"]) and dp.epsilon > 0
    run = dptrain.train(x[:240], y[:240], model=spec, algorithm="sgd", loss="token-ce", regression=True,
                        x_test=x[240:], y_test=y[240:], epochs=10, batch_size=24, lr=0.02, seed=2, threads=1,
                        verbose=False)
    m = run.model
    assert m.loss == "token-ce" and m.targets == T
    loss, ppl = m.evaluate(x[240:], y[240:])
    assert ppl == pytest.approx(np.exp(loss))
    assert loss < 0.7 * np.log(V), loss  # uniform: log V
    assert run.last["test_loss"] == pytest.approx(loss, rel=1e-6)
    net = m.to_torch()
    with torch.no_grad():
        logits = net(torch.from_numpy(x[240:])).reshape(-1, T, V)
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.from_numpy(y[240:]).long().reshape(-1))
    assert abs(loss - float(want)) <= 1e-5 + 1e-5 * float(want)
    with pytest.raises(ValueError, match="token-ce"):
        dptrain.train(x, y, model=spec, loss="ce", regression=True, epochs=1, verbose=False)

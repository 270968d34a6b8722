"""Sequence layers against PyTorch's own modules on the same weights: nn.Embedding plus a
learned position table, nn.LayerNorm, RMSNorm written in torch (x / sqrt(mean(x^2) + 1e-6)
* weight; torch 1.13 has no nn.RMSNorm), nn.Linear applied at every position, GELU, mean and
CLS pooling, a residual group, nn.MultiheadAttention and a pre-LN nn.TransformerEncoderLayer
(bidirectional and causal). Compared: the forward, the batch gradient of <dout, out>
for every parameter, each example's own gradient (dptrain's PER_EXAMPLE rows against
torch.autograd.grad of that example alone), the squared per-example norms dptrain computes
without forming the gradients (SQNORM: the embedding's co-occurrence sum, the
position-wise Linear's Gram path) and, for float inputs, the input cotangent.

Tolerance: |dptrain - torch| <= 1e-5 + 1e-4 |torch| (norms: 1e-4 relative). Both compute
in float32 with different summation orders (BLAS vs PyTorch kernels; dptrain's norms and
statistics in double), giving errors of order 1e-6 here, while a wrong layout, a missing
position table or a norm that ignores repeated tokens is off by O(0.1)."""
import numpy as np
import pytest

import dptrain
from dptrain._lib import check, ffi, lib

torch = pytest.importorskip("torch")
nn = torch.nn
F = nn.functional


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TextNet(nn.Module):
    """seq:T:emb{V}x{D},ln,[plin{D},gelu],rms,{pool},fc{C} with positions, or float inputs
    (seq:TxD:identity,...) when V is None."""

    def __init__(self, T, V, D, C, pool):
        super().__init__()
        self.V = V
        if V:
            self.emb = nn.Embedding(V, D)
            self.pos = nn.Parameter(torch.randn(T, D))
        self.ln = nn.LayerNorm(D)
        self.plin = nn.Linear(D, D)
        self.rms = RMSNorm(D)
        self.fc = nn.Linear(D, C)
        self.pool = pool
        with torch.no_grad():  # scales and shifts away from 1 and 0
            for p in (self.ln.weight, self.ln.bias, self.rms.weight):
                p.add_(0.3 * torch.randn_like(p))

    def spec(self, T, D, C):
        head = "seq:%d:emb%dx%d" % (T, self.V, D) if self.V else "seq:%dx%d:identity" % (T, D)
        return "%s,ln,[plin%d,gelu],rms,%s,fc%d" % (head, D, self.pool, C)

    def names(self):
        n = {"ln1.weight": self.ln.weight, "ln1.bias": self.ln.bias, "plin1.weight": self.plin.weight,
             "plin1.bias": self.plin.bias, "rms1.weight": self.rms.weight, "fc1.weight": self.fc.weight,
             "fc1.bias": self.fc.bias}
        if self.V:
            n = {"emb1.weight": self.emb.weight, "emb1.position": self.pos, **n}
        return n

    def forward(self, x):
        h = self.emb(x) + self.pos if self.V else x
        h = self.ln(h)
        h = h + F.gelu(self.plin(h))
        h = self.rms(h)
        h = h.mean(1) if self.pool == "meanpool" else h[:, 0]
        return self.fc(h)


def tol(got, want, rel=1e-4):
    err = np.abs(got - want) - (1e-5 + rel * np.abs(want))
    assert float(err.max()) <= 0, float(np.abs(got - want).max())


@pytest.mark.parametrize("tokens,pool", [(True, "meanpool"), (True, "clspool"), (False, "meanpool")])
def test_against_torch(tokens, pool):
    torch.manual_seed(0)
    T, V, D, C, B = 7, 5, 6, 3, 4
    net = TextNet(T, V if tokens else None, D, C, pool)
    if tokens:
        x = torch.randint(0, V, (B, T))
        x[:, 1] = x[:, 0]  # a repeated token in every example
    else:
        x = torch.randn(B, T, D, requires_grad=True)
    compare(net.spec(T, D, C), net, net.names(), x, tokens)


@pytest.mark.parametrize("causal", [False, True])
def test_transformer_block_against_torch(causal):
    """A pre-LN nn.TransformerEncoderLayer (GELU, no dropout) and nn.MultiheadAttention are
    dptrain's [ln,plin<3D>,attn<H>[c],plin<D>],[ln,plin<F>,gelu,plin<D>] on the same weights
    (in_proj -> plin1, out_proj -> plin2); a causal mask is attn<H>c."""
    torch.manual_seed(2)
    T, D, H, Fw, B = 5, 8, 2, 12, 3
    layer = nn.TransformerEncoderLayer(D, H, Fw, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    with torch.no_grad():
        for p in (layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias,
                  layer.self_attn.in_proj_bias, layer.self_attn.out_proj.bias):
            p.add_(0.3 * torch.randn_like(p))
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None

    def net(x):
        return layer(x, src_mask=mask).mean(1)

    sa = layer.self_attn
    params = {"ln1.weight": layer.norm1.weight, "ln1.bias": layer.norm1.bias,
              "plin1.weight": sa.in_proj_weight, "plin1.bias": sa.in_proj_bias,
              "plin2.weight": sa.out_proj.weight, "plin2.bias": sa.out_proj.bias,
              "ln2.weight": layer.norm2.weight, "ln2.bias": layer.norm2.bias,
              "plin3.weight": layer.linear1.weight, "plin3.bias": layer.linear1.bias,
              "plin4.weight": layer.linear2.weight, "plin4.bias": layer.linear2.bias}
    spec = "seq:%dx%d:identity,[ln,plin%d,attn%d%s,plin%d],[ln,plin%d,gelu,plin%d],meanpool" % (
        T, D, 3 * D, H, "c" if causal else "", D, Fw, D)
    x = torch.randn(B, T, D, requires_grad=True)
    compare(spec, net, params, x, False)
    # the same attention alone: nn.MultiheadAttention(q = k = v = x)
    sa_spec = "seq:%dx%d:identity,plin%d,attn%d%s,plin%d,flatten" % (T, D, 3 * D, H, "c" if causal else "", D)
    compare(sa_spec, lambda x: sa(x, x, x, attn_mask=mask, need_weights=False)[0].reshape(B, -1),
            {k: params[k] for k in ("plin1.weight", "plin1.bias", "plin2.weight", "plin2.bias")}, x, False)


def compare(spec, net, params, x, tokens):
    """dptrain's model `spec` with torch's `params` (its tensor names -> torch parameters, in
    the model's order) against net(x): forward, batch and per-example gradients of
    <dout, out>, SQNORM, and for float inputs the input cotangent (spec starts 'identity')."""
    B = x.shape[0]
    model = dptrain.Model.from_spec(spec, threads=1)
    model.set_parameters({k: p.detach().numpy() for k, p in params.items()})
    m = model._m
    P = int(m.n_params)
    assert list(model.parameters()) == list(params)  # the tensor table's order and names

    xs = np.ascontiguousarray(x.detach().numpy().reshape(B, -1), dtype=np.float32)
    check(lib.dpt_model_forward(m, ffi.cast("const float *", ffi.from_buffer(xs)), B))
    ref = net(x)
    C = ref.shape[1]
    dout = torch.randn(B, C)
    out = np.frombuffer(ffi.buffer(m.act[m.n_layers], B * C * 4), dtype=np.float32).reshape(B, C)
    tol(out, ref.detach().numpy())

    d = np.ascontiguousarray(dout.numpy(), dtype=np.float32)
    check(lib.dpt_model_backward(m, ffi.cast("const float *", ffi.from_buffer(d)), B))

    def grads(mode, ld=0, rows=1):
        buf = np.zeros(rows * max(ld, P) if mode != lib.DPT_GRAD_SQNORM else B, dtype=np.float32)
        check(lib.dpt_model_param_grad(m, B, mode, ffi.NULL, ffi.cast("float *", ffi.from_buffer(buf)), ld, 0))
        return buf

    plist = list(params.values())
    want_sum = torch.autograd.grad((ref * dout).sum(), plist, retain_graph=True)
    tol(grads(lib.DPT_GRAD_SUM), torch.cat([g.reshape(-1) for g in want_sum]).numpy())

    rows = grads(lib.DPT_GRAD_PER_EXAMPLE, P, B).reshape(B, P)
    norms = grads(lib.DPT_GRAD_SQNORM)
    for i in range(B):
        gi = torch.autograd.grad((ref[i] * dout[i]).sum(), plist, retain_graph=True)
        gi = torch.cat([g.reshape(-1) for g in gi]).numpy()
        tol(rows[i], gi)
        tol(np.array([norms[i]]), np.array([np.dot(gi.astype(np.float64), gi)]), rel=1e-4)

    if not tokens:  # the input cotangent: dact[1] is the cotangent of the identity's output = x
        gx = torch.autograd.grad((ref * dout).sum(), x)[0].numpy().reshape(B, -1)
        dx = np.frombuffer(ffi.buffer(m.dact[1], gx.size * 4), dtype=np.float32).reshape(B, -1)
        tol(dx, gx)


def test_plin_norm_paths_agree_with_torch():
    """Both SQNORM paths of the position-wise Linear against torch per-example gradient
    norms: the layer picks Gram for T (D + K) < D K, so the first shape runs the Gram path
    and the second the materialized one (the choice itself is checked in test_nn_seq.c)."""
    torch.manual_seed(1)
    B = 3
    for T, D, K in [(2, 8, 8), (12, 3, 2)]:  # Gram, materialized
        lin = nn.Linear(D, K)
        model = dptrain.Model.from_spec("seq:%dx%d:identity,plin%d" % (T, D, K), threads=1)
        model.set_parameters({"plin1.weight": lin.weight.detach().numpy(), "plin1.bias": lin.bias.detach().numpy()})
        m = model._m
        assert int(m.layers[1].kind) == lib.DPT_LAYER_SEQLINEAR
        x = torch.randn(B, T, D)
        dout = torch.randn(B, T, K)
        xs = np.ascontiguousarray(x.numpy().reshape(B, -1))
        check(lib.dpt_model_forward(m, ffi.cast("const float *", ffi.from_buffer(xs)), B))
        d = np.ascontiguousarray(dout.numpy().reshape(B, -1))
        check(lib.dpt_model_backward(m, ffi.cast("const float *", ffi.from_buffer(d)), B))
        sq = np.zeros(B, dtype=np.float32)
        check(lib.dpt_model_param_grad(m, B, lib.DPT_GRAD_SQNORM, ffi.NULL, ffi.cast("float *", ffi.from_buffer(sq)),
                                       0, 0))
        for i in range(B):
            gw, gb = torch.autograd.grad((lin(x[i]) * dout[i]).sum(), [lin.weight, lin.bias])
            want = float((gw.double() ** 2).sum() + (gb.double() ** 2).sum())
            assert abs(sq[i] - want) <= 1e-5 + 1e-4 * want, (T, D, K, i, sq[i], want)

"""The padding mask (docs/nn.md "Padding masks") against PyTorch on the same weights:
dptrain's seq:T:emb<V>x<D>pad<P>,[ln,plin<3D>,attn<H>[c],plin<D>],ln,... is torch's
nn.Embedding + positions and nn.MultiheadAttention with key_padding_mask = (ids == P) (and
the causal attn_mask), followed by a mean over the valid positions (bert-like) or by
per-position logits whose padded rows are 0 (gpt-like, with the token cross-entropy that
ignores pad targets: F.cross_entropy(ignore_index=P) averaged per sequence).

Compared: the forward, each example's gradient (PER_EXAMPLE rows against
torch.autograd.grad of that example alone) and the squared norms SQNORM, and the per-token
loss. Padding sits at the end and in the middle, never at position 0 of a causal model
(torch gives NaN for a query without an allowed key; dptrain gives 0, tested in C).
Tolerance as test_torch_seq.py: |dptrain - torch| <= 1e-5 + 1e-4 |torch|."""
import numpy as np
import pytest

import dptrain
from dptrain._lib import check, ffi, lib

try:
    import torch
except ImportError:  # torch is optional: the C tests (test_nn_seq) cover the mask without it
    pytest.skip("PyTorch is not installed: the comparison with nn.MultiheadAttention(key_padding_mask) is skipped",
                allow_module_level=True)
nn = torch.nn
F = nn.functional

T, V, D, H, C, B, PAD = 6, 7, 8, 2, 3, 4, 0


class PadNet(nn.Module):
    def __init__(self, causal, lm):
        super().__init__()
        self.causal, self.lm = causal, lm
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D))
        self.ln1 = nn.LayerNorm(D)
        self.att = nn.MultiheadAttention(D, H, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.head = nn.Linear(D, V if lm else C)
        with torch.no_grad():
            for p in (self.ln1.weight, self.ln1.bias, self.att.in_proj_bias, self.att.out_proj.bias):
                p.add_(0.3 * torch.randn_like(p))

    def spec(self):
        return "seq:%d:emb%dx%dpad%d,[ln,plin%d,attn%d%s,plin%d],ln,%s" % (
            T, V, D, PAD, 3 * D, H, "c" if self.causal else "", D, "plin%d" % V if self.lm else "meanpool,fc%d" % C)

    def params(self):
        a = self.att
        return {"emb1.weight": self.emb.weight, "emb1.position": self.pos, "ln1.weight": self.ln1.weight,
                "ln1.bias": self.ln1.bias, "plin1.weight": a.in_proj_weight, "plin1.bias": a.in_proj_bias,
                "plin2.weight": a.out_proj.weight, "plin2.bias": a.out_proj.bias, "ln2.weight": self.ln2.weight,
                "ln2.bias": self.ln2.bias, ("plin3" if self.lm else "fc1") + ".weight": self.head.weight,
                ("plin3" if self.lm else "fc1") + ".bias": self.head.bias}

    def forward(self, x):
        pad = x == PAD
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if self.causal else None
        h = self.emb(x) + self.pos
        u = self.ln1(h)
        h = h + self.att(u, u, u, key_padding_mask=pad, attn_mask=mask, need_weights=False)[0]
        h = self.ln2(h)
        valid = (~pad).unsqueeze(-1).to(h.dtype)
        if self.lm:
            return (self.head(h) * valid).reshape(x.shape[0], -1)
        return self.head((h * valid).sum(1) / valid.sum(1))


def tol(got, want, rel=1e-4):
    err = np.abs(got - want) - (1e-5 + rel * np.abs(want))
    assert float(err.max()) <= 0, float(np.abs(got - want).max())


def tokens():
    x = torch.randint(1, V, (B, T))  # real tokens 1..V-1, PAD = 0
    x[1, 3:] = PAD  # padded end
    x[2, 2] = PAD  # a pad in the middle
    x[3, 1:] = PAD  # one valid token
    return x


@pytest.mark.parametrize("causal,lm", [(False, False), (True, False), (True, True), (False, True)])
def test_padding_against_torch(causal, lm):
    torch.manual_seed(3 + 2 * causal + lm)
    net = PadNet(causal, lm)
    params = net.params()
    x = tokens()
    model = dptrain.Model.from_spec(net.spec(), threads=1)
    model.set_parameters({k: p.detach().numpy() for k, p in params.items()})
    assert list(model.parameters()) == list(params)
    m = model._m
    P = int(m.n_params)
    xs = np.ascontiguousarray(x.numpy(), dtype=np.float32)
    check(lib.dpt_model_forward(m, ffi.cast("const float *", ffi.from_buffer(xs)), B))
    ref = net(x)
    K = ref.shape[1]
    out = np.frombuffer(ffi.buffer(m.act[m.n_layers], B * K * 4), dtype=np.float32).reshape(B, K).copy()
    tol(out, ref.detach().numpy())

    if lm:  # the per-token loss with pad targets (the next ids; the pad after the last)
        y = torch.cat([x[:, 1:], torch.full((B, 1), PAD)], 1)
        ce = F.cross_entropy(ref.reshape(B * T, V), y.reshape(-1), ignore_index=PAD, reduction="none").reshape(B, T)
        n = (y != PAD).sum(1).clamp(min=1)
        want = ce.sum(1) / n
        ys = np.ascontiguousarray(y.numpy(), dtype=np.float32)
        loss, dout = np.zeros(B, dtype=np.float32), np.zeros((B, K), dtype=np.float32)
        check(lib.dpt_loss_tokens_pad(ffi.cast("const float *", ffi.from_buffer(out)), B, T, V,
                                      ffi.cast("const float *", ffi.from_buffer(ys)), PAD,
                                      ffi.cast("float *", ffi.from_buffer(loss)),
                                      ffi.cast("float *", ffi.from_buffer(dout))))
        tol(loss, want.detach().numpy())
        tdout = torch.autograd.grad(want.sum(), ref, retain_graph=True)[0]
        tol(dout, tdout.numpy())
        dout = torch.from_numpy(dout)
    else:
        dout = torch.randn(B, K)
    d = np.ascontiguousarray(dout.numpy(), dtype=np.float32)
    check(lib.dpt_model_backward(m, ffi.cast("const float *", ffi.from_buffer(d)), B))
    rows = np.zeros(B * P, dtype=np.float32)
    check(lib.dpt_model_param_grad(m, B, lib.DPT_GRAD_PER_EXAMPLE, ffi.NULL, ffi.cast("float *", ffi.from_buffer(rows)),
                                   P, 0))
    norms = np.zeros(B, dtype=np.float32)
    check(lib.dpt_model_param_grad(m, B, lib.DPT_GRAD_SQNORM, ffi.NULL, ffi.cast("float *", ffi.from_buffer(norms)),
                                   0, 0))
    rows = rows.reshape(B, P)
    plist = list(params.values())
    for i in range(B):
        gi = torch.autograd.grad((ref[i] * dout[i]).sum(), plist, retain_graph=True)
        gi = torch.cat([g.reshape(-1) for g in gi]).numpy()
        tol(rows[i], gi)
        tol(np.array([norms[i]]), np.array([np.dot(gi.astype(np.float64), gi)]))
    # the pad token's embedding row gets no gradient from any example
    off = 0
    assert not rows[:, off + PAD * D: off + (PAD + 1) * D].any()

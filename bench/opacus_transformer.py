#!/usr/bin/env python3
"""dptrain against Opacus on the named transformers (issue 39 item 6): the time of one DP-SGD
step of the same transformer on the same data, interleaved in one process.

Contenders (bench/opacus_compare.py's, whose setup and timing code this reuses):

  opacus   Opacus's make_private (Poisson sampling, flat clipping, per-sample gradient hooks)
           on the same transformer written with Opacus's DPMultiheadAttention, as Opacus
           requires for attention (nn.MultiheadAttention is refused by its validator); it is
           sequence-first (T, n, D), so the module keeps every tensor sequence-first and
           make_private gets batch_first=False. Embeddings are nn.Embedding (token, position,
           the ViT's CLS vector as a one-row table), the ViT's 4x4 patches an nn.Linear on the
           unfolded image (the stride-4 convolution's map), LayerNorm, Linear and GELU as usual.
  torch    dptrain's to_torch() of the spec (nn.Linear, nn.LayerNorm, its attention core) and
           the same loop without privacy: the baseline of the ratios
  engine   dptrain's C engine through Python: dptrain.train(algorithm="dpsgd", max_steps=S)

All three start from the same weights (PyTorch's initialization of the to_torch() module,
copied into the Opacus module and handed to the engine as init_params); the Opacus module's
output is checked equal to the to_torch() module's (1e-4) before anything is timed.
Models (src/nn/spec.c): gpt_tiny (causal LM, T 64, V 256, the per-token cross-entropy),
bert_tiny (bidirectional encoder classifier, T 64, 2 classes), vit_mnist (MNIST, 50
positions), vit_cifar (CIFAR-10's training images, 65 positions); the text models read
synthetic token ids (the step's cost does not depend on which ids), the ViTs the real images
where they are present (else synthetic). Same threads, expected batch, sigma, C and SGD
learning rate for every contender; what is timed is opacus_compare.py's (its docstring).
Target (issue 39): engine >= 10x faster than Opacus at one thread.

Opacus is not a dependency of dptrain: without it the script says so and exits 0, or with
--without-opacus times the two other contenders.

    PYTHONPATH=python:/work/opacus-1.4.0:/work/opt_einsum DPTRAIN_BUILD_DIR=$PWD/build \\
        /usr/bin/python3 bench/opacus_transformer.py --out opacus_transformer.csv
    /usr/bin/python3 bench/opacus_transformer.py --quick --without-opacus --out /tmp/s.csv   # seconds
"""
import datetime
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import opacus_compare as oc  # noqa: E402  (the contenders, data loaders, timing rounds)

# name -> (engine spec, data: "lm" token LM, "text" token classifier, "mnist" / "cifar10" images)
MODELS = {
    "gpt_tiny": ("gpt_tiny", "lm"),
    "bert_tiny": ("bert_tiny", "text"),
    "vit_mnist": ("vit_mnist", "mnist"),
    "vit_cifar": ("vit_cifar", "cifar10"),
}
QUICK_MODELS = {"gpt_tiny": "gpt_tiny:t8:v16", "bert_tiny": "bert_tiny:t8:v16"}
CONTENDERS = ("opacus", "torch", "engine")
TARGET = 10.0
SKIP_MESSAGE = "opacus_transformer: skipped: Opacus is not importable"
WIDTH, HEADS, MLP, BLOCKS, PATCH = 64, 4, 256, 2, 4  # the named transformers' shape (spec.c)


def parse_args(argv):
    ap = oc.new_parser("opacus_transformer.py", __doc__, "opacus_transformer.csv",
                       "CSV file written (one row per model and contender)", MODELS, CONTENDERS, SKIP_MESSAGE)
    ap.add_argument("--threads", type=int, default=1, help="threads of every contender")
    oc.add_common_args(ap, rounds=3, steps=3, warmup=1, n=2048, batch=64)
    ap.add_argument("--quick", action="store_true", help="smoke run: gpt_tiny:t8:v16 and bert_tiny:t8:v16, 2 "
                    "rounds of 2 steps, n 256, batch 16")
    a = ap.parse_args(argv)
    if a.quick:
        a.models, a.rounds, a.steps, a.warmup, a.n, a.batch_size = "gpt_tiny,bert_tiny", 2, 2, 1, 256, 16
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    oc.check_common(ap, a, MODELS, CONTENDERS)
    return a


# ==== data ====

def text_data(np, n, T, V, lm):
    """Token ids x float32 [n, T] uniform in [0, V); y: next tokens float32 [n, T] (lm: x shifted
    by one, a random last one) or labels int64 [n] (whether token 0 occurs more often than 1)."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, V, (n, T))
    if lm:
        y = np.concatenate([x[:, 1:], rng.integers(0, V, (n, 1))], 1).astype(np.float32)
    else:
        y = ((x == 0).sum(1) > (x == 1).sum(1)).astype(np.int64)
    return x.astype(np.float32), y, "synthetic token ids (T %d, V %d)" % (T, V)


# ==== the Opacus module: the same transformer with DPMultiheadAttention ====

def opacus_module(torch, net, kind, T, image_shape=None):
    """The transformer of to_torch()'s `net` (its weights copied) as Opacus trains attention:
    DPMultiheadAttention, every tensor sequence-first [T, n, D] (make_private(batch_first=
    False)); the input is the batch as the data has it ([n, T] ids, [n, C H W] images)."""
    nn, F = torch.nn, torch.nn.functional
    from opacus.layers import DPMultiheadAttention
    sd = net.state_dict()
    D = WIDTH

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.attn = DPMultiheadAttention(D, HEADS)
            self.fc1, self.fc2 = nn.Linear(D, MLP), nn.Linear(MLP, D)

        def forward(self, h, mask):
            a = self.ln1(h)
            h = h + self.attn(a, a, a, attn_mask=mask, need_weights=False)[0]
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))

    class Xformer(nn.Module):
        def __init__(self):
            super().__init__()
            if image_shape:
                C = image_shape[0]
                self.patch = nn.Linear(C * PATCH * PATCH, D)
                self.cls = nn.Embedding(1, D)
            else:
                self.tok = nn.Embedding(sd["emb1.weight"].shape[0], D)
            self.pos = nn.Embedding(T, D)
            self.blocks = nn.ModuleList([Block() for _ in range(BLOCKS)])
            self.ln = nn.LayerNorm(D)
            head = sd["plin%d.weight" % (4 * BLOCKS + 1)] if kind == "lm" else sd["fc1.weight"]
            self.head = nn.Linear(D, head.shape[0])

        def forward(self, x):
            n = x.shape[0]
            posid = torch.arange(T).unsqueeze(1).expand(T, n)
            if image_shape:
                C, H, W = image_shape
                p = F.unfold(x.reshape(n, C, H, W), PATCH, stride=PATCH).permute(2, 0, 1)  # [N, n, C p p]
                cls = self.cls(torch.zeros(1, n, dtype=torch.long))
                h = torch.cat([cls, self.patch(p)], 0) + self.pos(posid)
            else:
                h = self.tok(x.reshape(n, T).long().t()) + self.pos(posid)
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if kind == "lm" else None
            for b in self.blocks:
                h = b(h, mask)
            h = self.ln(h)
            if kind == "lm":
                return self.head(h).transpose(0, 1)  # [n, T, V]
            pooled = h.mean(0, keepdim=True) if kind == "text" else h[:1]  # [1, n, D]: batch stays in dim 1
            return self.head(pooled)[0]

    m = Xformer()
    with torch.no_grad():
        if image_shape:
            m.patch.weight.copy_(sd["conv1.weight"].reshape(D, -1))
            m.patch.bias.copy_(sd["conv1.bias"])
            m.cls.weight.copy_(sd["toseq1.cls"].reshape(1, D))
            m.pos.weight.copy_(sd["toseq1.position"])
        else:
            m.tok.weight.copy_(sd["emb1.weight"])
            m.pos.weight.copy_(sd["emb1.position"])
        for b, blk in enumerate(m.blocks):
            ln, pl = 2 * b + 1, 4 * b + 1
            for mod, key in ((blk.ln1, "ln%d" % ln), (blk.ln2, "ln%d" % (ln + 1)), (blk.attn.out_proj,
                             "plin%d" % (pl + 1)), (blk.fc1, "plin%d" % (pl + 2)), (blk.fc2, "plin%d" % (pl + 3))):
                mod.weight.copy_(sd[key + ".weight"])
                mod.bias.copy_(sd[key + ".bias"])
            w, bias = sd["plin%d.weight" % pl].chunk(3, 0), sd["plin%d.bias" % pl].chunk(3, 0)  # q, k, v rows
            for lin, wj, bj in zip((blk.attn.qlinear, blk.attn.klinear, blk.attn.vlinear), w, bias):
                lin.weight.copy_(wj)
                lin.bias.copy_(bj)
        m.ln.weight.copy_(sd["ln%d.weight" % (2 * BLOCKS + 1)])
        m.ln.bias.copy_(sd["ln%d.bias" % (2 * BLOCKS + 1)])
        head = "plin%d" % (4 * BLOCKS + 1) if kind == "lm" else "fc1"
        m.head.weight.copy_(sd[head + ".weight"])
        m.head.bias.copy_(sd[head + ".bias"])
    return m.train()


def check_same(torch, net, onet, x, kind):
    """The Opacus module computes to_torch()'s function: outputs equal to 1e-4 on 4 examples."""
    with torch.no_grad():
        a = net(x[:4])
        b = onet(x[:4]).reshape(a.shape)
    err = float((a - b).abs().max())
    if not err <= 1e-4 * (1.0 + float(a.abs().max())):
        raise RuntimeError("the Opacus module differs from to_torch()'s by %.3g" % err)
    return err


# ==== the bench ====

def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    got = oc.load_modules(args, "opacus_transformer", SKIP_MESSAGE)
    if got is None:
        return 0
    np, torch, dptrain = got
    from dptrain._lib import lib
    F = torch.nn.functional

    versions = "torch %s, opacus %s, dptrain %s" % (
        torch.__version__, getattr(sys.modules.get("opacus"), "__version__", "-"), dptrain.__version__)
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load0 = " ".join("%.2f" % v for v in os.getloadavg())
    print("opacus_transformer: %s; %s; load average at start %s; %s" % (date, oc.machine(), load0, versions))
    t = args.threads
    rows = []
    for name in args.models:
        spec, dname = MODELS[name]
        if args.quick and name in QUICK_MODELS:
            spec = QUICK_MODELS[name]
        oc.set_threads(torch, lib, t)
        net = oc.make_torch_module(torch, dptrain, spec, seed=1)
        with torch.no_grad():  # the tables reset_parameters() does not reach: N(0, 1), dptrain's init
            for pname, p in net.named_parameters():
                if pname.startswith("emb") or pname.endswith((".position", ".cls")):
                    p.normal_()
        shape = tuple(net.input_shape)
        ctx = dict(torch=torch, np=np, dptrain=dptrain, spec=spec, net=net, batch=args.batch_size, sigma=args.sigma,
                   clip=args.clip, lr=args.lr, threads=t, close=[])
        image = dname in ("mnist", "cifar10")
        kind = "image" if image else dname
        if image:
            x, y, source = oc.load_data(dname, args.n, args, np)
            xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        else:
            T = shape[1]
            V = net.state_dict()["emb1.weight"].shape[0]
            x, y, source = text_data(np, args.n, T, V, dname == "lm")
            xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()
        if dname == "lm":
            V = net.state_dict()["emb1.weight"].shape[0]
            ctx["loss_fn"] = lambda out, tgt, V=V: F.cross_entropy(out.reshape(-1, V), tgt.reshape(-1))
            ctx["engine_kw"] = dict(loss="token-ce", regression=True)
        nb = int(math.ceil(len(x) / args.batch_size))
        ctx.update(x=x, y=y, xt=xt, yt=yt, q=1.0 / nb)
        err = None
        if "opacus" in args.contenders:
            onet = opacus_module(torch, net, kind, shape[1] if not image else (shape[1] // PATCH) * (shape[2] //
                                 PATCH) + 1, shape if image else None)
            err = check_same(torch, net, onet, xt, kind)
            ctx["opacus_net"], ctx["batch_first"] = onet, False
        runs = {c: oc.SETUP[c](ctx) for c in args.contenders}
        params = sum(p.numel() for p in net.parameters())
        print("%s (%s, %d parameters), %s, n %d, q %.5f, batch %d, sigma %g, C %g, %d thread%s%s:" % (
            name, spec, params, source, len(x), ctx["q"], args.batch_size, args.sigma, args.clip, t,
            "" if t == 1 else "s", "" if err is None else "; Opacus module = to_torch() to %.1e" % err), flush=True)
        times, calls = oc.run_rounds(runs, args, lambda: oc.set_threads(torch, lib, t))
        oc.record(rows, times, calls, args, date=date, machine=oc.machine(), load_at_start=load0, versions=versions,
                  model=name, spec=spec, params=params, data=source, n=len(x), batch=args.batch_size,
                  q="%.6f" % ctx["q"], sigma=args.sigma, clip=args.clip, threads=t)
    oc.write_csv(rows, args.out)
    print_table(rows, args)
    return 0


def print_table(rows, args):
    """The Markdown table of docs/dpsgd.md and the target."""
    by = {}
    for r in rows:
        by.setdefault(r["model"], {})[r["contender"]] = r
    cols = [c for c in CONTENDERS if c in args.contenders]
    heads = {"opacus": "Opacus ms/step", "torch": "PyTorch non-private", "engine": "engine DP-SGD"}
    print()
    print("| model | batch | %s | engine vs Opacus | engine / non-private PyTorch |" % " | ".join(heads[c] for c in cols))
    print("|---|---|%s---|---|" % ("---|" * len(cols)))
    for m, d in by.items():
        e = d.get("engine")
        print("| %s | %s | %s | %s | %s |" % (
            d[cols[0]]["spec"], d[cols[0]]["batch"], " | ".join(d[c]["median_ms_per_step"] for c in cols),
            e["speedup_vs_opacus"] + "x" if e and e["speedup_vs_opacus"] else "-",
            e["cost_vs_torch"] + "x" if e and e["cost_vs_torch"] else "-"))
    for m, d in by.items():
        e = d.get("engine")
        if e and e["speedup_vs_opacus"]:
            s = float(e["speedup_vs_opacus"])
            print("target %s, %s thread(s): engine >= %gx Opacus: %.2fx, %s" % (
                m, e["threads"], TARGET, s, "not judged (--quick: a smoke configuration, not the target's)"
                if args.quick else "met" if s >= TARGET else "NOT met"))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""dptrain against Opacus, side by side (issue 41 item 9): the time of one DP-SGD step of the
same model on the same data, interleaved in one process.

Contenders, each training the same model from the same starting weights for a fixed number
of steps with the same expected batch q n, sigma, clip C, SGD learning rate and threads:

  opacus   Opacus's make_private (Poisson sampling, flat clipping, GradSampleModule hooks)
           and its usual loop: zero_grad, forward, loss, backward, optimizer.step()
  torch    the same PyTorch model and loop without privacy (the baseline of the ratios)
  engine   dptrain's C engine through Python: dptrain.train(algorithm="dpsgd", max_steps=S)
  byog     dptrain's bring-your-own-gradients loop on the PyTorch model: PrivateGradients
           .sample(), per_example_gradients (vmap), .release(), set_gradients, SGD step

Models: the engine's two MLPs (mlp:784-128-64-32-10:gelu, mlp:784-1000-10:relu) and CNNs
(mnist_cnn, resnet5; src/nn/spec.c), on MNIST (shared/datasets/mnist, else Fashion-MNIST from
/usr/share/datasets/fashion-mnist) for the first three and CIFAR-10's training images
(shared/datasets/cifar10) for resnet5, or synthetic data of the same shape where the files
are absent (or with --synthetic). The PyTorch module is dptrain's own to_torch() of the
spec, so the architecture is the same layer for layer; its freshly initialized weights are
handed to the engine (init_params), so all four start equal.

What is timed, per contender and round: S steps after --warmup untimed ones, wall clock,
divided by S. For the PyTorch contenders a step includes drawing the batch (Opacus's own
UniformWithReplacementSampler for Opacus, the same Bernoulli(q) mask for plain PyTorch,
PrivateGradients.sample() for byog) and gathering its rows from tensors in memory; Opacus's
DataLoader collation, one __getitem__ per example, is left out, which favours Opacus. For the
engine it is the trainer's own step time (the run's wall_s: the sum of its steps, sampling
included) of a run of --warmup + S steps less that of a run of --warmup steps (each
dptrain.train() call starts with fresh buffers, first touched in its first step), over S; the whole dptrain.train() call per step, which also copies
and hashes the data, is in the CSV as call_ms_per_step. The thread count is set for each
contender just before it runs (torch.set_num_threads and OpenBLAS's count, which PyTorch and
libdptrain share here; the engine's and PrivateGradients' threads=).

Rounds alternate the contenders (their order rotates each round) so that load on a shared
machine falls on all of them alike; the reported time is the median over rounds. Ratios:
speedup_vs_opacus = Opacus's median / the contender's, cost_vs_torch = the contender's median
/ plain PyTorch's. Targets (issue 41): engine >= 10x Opacus on the MLPs, >= 3x on the CNNs,
at one thread; printed as met / not met.

Opacus is not a dependency of dptrain: without it the script says so and exits 0, or with
--without-opacus times the three other contenders (ratios vs Opacus left empty).

    PYTHONPATH=/path/to/opacus /usr/bin/python3 bench/opacus_compare.py --out opacus.csv
    /usr/bin/python3 bench/opacus_compare.py --quick --out /tmp/smoke.csv     # seconds
"""
import argparse
import csv
import datetime
import glob
import gzip
import math
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# shared/ sits beside the clone (/work/main, CI's clone) or beside its worktree folder (/work/wt/NAME)
SHARED = next((p for p in (os.path.join(os.path.dirname(REPO), "shared", "datasets"),
                           os.path.join(os.path.dirname(os.path.dirname(REPO)), "shared", "datasets"))
               if os.path.isdir(p)), os.path.join(os.path.dirname(REPO), "shared", "datasets"))
FASHION = "/usr/share/datasets/fashion-mnist"

# name -> (engine spec, data set, kind for the targets)
MODELS = {
    "mlp_small": ("mlp:784-128-64-32-10:gelu", "mnist", "mlp"),
    "mlp_wide": ("mlp:784-1000-10:relu", "mnist", "mlp"),
    "mnist_cnn": ("mnist_cnn", "mnist", "cnn"),
    "resnet5": ("resnet5", "cifar10", "cnn"),
}
CONTENDERS = ("opacus", "torch", "engine", "byog")
TARGETS = {"mlp": 10.0, "cnn": 3.0}  # engine speedup over Opacus at one thread
SKIP_MESSAGE = "opacus_compare: skipped: Opacus is not importable"


def new_parser(prog, doc, out, out_help, models, contenders, skip_message=SKIP_MESSAGE):
    """The argument parser both Opacus benches start from: --out, --models, --contenders."""
    ap = argparse.ArgumentParser(
        prog=prog, description=doc.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Without Opacus on sys.path (it is not a dependency): prints '%s' and exits 0, unless "
               "--without-opacus." % skip_message)
    ap.add_argument("--out", default=out, help=out_help)
    ap.add_argument("--models", default=",".join(models), help="comma-separated, from: %s" % ", ".join(models))
    ap.add_argument("--contenders", default=",".join(contenders), help="comma-separated, from: %s"
                    % ", ".join(contenders))
    return ap


def check_common(ap, a, models, contenders):
    """Splits --models / --contenders into lists and refuses unknown names and impossible sizes."""
    a.models = [m for m in a.models.split(",") if m]
    a.contenders = [c for c in a.contenders.split(",") if c]
    for m in a.models:
        if m not in models:
            ap.error("--models: unknown model %r (known: %s)" % (m, ", ".join(models)))
    for c in a.contenders:
        if c not in contenders:
            ap.error("--contenders: unknown contender %r (known: %s)" % (c, ", ".join(contenders)))
    for k in ("rounds", "steps", "n", "batch_size"):
        if getattr(a, k) < 1:
            ap.error("--%s must be >= 1" % k.replace("_", "-"))
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    if a.batch_size > a.n:
        ap.error("--batch-size %d exceeds --n %d" % (a.batch_size, a.n))


def add_common_args(ap, rounds, steps, warmup, n, batch):
    """The options both Opacus benches share (timing, data, DP-SGD, build), with their defaults."""
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds; the median is over them")
    ap.add_argument("--steps", type=int, default=steps, help="timed steps per contender and round")
    ap.add_argument("--warmup", type=int, default=warmup, help="untimed steps before each timed run (the engine: "
                    "the time of a run of warmup + steps less that of a run of warmup, since each run starts cold)")
    ap.add_argument("--n", type=int, default=n, help="training examples (the first n of the data set)")
    ap.add_argument("--batch-size", type=int, default=batch, help="expected Poisson batch; q = 1 / ceil(n / "
                    "batch), as Opacus's make_private computes it")
    ap.add_argument("--sigma", type=float, default=1.0, help="noise multiplier")
    ap.add_argument("--clip", type=float, default=1.0, help="per-example clipping norm C")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (all contenders)")
    ap.add_argument("--mnist", default=os.path.join(SHARED, "mnist"), help="MNIST IDX files (absent: "
                    "Fashion-MNIST from %s, else synthetic)" % FASHION)
    ap.add_argument("--cifar10", default=os.path.join(SHARED, "cifar10"), help="CIFAR-10 binary batches")
    ap.add_argument("--synthetic", action="store_true", help="synthetic data of the same shapes (no files read)")
    ap.add_argument("--build", default=os.environ.get("DPTRAIN_BUILD_DIR") or os.path.join(REPO, "build"),
                    help="dptrain build directory (libdptrain.so, the cffi module)")
    ap.add_argument("--without-opacus", action="store_true", help="time the other contenders when Opacus is "
                    "absent (instead of skipping)")


def parse_args(argv):
    ap = new_parser("opacus_compare.py", __doc__, "opacus_compare.csv",
                    "CSV file written (one row per model, threads, contender)", MODELS, CONTENDERS)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    add_common_args(ap, rounds=5, steps=20, warmup=2, n=10240, batch=256)
    ap.add_argument("--quick", action="store_true", help="smoke run: mlp_small and mnist_cnn, 1 thread, 2 rounds "
                    "of 3 steps, n 1024, batch 64, synthetic data")
    a = ap.parse_args(argv)
    if a.quick:
        a.models, a.threads, a.rounds, a.steps, a.warmup, a.n, a.batch_size = "mlp_small,mnist_cnn", "1", 2, 3, 1, \
            1024, 64
        a.synthetic = True
    a.threads = [int(t) for t in a.threads.split(",") if t]
    if not a.threads or min(a.threads) < 1:
        ap.error("--threads: give thread counts >= 1")
    check_common(ap, a, MODELS, CONTENDERS)
    return a


# ==== data ====

def load_data(name, n, args, np):
    """(x float32 [n, D] flat, channel-major for images; y int64 [n]; source text)."""
    shape = (1, 28, 28) if name == "mnist" else (3, 32, 32)
    d = int(np.prod(shape))
    for where, label, mean, std in ((args.mnist, "MNIST", 0.1307, 0.3081),
                                    (FASHION, "Fashion-MNIST", 0.2860, 0.3530)):
        if args.synthetic or name != "mnist":
            break
        f = [os.path.join(where, s) for s in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")]
        if all(os.path.exists(p) for p in f):
            import dptrain
            x, y = dptrain.load_idx(*f)
            if len(x) >= n:
                x = ((x[:n] - mean) / std).reshape(n, d).astype(np.float32)
                return x, y[:n].astype(np.int64), "%s (%s)" % (label, where)
    if not args.synthetic and name == "cifar10":
        parts = []  # data_batch_1, 2, ... (10,000 images each) until n
        for k in range(1, 6):
            p = os.path.join(args.cifar10, "data_batch_%d.bin.gz" % k)
            if sum(len(r) for r in parts) >= n or not os.path.exists(p):
                break
            with gzip.open(p, "rb") as fh:
                raw = np.frombuffer(fh.read(), dtype=np.uint8)
            parts.append(raw[:raw.size // (d + 1) * (d + 1)].reshape(-1, d + 1))  # label byte, R, G, B planes
        rec = np.concatenate(parts) if parts else np.zeros((0, d + 1), np.uint8)
        if len(rec) >= n:
            x = (rec[:n, 1:].astype(np.float32) / 255.0 - 0.5) / 0.25
            return x, rec[:n, 0].astype(np.int64), "CIFAR-10 (%s, first %d)" % (args.cifar10, n)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, n)
    centres = rng.normal(size=(10, d)).astype(np.float32) * 0.3
    x = centres[y] + rng.normal(size=(n, d)).astype(np.float32)
    return x.astype(np.float32), y.astype(np.int64), "synthetic %dx%dx%d" % shape


# ==== the contenders: each a setup(...) returning run(steps) ====

def set_threads(torch, lib, t):
    torch.set_num_threads(t)
    lib.dpt_threads_set_blas(t)  # OpenBLAS's count (PyTorch's libblas is the same OpenBLAS on Debian)


def make_torch_module(torch, dptrain, spec, seed):
    """dptrain's to_torch() of the spec (same layers as the engine) with PyTorch's default
    initialization, and those weights as init_params for the engine."""
    torch.manual_seed(seed)
    net = dptrain.Model.from_spec(spec).to_torch()
    for m in net.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    net.train()
    return net


def copy_module(torch, net):
    import copy
    m = copy.deepcopy(net)
    m.train()
    return m


# ctx keys beyond the model and data (bench/opacus_transformer.py sets them; absent here):
#   opacus_net   the module Opacus trains (default: a copy of net)
#   batch_first  False when the modules see the batch in dimension 1 (Opacus's
#                DPMultiheadAttention is sequence-first), passed to make_private
#   loss_fn      loss(output, target) of the PyTorch contenders (default F.cross_entropy)
#   engine_kw    extra keywords of dptrain.train (loss="token-ce", regression=True)

def setup_opacus(ctx):
    torch, F = ctx["torch"], ctx["torch"].nn.functional
    from opacus import PrivacyEngine
    net = ctx.get("opacus_net") or copy_module(torch, ctx["net"])
    loss_fn = ctx.get("loss_fn") or F.cross_entropy
    opt = torch.optim.SGD(net.parameters(), lr=ctx["lr"])
    ds = torch.utils.data.TensorDataset(ctx["xt"], ctx["yt"])
    loader = torch.utils.data.DataLoader(ds, batch_size=ctx["batch"])
    engine = PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private(module=net, optimizer=opt, data_loader=loader,
                                             noise_multiplier=ctx["sigma"], max_grad_norm=ctx["clip"],
                                             poisson_sampling=True, batch_first=ctx.get("batch_first", True))
    if abs(loader.sample_rate - ctx["q"]) > 1e-12:
        raise RuntimeError("Opacus's sample rate %r differs from the bench's q %r" % (loader.sample_rate, ctx["q"]))
    sampler = loader.batch_sampler  # Opacus's UniformWithReplacementSampler (Poisson)
    x, y = ctx["xt"], ctx["yt"]

    def run(steps):
        sampler.steps = steps
        for idx in sampler:
            idx = torch.tensor(idx, dtype=torch.long)
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        return None
    return run


def setup_torch(ctx):
    torch, F = ctx["torch"], ctx["torch"].nn.functional
    net = copy_module(torch, ctx["net"])
    loss_fn = ctx.get("loss_fn") or F.cross_entropy
    opt = torch.optim.SGD(net.parameters(), lr=ctx["lr"])
    x, y, q, n = ctx["xt"], ctx["yt"], ctx["q"], len(ctx["xt"])

    def run(steps):
        for _ in range(steps):
            idx = (torch.rand(n) < q).nonzero().reshape(-1)  # the same Poisson batch size distribution
            opt.zero_grad()
            loss = loss_fn(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
        return None
    return run


def setup_engine(ctx):
    dptrain = ctx["dptrain"]
    init = {k: v.detach().numpy().copy() for k, v in ctx["net"].state_dict().items()}
    x, y, q = ctx["x"], ctx["y"], ctx["q"]

    def train(steps):
        r = dptrain.train(x, y, model=ctx["spec"], init_params=init,
                          algorithm=dptrain.DPSGD(sigma=ctx["sigma"], clip=ctx["clip"]), sample_rate=q, optimizer="sgd", lr=ctx["lr"], max_steps=steps,
                          epochs=int(math.ceil(steps * q)) + 1, threads=ctx["threads"], seed=1, verbose=False,
                          progress=False, **ctx.get("engine_kw", {}))
        if r.steps != steps:
            raise RuntimeError("engine: the run made %d steps, %d asked" % (r.steps, steps))
        return r.last["wall_s"]  # the trainer's own time: the sum of its steps

    def run(steps, warmup=0):
        # every dptrain.train() starts cold (fresh buffers: their first touch is in the first
        # step); warm steps as for the PyTorch contenders = a run of warmup + steps minus a
        # run of warmup
        return train(steps + warmup) - train(warmup) if warmup else train(steps)
    return run


def setup_byog(ctx):
    torch, dptrain, np = ctx["torch"], ctx["dptrain"], ctx["np"]
    net = copy_module(torch, ctx["net"])
    opt = torch.optim.SGD(net.parameters(), lr=ctx["lr"])
    dim = sum(p.numel() for _, p in dptrain.trainable_parameters(net))
    pg = dptrain.PrivateGradients(len(ctx["x"]), dim, sample_rate=ctx["q"], sigma=ctx["sigma"], clip=ctx["clip"],
                                  seed=1, threads=ctx["threads"], secure=False)
    ctx["close"].append(pg.close)
    grads = dptrain.per_example_gradients(net, torch.nn.functional.cross_entropy)
    x, y = ctx["xt"], ctx["yt"]

    def run(steps):
        for _ in range(steps):
            idx = torch.from_numpy(pg.sample().astype(np.int64))
            update = pg.release(grads(x[idx], y[idx]))
            opt.zero_grad()
            dptrain.set_gradients(net, update)
            opt.step()
        return None
    return run


SETUP = {"opacus": setup_opacus, "torch": setup_torch, "engine": setup_engine, "byog": setup_byog}


# ==== the bench ====

def ensure_extension(build):
    """(Re)build the cffi module into <build>/python when it is missing or older than
    libdptrain.so, build_ffi.py or a public header (as python/tests/conftest.py does)."""
    lib = os.path.join(build, "libdptrain.so")
    if not os.path.exists(lib):
        return  # an installed dptrain package, or the import below says what is missing
    mods = glob.glob(os.path.join(build, "python", "dptrain", "_dptrain_cffi*.so"))
    inputs = [lib, os.path.join(REPO, "python", "build_ffi.py")] + glob.glob(
        os.path.join(REPO, "include", "dptrain", "*.h"))
    if not mods or os.path.getmtime(mods[0]) < max(os.path.getmtime(p) for p in inputs):
        subprocess.run([sys.executable, os.path.join(REPO, "python", "build_ffi.py"), "--build-dir", build],
                       check=True, stdout=subprocess.DEVNULL)


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d cores" % (cpu, os.cpu_count() or 0)


def run_rounds(runs, args, before):
    """args.rounds rounds of args.steps timed steps of each contender in runs {name: run(steps)},
    their order rotating each round; before() runs before each contender's turn (sets the
    threads), then args.warmup untimed steps (the engine, whose dptrain.train() runs start
    cold: a run of warmup + steps less a run of warmup).
    Returns ({name: [seconds per step, one per round]} as the contender reports it (the
    engine: its trainer's own time) or else wall clock, {name: [wall seconds per step]})."""
    names = list(runs)
    times = {c: [] for c in names}
    calls = {c: [] for c in names}
    for r in range(args.rounds):
        k = r % len(names)
        for c in names[k:] + names[:k]:
            before()
            if args.warmup and c != "engine":
                runs[c](args.warmup)
            t0 = time.perf_counter()
            inner = runs[c](args.steps, warmup=args.warmup) if c == "engine" else runs[c](args.steps)
            wall = time.perf_counter() - t0
            calls[c].append(wall / args.steps)
            times[c].append((inner if inner is not None else wall) / args.steps)
    return times, calls


def load_modules(args, name, skip_message):
    """Imports Opacus (without it: returns None after skip_message unless --without-opacus,
    which drops its contender), numpy and torch (None when absent), then dptrain from this
    checkout's python/ with its extension built into args.build: (np, torch, dptrain)."""
    try:
        import opacus  # noqa: F401
        why = None
    except ImportError as e:
        why = str(e)
    if why is not None:
        if not args.without_opacus:
            print("%s (%s): it is not a dependency of dptrain; put Opacus 1.4 (and opt_einsum) on PYTHONPATH to "
                  "compare, or give --without-opacus to time the other contenders" % (skip_message, why))
            return None
        args.contenders = [c for c in args.contenders if c != "opacus"]
        print("%s: Opacus is not importable (%s): timing %s only" % (name, why, ", ".join(args.contenders)))
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print("%s: skipped: PyTorch or numpy is not importable (%s)" % (name, e))
        return None
    build = os.path.abspath(args.build)
    os.environ["DPTRAIN_BUILD_DIR"] = build
    ensure_extension(build)
    sys.path.insert(0, os.path.join(REPO, "python"))
    import dptrain
    return np, torch, dptrain


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    got = load_modules(args, "opacus_compare", SKIP_MESSAGE)
    if got is None:
        return 0
    np, torch, dptrain = got
    from dptrain._lib import lib
    if "byog" in args.contenders and dptrain.torch_interop._vmap_grad() is None:
        print("opacus_compare: note: no torch.func / functorch: byog computes per-example gradients one backward "
              "pass at a time")

    versions = "torch %s, opacus %s, dptrain %s" % (
        torch.__version__, getattr(sys.modules.get("opacus"), "__version__", "-"), dptrain.__version__)
    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load0 = " ".join("%.2f" % v for v in os.getloadavg())
    print("opacus_compare: %s; %s; load average at start %s; %s" % (date, machine(), load0, versions))
    data_cache = {}
    rows = []
    for t in args.threads:
        for name in args.models:
            spec, dname, kind = MODELS[name]
            if dname not in data_cache:
                data_cache[dname] = load_data(dname, args.n, args, np)
            x, y, source = data_cache[dname]
            set_threads(torch, lib, t)
            net = make_torch_module(torch, dptrain, spec, seed=1)
            nb = int(math.ceil(len(x) / args.batch_size))
            ctx = dict(torch=torch, np=np, dptrain=dptrain, spec=spec, net=net, x=x, y=y,
                       xt=torch.from_numpy(x), yt=torch.from_numpy(y), q=1.0 / nb, batch=args.batch_size,
                       sigma=args.sigma, clip=args.clip, lr=args.lr, threads=t, close=[])
            runs = {c: SETUP[c](ctx) for c in args.contenders}
            print("%s (%s, %d parameters), %s, n %d, q %.5f, sigma %g, C %g, %d thread%s:" % (
                name, spec, sum(p.numel() for p in net.parameters()), source, len(x), ctx["q"], args.sigma,
                args.clip, t, "" if t == 1 else "s"), flush=True)
            times, calls = run_rounds(runs, args, lambda: set_threads(torch, lib, t))
            for f in ctx["close"]:
                f()
            record(rows, times, calls, args, date=date, machine=machine(), load_at_start=load0, versions=versions,
                   model=name, spec=spec, params=sum(p.numel() for p in net.parameters()), data=source, n=len(x),
                   q="%.6f" % ctx["q"], sigma=args.sigma, clip=args.clip, threads=t)
    write_csv(rows, args.out)
    print_table(rows, args)
    return 0


def record(rows, times, calls, args, **fields):
    """Appends one CSV row per contender (the fields, then its medians and ratios) and prints
    them: times and calls map each contender to its per-round seconds per step."""
    med = {c: statistics.median(v) for c, v in times.items()}
    for c in args.contenders:
        sp = med["opacus"] / med[c] if "opacus" in med else None
        ct = med[c] / med["torch"] if "torch" in med else None
        rows.append(dict(fields, contender=c, rounds=args.rounds, steps_per_round=args.steps,
                         median_ms_per_step="%.3f" % (1e3 * med[c]),
                         min_ms_per_step="%.3f" % (1e3 * min(times[c])),
                         max_ms_per_step="%.3f" % (1e3 * max(times[c])),
                         call_ms_per_step="%.3f" % (1e3 * statistics.median(calls[c])),
                         speedup_vs_opacus="" if sp is None else "%.2f" % sp,
                         cost_vs_torch="" if ct is None else "%.2f" % ct))
        print("  %-7s median %9.3f ms/step  (%s)%s%s" % (
            c, 1e3 * med[c], " ".join("%.2f" % (1e3 * v) for v in times[c]),
            "" if sp is None else "  %.2fx faster than Opacus" % sp,
            "" if ct is None else "  %.2fx plain PyTorch" % ct), flush=True)


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("load average at end %s; wrote %s" % (" ".join("%.2f" % v for v in os.getloadavg()), path))


def print_table(rows, args):
    """The Markdown table of docs/dpsgd.md ("dptrain against Opacus") and the targets."""
    by = {}
    for r in rows:
        by.setdefault((r["model"], r["threads"]), {})[r["contender"]] = r
    cols = [c for c in CONTENDERS if c in args.contenders]
    print()
    heads = {"opacus": "Opacus ms/step", "torch": "PyTorch non-private", "engine": "engine", "byog": "byog"}
    print("| model | threads | %s | engine vs Opacus | byog vs Opacus | engine / non-private |"
          % " | ".join(heads[c] for c in cols))
    print("|---|---|%s---|---|---|" % ("---|" * len(cols)))
    for (m, t), d in by.items():
        e, b = d.get("engine"), d.get("byog")
        print("| %s | %d | %s | %s | %s | %s |" % (
            MODELS[m][0], t, " | ".join(d[c]["median_ms_per_step"] for c in cols),
            e["speedup_vs_opacus"] + "x" if e and e["speedup_vs_opacus"] else "-",
            b["speedup_vs_opacus"] + "x" if b and b["speedup_vs_opacus"] else "-",
            e["cost_vs_torch"] + "x" if e and e["cost_vs_torch"] else "-"))
    for (m, t), d in by.items():
        e = d.get("engine")
        if t != 1 or not e or not e["speedup_vs_opacus"]:
            continue
        goal = TARGETS[MODELS[m][2]]
        s = float(e["speedup_vs_opacus"])
        print("target %s, one thread: engine >= %gx Opacus: %.2fx, %s" % (
            m, goal, s, "not judged (--quick: a smoke configuration, not the target's)" if args.quick else
            "met" if s >= goal else "NOT met"))


if __name__ == "__main__":
    sys.exit(main())

"""One PyTorch model trained with DP-SGD twice, side by side: with Opacus's usual loop and with
dptrain's (PrivateGradients), line for line. Coming from Opacus, read train_dptrain(): each
line carries, in a comment, the Opacus line it replaces (train_opacus() numbers the same
steps).

    Opacus                                          dptrain
    ------                                          -------
    engine = PrivacyEngine()                        (nothing: the mechanism is the engine)
    model, opt, loader = engine.make_private(       pg = dptrain.PrivateGradients(n, dim,
        module=model, optimizer=opt,                    sample_rate=q, sigma=sigma, clip=C)
        data_loader=loader, noise_multiplier=sigma, grads = dptrain.per_example_gradients(
        max_grad_norm=C)                                model, loss_fn)
    for x, y in loader:                             idx = pg.sample(); x, y = X[idx], Y[idx]
        opt.zero_grad()                                 opt.zero_grad()
        loss_fn(model(x), y).backward()                 g = grads(x, y)
        opt.step()                                      dptrain.set_gradients(model, pg.release(g))
                                                        opt.step()
    engine.get_epsilon(delta)                       pg.epsilon(delta)

What differs: Opacus wraps the model (GradSampleModule hooks), the optimizer (DPOptimizer
clips and noises in step()) and the data loader (Poisson batches); dptrain wraps nothing:
per_example_gradients computes the per-example gradients (vmap), PrivateGradients draws the
Poisson batch, clips each row to norm C, adds N(0, sigma^2 C^2) to the sum and divides by
the expected batch q n, as Opacus does, and records the step in its ledger before sample()
returns; set_gradients puts that update into .grad, and any torch optimizer steps with it.
Both accountants are RDP (Mironov et al., 2019) on the same q, sigma and steps: the two
printed epsilons agree (dptrain's own default, pg.epsilon(delta), is the smaller of its PLD
and RDP bounds, tighter: docs/accounting.md).

Data: MNIST from shared/datasets/mnist (beside the repository), else Fashion-MNIST from
/usr/share/datasets/fashion-mnist, else synthetic images (also with --synthetic). Opacus is
not a dependency of dptrain: without it (or with --only dptrain) only the dptrain half runs.

    /usr/bin/python3 python/examples/opacus_vs_dptrain.py                 # dptrain's half
    PYTHONPATH=/path/to/opacus-1.4.0 /usr/bin/python3 python/examples/opacus_vs_dptrain.py  # both
"""
import argparse
import copy
import os
import time

import numpy as np
import torch
from torch import nn

import dptrain

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class SampleConvNet(nn.Module):
    """Opacus's MNIST example network (dptrain's model "mnist_cnn", 26,010 parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 8, 2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, 4, 2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))          # [b, 16, 14, 14]
        x = torch.max_pool2d(x, 2, 1)          # [b, 16, 13, 13]
        x = torch.relu(self.conv2(x))          # [b, 32, 5, 5]
        x = torch.max_pool2d(x, 2, 1)          # [b, 32, 4, 4]
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def load(args):
    """(x float32 [n, 1, 28, 28], y int64 [n], x_test, y_test, source)."""
    n, nt = args.train_size, args.test_size
    dirs = [(os.path.join(up, "shared", "datasets", "mnist"), "MNIST", 0.1307, 0.3081)  # beside the clone
            for up in (os.path.dirname(REPO), os.path.dirname(os.path.dirname(REPO)))]     # or its worktree
    dirs.append(("/usr/share/datasets/fashion-mnist", "Fashion-MNIST", 0.2860, 0.3530))
    for where, name, mean, std in ([] if args.synthetic else dirs):
        f = [os.path.join(where, s) for s in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]
        if all(os.path.exists(p) for p in f):
            x, y = dptrain.load_idx(f[0], f[1])
            xt, yt = dptrain.load_idx(f[2], f[3])
            x, xt = ((v - mean) / std for v in (x[:n], xt[:nt]))  # published constants, no private statistic
            y, yt, source = y[:n], yt[:nt], "%s (%s)" % (name, where)
            break
    else:
        rng = np.random.default_rng(0)
        centres = rng.normal(size=(10, 28, 28)).astype(np.float32)
        y, yt = rng.integers(0, 10, n), rng.integers(0, 10, nt)
        x = centres[y] + 2 * rng.normal(size=(n, 28, 28)).astype(np.float32)
        xt = centres[yt] + 2 * rng.normal(size=(nt, 28, 28)).astype(np.float32)
        source = "synthetic"
    t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a)).to(dt)  # noqa: E731
    return (t(x, torch.float32).unsqueeze(1), t(y, torch.int64), t(xt, torch.float32).unsqueeze(1),
            t(yt, torch.int64), source)


def accuracy(model, xt, yt):
    with torch.no_grad():
        return float((model(xt).argmax(1) == yt).float().mean())


def train_opacus(model, x, y, args):
    """Opacus 1.4's usual loop. Returns (epsilon, steps)."""
    from opacus import PrivacyEngine
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)                     # 1. the optimizer
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),     # 2. the data
                                         batch_size=args.batch_size)
    privacy_engine = PrivacyEngine(accountant="rdp")                                # 3. the mechanism
    model, optimizer, loader = privacy_engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader,
        noise_multiplier=args.sigma, max_grad_norm=args.clip, poisson_sampling=True)
    steps = 0
    for epoch in range(args.epochs):
        for xb, yb in loader:                                                       # 4. a Poisson batch
            optimizer.zero_grad()                                                   # 5.
            loss = loss_fn(model(xb), yb)                                           # 6. per-example
            loss.backward()                                                         #    gradients (hooks)
            optimizer.step()                                                        # 7. clip, noise, step
            steps += 1
    return privacy_engine.get_epsilon(args.delta), steps                            # 8. epsilon


def train_dptrain(model, x, y, args):
    """The same with dptrain. Returns (epsilon, steps)."""
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)                     # 1. same
    n = len(x)                                                                      # 2. the data stay
    q = 1 / len(range(0, n, args.batch_size))  # Opacus's q: 1 / len(DataLoader)    #    tensors
    dim = sum(p.numel() for _, p in dptrain.trainable_parameters(model))
    pg = dptrain.PrivateGradients(n, dim, sample_rate=q, sigma=args.sigma,         # 3. make_private(
                                  clip=args.clip, delta=args.delta)                  # noise_multiplier,
    grads = dptrain.per_example_gradients(model, loss_fn)                           #    max_grad_norm)
    steps = 0
    for epoch in range(args.epochs):
        for _ in range(len(range(0, n, args.batch_size))):  # Opacus: len(loader)   #    steps per epoch
            idx = torch.from_numpy(pg.sample().astype(np.int64))                    # 4. for xb, yb in loader
            xb, yb = x[idx], y[idx]                                                 #    (idx stays secret)
            optimizer.zero_grad()                                                   # 5. same
            g = grads(xb, yb)  # {name: [b, *shape]}                                # 6. loss.backward()
            dptrain.set_gradients(model, pg.release(g))                             # 7. optimizer.step():
            optimizer.step()                                                        #    clip+noise, step
            steps += 1
    eps = pg.epsilon(args.delta, accountant="rdp")                                  # 8. get_epsilon(delta)
    # (Opacus' accountant here is RDP; dptrain's default, pg.epsilon(delta), is the smaller of
    # the PLD and RDP bounds, the one its target_epsilon calibrates with)
    pg.close()
    return eps, steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--only", choices=("both", "opacus", "dptrain"), default="both", help="which halves to run")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--train-size", type=int, default=10240, help="first N training examples")
    ap.add_argument("--test-size", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=256, help="expected Poisson batch (q = 1 / ceil(N / it))")
    ap.add_argument("--sigma", type=float, default=1.0, help="noise multiplier")
    ap.add_argument("--clip", type=float, default=1.0, help="per-example clipping norm C")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--lr", type=float, default=0.5, help="SGD learning rate")
    ap.add_argument("--seed", type=int, default=1, help="model initialization (both halves); the batches and "
                    "the noise come from the OS (dptrain's secure default)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--synthetic", action="store_true", help="synthetic images instead of MNIST")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y, xt, yt, source = load(args)
    model = SampleConvNet()  # one initialization, copied to both halves
    print("%s: %d training examples, %d test; SampleConvNet, %d parameters; sigma %g, C %g, batch %d" % (
        source, len(x), len(xt), sum(p.numel() for p in model.parameters()), args.sigma, args.clip, args.batch_size))
    halves = [("dptrain", train_dptrain)]
    if args.only != "dptrain":
        try:
            import opacus
            halves.insert(0, ("opacus %s" % opacus.__version__, train_opacus))
        except ImportError as e:
            print("Opacus is not importable (%s): the dptrain half only" % e)
    if args.only == "opacus":
        halves = [h for h in halves if h[0] != "dptrain"]
    for name, fn in halves:
        m = copy.deepcopy(model)
        t0 = time.perf_counter()
        eps, steps = fn(m, x, y, args)
        print("%-12s %d steps in %.1f s, test accuracy %.4f, epsilon %.4f (RDP) at delta %g" % (
            name, steps, time.perf_counter() - t0, accuracy(m, xt, yt), eps, args.delta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

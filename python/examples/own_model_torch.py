"""DP-SGD on a PyTorch model of your own through dptrain: dptrain.per_example_gradients
computes each example's gradient, dptrain.PrivateGradients samples the batches, clips, adds
the noise and keeps the ledger, dptrain.set_gradients hands the noisy update to a torch
optimizer.

The model below has a custom forward pass (a gated branch times a sigmoid gate, plus a
linear skip branch), which dptrain.from_torch cannot convert. Data: Fashion-MNIST from
/usr/share/datasets/fashion-mnist (or --data), else synthetic blobs of the same shape.

    /usr/bin/python3 python/examples/own_model_torch.py                 # ~20 s on 2 cores
    /usr/bin/python3 python/examples/own_model_torch.py --epochs 5 --train-size 60000 --secure

What must stay true for the printed epsilon to hold: each row given to release() is the
gradient of ONE example's loss at the current parameters (no batch statistics;
per_example_gradients refuses a BatchNorm in training mode), the batch
indices are not published, and every sampled batch is counted (sampling again without
releasing still spends the step). See docs/python.md.
"""
import argparse
import os
import time

import numpy as np
import torch
from torch import nn

import dptrain


class GatedNet(nn.Module):
    """out = head(relu(a(x)) * sigmoid(g(x)) + skip(x)): two branches combined in forward()."""

    def __init__(self, d_in=784, width=64, classes=10):
        super().__init__()
        self.a = nn.Linear(d_in, width)
        self.g = nn.Linear(d_in, width)
        self.skip = nn.Linear(d_in, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(torch.relu(self.a(x)) * torch.sigmoid(self.g(x)) + self.skip(x))


def load(data_dir, train_size, pool, seed):
    """(x, y, x_test, y_test, source): Fashion-MNIST normalized with its published constants
    (no statistic of the private data) and average-pooled pool x pool (fewer parameters:
    per-example gradients are [b, parameters] floats), or synthetic blobs of that size."""
    files = [os.path.join(data_dir, f) for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")]
    if all(os.path.exists(f) for f in files):
        x, y = dptrain.load_idx(files[0], files[1])
        xt, yt = dptrain.load_idx(files[2], files[3])
        x, xt = ((v - 0.2860) / 0.3530 for v in (x, xt))
        if pool > 1:
            side = 28 // pool
            x, xt = (v[:, :side * pool, :side * pool].reshape(len(v), side, pool, side, pool).mean((2, 4))
                     for v in (x, xt))
        x, xt = (v.reshape(len(v), -1) for v in (x, xt))
        source = "Fashion-MNIST (%s)" % data_dir
    else:
        rng = np.random.default_rng(seed)
        d = (28 // pool) ** 2
        centres = rng.normal(size=(10, d)).astype(np.float32) * 0.15
        y, yt = rng.integers(0, 10, 60000), rng.integers(0, 10, 10000)
        x = centres[y] + rng.normal(size=(60000, d)).astype(np.float32)
        xt = centres[yt] + rng.normal(size=(10000, d)).astype(np.float32)
        source = "synthetic blobs (no Fashion-MNIST in %s)" % data_dir
    x, y = x[:train_size], y[:train_size]
    t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(a)).to(dt)  # noqa: E731
    return t(x, torch.float32), t(y, torch.int64), t(xt, torch.float32), t(yt, torch.int64), source


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the IDX files")
    ap.add_argument("--train-size", type=int, default=20000, help="first N training examples (the private data)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs of round(n / batch size) steps")
    ap.add_argument("--pool", type=int, default=2, help="average-pool the 28x28 images pool x pool (1: none)")
    ap.add_argument("--width", type=int, default=64, help="width of the model's branches")
    ap.add_argument("--batch-size", type=int, default=256, help="expected Poisson batch q n")
    ap.add_argument("--target-epsilon", type=float, default=3.0, help="calibrates sigma for --epochs")
    ap.add_argument("--sigma", type=float, default=None, help="noise multiplier (instead of calibrating it)")
    ap.add_argument("--clip", type=float, default=1.0, help="per-example L2 clipping norm C")
    ap.add_argument("--delta", type=float, default=1e-5, help="delta of epsilon (< 1 / train size)")
    ap.add_argument("--lr", type=float, default=2.0, help="SGD learning rate on the noisy mean gradient")
    ap.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (post-processing of the updates)")
    ap.add_argument("--secure", action="store_true", help="OS-seeded sampling, discrete Gaussian lattice noise")
    ap.add_argument("--ledger", default=None, help="write the privacy ledger here (atomically, every step)")
    ap.add_argument("--seed", type=int, default=None, help="model init, data and noise seed (default: random)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little"))

    x, y, xt, yt, source = load(args.data, args.train_size, args.pool, 0)
    n = len(x)
    model = GatedNet(x.shape[1], args.width)
    dim = sum(p.numel() for _, p in dptrain.trainable_parameters(model))
    steps_per_epoch = max(1, round(n / args.batch_size))
    pg = dptrain.PrivateGradients(
        n, dim, batch_size=args.batch_size, clip=args.clip, delta=args.delta, seed=args.seed, secure=args.secure,
        ledger_path=args.ledger,
        **(dict(sigma=args.sigma) if args.sigma else dict(target_epsilon=args.target_epsilon,
                                                         steps=args.epochs * steps_per_epoch)))
    print("%s: %d training examples, %d test, %d features; GatedNet of %d parameters" % (
        source, n, len(xt), x.shape[1], dim))
    print("q %.5f (expected batch %d), sigma %.4f, C %g, %d steps per epoch%s" % (
        pg.sample_rate, args.batch_size, pg.sigma, args.clip, steps_per_epoch, ", secure" if args.secure else ""))
    grads = dptrain.per_example_gradients(model, nn.functional.cross_entropy)  # (x, y) -> {name: [b, *shape]}
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)  # any optimizer: post-processing
    t0 = time.time()
    for epoch in range(1, args.epochs + 1):
        for _ in range(steps_per_epoch):
            idx = torch.from_numpy(pg.sample().astype(np.int64))  # secret: picks the examples, nothing else
            update = pg.release(grads(x[idx], y[idx]))             # (clipped sum + noise) / (q n), [dim]
            opt.zero_grad()
            dptrain.set_gradients(model, update)                  # into each parameter's .grad
            opt.step()
        with torch.no_grad():
            acc = float((model(xt).argmax(1) == yt).float().mean())
        # pg.epsilon(): the default accountant (min of PLD and RDP: what calibrated sigma and
        # what the budget uses)
        print("epoch %d: test accuracy %.4f, epsilon %.3f at delta %g after %d steps (%.0f s)" % (
            epoch, acc, pg.epsilon(), args.delta, pg.steps, time.time() - t0))
    print("epsilon %.3f by the PLD accountant, %.3f by the RDP accountant (the cross-check)%s" % (
        pg.epsilon(accountant="pld"), pg.epsilon(accountant="rdp"),
        "; ledger in %s" % args.ledger if args.ledger else ""))
    pg.close()


if __name__ == "__main__":
    main()

"""DP-SGD on MNIST to epsilon 3 from Python: load the IDX files with numpy, train, print
accuracy and epsilon, export the model to PyTorch and check that it predicts the same.

    /usr/bin/python3 python/examples/mnist_dpsgd.py /work/shared/datasets/mnist
"""
import gzip
import sys

import numpy as np

import dptrain


def load_idx(images, labels):
    """MNIST's IDX format: big-endian header, then uint8 pixels / labels."""
    with gzip.open(images, "rb") as f:
        data = f.read()
    n, rows, cols = (int.from_bytes(data[4 * i + 4:4 * i + 8], "big") for i in range(3))
    x = np.frombuffer(data, np.uint8, offset=16).reshape(n, rows * cols).astype(np.float32) / 255
    with gzip.open(labels, "rb") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x, y


data = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/datasets/mnist"
x, y = load_idx(data + "/train-images-idx3-ubyte.gz", data + "/train-labels-idx1-ubyte.gz")
x_test, y_test = load_idx(data + "/t10k-images-idx3-ubyte.gz", data + "/t10k-labels-idx1-ubyte.gz")

run = dptrain.train(
    x, y, x_test=x_test, y_test=y_test,
    model="mlp:784-128-64-32-10:gelu",   # or a list: [dptrain.layers.Linear(128), dptrain.layers.GELU(), ...]
    algorithm=dptrain.DPSGD(target_epsilon=3.0, delta=1e-5, clip=1.0),  # sigma calibrated for 5 epochs
    batch_size=256, epochs=5,            # expected batch 256: Poisson sampling at q = 256 / 60000
    optimizer="sgd", lr=0.5,
    out_dir="runs/mnist-dpsgd",          # checkpoint.safetensors, ledger.json, metrics.jsonl; the run's
                                         # secret (key, seed, streams) goes to run.secret_path, outside it
    overwrite=True,
)
loss, accuracy = run.model.evaluate(x_test, y_test)
# run.epsilon: the default accountant's (the one target_epsilon calibrated with; run.accountant
# names it, PLD here), with the RDP accountant's beside it as a cross-check
print("sigma %.4f, %d steps: test accuracy %.2f%%, epsilon %.3f (%s; RDP %.3f) at delta %g"
      % (run.sigma, run.steps, 100 * accuracy, run.epsilon, run.accountant.upper(), run.epsilon_rdp, run.delta))

# The ledger is what the guarantee rests on; it is also in runs/mnist-dpsgd/ledger.json.
ledger = dptrain.read_ledger("runs/mnist-dpsgd")
print("ledger: %d steps, epsilon %.3f at delta 1e-6" % (ledger.steps, ledger.epsilon(1e-6)))

# PyTorch: a torch.nn.Module with the checkpoint's tensor names (fc1.weight, ...).
import torch  # noqa: E402

net = run.model.to_torch()
with torch.no_grad():
    logits = net(torch.from_numpy(x_test)).numpy()
agree = np.mean(logits.argmax(1) == run.model.predict(x_test).argmax(1))
print("PyTorch model: %d parameters, same predictions on %.2f%% of the test set"
      % (sum(p.numel() for p in net.parameters()), 100 * agree))

"""DP fine-tuning from public data, measured: the first PUBLIC examples of Fashion-MNIST's
training split train a model without privacy (the stand-in for a public dataset of the same
kind), then DP-SGD to epsilon 3 on the other, private examples starts once from a random
initialization, once from that model (dptrain.train(model=<Model>)), and from that model with
its first layer frozen (freeze=["fc1"]: 100,480 of its 111,146 parameters) and with its first
two (["fc1", "fc2"]: only fc3 and fc4 train, clipped and noised); each prints its test
accuracy and training time. The private run's epsilon covers the private examples only because the
public model never saw them.

    /usr/bin/python3 python/examples/public_pretraining.py [SEED] [PUBLIC] [DIR]

SEED (1), PUBLIC (2000 examples), DIR (/usr/share/datasets/fashion-mnist, the Debian
package dataset-fashion-mnist). Pixels are scaled by Fashion-MNIST's published mean and std.
"""
import os
import sys

import dptrain

SPEC = "mlp:784-128-64-32-10:gelu"


def last_accuracy(run):
    h = run.history
    return 100 * (h[-1]["test_accuracy"] if isinstance(h, list) else h["test_accuracy"].iloc[-1])


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    n_pub = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    d = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/datasets/fashion-mnist"
    x, y = dptrain.load_idx(os.path.join(d, "train-images-idx3-ubyte.gz"), os.path.join(d, "train-labels-idx1-ubyte.gz"))
    xt, yt = dptrain.load_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), os.path.join(d, "t10k-labels-idx1-ubyte.gz"))
    x, xt = (x.reshape(len(x), -1) - 0.286) / 0.353, (xt.reshape(len(xt), -1) - 0.286) / 0.353
    common = dict(x_test=xt, y_test=yt, seed=seed, verbose=False, progress=False)
    public = dptrain.train(x[:n_pub], y[:n_pub], model=SPEC, epochs=20, optimizer="sgd", lr=0.1, **common)
    print("public model (%d examples, non-private, 20 epochs): %.2f%%" % (n_pub, last_accuracy(public)))
    for name, model, freeze in (("random initialization", SPEC, None), ("the public model", public.model, None),
                                ("the public model, fc1 frozen", public.model, ["fc1"]),
                                ("the public model, fc1 and fc2 frozen", public.model, ["fc1", "fc2"])):
        r = dptrain.train(x[n_pub:], y[n_pub:], model=model, algorithm=dptrain.DPSGD(target_epsilon=3.0, delta=1e-5),
                          epochs=5, optimizer="sgd", lr=0.5, freeze=freeze, **common)
        wall = r.history[-1]["wall_s"] if isinstance(r.history, list) else r.history["wall_s"].iloc[-1]
        print("DP-SGD on the other %d examples, epsilon %.3f, from %s: %.2f%% (%.1f s of training)" % (
            len(x) - n_pub, r.epsilon, name, last_accuracy(r), wall))


if __name__ == "__main__":
    main()

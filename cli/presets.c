/* `dptrain train --preset NAME`: named flag sets that reproduce a paper's settings. The
 * preset's flags are inserted before the user's, so any flag given explicitly overrides
 * the preset's value (the last occurrence of a flag wins). Each preset is plain text, so
 * `--preset NAME --help` and docs/dpmac.md show exactly what it sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "presets.h"

/* DP-MAC (Harder, Köhler, Welling, Park: "DP-MAC: The Differentially Private Method of
 * Auxiliary Coordinates for Deep Learning"), the authors' settings: Table 2 of the paper and the
 * README commands of the authors' code (github.com/mijungi/dp_mac), whose epsilon-0.5 row
 * differs from Table 2 (batch 500, sigma 4.4, z lr 0.01, decay held after 7 epochs; Table 2:
 * batch 1000, sigma 8.0); the README's is used. Glorot initialization (biases 0 here; the
 * authors draw them with the weights' variance); pixels x / 255 shifted by the MNIST mean
 * 0.1307 and divided by 1 - 0.1307 (the authors subtract the scalar data mean and divide by
 * the largest absolute value: published constants here, nothing fitted); the rows are
 * projected as they are (not unit-normed) on the DP-PCA components; mu = 2 (the authors'
 * classifier weighs ||z - f||^2 against its cross-entropy output); the lr decays by gamma
 * per epoch and is held after stop_decay - 1 decays. Poisson sampling (the authors iterate
 * in a fixed order, which the accountant does not cover). See docs/dpmac.md. */
#define DPMAC_MNIST                                                                                          \
    "--algo dpmac --dataset mnist --normalize affine:0.1307:0.8693 --model mlp:60-300-10:relu --loss bce "   \
    "--init xavier --optimizer adam --pca-dims 60 --pca-project rows --z-mu 2 --z-steps 30 --clip 0.3 "
#define DPMAC_USPS                                                                                           \
    "--algo dpmac --dataset usps --normalize affine:-1:2 --max-train 5000 "                                   \
    "--model ae:256-300-100-20-100-300-256:relu --loss mse --init xavier --optimizer adam --z-steps 30 "      \
    "--z-lr 0.001 --clip 0.001 --lr 0.003 --lr-schedule exp:0.97 --epochs 50 "

/* Tramer & Boneh, "Differentially Private Learning Needs Better Features (or Much More
 * Data)", ICLR 2021: the hyperparameters of the README of their code (github.com/ftramer/
 * Handcrafted-DP, commit 010627d): SGD with momentum 0.9, C 0.1, pixels in [0, 1]
 * (ToTensor, no normalization) for MNIST and Fashion-MNIST, tanh CNNs (models.py), the
 * ScatterNet of Kymatio (J = 2, L = 8) with GroupNorm(27 groups, affine=False: gn27 with
 * its parameters frozen at gamma 1, beta 0). Their noise multipliers are calibrated to
 * spend epsilon 3 at delta 1e-5 in 40 epochs (README; their RDP accountant with the
 * classic conversion); ours calibrates --target-epsilon 3 for the same 40 epochs with the
 * default accountant (docs/accounting.md), so sigma is smaller for the same guarantee.
 * Their MNIST and CIFAR-10 ScatterNet recipes normalize the features with "frozen
 * BatchNorm" from DP channel statistics (bn_noise_multiplier 8, two Gaussian releases
 * composed with DP-SGD's): here fbn frozen, --feature-norm dp (docs/nn.md); the epochs are
 * those at which their README's noise multiplier spends epsilon 3 with those releases
 * (their RDP orders, classic conversion), the clips the median norms their code uses,
 * measured on a held-out part of the training split (docs/cnn.md, "Tramer & Boneh
 * recipes", says which). CIFAR-10's pixels: the dataset's published per-channel constants
 * (theirs: ImageNet's; the channel normalization after the scattering absorbs the scale). */
#define TB_DPSGD                                                                                             \
    "--algo dpsgd --sampler poisson --optimizer sgd --momentum 0.9 --clip 0.1 --target-epsilon 3 --delta 1e-5 "
#define TB_COMMON TB_DPSGD "--epochs 40 "
#define TB_FN_MNIST "--freeze fbn1 --feature-norm dp --feature-norm-sigma 8 --feature-norm-clip 0.17,0.053 "
#define TB_FN_CIFAR "--freeze fbn1 --feature-norm dp --feature-norm-sigma 8 --feature-norm-clip 0.91,1.2 "
#define TB_SCATTER_CNN_CIFAR                                                                                 \
    "cnn:3x32x32:scatter,fbn,conv64k3s1p1,tanh,maxpool2,conv64k3s1p1,tanh,flatten,fc10"
#define TB_SCATTER_CNN_28                                                                                    \
    "cnn:1x28x28:scatter,gn27,conv16k3s2p1,tanh,conv32k3s1p1,tanh,flatten,fc32,tanh,fc10"

static const struct {
    const char *name, *flags;
} PRESETS[] = {
    /* --init torch: their model's initialization (PyTorch's default); ahead of the Gaussian
     * default (Xavier for tanh) in each of 3 seeds on a validation split (docs/cnn.md) */
    {"tb-cnn-mnist", TB_COMMON "--dataset mnist --normalize none --model mnist_cnn_tanh --init torch --batch-size 512 "
                     "--lr 0.5"},
    {"tb-cnn-fmnist", TB_COMMON "--dataset fashion-mnist --normalize none --model mnist_cnn_tanh --batch-size 2048 "
                      "--lr 4"},
    {"tb-scatter-linear-fmnist", TB_COMMON "--dataset fashion-mnist --normalize none "
                                 "--model cnn:1x28x28:scatter,gn27,fc10 --freeze gn1 --batch-size 8192 --lr 16"},
    {"tb-scatter-cnn-fmnist", TB_COMMON "--dataset fashion-mnist --normalize none --model " TB_SCATTER_CNN_28
                              " --freeze gn1 --batch-size 2048 --lr 4"},
    {"tb-scatter-linear-mnist", TB_COMMON "--dataset mnist --normalize none --model cnn:1x28x28:scatter,fbn,fc10 "
                                TB_FN_MNIST "--batch-size 4096 --lr 8"},
    {"tb-scatter-cnn-mnist", TB_DPSGD "--epochs 23 --dataset mnist --normalize none --model "
                             "cnn:1x28x28:scatter,fbn,conv16k3s2p1,tanh,conv32k3s1p1,tanh,flatten,fc32,tanh,fc10 "
                             TB_FN_MNIST "--batch-size 1024 --lr 1"},
    {"tb-scatter-linear-cifar10", TB_DPSGD "--epochs 60 --dataset cifar10 --normalize public "
                                  "--model cnn:3x32x32:scatter,fbn,fc10 " TB_FN_CIFAR "--batch-size 8192 --lr 4"},
    {"tb-scatter-cnn-cifar10", TB_DPSGD "--epochs 60 --dataset cifar10 --normalize public --model "
                               TB_SCATTER_CNN_CIFAR " " TB_FN_CIFAR "--batch-size 8192 --lr 4"},
    /* Their end-to-end CIFAR-10 CNN (README: `cnns.py --dataset=cifar10 --batch_size=1024 --lr=1
     * --noise_multiplier=1.54`, budget spent in 30 epochs; models.py CIFAR10_CNN(3), here
     * cifar_cnn_tanh; commit 6568e8f): their 1.54 gives epsilon 3.002 under their accountant for
     * 30 x floor(50000 / 1024) = 1440 steps (classic conversion, their orders); here 30 epochs
     * are 1470 Poisson steps and sigma comes from --target-epsilon 3 like the others. Pixels:
     * the dataset's published per-channel constants (theirs: ImageNet's 0.485, 0.456, 0.406 /
     * 0.229, 0.224, 0.225, with no channel normalization after them to absorb the difference). */
    {"tb-cnn-cifar10", TB_DPSGD "--epochs 30 --dataset cifar10 --normalize public --model cifar_cnn_tanh "
                       "--batch-size 1024 --lr 1"},
    {"dpmac-mnist-eps8", DPMAC_MNIST "--pca-sigma 4 --sigma 1.0 --batch-size 1000 --lr 0.01 "
                         "--lr-schedule exp:0.95:19 --z-lr 0.003 --epochs 30"},
    {"dpmac-mnist-eps2", DPMAC_MNIST "--pca-sigma 8 --sigma 2.8 --batch-size 1000 --lr 0.01 "
                         "--lr-schedule exp:0.95:19 --z-lr 0.003 --epochs 30"},
    {"dpmac-mnist-eps0.5", DPMAC_MNIST "--pca-sigma 16 --sigma 4.4 --batch-size 500 --lr 0.03 "
                           "--lr-schedule exp:0.7:6 --z-lr 0.01 --epochs 10"},
    {"dpmac-usps-eps8", DPMAC_USPS "--sigma 1.8 --batch-size 500"},
    {"dpmac-usps-eps4", DPMAC_USPS "--sigma 3.1 --batch-size 500"},
    {"dpmac-usps-eps2", DPMAC_USPS "--sigma 4.1 --batch-size 250"},
    {"dpmac-usps-eps1", DPMAC_USPS "--sigma 7.8 --batch-size 250"},
};
#define N_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

/* The expansion in use, for messages about a flag the command line may not hold
 * (cli_preset_setting): set by cli_preset_expand, cleared by cli_preset_free. */
static struct {
    const char *name; /* NULL: no --preset */
    char **flags;     /* the preset's flags as inserted: flags[0..n) */
    int n;
    int argc;         /* the command line as given */
    char **argv;
} g_expanded;

const char *cli_preset_names(void) {
    static char buf[1024];
    if (!buf[0]) {
        for (size_t i = 0; i < N_PRESETS; i++) {
            if (i) strncat(buf, " | ", sizeof buf - strlen(buf) - 1);
            strncat(buf, PRESETS[i].name, sizeof buf - strlen(buf) - 1);
        }
    }
    return buf;
}

static int given(int argc, char **argv, const char *flag) {
    const size_t n = strlen(flag);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], flag, n) && (argv[i][n] == 0 || argv[i][n] == '=')) return 1;
    return 0;
}

int cli_preset_expand(int argc, char **argv, int *out_argc, char ***out_argv, char **storage) {
    *out_argc = argc, *out_argv = argv, *storage = NULL;
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset")) {
            if (i + 1 >= argc) return cli_error("--preset: missing value (one of %s)", cli_preset_names());
            name = argv[i + 1];
        } else if (!strncmp(argv[i], "--preset=", 9)) {
            name = argv[i] + 9;
        }
    }
    if (!name) return 0;
    const char *flags = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(PRESETS[i].name, name)) flags = PRESETS[i].flags;
    if (!flags) return cli_error("--preset: unknown preset '%s' (available: %s)", name, cli_preset_names());
    char *copy = strdup(flags);
    char **v = calloc((size_t)argc + strlen(flags) / 2 + 2, sizeof *v);
    if (!copy || !v) {
        free(copy), free(v);
        return cli_failf("--preset: out of memory");
    }
    /* calibrating (--target-epsilon) replaces the preset's noise multiplier */
    const int drop_sigma = given(argc, argv, "--target-epsilon");
    int n = 0;
    v[n++] = argv[0];
    char *save = NULL;
    for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (drop_sigma && !strcmp(tok, "--sigma")) {
            strtok_r(NULL, " ", &save);
            continue;
        }
        v[n++] = tok;
    }
    const int n_preset = n - 1;
    for (int i = 1; i < argc; i++) v[n++] = argv[i];
    v[n] = NULL;
    *out_argc = n, *out_argv = v, *storage = copy;
    g_expanded.name = name, g_expanded.flags = v + 1, g_expanded.n = n_preset;
    g_expanded.argc = argc, g_expanded.argv = argv;
    return 0;
}

const char *cli_preset_setting(const char *flag, const char **value, int *typed) {
    for (int i = 0; g_expanded.name && i + 1 < g_expanded.n; i++)
        if (!strcmp(g_expanded.flags[i], flag)) {
            if (value) *value = g_expanded.flags[i + 1];
            if (typed) *typed = given(g_expanded.argc, g_expanded.argv, flag);
            return g_expanded.name;
        }
    return NULL;
}

const char *cli_preset_excludes(void) {
    const char *v = NULL;
    int typed = 0, norm_typed = 0;
    if (!cli_preset_setting("--feature-norm-clip", &v, &typed) || typed) return NULL;
    const char *mode = NULL;
    if (cli_preset_setting("--feature-norm", &mode, &norm_typed) && norm_typed) {
        /* the command line's --feature-norm wins: the last one given */
        for (int i = g_expanded.argc - 2; i >= 1; i--)
            if (!strcmp(g_expanded.argv[i], "--feature-norm")) {
                if (strcmp(g_expanded.argv[i + 1], "dp")) return NULL;
                break;
            }
    }
    return "the feature normalization's clip bounds (--feature-norm-clip of the preset): medians of per-example "
           "feature norms measured on part of this dataset's training split (docs/cnn.md)";
}

void cli_preset_flags_except(const char *flag, char *out, size_t n) {
    size_t w = 0;
    out[0] = 0;
    for (int i = 0; i < g_expanded.n && w < n; i++) {
        if (!strcmp(g_expanded.flags[i], flag)) {
            i++; /* and its value */
            continue;
        }
        int k = snprintf(out + w, n - w, "%s%s", w ? " " : "", g_expanded.flags[i]);
        if (k < 0) break;
        w += (size_t)k;
    }
}

void cli_preset_free(char **argv_expanded, char **argv_orig, char *storage) {
    if (argv_expanded != argv_orig) free(argv_expanded);
    free(storage);
    memset(&g_expanded, 0, sizeof g_expanded);
}
